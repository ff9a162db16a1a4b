"""Benchmark: the cost of a no-op converge.virt.vm task, side by side with peers.

Run on one private libvirt host (tools.virtlab) holding N defined VMs:

* per-task cost: a playbook of K no-op tasks and one of 2K; (T(2K) - T(K)) / K
  cancels ansible's start-up. Measured for converge.virt.vm (state present on
  a defined, stopped VM), community.libvirt.virt (state shutdown on the same
  stopped VM, from the ``ansible`` package on PyPI) and ansible.builtin.ping,
  the floor of any task;
* the fleet form: one converge.virt.vm task declaring all N VMs (no-op),
  minus an empty playbook.

Results are printed as JSON and written to bench/results/vm_noop.json, with
ratios (converge / ping, converge / community.libvirt). Needs ``make bench-venv``
(a virtualenv with the ``ansible`` package) and root.

    python -m bench.vm_noop --vms 1000 --tasks 20
"""

import argparse
import json
import os
import subprocess
import sys
import time

import libvirt

from bench.common import ROOT, bench_env, playbook, report, run_playbook
from tools.virtlab import domains, hosts


def per_task(bin_dir, task, count, env, repeat):
    best_k = min(run_playbook(bin_dir, playbook([task] * count), env) for _attempt in range(repeat))
    best_2k = min(run_playbook(bin_dir, playbook([task] * (2 * count)), env) for _attempt in range(repeat))
    return (best_2k - best_k) / count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=1000)
    parser.add_argument('--tasks', type=int, default=20)
    parser.add_argument('--repeat', type=int, default=2)
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-lab'))
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    env = bench_env(bin_dir)
    lab = hosts.start_hosts(1, args.state_dir, first_address='127.0.0.41', name_prefix='bench-', first_tcp_port=16811,
                            first_migration_port=49800)
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
        results = {
            'vms_defined': args.vms, 'define_seconds': round(define_seconds, 2), 'tasks': args.tasks,
            'per_task_seconds': {
                'ansible.builtin.ping': per_task(bin_dir, ping_task, args.tasks, env, args.repeat),
                'converge.virt.vm': per_task(bin_dir, converge_task, args.tasks, env, args.repeat),
                'community.libvirt.virt': per_task(bin_dir, peer_task, args.tasks, env, args.repeat),
            },
        }
        empty = min(run_playbook(bin_dir, playbook([ping_task]), env) for _attempt in range(args.repeat))
        fleet_total = min(run_playbook(bin_dir, playbook([ping_task, fleet]), env) for _attempt in range(args.repeat))
        cost = results['per_task_seconds']
        results['fleet_noop_task_seconds'] = round(fleet_total - empty, 3)
        results['ratios'] = {
            'converge_vs_ping': round(cost['converge.virt.vm'] / cost['ansible.builtin.ping'], 3),
            'community_libvirt_vs_converge': round(cost['community.libvirt.virt'] / cost['converge.virt.vm'], 2),
            'community_loop_estimate_vs_fleet': round(cost['community.libvirt.virt'] * args.vms / results['fleet_noop_task_seconds'], 1),
        }
        results['per_task_seconds'] = {k: round(v, 4) for k, v in cost.items()}
        report('vm_noop', results)
        conn.close()
    finally:
        hosts.stop_hosts(args.state_dir)
    return 0


if __name__ == '__main__':
    sys.exit(main())
