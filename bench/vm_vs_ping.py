"""Benchmark: a no-op converge.virt.vm task against ansible.builtin.ping, as a user would try it (issue 16).

Whole playbooks of ``--tasks`` tasks (20), one of no-op ``converge.virt.vm`` tasks on a stopped VM of one private
libvirt host and one of ``ansible.builtin.ping``, run one after the other and alternating in order, ``--repeat``
rounds; the medians of the wall-clock and of the CPU seconds (user + system of ansible-playbook and its children)
and their ratios are printed as JSON and written to bench/results/vm_vs_ping.json, with the 1-minute load average
at the start and the end. bench/vm_noop.py measures the per-task cost instead (T(2K) - T(K)); this one is the
whole-playbook figure the issue's 1.10x target is stated in. ``--collections DIR`` adds a third kind: the same vm
playbook with another tree of the collection (e.g. an older commit's build/collections) for a before/after.

The playbooks run in this process's environment less ``PYTHONDONTWRITEBYTECODE``, as a user's shell has it: with that
variable set (as in this project's development shells) Python writes no bytecode and the collection's module_utils
bytecode cache (_common/bytecache.py) is never filled, so every vm task compiles its whole module_utils tree again
(about 60 ms of CPU per task on this machine). ``--dont-write-bytecode`` keeps the variable (the cold figure); the
result records which. The size of each kind's AnsiballZ payload (one extra task with ANSIBLE_KEEP_REMOTE_FILES) is
recorded too.

Two control kinds run alongside (``--no-controls`` leaves them out): ``libvirt_floor``, a module that does ping's work plus
the least a libvirt no-op check does through libvirt-python (bench/library/libvirt_noop_floor.py: import libvirt and
ElementTree, connect, look the domain up, read state and XML) - its ratio to ping is what libvirt-python alone costs a
task, and ``vm_over_libvirt_floor`` / ``vm_minus_libvirt_floor_ms_per_task`` what the collection adds on top; and
``community_libvirt``, community.libvirt.virt (state shutdown) on the same stopped VM. ``vm_direct`` (issue 39) is the
vm playbook with ``converge_virt_direct_execution: true`` on its tasks (docs/direct-execution.md): the module runs in
ansible's worker process, no AnsiballZ payload and no module process (its payload size is recorded as 0 after a check
that the run left none); ``--no-direct`` leaves it out.

    python -m bench.vm_vs_ping --tasks 20 --repeat 3
"""

import argparse
import json
import os
import glob
import re
import shutil
import statistics
import sys
import tempfile

from bench.common import ROOT, bench_env, comparison, lab_layout, load_average, odd_repeat, playbook, results_dir, timed_playbook
from tools.virtlab import domains, hosts

