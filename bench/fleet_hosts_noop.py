"""Benchmark and profile: a fleet's no-op re-run over many hypervisors against ``ansible -m ping`` on the same hosts (issue 39 item 3).

``--hosts`` private libvirt hosts of tools.virtlab, each with its own sshd (the lab's inventory, group ``virtlab``),
and on each host ``--vms`` diskless VMs (``state: running`` by default) declared by one converge.virt.vm task in its
fleet form, ``uri: qemu:///system`` (local to each hypervisor), ``forks`` = the number of hosts - the form of
bench/fleet_hosts.py. Measured:

* ``first_converge``: the fleet from nothing (one run; wall and CPU, and what each host's libvirtd was asked);
* the no-op re-run of the same play against ``ansible virtlab -m ping`` and a playbook of one ``ping`` task over the
  same hosts with the same forks: ``--repeat`` (odd) alternating rounds, medians; the ping is the floor of "one
  task on each host" (ansible's own per-host cost, the SSH round trips, one tiny module);
* per run, besides the wall clock: the CPU seconds of ansible-playbook/ansible and every process it waited for
  (``cpu_s``, the controller), of everything under each host's sshd (``remote_cpu_s``: the module processes, their
  shells, the SSH sessions; reaped children count through their parents) and of each host's libvirtd
  (``libvirtd_cpu_s``): on a loaded machine the CPU figures move far less than the wall clock;
* ``community_first_converge`` (unless ``--skip-community``): community.libvirt.virt from nothing on the same hosts,
  one loop item per VM (``command: define`` with the same diskless domain XML, then ``state: running``), the form of
  bench/fleet_hosts.py's peer, with the same CPU figures and request counts as ``first_converge``;
* ``requests``: one more no-op run (not timed) and the first converge with each host's libvirtd logging every RPC it
  receives (``virt-admin daemon-log-filters``, the daemon's RPC_SERVER_CLIENT_MSG_RX probes): per host, the
  connections opened and the calls by procedure, and which of them write (a no-op must write nothing).

Needs root, ``make bench-venv`` and a private network namespace:

    python -m tools.virtlab netns -- build/bench-venv/bin/python -m bench.fleet_hosts_noop --hosts 8 --vms 10 --repeat 5
"""

import argparse
import collections
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from bench.fleet_hosts import _community_play, _count, _wipe
from bench.common import (
    ROOT, alternating, bench_env, comparison, lab_layout, load_average, median_of_odd, odd_repeat, report, results_name, timed_playbook)
from tools.virtlab import hosts as virtlab_hosts
from tools.virtlab import sshd as virtlab_sshd

# the remote protocol's procedure numbers (libvirt src/remote/remote_protocol.x) of the calls a vm task can make
PROCEDURES = {
    1: 'open', 2: 'close', 9: 'domainCreate', 15: 'domainGetAutostart', 16: 'domainGetInfo', 24: 'domainLookupByUUID',
    11: 'domainDefineXML', 12: 'domainDestroy', 14: 'domainGetXMLDesc',
    23: 'domainLookupByName', 28: 'domainResume', 29: 'domainSetAutostart', 33: 'domainShutdown', 34: 'domainSuspend',
    35: 'domainUndefine', 59: 'getHostname', 60: 'supportsFeature', 66: 'authList', 140: 'listSecrets',
    142: 'secretDefineXML', 146: 'secretUndefine', 147: 'secretLookupByUsage', 143: 'secretGetXMLDesc', 150: 'domainIsActive',
    151: 'domainIsPersistent', 157: 'getLibVersion', 163: 'domainGetJobInfo', 167: 'domainEventRegisterAny',
    168: 'domainEventDeregisterAny', 182: 'domainManagedSave', 183: 'domainHasManagedSaveImage',
    184: 'domainManagedSaveRemove', 196: 'domainCreateWithFlags', 212: 'domainGetState', 231: 'domainUndefineFlags',
    234: 'domainDestroyFlags', 258: 'domainShutdownFlags', 264: 'domainSetMetadata', 265: 'domainGetMetadata',
    273: 'listAllDomains', 283: 'listAllNetworks', 287: 'listAllSecrets', 344: 'getAllDomainStats',
    350: 'domainDefineXMLFlags',
}
# the procedures that change something on the host (a no-op must make none of them)
WRITES = frozenset((9, 11, 12, 28, 29, 33, 34, 35, 142, 146, 182, 184, 196, 231, 234, 258, 264, 350))
REMOTE_PROGRAM = 536903814  # 0x20008086: the remote (hypervisor) program; the admin program is another
RX = re.compile(r'RPC_SERVER_CLIENT_MSG_RX: client=(\S+) .*? prog=(\d+) vers=\d+ proc=(\d+) type=0 ')
DAEMON_LOG = '3:file:/var/log/libvirt/libvirtd.log'  # the lab's own setting (tools/virtlab/hosts.py)


