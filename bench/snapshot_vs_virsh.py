"""Benchmark: 20 VMs snapshotted in one converge.virt.snapshot task vs a loop of ``virsh snapshot-create-as``.

One private libvirt host (tools.virtlab) with N guests (diskless SeaBIOS guests, each with one qcow2 data disk
of its own); stopped by default (disk snapshots), or running with ``--running`` (snapshots with the guest's
memory). Every round times, side by side, one new snapshot of every VM:

* the module: one ``ansible-playbook`` run whose one task is converge.virt.snapshot in its fleet form (``vms``:
  the N VMs, ``parallel``: 8 by default, one module run over one connection; each VM observed, its task taken,
  snapshotted, its task released); the whole process and, through bench/callback_plugins/task_timer.py, the task
  alone (ansible's start-up left out). ``--loop`` times the task with ``loop`` over the VMs instead (the module
  once per VM);
* virsh: ``virsh -c <uri> snapshot-create-as <vm> <name>`` for each VM in turn (subprocess argv lists, no shell).

After each side the round's snapshots are deleted (not timed), so every round starts from the same state.
The 1-minute load average is recorded at the start and after every round. Medians, the ratios module / virsh
(whole process and task alone) and the per-VM cost of each side are printed as JSON and written to
bench/results/snapshot_vs_virsh.json (``--running``: snapshot_vs_virsh_running.json). Needs root.

    build/bench-venv/bin/python -m bench.snapshot_vs_virsh --vms 20 --rounds 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import libvirt

from bench.common import ROOT, bench_env, comparison, lab_layout, load_average, odd_repeat, playbook, results_dir, run_playbook_times
from tools.virtlab import domains, hosts


def make_vms(conn, count, disk_dir, running):
    """``count`` guests bench-snap-NN, each with one qcow2 disk of its own; return their names."""
    names = []
    for index in range(count):
        name = 'bench-snap-%02d' % index
        path = os.path.join(disk_dir, name + '.qcow2')
        subprocess.run(['qemu-img', 'create', '-q', '-f', 'qcow2', path, '16M'], check=True)
        root = ET.fromstring(domains.diskless_domain_xml(name, hosts.diskless_domain_type()))
        disk = ET.SubElement(root.find('devices'), 'disk', {'type': 'file', 'device': 'disk'})
        ET.SubElement(disk, 'driver', {'name': 'qemu', 'type': 'qcow2'})
        ET.SubElement(disk, 'source', {'file': path})
        ET.SubElement(disk, 'target', {'dev': 'vdb', 'bus': 'virtio'})
        dom = conn.defineXML(ET.tostring(root, encoding='unicode'))
        if running:
            dom.create()
        names.append(name)
    return names


def delete_all(conn, names):
    """Delete every snapshot of the VMs (between timed runs)."""
    for name in names:
        dom = conn.lookupByName(name)
        for snap in dom.listAllSnapshots(0):
            snap.delete(0)


def count_snapshots(conn, names, snapshot):
    return sum(1 for name in names if snapshot in [s.getName() for s in conn.lookupByName(name).listAllSnapshots(0)])


def module_round(bin_dir, uri, names, snapshot, loop=False, parallel=8):
    """(whole ansible-playbook seconds, the task's seconds, CPU seconds) of one task snapshotting every VM."""
    handle, times = tempfile.mkstemp(prefix='bench-task-times-')
    os.close(handle)
    env = dict(bench_env(bin_dir), BENCH_TASK_TIMES=times, ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, 'bench', 'callback_plugins'),
               ANSIBLE_CALLBACKS_ENABLED='task_timer', ANSIBLE_LOAD_CALLBACK_PLUGINS='1')
    if loop:
        task = {'name': 'snapshot every VM', 'converge.virt.snapshot': {'uri': uri, 'vm': '{{ item }}', 'name': snapshot}, 'loop': names}
    else:
        task = {'name': 'snapshot every VM', 'converge.virt.snapshot': {'uri': uri, 'vms': names, 'name': snapshot, 'parallel': parallel}}
    whole, cpu = run_playbook_times(bin_dir, playbook([task]), env, expect_changed=True)
    with open(times, encoding='utf-8') as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    os.unlink(times)
    if len(records) != 1 or records[0]['status'] != 'ok':
        raise RuntimeError('expected one successful task, recorded: %s' % records)
    return whole, records[0]['seconds'], cpu


