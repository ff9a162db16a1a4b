"""One table of every benchmark ratio against its peer and its floor, from bench/results/*.json (issue 39 item 5).

``make bench`` ends with it; by hand: ``python tools/bench_summary.py [--results DIR] [--markdown]``.

A results file with a ``comparisons`` list (bench.common.comparison: the benches rewritten for issue 39) gives its lines
as they are. Older files are read by the per-benchmark readers below, which take only figures the file holds and say
what each is: the statistic (median of N, best of N, or the larger of 2 when an old ``--repeat 2`` median), the forms
compared (a fleet form against a loop is flagged ``DIFFERENT FORMS``: the fleet form's gain, not a per-task figure),
the load average recorded, and the floor (ansible's start-up: an empty playbook, a ping task, ``ansible -m ping`` or an
empty inventory). Nothing is measured here.

Ratio column: written as the bench's target is stated, ``ours/peer`` (below 1: ours faster) or ``peer/ours`` (above 1:
ours faster).
"""

import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def line(bench, name, ours, peer, ratio_of, floor=None, stat='', load=None, note=''):  # pylint: disable=too-many-arguments
    """A table row. ``ours``/``peer``: (label, form, seconds); ``floor``: (label, seconds) or None."""
    top, bottom = (peer[2], ours[2]) if ratio_of == 'peer/ours' else (ours[2], peer[2])
    return {'bench': bench, 'name': name, 'ours': ours, 'peer': peer, 'ratio_of': ratio_of,
            'ratio': round(top / bottom, 3) if bottom else None, 'same_form': ours[1] == peer[1], 'floor': floor,
            'stat': stat, 'load': load, 'note': note}


