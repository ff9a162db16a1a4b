"""Benchmark: converging N volumes, converge.virt.volume vs community.libvirt.virt_volume, like with like.

Run on one private libvirt host (tools.virtlab), with three directory pools, each side's volumes made by its own module:

* ``converge.virt.volume looped`` (pool ``convloop``): one task looping over the N volumes, the single-volume form
  (name, pool, capacity) - the same form as the peer's;
* ``community.libvirt.virt_volume looped`` (pool ``peer``; from the ``ansible`` package on PyPI) with ``loop:`` over
  the same N volumes, each item ``state: present`` with the volume XML;
* ``converge.virt.volume fleet form`` (pool ``conv``): one task declaring all N volumes (``volumes:``): its own line,
  **a different form** from the peer's loop.

Each round empties the three pools, runs the three creates, then the three re-runs (converge.virt's must change nothing;
the peer's is not checked), the kinds alternating in order (reversed every other round), ``--repeat`` (odd)
rounds; each measurement is a whole playbook (ping + the measured task), and the task alone is that minus the median
of a playbook of two ping tasks timed in the same rounds (the floor: ansible's start-up cancels). Medians (the middle
run), every run, CPU seconds and the load average before every round are written to bench/results/volume_converge.json
with ``comparisons`` of the whole playbooks against the floor (the lines tools/bench_summary.py prints). Needs
``make bench-venv`` and root.

    build/bench-venv/bin/python -m bench.volume_converge --volumes 100
"""

import argparse
import os
import sys
import xml.etree.ElementTree as ET

import libvirt

from bench.common import ROOT, comparison, load_average, median_of_odd, odd_repeat, playbook, report, run_playbook_times
from tools.virtlab import hosts

MIB = 1024 * 1024