def _names(count):
    return ['fleet-%03d' % index for index in range(1, count + 1)]


def _fleet_play(count, state, domain_type):
    return [{'name': 'fleet', 'hosts': 'virtlab', 'gather_facts': False, 'tasks': [{
        'name': 'the fleet of this hypervisor', 'converge.virt.vm': {
            'uri': 'qemu:///system', 'state': state, 'memory': '64MiB', 'domain_type': domain_type, 'shutdown_timeout': 0,
            'vms': [{'name': name} for name in _names(count)]}}]}]


def _ping_play():
    return [{'name': 'ping', 'hosts': 'virtlab', 'gather_facts': False, 'tasks': [{'ansible.builtin.ping': {}}]}]


# ------------------------------------------------------------------ CPU of the hosts' processes
def _stat(pid):
    """(own CPU ticks, reaped children's CPU ticks, parent pid) of a live process, or None."""
    try:
        with open('/proc/%d/stat' % pid, encoding='ascii', errors='replace') as handle:
            fields = handle.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    # after the command: state ppid ... utime(14) stime(15) cutime(16) cstime(17), counted from field 3 at index 0
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]), int(fields[1])


def _tree_ticks(root):
    """CPU ticks of ``root`` and every live descendant, with what each of them reaped."""
    stats = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = found
    children = collections.defaultdict(list)
    for pid, (_own, _reaped, ppid) in stats.items():
        children[ppid].append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        if pid in stats:
            total += stats[pid][0] + stats[pid][1]
            stack.extend(children[pid])
    return total


def _libvirtd_pid(host):
    with open(os.path.join(host.dirs['run'], 'libvirtd.pid'), encoding='ascii') as handle:
        return int(handle.read().strip())


def _host_ticks(started):
    """(ticks under every host's sshd, ticks of every host's libvirtd)."""
    return (sum(_tree_ticks(host.pids['sshd']) for host in started), sum(_tree_ticks(_libvirtd_pid(host)) for host in started))


def _with_host_cpu(started, call):
    """Run ``call()`` (-> dict with seconds, cpu_seconds); add remote_cpu_seconds and libvirtd_cpu_seconds."""
    tick = float(os.sysconf('SC_CLK_TCK'))
    before = _host_ticks(started)
    out = call()
    after = _host_ticks(started)
    out.update(remote_cpu_seconds=(after[0] - before[0]) / tick, libvirtd_cpu_seconds=(after[1] - before[1]) / tick)
    return out


# ------------------------------------------------------------------ RPCs each libvirtd receives
def _admin(host, *args):
    uri = 'libvirtd:///system?socket=' + os.path.join(host.dirs['run'], 'libvirt-admin-sock')
    subprocess.run(['virt-admin', '-c', uri] + list(args), check=True, capture_output=True, text=True)


def _count_requests(started, call):
    """Run ``call()`` with every host's libvirtd logging the RPCs it receives; return (call's value, per host counts)."""
    for host in started:
        path = host.real_path('/var/log/libvirt/rpc-count.log')
        if os.path.exists(path):
            os.unlink(path)
        _admin(host, 'daemon-log-filters', '2:rpc.netserverclient')
        _admin(host, 'daemon-log-outputs', '2:file:/var/log/libvirt/rpc-count.log ' + DAEMON_LOG)
    try:
        value = call()
    finally:
        for host in started:
            _admin(host, 'daemon-log-outputs', DAEMON_LOG)
            _admin(host, 'daemon-log-filters', '')
    per_host = {}
    for host in started:
        clients, calls = set(), collections.Counter()
        with open(host.real_path('/var/log/libvirt/rpc-count.log'), encoding='utf-8', errors='replace') as handle:
            for line in handle:
                match = RX.search(line)
                if match and int(match.group(2)) == REMOTE_PROGRAM:
                    clients.add(match.group(1))
                    calls[int(match.group(3))] += 1
        per_host[host.name] = {
            # connections opened (REMOTE_PROC_OPEN); a freed client's address can be reused, so distinct clients undercount
            'connections': calls[1], 'distinct_clients': len(clients), 'calls': sum(calls.values()),
            'writes': sum(n for proc, n in calls.items() if proc in WRITES),
            'by_procedure': dict(sorted(((PROCEDURES.get(proc, 'proc-%d' % proc), n) for proc, n in calls.items()), key=lambda kv: -kv[1])),
        }
    return value, per_host