def virsh_round(uri, names, snapshot):
    """Seconds of a loop of ``virsh snapshot-create-as`` over every VM."""
    start = time.monotonic()
    for name in names:
        proc = subprocess.run(['virsh', '-c', uri, 'snapshot-create-as', name, snapshot], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError('virsh snapshot-create-as %s failed: %s' % (name, proc.stderr))
    return time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=20)
    parser.add_argument('--rounds', type=odd_repeat, default=3, help='rounds, odd (the median is the middle run)')
    parser.add_argument('--running', action='store_true', help='running guests: snapshots with their memory')
    parser.add_argument('--parallel', type=int, default=8, help='the fleet form\'s parallel')
    parser.add_argument('--loop', action='store_true', help='time a task looping the module over the VMs instead of the fleet form')
    parser.add_argument('--state-dir', default=None)
    args = parser.parse_args()
    state_dir = args.state_dir or tempfile.mkdtemp(prefix='bench-snap-')
    bin_dir = os.path.dirname(sys.executable)
    lab = hosts.start_hosts(1, state_dir, **lab_layout('127.0.0.71', 'benchsnap-', 16871, 50700))
    try:
        conn = libvirt.open(lab[0].uri)
        disk_dir = os.path.join(state_dir, 'disks')
        os.makedirs(disk_dir, exist_ok=True)
        names = make_vms(conn, args.vms, disk_dir, args.running)
        module_round(bin_dir, lab[0].uri, names, 'warm-up', args.loop, args.parallel)  # ansible's caches, not counted
        delete_all(conn, names)
        times = {'module': [], 'task': [], 'cpu': [], 'virsh': []}
        loads = [load_average()]
        for number in range(args.rounds):
            whole, task, cpu = module_round(bin_dir, lab[0].uri, names, 'm%d' % number, args.loop, args.parallel)
            if count_snapshots(conn, names, 'm%d' % number) != len(names):
                raise RuntimeError('the module did not snapshot every VM')
            times['module'].append(whole)
            times['task'].append(task)
            times['cpu'].append(cpu)
            delete_all(conn, names)
            times['virsh'].append(virsh_round(lab[0].uri, names, 'v%d' % number))
            if count_snapshots(conn, names, 'v%d' % number) != len(names):
                raise RuntimeError('virsh did not snapshot every VM')
            delete_all(conn, names)
            loads.append(load_average())
        conn.close()
        median = dict((key, statistics.median(values)) for key, values in times.items())
        result = {
            'vms': args.vms, 'rounds': args.rounds, 'guests': 'running (memory snapshots)' if args.running else 'stopped (disk snapshots)',
            'load_average_1m': {'start': loads[0], 'median': statistics.median(loads), 'max': max(loads), 'end': loads[-1]},
            'module_s': [round(t, 3) for t in times['module']], 'module_task_s': [round(t, 3) for t in times['task']],
            'module_cpu_s': [round(t, 3) for t in times['cpu']], 'virsh_s': [round(t, 3) for t in times['virsh']],
            'module_median_s': round(median['module'], 3), 'module_task_median_s': round(median['task'], 3),
            'virsh_median_s': round(median['virsh'], 3),
            'module_task_per_vm_s': round(median['task'] / args.vms, 3), 'virsh_per_vm_s': round(median['virsh'] / args.vms, 3),
            'ratio_module_to_virsh': round(median['module'] / median['virsh'], 3),
            'ratio_module_task_to_virsh': round(median['task'] / median['virsh'], 3),
            'ratio_module_task_to_virsh_median_of_rounds': round(statistics.median(t / v for t, v in zip(times['task'], times['virsh'])), 3),
            'form': 'loop (the module once per VM)' if args.loop else 'fleet (vms, parallel %d)' % args.parallel,
        }
        result['load_average_1min'] = loads
        # the module's task (ansible's start-up excluded) against a shell loop of virsh commands: never the same form
        result['comparisons'] = [comparison(
            'snapshots of %d VMs (%s), task alone vs virsh loop' % (args.vms, result['guests']),
            {'label': 'converge.virt.snapshot', 'form': 'looped' if args.loop else 'fleet', 'seconds': result['module_task_median_s']},
            {'label': 'virsh snapshot-create-as', 'form': 'command loop', 'seconds': result['virsh_median_s']}, 'ours/peer',
            note='DIFFERENT FORMS: an ansible task vs bare commands', stat='median of %d' % args.rounds)]
        print(json.dumps(result, indent=2))
        os.makedirs(results_dir(), exist_ok=True)
        name = 'snapshot_vs_virsh%s%s.json' % ('_running' if args.running else '', '_loop' if args.loop else '')
        with open(os.path.join(results_dir(), name), 'w', encoding='utf-8') as handle:
            json.dump(result, handle, indent=2)
    finally:
        hosts.stop_hosts(state_dir)


if __name__ == '__main__':
    main()