DIRECT_VARIABLE = 'converge_virt_direct_execution'
# the play recap of a run in which every task was ok and none changed or failed
NOOP_RECAP = re.compile(r'ok=\d+\s+changed=0\s+unreachable=0\s+failed=0')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--tasks', type=int, default=20)
    parser.add_argument('--repeat', type=odd_repeat, default=3, help='rounds, odd (the median is the middle run)')
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-ping-lab'))
    parser.add_argument('--collections', help='another collections path to measure the vm playbook with (before/after)')
    parser.add_argument('--dont-write-bytecode', action='store_true',
                        help='keep PYTHONDONTWRITEBYTECODE from this environment (no bytecode cache on the module side: the cold figure)')
    parser.add_argument('--no-controls', dest='controls', action='store_false',
                        help='leave out the two control kinds: libvirt_floor (ping + the least a libvirt no-op check does, '
                             'bench/library/libvirt_noop_floor.py) and community_libvirt (community.libvirt.virt state=shutdown)')
    parser.add_argument('--no-direct', dest='direct', action='store_false',
                        help='leave out vm_direct (the vm playbook with converge_virt_direct_execution: true)')
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    lab = hosts.start_hosts(1, args.state_dir, **lab_layout('127.0.0.46', 'bvp-', 16861, 49860))
    try:
        uri = lab[0].uri
        import libvirt  # pylint: disable=import-outside-toplevel
        conn = libvirt.open(uri)
        try:
            conn.defineXML(domains.diskless_domain_xml('bvp-noop', domain_type='qemu', memory_mib=64))
        finally:
            conn.close()
        env = bench_env(bin_dir)
        if not args.dont_write_bytecode:
            env.pop('PYTHONDONTWRITEBYTECODE', None)
        vm = {'converge.virt.vm': {'uri': uri, 'name': 'bvp-noop', 'state': 'stopped'}}
        kinds = [('ping', {'ansible.builtin.ping': {}}, env), ('vm', vm, env)]
        if args.direct:
            kinds.append(('vm_direct', dict(vm, vars={DIRECT_VARIABLE: True}), env))
        if args.controls:
            # the least a libvirt no-op check costs (bench/library/libvirt_noop_floor.py), and the peer module on the same VM
            floor_env = dict(env, ANSIBLE_LIBRARY=os.path.join(ROOT, 'bench', 'library'))
            kinds.append(('libvirt_floor', {'libvirt_noop_floor': {'uri': uri, 'name': 'bvp-noop'}}, floor_env))
            kinds.append(('community_libvirt', {'community.libvirt.virt': {'uri': uri, 'name': 'bvp-noop', 'state': 'shutdown'}}, env))
        if args.collections:
            kinds.append(('vm_other_tree', vm, dict(env, ANSIBLE_COLLECTIONS_PATH=os.path.abspath(args.collections))))
        cli = ['-i', 'localhost,', '-c', 'local']
        for _kind, task, kind_env in kinds:
            # the first contact records the VM's state and warms the bytecode caches: not measured
            timed_playbook(bin_dir, playbook([task] * 2), kind_env, cli)
        wall = dict((kind, []) for kind, _task, _env in kinds)
        cpu = dict((kind, []) for kind, _task, _env in kinds)
        load_before = load_average()
        for index in range(args.repeat):
            for kind, task, kind_env in (kinds if index % 2 == 0 else list(reversed(kinds))):
                proc, seconds, cpu_seconds = timed_playbook(bin_dir, playbook([task] * args.tasks), kind_env, cli)
                if not NOOP_RECAP.search(proc.stdout):
                    raise RuntimeError('%s: not a no-op run:\n%s' % (kind, proc.stdout[-3000:]))
                wall[kind].append(round(seconds, 3))
                cpu[kind].append(round(cpu_seconds, 3))
        result = {'tasks': args.tasks, 'rounds': args.repeat, 'load': [load_before, load_average()],
                  'pythondontwritebytecode': bool(env.get('PYTHONDONTWRITEBYTECODE')),
                  'payload_bytes': dict((kind, payload_size(bin_dir, task, kind_env, cli, expected=0 if kind == 'vm_direct' else 1))
                                        for kind, task, kind_env in kinds),
                  'wall': wall, 'cpu': cpu}
        for name, series in (('wall', wall), ('cpu', cpu)):
            medians = dict((kind, statistics.median(values)) for kind, values in series.items())
            result['median_' + name] = medians
            result['ratio_' + name] = dict((kind, round(value / medians['ping'], 3)) for kind, value in medians.items())
            if 'libvirt_floor' in medians:
                # what the collection adds over the least a libvirt-python check costs, per task and as a ratio
                result['vm_over_libvirt_floor_' + name] = round(medians['vm'] / medians['libvirt_floor'], 3)
                result['vm_minus_libvirt_floor_ms_per_task_' + name] = round((medians['vm'] - medians['libvirt_floor']) * 1000 / args.tasks, 1)
                result['libvirt_floor_minus_ping_ms_per_task_' + name] = round((medians['libvirt_floor'] - medians['ping']) * 1000 / args.tasks, 1)
        if 'community_libvirt' in wall:
            medians = dict((kind, statistics.median(values)) for kind, values in wall.items())
            cpu_medians = dict((kind, statistics.median(values)) for kind, values in cpu.items())
            result['comparisons'] = [comparison(
                'libvirt no-op, %d-task playbooks' % args.tasks,
                {'label': 'converge.virt.vm', 'form': 'looped', 'seconds': medians['vm'], 'cpu_seconds': cpu_medians['vm']},
                {'label': 'community.libvirt.virt', 'form': 'looped', 'seconds': medians['community_libvirt'], 'cpu_seconds': cpu_medians['community_libvirt']},
                'ours/peer', {'label': '%d ping tasks' % args.tasks, 'seconds': medians['ping']}, note='target <= 0.90 (issue 39)',
                stat='median of %d' % args.repeat)]
            if 'vm_direct' in medians:
                result['comparisons'].append(comparison(
                    'libvirt no-op, %d-task playbooks, converge_virt_direct_execution' % args.tasks,
                    {'label': 'converge.virt.vm (direct execution)', 'form': 'looped', 'seconds': medians['vm_direct'],
                     'cpu_seconds': cpu_medians['vm_direct']},
                    {'label': 'community.libvirt.virt', 'form': 'looped', 'seconds': medians['community_libvirt'],
                     'cpu_seconds': cpu_medians['community_libvirt']},
                    'ours/peer', {'label': '%d ping tasks' % args.tasks, 'seconds': medians['ping']}, note='target <= 0.90 (issue 39)',
                    stat='median of %d' % args.repeat))
            result['load_average_1min'] = result['load']
        print(json.dumps(result, indent=1))
        os.makedirs(results_dir(), exist_ok=True)
        with open(os.path.join(results_dir(), 'vm_vs_ping.json'), 'w', encoding='utf-8') as handle:
            json.dump(result, handle, indent=1)
    finally:
        hosts.stop_hosts(args.state_dir)
    return 0


def payload_size(bin_dir, task, env, cli, expected=1):
    """The size in bytes of the AnsiballZ file one run of ``task`` sends to the host (kept with ANSIBLE_KEEP_REMOTE_FILES).

    ``expected`` 0 (direct execution): the run must leave no payload; the size is 0.
    """
    keep = tempfile.mkdtemp(prefix='bench-payload-')
    try:
        timed_playbook(bin_dir, playbook([task]), dict(env, ANSIBLE_KEEP_REMOTE_FILES='1', ANSIBLE_REMOTE_TMP=keep), cli)
        found = glob.glob(os.path.join(keep, '*', 'AnsiballZ_*.py'))
        if len(found) != expected:
            raise RuntimeError('expected %d AnsiballZ payload(s) in %s, found %s' % (expected, keep, found))
        return os.path.getsize(found[0]) if found else 0
    finally:
        shutil.rmtree(keep, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
