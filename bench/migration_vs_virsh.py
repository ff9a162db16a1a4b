"""Benchmark: a live migration through converge.virt.migration vs ``virsh migrate --live``.

Two private libvirt hosts (tools.virtlab) and one booted TCG guest (the
tools.virtlab guest, whose init loop keeps rewriting part of its memory). The
guest is moved back and forth; every round times, side by side:

* the module: one ``ansible localhost -m converge.virt.migration`` process
  (ansible start-up, the module's checks, the task record, the migration with
  progress polling, the finished record and history on the destination);
* virsh: ``virsh -c <source> migrate --live --persistent --undefinesource
  <name> <target>`` (subprocess argv, the same flags the module uses by default).

The 1-minute load average is recorded at the start and after every round.
With VIRTLAB_WORKER set, the hosts use that worker's spare slot (bench.common.lab_layout).

The module's own wall time is the task's, recorded by bench/callback_plugins/task_timer.py
from the moment ansible starts the task to its result (worker, AnsiballZ, interpreter,
module): ansible's start-up before the first task (plugins, inventory) is not the module's.
Both ratios are reported: the whole ``ansible`` process and the task alone, each against virsh.

The floor of any ansible module that migrates is timed too: ``ansible -m ansible.builtin.command`` running the
very same virsh command (ansible's worker, AnsiballZ and module interpreter, and ansible's controller loop running
on the same cores while the guest migrates). ratio_module_task_to_command_virsh_task compares the module with it.
ANSIBLE_INTERNAL_POLL_INTERVAL (ansible's controller loop, 0.001 s by default) is recorded: a quieter controller
leaves more CPU to the migration on a small machine (set it in the environment to measure that).

For context it also times the backend alone (Migration.converge in this
process: no ansible start-up) and ``ansible -m ping`` (the floor of any task), whole and
its task alone: (ping task + virsh) / virsh is the best ratio any ansible module can reach.
Medians and the ratio module / virsh are printed as JSON and written to
bench/results/migration_vs_virsh.json. Target: at most 1.3x. Needs root.

    build/bench-venv/bin/python -m bench.migration_vs_virsh --rounds 5 --memory 512
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import libvirt

from bench.common import comparison, lab_layout, load_average, odd_repeat, results_dir
from tools.virtlab import domains, guest as virtlab_guest, hosts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = 'bench-mig'


def ansible_env():
    env = dict(os.environ)
    env.update({'ANSIBLE_COLLECTIONS_PATH': os.path.join(ROOT, 'build', 'collections'), 'ANSIBLE_LOCALHOST_WARNING': '0',
                'ANSIBLE_INVENTORY_UNPARSED_WARNING': '0', 'ANSIBLE_PYTHON_INTERPRETER': sys.executable, 'ANSIBLE_NOCOLOR': '1'})
    return env


def timed_env(path):
    """ansible's environment with bench/callback_plugins/task_timer.py recording each task's wall time into path."""
    return dict(ansible_env(), BENCH_TASK_TIMES=path, ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, 'bench', 'callback_plugins'),
                ANSIBLE_CALLBACKS_ENABLED='task_timer', ANSIBLE_LOAD_CALLBACK_PLUGINS='1')


def task_seconds(path):
    """The wall time of the one task recorded by bench/callback_plugins/task_timer.py in path."""
    with open(path, encoding='utf-8') as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    os.unlink(path)
    if len(records) != 1 or records[0]['status'] != 'ok':
        raise RuntimeError('expected one successful task, recorded: %s' % records)
    return records[0]['seconds']


def timed_task(bin_dir, module, args=None, expect='SUCCESS'):
    """One ``ansible localhost -m module`` run: (wall time of the whole process, wall time of its task alone).

    ``expect``: a word ansible prints for the task when it did its work (else RuntimeError with the output).
    """
    cmd = [os.path.join(bin_dir, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', module]
    if args is not None:
        cmd += ['-a', json.dumps(args)]
    handle, times = tempfile.mkstemp(prefix='bench-task-times-')
    os.close(handle)
    start = time.monotonic()
    proc = subprocess.run(cmd, env=timed_env(times), capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0 or expect not in proc.stdout:
        raise RuntimeError('ansible -m %s failed:\n%s\n%s' % (module, proc.stdout[-2000:], proc.stderr[-2000:]))
    return took, task_seconds(times)


def module_move(bin_dir, src, dst):
    """(wall time of the whole ``ansible`` process, wall time of its task alone)."""
    return timed_task(bin_dir, 'converge.virt.migration', {'uri': src.uri, 'name': NAME, 'target_uri': dst.uri}, expect='CHANGED')


def backend_move(src, dst):
    sys.path.insert(0, os.path.join(ROOT, 'build', 'collections'))
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as mb  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_options  # pylint: disable=import-outside-toplevel
    start = time.monotonic()
    result = mb.Migration((src.uri, None, None), dst.uri, NAME, migration_options.MigrationOptions()).converge()
    took = time.monotonic() - start
    if result.get('failed') or result.get('phase') != 'Succeeded':
        raise RuntimeError('backend migration failed: %s' % result)
    return took


def ping(bin_dir):
    """(wall time of ``ansible -m ping``, wall time of its task alone): the floor of any ansible task."""
    return timed_task(bin_dir, 'ansible.builtin.ping')


def command_virsh_move(bin_dir, src, dst):
    """(wall time of ``ansible -m command`` running the same virsh migrate, wall time of its task alone).

    The floor of any ansible module that migrates: ansible's task machinery (worker, AnsiballZ, the module's
    interpreter) plus virsh itself, with ansible's controller running while the migration does.
    """
    argv = ['virsh', '-c', src.uri, 'migrate', '--live', '--persistent', '--undefinesource', NAME, dst.uri]
    return timed_task(bin_dir, 'ansible.builtin.command', {'argv': argv}, expect='CHANGED')


def virsh_move(src, dst):
    cmd = ['virsh', '-c', src.uri, 'migrate', '--live', '--persistent', '--undefinesource', NAME, dst.uri]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError('virsh migrate failed: %s' % proc.stderr)
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--rounds', type=odd_repeat, default=9,
                        help='rounds, odd (the guest rewrites its memory about once a second, so single migrations vary by ~1 s: use medians of many)')
    parser.add_argument('--memory', type=int, default=512, help='guest memory in MiB')
    parser.add_argument('--state-dir', default=None)
    args = parser.parse_args()
    state_dir = args.state_dir or tempfile.mkdtemp(prefix='bench-mig-')
    bin_dir = os.path.dirname(sys.executable)
    lab = hosts.start_hosts(2, state_dir, **lab_layout('127.0.0.51', 'benchmig-', 16851, 49900))
    try:
        image = virtlab_guest.build_guest(os.environ.get('VIRTLAB_GUEST_CACHE') or virtlab_guest.DEFAULT_CACHE_DIR)
        conn = libvirt.open(lab[0].uri)
        _dom, log = domains.start_kernel_guest(conn, lab[0], NAME, image, memory_mib=args.memory)
        domains.wait_for_console(log)
        conn.close()
        times = {'module': [], 'task': [], 'virsh': [], 'backend': [], 'ping': [], 'ping_task': [], 'command': [], 'command_task': []}
        loads = [load_average()]
        here, there = lab[0], lab[1]
        module_move(bin_dir, here, there)  # warm-up (ansible's caches), not counted
        here, there = there, here
        for _round in range(args.rounds):
            whole, task = module_move(bin_dir, here, there)
            times['module'].append(whole)
            times['task'].append(task)
            here, there = there, here
            times['virsh'].append(virsh_move(here, there))
            here, there = there, here
            times['backend'].append(backend_move(here, there))
            here, there = there, here
            whole, task = command_virsh_move(bin_dir, here, there)
            times['command'].append(whole)
            times['command_task'].append(task)
            here, there = there, here
            whole, task = ping(bin_dir)
            times['ping'].append(whole)
            times['ping_task'].append(task)
            loads.append(load_average())
        result = {
            'guest_memory_mib': args.memory, 'rounds': args.rounds,
            'load_average_1m': {'start': loads[0], 'median': statistics.median(loads), 'max': max(loads), 'end': loads[-1]},
            'module_s': [round(t, 3) for t in times['module']], 'virsh_s': [round(t, 3) for t in times['virsh']],
            'module_median_s': round(statistics.median(times['module']), 3), 'virsh_median_s': round(statistics.median(times['virsh']), 3),
        }
        result.update(backend_median_s=round(statistics.median(times['backend']), 3), ansible_ping_median_s=round(statistics.median(times['ping']), 3))
        result['ratio_module_to_virsh'] = round(result['module_median_s'] / result['virsh_median_s'], 3)
        # side by side: each round's module run against the virsh run right after it (same load)
        result['ratio_module_to_virsh_median_of_rounds'] = round(statistics.median(m / v for m, v in zip(times['module'], times['virsh'])), 3)
        result['ratio_backend_to_virsh'] = round(result['backend_median_s'] / result['virsh_median_s'], 3)
        # the module's own wall time: the task inside the ansible run (ansible's start-up - plugins, inventory - left out)
        result['module_task_s'] = [round(t, 3) for t in times['task']]
        result['module_task_median_s'] = round(statistics.median(times['task']), 3)
        result['ratio_module_task_to_virsh'] = round(result['module_task_median_s'] / result['virsh_median_s'], 3)
        result['ratio_module_task_to_virsh_median_of_rounds'] = round(statistics.median(m / v for m, v in zip(times['task'], times['virsh'])), 3)
        # any ansible task costs at least a ping task: (ping task + virsh) / virsh is the best ratio an ansible module can reach
        result['ansible_ping_task_median_s'] = round(statistics.median(times['ping_task']), 3)
        ping_task, virsh = result['ansible_ping_task_median_s'], result['virsh_median_s']
        result['ratio_floor_ping_task_plus_virsh_to_virsh'] = round((ping_task + virsh) / virsh, 3)
        result['module_task_minus_ping_task_minus_virsh_s'] = round(result['module_task_median_s'] - ping_task - virsh, 3)
        result['ratio_module_minus_ping_to_virsh'] = round((result['module_median_s'] - result['ansible_ping_median_s']) / result['virsh_median_s'], 3)
        # the floor of any ansible module that migrates: the same virsh run as an ansible task (ansible.builtin.command)
        result['command_virsh_task_s'] = [round(t, 3) for t in times['command_task']]
        result['command_virsh_task_median_s'] = round(statistics.median(times['command_task']), 3)
        result['command_virsh_median_s'] = round(statistics.median(times['command']), 3)
        result['ratio_floor_command_virsh_task_to_virsh'] = round(result['command_virsh_task_median_s'] / virsh, 3)
        result['ratio_module_task_to_command_virsh_task'] = round(result['module_task_median_s'] / result['command_virsh_task_median_s'], 3)
        result['ratio_module_task_to_command_virsh_task_median_of_rounds'] = round(
            statistics.median(m / c for m, c in zip(times['task'], times['command_task'])), 3)
        result['ansible_internal_poll_interval'] = os.environ.get('ANSIBLE_INTERNAL_POLL_INTERVAL', 'default (0.001)')
        result['target_ratio'] = 1.3
        result['load_average_1min'] = loads
        stat = 'median of %d' % args.rounds
        floor = {'label': 'ping task', 'seconds': result['ansible_ping_task_median_s']}
        ours_task = {'label': 'converge.virt.migration', 'form': 'task', 'seconds': result['module_task_median_s']}
        result['comparisons'] = [
            comparison('live migration, the task vs virsh migrate as a task', ours_task,
                       {'label': 'command: virsh migrate --live', 'form': 'task', 'seconds': result['command_virsh_task_median_s']},
                       'ours/peer', floor, note='target <= 1.05 (issue 39)', stat=stat),
            comparison('live migration, whole ansible process vs virsh as a task',
                       {'label': 'ansible -m converge.virt.migration', 'form': 'process', 'seconds': result['module_median_s']},
                       {'label': 'ansible -m command virsh migrate', 'form': 'process', 'seconds': result['command_virsh_median_s']},
                       'ours/peer', {'label': 'ansible -m ping', 'seconds': result['ansible_ping_median_s']}, stat=stat),
            comparison('live migration, the task vs bare virsh', ours_task,
                       {'label': 'virsh migrate --live', 'form': 'command', 'seconds': virsh}, 'ours/peer', floor,
                       note='DIFFERENT FORMS: an ansible task vs the bare command', stat=stat),
        ]
        print(json.dumps(result, indent=2))
        os.makedirs(results_dir(), exist_ok=True)
        with open(os.path.join(results_dir(), 'migration_vs_virsh.json'), 'w', encoding='utf-8') as handle:
            json.dump(result, handle, indent=2)
    finally:
        hosts.stop_hosts(state_dir)


if __name__ == '__main__':
    main()