def _load_span(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return '%.1f-%.1f' % (min(values), max(values)) if values else '?'


def _stat(runs, statistic='median'):
    """What a stored 'median' of ``runs`` is."""
    if not runs:
        return statistic
    if len(runs) % 2 == 0:
        return 'median of %d (even: the larger middle run)' % len(runs)
    return '%s of %d' % (statistic, len(runs))


def from_comparisons(bench, data):
    rows = []
    loads = data.get('timed', {}).get('load_average_1min') or data.get('load_average_1min') or []
    for item in data['comparisons']:
        floor = item.get('floor')
        rows.append({'bench': bench, 'name': item['name'], 'ratio_of': item['ratio_of'], 'ratio': item['ratio'],
                     'same_form': item['same_form'],
                     'ours': (item['ours']['label'], item['ours'].get('form', ''), item['ours']['seconds']),
                     'peer': (item['peer']['label'], item['peer'].get('form', ''), item['peer']['seconds']),
                     'floor': (floor['label'], floor['seconds']) if floor else None,
                     'stat': item.get('stat') or 'median of %s' % data.get('repeat', '?'), 'load': _load_span(loads), 'note': item.get('note', '')})
    return rows


def inventory(bench, data):
    ours_label = next(k for k in data if k.startswith('converge.virt.'))
    peer_label = next(k for k in data if isinstance(data[k], dict) and 'hosts' in data[k] and k not in (ours_label, 'empty')
                      and not k.startswith('floor'))
    ours, peer = data[ours_label], data[peer_label]
    floor = ('empty inventory', data['empty']['median_seconds']) if 'empty' in data else None
    note = 'variables per host: ours %s, peer %s' % (ours.get('variables_per_host'), peer.get('variables_per_host'))
    if 'floor: no variable' in data:
        note += '; floor with %d hosts and no variable %.3f s' % (data['vms'], data['floor: no variable']['median_seconds'])
    return [line(bench, 'ansible-inventory --list, %d VMs' % data['vms'], (ours_label, 'inventory', ours['median_seconds']),
                 (peer_label, 'inventory', peer['median_seconds']), 'peer/ours', floor, _stat(ours.get('runs')),
                 _load_span(data.get('load_average_1min', [])), note)]


def vm_noop(bench, data):
    per_task = data['per_task_seconds']
    loads = _load_span(data.get('load_average_1m', {}).values())
    stat = 'median of %d rounds, (T(2K)-T(K))/K' % data['rounds']
    return [line(bench, 'libvirt no-op, per task', ('converge.virt.vm', 'looped', per_task['converge.virt.vm']),
                 ('community.libvirt.virt', 'looped', per_task['community.libvirt.virt']), 'ours/peer',
                 ('ping task', per_task['ansible.builtin.ping']), stat, loads, 'target <= 0.90 (issue 39)')]


def vm_vs_ping(bench, data):
    wall = data['median_wall']
    if 'community_libvirt' not in wall:
        return []
    return [line(bench, 'libvirt no-op, %d-task playbooks' % data['tasks'], ('converge.virt.vm', 'looped', wall['vm']),
                 ('community.libvirt.virt', 'looped', wall['community_libvirt']), 'ours/peer', ('%d ping tasks' % data['tasks'], wall['ping']),
                 _stat(data.get('wall', {}).get('vm')), _load_span(data.get('load', [])), 'libvirt_floor %.3f s' % wall.get('libvirt_floor', 0))]


def volume_converge(bench, data):
    tasks = data['task_seconds']
    floor = ('playbook of two ping tasks', data['baseline_playbook_seconds'])
    note = 'DIFFERENT FORMS: one task over %d volumes vs the peer looped' % data['volumes']
    return [line(bench, 'volumes create, task alone', ('converge.virt.volume', 'fleet', tasks['converge.virt.volume create']),
                 ('community.libvirt.virt_volume', 'looped', tasks['community.libvirt.virt_volume create (loop)']), 'peer/ours', floor,
                 'best of N (peer: one run)', '?', note),
            line(bench, 'volumes no-op, task alone', ('converge.virt.volume', 'fleet', tasks['converge.virt.volume no-op']),
                 ('community.libvirt.virt_volume', 'looped', tasks['community.libvirt.virt_volume re-run (loop)']), 'peer/ours', floor,
                 'best of N (peer: one run)', '?', note)]


def migration(bench, data):
    loads = data.get('load_average_1m', {})
    load = _load_span([loads.get('start'), loads.get('max'), loads.get('end')])
    stat = 'median of %d' % data['rounds']
    floor = ('ping task', data['ansible_ping_task_median_s'])
    rows = [line(bench, 'live migration, task alone vs virsh', ('converge.virt.migration', 'task', data['module_task_median_s']),
                 ('virsh migrate --live', 'command', data['virsh_median_s']), 'ours/peer', floor, stat, load,
                 'DIFFERENT FORMS: an ansible task vs the bare command')]
    if 'command_virsh_task_median_s' in data:
        rows.append(line(bench, 'live migration, task vs virsh as a task', ('converge.virt.migration', 'task', data['module_task_median_s']),
                         ('command: virsh migrate --live', 'task', data['command_virsh_task_median_s']), 'ours/peer', floor, stat, load,
                         'target <= 1.05 (issue 39)'))
    return rows


def snapshot(bench, data):
    loads = data.get('load_average_1m', {})
    form = 'fleet' if 'fleet' in data.get('form', 'fleet') else 'looped'
    return [line(bench, 'snapshots of %d VMs (%s), task alone' % (data['vms'], data.get('guests', '')),
                 ('converge.virt.snapshot', form, data['module_task_median_s']),
                 ('virsh snapshot-create-as', 'command loop', data['virsh_median_s']), 'ours/peer', None, 'median of %d' % data['rounds'],
                 _load_span([loads.get('start'), loads.get('max'), loads.get('end')]), 'DIFFERENT FORMS: an ansible task vs bare commands')]


def legacy_kubevirt_fleet(bench, data):
    return [line(bench, 'KubeVirt no-op, %d VMs (stored before issue 39)' % data['vms'], ('converge.virt.vm', 'fleet', data['noop_converge_fleet_s']),
                 ('kubevirt.core.kubevirt_vm', 'looped', data['noop_kubevirt_core_loop_s']), 'ours/peer', ('empty playbook', data['empty_playbook_s']),
                 'best of 2', '?', 'DIFFERENT FORMS: the fleet form\'s gain, not a per-task figure')]


def golden(bench, data):
    return [line(bench, '%d login guests from a golden image, whole' % data['vms'], ('converge.virt volume+vm', 'fleet', data['converge_virt']['whole_s']),
                 ('community.libvirt + virsh + wait_for', 'looped', data['community_libvirt']['whole_s']), 'peer/ours', None, 'one run',
                 _load_span(data.get('load_average', [])), 'DIFFERENT FORMS: fleet tasks vs loops')]


def fleet_hosts(bench, data):
    if 'community' not in data:
        return []
    return [line(bench, '%d hosts x %d VMs (%s), first converge' % (data['hosts'], data['vms_per_host'], data['state']),
                 ('converge.virt.vm', 'fleet', data['converge']['wall_s']), ('community.libvirt loops', 'looped', data['community']['wall_s']),
                 'peer/ours', None, 'one run', _load_span([data.get('load_before'), data.get('load_after')]),
                 'DIFFERENT FORMS: fleet form per host vs loops; no-op re-run %.2f s' % data['noop']['wall_s'])]


READERS = {
    'vm_noop': vm_noop, 'vm_vs_ping': vm_vs_ping, 'volume_converge': volume_converge, 'migration_vs_virsh': migration,
    'snapshot_vs_virsh': snapshot, 'snapshot_vs_virsh_loop': snapshot, 'kubevirt_fleet': legacy_kubevirt_fleet,
    'kubevirt_fleet_emulated': legacy_kubevirt_fleet, 'golden_fleet': golden, 'fleet_hosts': fleet_hosts, 'fleet_hosts_running': fleet_hosts,
}


def rows_of(path):
    """The table rows of one results file, or one row saying why it has none."""
    bench = os.path.basename(path)[:-len('.json')]
    with open(path, encoding='utf-8') as handle:
        data = json.load(handle)
    if 'comparisons' in data:
        return from_comparisons(bench, data)
    reader = READERS.get(bench)
    if reader is None and bench.startswith('inventory_'):
        reader = inventory
    if reader is None:
        return [{'bench': bench, 'name': 'no peer in this file', 'skip': True}]
    try:
        return reader(bench, data)
    except (KeyError, StopIteration, TypeError) as exc:
        return [{'bench': bench, 'name': 'unreadable: missing %s' % exc, 'skip': True}]


def fmt(row):
    if row.get('skip'):
        return [row['bench'], row['name']] + [''] * 8
    floor = row['floor']
    floor_text = '%.3f (%s)' % (floor[1], floor[0]) if floor else '-'
    over = '%.2f / %.2f' % (row['ours'][2] / floor[1], row['peer'][2] / floor[1]) if floor and floor[1] else '-'
    forms = '%s vs %s' % (row['ours'][1], row['peer'][1]) + ('' if row['same_form'] else ' (DIFFERENT)')
    return [row['bench'], row['name'], '%s %.3f' % (row['ours'][0], row['ours'][2]), '%s %.3f' % (row['peer'][0], row['peer'][2]),
            forms, '%s %s' % (row['ratio'], row['ratio_of']), floor_text, over, row['stat'],
            str(row['load'] or '?') + ('; ' + row['note'] if row['note'] else '')]


HEADER = ['bench', 'comparison', 'ours (s)', 'peer (s)', 'forms', 'ratio', 'floor (s)', 'ours/floor, peer/floor', 'statistic', 'load 1-min; note']


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--results', default=os.path.join(ROOT, 'bench', 'results'))
    parser.add_argument('--markdown', action='store_true', help='a Markdown table (default: tab-separated)')
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.results, '*.json')))
    if not paths:
        print('no results in %s' % args.results, file=sys.stderr)
        return 1
    table = [fmt(row) for path in paths for row in rows_of(path)]
    if args.markdown:
        print('| ' + ' | '.join(HEADER) + ' |')
        print('|' + '---|' * len(HEADER))
        for cells in table:
            print('| ' + ' | '.join(cell.replace('|', '/') for cell in cells) + ' |')
    else:
        print('\t'.join(HEADER))
        for cells in table:
            print('\t'.join(cells))
    return 0


if __name__ == '__main__':
    sys.exit(main())