def volume_xml(name, capacity):
    root = ET.Element('volume')
    ET.SubElement(root, 'name').text = name
    ET.SubElement(root, 'capacity', {'unit': 'bytes'}).text = str(capacity)
    ET.SubElement(root, 'allocation').text = '0'
    ET.SubElement(ET.SubElement(root, 'target'), 'format', {'type': 'raw'})
    return ET.tostring(root, encoding='unicode')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--volumes', type=int, default=100)
    parser.add_argument('--repeat', type=odd_repeat, default=3, help='rounds, odd (the median is the middle run)')
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-lab-volume'))
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'),
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(bin_dir, 'python'), ANSIBLE_NOCOLOR='1')
    env.pop('ANSIBLE_STDOUT_CALLBACK', None)
    lab = hosts.start_hosts(1, args.state_dir, first_address='127.0.0.46', name_prefix='benchvol-', first_tcp_port=16816,
                            first_migration_port=49850, migration_ports_per_host=10)
    try:
        uri = lab[0].uri
        conn = libvirt.open(uri)
        pools = {}
        for pool_name in ('conv', 'convloop', 'peer'):
            path = os.path.join(args.state_dir, 'pool-' + pool_name)
            os.makedirs(path, exist_ok=True)
            pool_root = ET.Element('pool', {'type': 'dir'})
            ET.SubElement(pool_root, 'name').text = pool_name
            ET.SubElement(ET.SubElement(pool_root, 'target'), 'path').text = path
            pool = conn.storagePoolDefineXML(ET.tostring(pool_root, encoding='unicode'), 0)
            pool.create(0)
            pools[pool_name] = pool
        names = ['vol-%05d.raw' % i for i in range(args.volumes)]
        ping = {'ansible.builtin.ping': {}}
        tasks = {
            'converge.virt.volume looped': ({'converge.virt.volume': {'uri': uri, 'pool': 'convloop', 'capacity': '1MiB', 'name': '{{ item }}'},
                                             'loop': names}, 'convloop', 'looped'),
            'community.libvirt.virt_volume looped': ({'community.libvirt.virt_volume': {'uri': uri, 'pool': 'peer', 'state': 'present',
                                                                                        'name': '{{ item.name }}', 'xml': '{{ item.xml }}'},
                                                      'loop': [{'name': n, 'xml': volume_xml(n, MIB)} for n in names]}, 'peer', 'looped'),
            'converge.virt.volume fleet form': ({'converge.virt.volume': {'uri': uri, 'pool': 'conv', 'capacity': '1MiB',
                                                                          'volumes': [{'name': n} for n in names]}}, 'conv', 'fleet'),
        }
        ours = ('converge.virt.volume looped', 'converge.virt.volume fleet form')
        raw = dict(((label, step), []) for label in tasks for step in ('create', 're-run'))
        baseline, loads, peer_changed = [], [], []
        for index in range(args.repeat):
            loads.append(load_average())
            order = list(tasks) if index % 2 == 0 else list(reversed(list(tasks)))
            for pool in pools.values():
                for vol in pool.listAllVolumes(0):
                    vol.delete(0)
            baseline.append(run_playbook_times(bin_dir, playbook([ping, ping]), env, None))
            for label in order:
                raw[(label, 'create')].append(run_playbook_times(bin_dir, playbook([ping, tasks[label][0]]), env, True))
            for label in order:
                # converge.virt must change nothing on the re-run; the peer's re-run is recorded, not asserted
                raw[(label, 're-run')].append(run_playbook_times(bin_dir, playbook([ping, tasks[label][0]]), env, False if label in ours else None))
            for label, (_task, pool_name, _form) in tasks.items():
                pools[pool_name].refresh(0)
                count = pools[pool_name].numOfVolumes()
                if count != args.volumes:
                    raise RuntimeError('pool %s holds %d volumes after %s, expected %d' % (pool_name, count, label, args.volumes))
        loads.append(load_average())
        floor = median_of_odd(wall for wall, _cpu in baseline)
        floor_cpu = median_of_odd(cpu for _wall, cpu in baseline)
        timed = {}
        for (label, step), runs in raw.items():
            timed['%s %s' % (label, step)] = {
                'playbook_runs': [round(wall, 3) for wall, _cpu in runs], 'playbook_cpu_runs': [round(cpu, 3) for _wall, cpu in runs],
                'playbook_seconds': round(median_of_odd(wall for wall, _cpu in runs), 3),
                'playbook_cpu_seconds': round(median_of_odd(cpu for _wall, cpu in runs), 3),
                'task_seconds': round(max(0.001, median_of_odd(wall for wall, _cpu in runs) - floor), 3),
                'task_cpu_seconds': round(max(0.001, median_of_odd(cpu for _wall, cpu in runs) - floor_cpu), 3)}
        results = {
            'volumes': args.volumes, 'repeat': args.repeat, 'host': 'one private libvirt host (tools.virtlab), unix socket URI',
            'peer': 'community.libvirt.virt_volume from the ansible package in build/bench-venv, loop over the volumes',
            'floor_playbook_two_ping_tasks_s': round(floor, 3), 'floor_runs': [round(wall, 3) for wall, _cpu in baseline],
            'load_average_1min': loads, 'timed': timed,
            'comparisons': [],
        }
        for step in ('create', 're-run'):
            peer = timed['community.libvirt.virt_volume looped %s' % step]
            for label in ours:
                mine = timed['%s %s' % (label, step)]
                same = tasks[label][2] == 'looped'
                results['comparisons'].append(comparison(
                    '%d volumes, %s, whole playbook (ping + the task)' % (args.volumes, step),
                    {'label': 'converge.virt.volume', 'form': tasks[label][2], 'seconds': mine['playbook_seconds'],
                     'cpu_seconds': mine['playbook_cpu_seconds']},
                    {'label': 'community.libvirt.virt_volume', 'form': 'looped', 'seconds': peer['playbook_seconds'],
                     'cpu_seconds': peer['playbook_cpu_seconds']},
                    'peer/ours', {'label': 'playbook of two ping tasks', 'seconds': round(floor, 3)},
                    note='' if same else 'DIFFERENT FORMS: one task over every volume vs the peer looped', stat='median of %d' % args.repeat))
        report('volume_converge', results)
        conn.close()
    finally:
        hosts.stop_hosts(args.state_dir)
    return 0


if __name__ == '__main__':
    sys.exit(main())