# ------------------------------------------------------------------ runs
def _playbook(bin_dir, inventory, plays, forks, env, expect_changed):
    proc, elapsed, cpu = timed_playbook(bin_dir, plays, env, ['-i', inventory, '-f', str(forks)])
    recap = proc.stdout.rsplit('PLAY RECAP', maxsplit=1)[-1]
    changed = sorted(line.split()[0] for line in recap.splitlines() if 'changed=' in line and 'changed=0 ' not in line + ' ')
    if expect_changed is False and changed:
        raise RuntimeError('the no-op re-run changed something on %s' % changed)
    return {'seconds': elapsed, 'cpu_seconds': cpu, 'changed_hosts': len(changed)}


def _adhoc_ping(bin_dir, inventory, forks, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([os.path.join(bin_dir, 'ansible'), 'virtlab', '-i', inventory, '-f', str(forks), '-m', 'ansible.builtin.ping'],
                          env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or proc.stdout.count('SUCCESS') < 1:
        raise RuntimeError('ansible -m ping failed:\n%s\n%s' % (proc.stdout[-2000:], proc.stderr[-2000:]))
    return {'seconds': elapsed, 'cpu_seconds': (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def _rounded(entry):
    return dict((key, round(value, 3) if isinstance(value, float) else value) for key, value in entry.items())


def comparisons(results):
    """The lines of tools/bench_summary.py's table: the no-op against ``ansible -m ping`` over the same hosts (one task on
    each host on both sides: the same form), and the first converge against community.libvirt's loops (different forms:
    one task per host against one task per VM and action)."""
    lines = []
    rounds = results.get('rounds')
    shape = '%d hosts x %d VMs (%s)' % (results['hosts'], results['vms_per_host'], results['state'])
    if rounds:
        ours, ping = rounds['converge.virt.vm fleet no-op'], rounds['ansible -m ping']
        lines.append(comparison(
            'no-op re-run, %s, vs ansible -m ping on the same hosts' % shape,
            {'label': 'converge.virt.vm (vms: per host)', 'form': 'one task per host', 'seconds': ours['median_seconds'],
             'cpu_seconds': ours['median_cpu_seconds']},
            {'label': 'ansible -m ping', 'form': 'one task per host', 'seconds': ping['median_seconds'], 'cpu_seconds': ping['median_cpu_seconds']},
            'ours/peer', note='CPU under the hosts\' sshd: ours %.2f s, ping %.2f s; target <= 1.5x' % (
                ours['median_remote_cpu_seconds'], ping['median_remote_cpu_seconds'])))
    if 'community_first_converge' in results:
        ours, peer = results['first_converge'], results['community_first_converge']
        lines.append(comparison(
            'first converge from nothing, %s' % shape,
            {'label': 'converge.virt.vm (vms: per host)', 'form': 'fleet', 'seconds': ours['seconds'], 'cpu_seconds': ours['cpu_seconds']},
            {'label': 'community.libvirt.virt define+start loops', 'form': 'looped', 'seconds': peer['seconds'], 'cpu_seconds': peer['cpu_seconds']},
            'peer/ours', stat='one run', note='DIFFERENT FORMS: one task per host vs one task per VM and action; all CPU (controller, '
            'hosts\' sshd, libvirtd) peer/ours %.2f; target >= 3x' % results['first_converge_community_over_ours']['all_cpu_seconds']))
    return lines


def main(argv=None):  # pylint: disable=too-many-locals
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--hosts', type=int, default=8)
    parser.add_argument('--vms', type=int, default=10)
    parser.add_argument('--state', choices=['present', 'running'], default='running')
    parser.add_argument('--repeat', type=odd_repeat, default=5, help='alternating rounds (odd: the median is one of them)')
    parser.add_argument('--domain-type', choices=['auto', 'kvm', 'qemu'], default='auto')
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--skip-community', action='store_true', help='leave out community.libvirt\'s define and start loops')
    parser.add_argument('--results-name')
    args = parser.parse_args(argv)
    # started in the background by a shell, SIGINT arrives ignored: restore it, so that an interrupt stops the lab (finally)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    domain_type = virtlab_hosts.diskless_domain_type() if args.domain_type == 'auto' else args.domain_type
    bin_dir = os.path.join(os.path.abspath(args.venv), 'bin')
    env = bench_env(bin_dir)
    env['ANSIBLE_HOST_KEY_CHECKING'] = '1'
    state_dir = tempfile.mkdtemp(prefix='fleet-noop-')
    forks = args.hosts
    results = {'hosts': args.hosts, 'vms_per_host': args.vms, 'state': args.state, 'domain_type': domain_type, 'forks': forks,
               'repeat': args.repeat, 'date': time.strftime('%Y-%m-%d %H:%M', time.gmtime()), 'load_before': load_average()}
    started = virtlab_hosts.start_hosts(args.hosts, state_dir, ssh=True, ssh_python=os.path.join(bin_dir, 'python'),
                                        **lab_layout('127.0.42.11', 'noop-hv', 17400, 53000, migration_ports_per_host=5))
    inventory = os.path.join(state_dir, virtlab_sshd.INVENTORY_FILE)
    fleet = _fleet_play(args.vms, args.state, domain_type)
    try:
        # warm-up, not measured: every hypervisor's bytecode cache, ssh control masters
        _playbook(bin_dir, inventory, [{'hosts': 'virtlab', 'gather_facts': False, 'tasks': [{'converge.virt.vm_info': {'uri': 'qemu:///system'}}]}],
                  forks, env, None)
        first, results['first_converge_requests'] = _count_requests(
            started, lambda: _with_host_cpu(started, lambda: _playbook(bin_dir, inventory, fleet, forks, env, True)))
        results['first_converge'] = _rounded(first)
        noop, results['noop_requests'] = _count_requests(
            started, lambda: _with_host_cpu(started, lambda: _playbook(bin_dir, inventory, fleet, forks, env, False)))
        results['noop_with_rpc_log'] = _rounded(noop)
        host_cpu = collections.defaultdict(list)

        def measured(label, call):
            def run():
                out = _with_host_cpu(started, call)
                host_cpu[label].append((out.pop('remote_cpu_seconds'), out.pop('libvirtd_cpu_seconds')))
                return out
            return (label, run)
        rounds = alternating([
            measured('converge.virt.vm fleet no-op', lambda: _playbook(bin_dir, inventory, fleet, forks, env, False)),
            measured('ansible -m ping', lambda: _adhoc_ping(bin_dir, inventory, forks, env)),
            measured('playbook: one ping task', lambda: _playbook(bin_dir, inventory, _ping_play(), forks, env, False)),
        ], args.repeat)
        for label, values in host_cpu.items():
            rounds[label].update(median_remote_cpu_seconds=round(median_of_odd(v[0] for v in values), 3),
                                 median_libvirtd_cpu_seconds=round(median_of_odd(v[1] for v in values), 3),
                                 remote_cpu_runs=[round(v[0], 3) for v in values], libvirtd_cpu_runs=[round(v[1], 3) for v in values])
        results['rounds'] = rounds
        ours, ping = rounds['converge.virt.vm fleet no-op'], rounds['ansible -m ping']
        results['noop_over_ping'] = round(ours['median_seconds'] / ping['median_seconds'], 3)
        results['noop_over_ping_cpu'] = round(ours['median_cpu_seconds'] / ping['median_cpu_seconds'], 3)
        results['noop_over_ping_remote_cpu'] = round(ours['median_remote_cpu_seconds'] / ping['median_remote_cpu_seconds'], 3)
        if not args.skip_community:
            # the peer from nothing on the same hosts: community.libvirt.virt, one loop item per VM (define, then start)
            _wipe(started, args.vms)
            peer, results['community_requests'] = _count_requests(started, lambda: _with_host_cpu(
                started, lambda: _playbook(bin_dir, inventory, _community_play(args.vms, args.state, domain_type), forks, env, True)))
            results['community_first_converge'] = _rounded(peer)
            want = [args.vms] * args.hosts
            if _count(started) != want or (args.state == 'running' and _count(started, active=True) != want):
                raise RuntimeError('community.libvirt did not make the declared fleet')
            results['first_converge_community_over_ours'] = {
                key: round(peer[key] / first[key], 3) for key in ('seconds', 'cpu_seconds', 'remote_cpu_seconds', 'libvirtd_cpu_seconds')
                if first.get(key)}
            total = [sum(run[key] for key in ('cpu_seconds', 'remote_cpu_seconds', 'libvirtd_cpu_seconds')) for run in (peer, first)]
            results['first_converge_community_over_ours']['all_cpu_seconds'] = round(total[0] / total[1], 3)
        results['comparisons'] = comparisons(results)
        results['load_average_1min'] = [results['load_before']] + rounds['load_average_1min']  # for tools/bench_summary.py
    finally:
        results['load_after'] = load_average()
        virtlab_hosts.stop_hosts(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    report(results_name('fleet_hosts_noop', args.venv, args.results_name), results)
    return 0


if __name__ == '__main__':
    sys.exit(main())
