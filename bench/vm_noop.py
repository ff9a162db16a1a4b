"""Benchmark: the cost of a no-op converge.virt.vm task, side by side with peers.

Run on one private libvirt host (tools.virtlab) holding N defined VMs:

* per-task cost: a playbook of K no-op tasks and one of 2K; (T(2K) - T(K)) / K
  cancels ansible's start-up. Each round runs every kind side by side (K of
  each, then 2K of each); the median of ``--repeat`` rounds is reported, with
  the 1-minute load average at the start and the end, in wall-clock and in
  CPU seconds (user + system of ansible-playbook and its children: far less
  sensitive to other work on the machine than the wall clock). Measured for converge.virt.vm (state present on
  a defined, stopped VM), community.libvirt.virt (state shutdown on the same
  stopped VM, from the ``ansible`` package on PyPI) and ansible.builtin.ping,
  the floor of any task;
* the fleet form: one converge.virt.vm task declaring all N VMs (no-op),
  minus an empty playbook.

Results are printed as JSON and written to bench/results/vm_noop.json, with
ratios (converge / ping, converge / community.libvirt). Needs ``make bench-venv``
(a virtualenv with the ``ansible`` package) and root. With VIRTLAB_WORKER set,
the private host uses that worker's spare address/port slot (bench.common.lab_layout).

    python -m bench.vm_noop --vms 1000 --tasks 20
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import libvirt

from bench.common import ROOT, bench_env, comparison, lab_layout, load_average, odd_repeat, playbook, report, run_playbook, run_playbook_times
from tools.virtlab import domains, hosts


def per_task_round(bin_dir, tasks, count, env):
    """One round, side by side: for each task kind, ((T(2K) - T(K)) / K) in wall-clock and in CPU seconds.

    The kinds are interleaved so that load drifts hit every kind alike; returns {kind: (wall, cpu)}.
    """
    short = dict((kind, run_playbook_times(bin_dir, playbook([task] * count), env)) for kind, task in tasks.items())
    long_ = dict((kind, run_playbook_times(bin_dir, playbook([task] * (2 * count)), env)) for kind, task in tasks.items())
    return dict((kind, ((long_[kind][0] - short[kind][0]) / count, (long_[kind][1] - short[kind][1]) / count)) for kind in tasks)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=1000)
    parser.add_argument('--tasks', type=int, default=20)
    parser.add_argument('--repeat', type=odd_repeat, default=3, help='rounds, odd; the median of the rounds (the middle one) is reported')
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-lab'))
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    env = bench_env(bin_dir)
    lab = hosts.start_hosts(1, args.state_dir, **lab_layout('127.0.0.41', 'bench-', 16811, 49800))
    try:
        uri = lab[0].uri
        conn = libvirt.open(uri)
        names = ['bench-%05d' % i for i in range(args.vms)]
        t0 = time.perf_counter()
        for name in names:
            conn.defineXML(domains.diskless_domain_xml(name, domain_type='qemu', memory_mib=64))
        define_seconds = time.perf_counter() - t0
        for name in names[:3]:
            conn.lookupByName(name).create()
        target = names[-1]
        # first contact records vm_state in the metadata; afterwards every run is a no-op
        fleet = {'converge.virt.vm': {'uri': uri, 'parallel': 8,
                                      'vms': [{'name': n, 'state': 'running' if n in names[:3] else 'stopped'} for n in names]}}
        converge_task = {'converge.virt.vm': {'uri': uri, 'name': target, 'state': 'stopped'}}
        peer_task = {'community.libvirt.virt': {'uri': uri, 'name': target, 'state': 'shutdown'}}
        ping_task = {'ansible.builtin.ping': {}}
        subprocess.run([os.path.join(bin_dir, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', '/dev/stdin'],
                       input=json.dumps(playbook([fleet])), env=env, capture_output=True, text=True, check=True)
        kinds = {'ansible.builtin.ping': ping_task, 'converge.virt.vm': converge_task, 'community.libvirt.virt': peer_task}
        load_before = load_average()
        rounds = [per_task_round(bin_dir, kinds, args.tasks, env) for _round in range(args.repeat)]
        cost = dict((kind, statistics.median(r[kind][0] for r in rounds)) for kind in kinds)
        cpu = dict((kind, statistics.median(r[kind][1] for r in rounds)) for kind in kinds)
        results = {
            'vms_defined': args.vms, 'define_seconds': round(define_seconds, 2), 'tasks': args.tasks, 'rounds': args.repeat,
            # the modules' bytecode cache on the managed host is in use unless turned off (docs/guide.md)
            'module_bytecode_cache': not os.environ.get('PYTHONDONTWRITEBYTECODE') and os.environ.get('CONVERGE_VIRT_BYTECODE_CACHE', '1') != '0',
            'load_average_1m': {'start': load_before},
            'per_task_seconds': cost,
            'per_task_cpu_seconds': dict((k, round(v, 4)) for k, v in cpu.items()),
            'per_round_converge_vs_ping': [round(r['converge.virt.vm'][0] / r['ansible.builtin.ping'][0], 3) for r in rounds],
            'per_round_converge_vs_ping_cpu': [round(r['converge.virt.vm'][1] / r['ansible.builtin.ping'][1], 3) for r in rounds],
        }
        empty = statistics.median(run_playbook(bin_dir, playbook([ping_task]), env) for _attempt in range(args.repeat))
        fleet_total = statistics.median(run_playbook(bin_dir, playbook([ping_task, fleet]), env) for _attempt in range(args.repeat))
        results['load_average_1m']['end'] = load_average()
        results['fleet_noop_task_seconds'] = round(fleet_total - empty, 3)
        results['ratios'] = {
            'converge_vs_ping': round(cost['converge.virt.vm'] / cost['ansible.builtin.ping'], 3),
            'converge_vs_ping_median_of_rounds': round(statistics.median(results['per_round_converge_vs_ping']), 3),
            'converge_vs_ping_cpu': round(cpu['converge.virt.vm'] / cpu['ansible.builtin.ping'], 3),
            'community_libvirt_vs_ping_cpu': round(cpu['community.libvirt.virt'] / cpu['ansible.builtin.ping'], 3),
            'community_libvirt_vs_converge': round(cost['community.libvirt.virt'] / cost['converge.virt.vm'], 2),
            'community_loop_estimate_vs_fleet': round(cost['community.libvirt.virt'] * args.vms / results['fleet_noop_task_seconds'], 1),
        }
        results['per_task_seconds'] = {k: round(v, 4) for k, v in cost.items()}
        results['comparisons'] = [comparison(
            'libvirt no-op, per task ((T(2K)-T(K))/K)',
            {'label': 'converge.virt.vm', 'form': 'looped', 'seconds': round(cost['converge.virt.vm'], 4), 'cpu_seconds': round(cpu['converge.virt.vm'], 4)},
            {'label': 'community.libvirt.virt', 'form': 'looped', 'seconds': round(cost['community.libvirt.virt'], 4),
             'cpu_seconds': round(cpu['community.libvirt.virt'], 4)},
            'ours/peer', {'label': 'ping task', 'seconds': round(cost['ansible.builtin.ping'], 4)}, note='target <= 0.90 (issue 39)',
            stat='median of %d rounds' % args.repeat)]
        results['load_average_1min'] = [results['load_average_1m']['start'], results['load_average_1m']['end']]
        report('vm_noop', results)
        conn.close()
    finally:
        hosts.stop_hosts(args.state_dir)
    return 0


if __name__ == '__main__':
    sys.exit(main())
