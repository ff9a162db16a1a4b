"""Benchmark: a fleet across many private hypervisors, the modules running on each over SSH (issue 22, item 4).

``--hosts`` private libvirt hosts of tools.virtlab, each with its own sshd
(``start_hosts(ssh=True)``), the lab's inventory (group ``virtlab``), and on each
host ``--vms`` diskless VMs declared by one converge.virt.vm task in its fleet form
(``uri: qemu:///system``: local to each hypervisor).  Measured, wall clock and the
CPU seconds of ansible-playbook and its children (the modules on the hypervisors
run under their sshd, so their CPU is not in that figure):

* (not measured) one converge.virt.vm_info task per host, so every hypervisor's bytecode cache is warm;
* ``converge``      -- the fleet defined from nothing with ``forks`` = the number of hosts;
* ``noop``          -- the same playbook again (must change nothing);
* ``converge_forks1`` -- from nothing again with ``forks`` 1;
* ``interrupted`` (``--interrupt``) -- ``strategy: free`` from nothing, the third host's libvirtd killed once its
  first VMs exist: the other hosts finish, that host is reported failed; its daemon is started again and a
  re-run completes it;
* ``community``     -- community.libvirt.virt (``command: define``, one loop item per VM; from the
  ``ansible`` package of the bench venv) from nothing over the same inventory, ``forks`` = hosts.

VMs are ``state: present`` by default (defined, not started); ``--state running`` starts them: diskless guests
(no disk, no OS: the firmware finds nothing to boot and idles), ``kvm`` when /dev/kvm works (``--domain-type``,
default ``auto``; TCG otherwise), so 400 running qemu processes fit a 2-core machine (about 40 MiB each).  With
``--state running`` two more runs say where the time goes: ``split_define`` (the fleet ``state: present`` from
nothing: definitions only) then ``split_start`` (the same fleet ``state: running``: only the starts and the
waits), and community.libvirt gets a second loop (``state: running``, one item per VM).  Needs
root, ``make bench-venv`` and a private network namespace:

    python -m tools.virtlab netns -- build/bench-venv/bin/python -m bench.fleet_hosts --hosts 8 --vms 50
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench.common import ROOT, bench_env, lab_layout, load_average, report, results_name, timed_playbook
from tools.virtlab import domains, hosts as virtlab_hosts
from tools.virtlab import outage, sshd as virtlab_sshd


def _names(count):
    return ['fleet-%03d' % index for index in range(1, count + 1)]


def _converge_play(count, state, domain_type):
    return [{'name': 'fleet', 'hosts': 'virtlab', 'gather_facts': False, 'tasks': [{
        'name': 'the fleet of this hypervisor', 'converge.virt.vm': {
            'uri': 'qemu:///system', 'state': state, 'memory': '64MiB', 'domain_type': domain_type, 'shutdown_timeout': 0,
            'vms': [{'name': name} for name in _names(count)]}}]}]


def _community_play(count, state, domain_type):
    xml = {name: domains.diskless_domain_xml(name, domain_type=domain_type, memory_mib=64) for name in _names(count)}
    tasks = [{'name': 'define', 'community.libvirt.virt': {'uri': 'qemu:///system', 'command': 'define', 'xml': '{{ item.value }}'},
              'loop': '{{ fleet_xml | dict2items }}', 'loop_control': {'label': '{{ item.key }}'}}]
    if state == 'running':
        tasks.append({'name': 'start', 'community.libvirt.virt': {'uri': 'qemu:///system', 'name': '{{ item }}', 'state': 'running'},
                      'loop': _names(count)})
    return [{'name': 'fleet (community.libvirt)', 'hosts': 'virtlab', 'gather_facts': False, 'vars': {'fleet_xml': xml}, 'tasks': tasks}]


def _run(bin_dir, inventory, plays, forks, env):
    proc, elapsed, cpu = timed_playbook(bin_dir, plays, env, ['-i', inventory, '-f', str(forks)])
    recap = proc.stdout.rsplit('PLAY RECAP', maxsplit=1)[-1]
    changed = sorted(line.split()[0] for line in recap.splitlines() if 'changed=' in line and 'changed=0 ' not in line + ' ')
    return {'wall_s': round(elapsed, 2), 'cpu_s': round(cpu, 2), 'changed': changed}


def _wipe(started, count):
    import libvirt  # pylint: disable=import-outside-toplevel
    for host in started:
        conn = libvirt.open(host.uri)
        try:
            for name in _names(count):
                domains.remove_domain(conn, name)
        finally:
            conn.close()


def _count(started, active=False):
    """Per host, how many fleet-* domains are defined (active: running)."""
    import libvirt  # pylint: disable=import-outside-toplevel
    found = []
    for host in started:
        conn = libvirt.open(host.uri)
        try:
            found.append(len([dom for dom in conn.listAllDomains() if dom.name().startswith('fleet-') and (dom.isActive() or not active)]))
        finally:
            conn.close()
    return found


def _interrupted(bin_dir, inventory, started, count, state, domain_type, env):  # pylint: disable=too-many-arguments
    """strategy free, forks = hosts; the third host's libvirtd is killed once its first VMs exist; then a re-run."""
    victim = started[2 % len(started)]
    plays = _converge_play(count, state, domain_type)
    plays[0]['strategy'] = 'free'
    with tempfile.NamedTemporaryFile('w', suffix='.yml', delete=False) as handle:
        json.dump(plays, handle)
        path = handle.name
    try:
        start = time.perf_counter()
        argv = [os.path.join(bin_dir, 'ansible-playbook'), '-i', inventory, '-f', str(len(started)), path]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # pylint: disable=consider-using-with
        defined_at_kill = len(outage.kill_libvirtd_when(victim, 'fleet-', still_running=lambda: proc.poll() is None))
        killed_at = time.perf_counter() - start
        out, _err = proc.communicate()
        elapsed = time.perf_counter() - start
    finally:
        os.unlink(path)
    recap = out.rsplit('PLAY RECAP', maxsplit=1)[-1]
    failed = sorted(line.split()[0] for line in recap.splitlines() if ('failed=1' in line or 'unreachable=1' in line))
    counts_after_kill = _count([host for host in started if host is not victim])
    outage.restart_libvirtd(victim)
    rerun = _run(bin_dir, inventory, plays, len(started), env)
    return {'killed': victim.name, 'killed_after_s': round(killed_at, 2), 'defined_at_kill': defined_at_kill,
            'wall_s': round(elapsed, 2), 'rc': proc.returncode,
            'failed_hosts': failed, 'others_complete': all(found == count for found in counts_after_kill),
            'rerun': rerun, 'after_rerun': _count(started)}


def main(argv=None):  # pylint: disable=too-many-locals,too-many-statements
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--hosts', type=int, default=8)
    parser.add_argument('--vms', type=int, default=50)
    parser.add_argument('--state', choices=['present', 'running'], default='present')
    parser.add_argument('--domain-type', choices=['auto', 'kvm', 'qemu'], default='auto', help='auto: kvm when /dev/kvm works, else qemu (TCG)')
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--skip-community', action='store_true')
    parser.add_argument('--interrupt', action='store_true', help='also: strategy free with one host\'s libvirtd killed mid-run, then a re-run')
    parser.add_argument('--results-name')
    args = parser.parse_args(argv)
    domain_type = virtlab_hosts.diskless_domain_type() if args.domain_type == 'auto' else args.domain_type
    bin_dir = os.path.join(os.path.abspath(args.venv), 'bin')
    env = bench_env(bin_dir)
    env['ANSIBLE_HOST_KEY_CHECKING'] = '1'
    state_dir = tempfile.mkdtemp(prefix='fleet-hosts-')
    began = time.perf_counter()
    started = virtlab_hosts.start_hosts(args.hosts, state_dir, ssh=True, ssh_python=os.path.join(bin_dir, 'python'),
                                        **lab_layout('127.0.40.11', 'fleet-hv', 17100, 51000))
    results = {'hosts': args.hosts, 'vms_per_host': args.vms, 'state': args.state, 'domain_type': domain_type,
               'lab_start_s': round(time.perf_counter() - began, 2), 'load_before': load_average()}
    inventory = os.path.join(state_dir, virtlab_sshd.INVENTORY_FILE)
    running = args.state == 'running'

    def converge(forks, state=args.state):
        return _run(bin_dir, inventory, _converge_play(args.vms, state, domain_type), forks, env)

    def expect_fleet(key, expected_state=args.state):
        results[key] = {'defined': _count(started), 'running': _count(started, active=True)}
        want_running = args.vms if expected_state == 'running' else 0
        if results[key]['defined'] != [args.vms] * args.hosts or (expected_state == 'running' and results[key]['running'] != [want_running] * args.hosts):
            raise RuntimeError('%s: not the declared fleet: %s' % (key, results[key]))

    try:
        # warm-up, not measured: each hypervisor's first module run fills its bytecode cache (docs/hypervisors.md)
        _run(bin_dir, inventory, [{'hosts': 'virtlab', 'gather_facts': False, 'tasks': [{'converge.virt.vm_info': {'uri': 'qemu:///system'}}]}],
             args.hosts, env)
        results['converge'] = converge(args.hosts)
        expect_fleet('vms_after_converge')
        results['noop'] = converge(args.hosts)
        if results['noop']['changed']:  # the hosts on which something changed
            raise RuntimeError('the no-op re-run changed something')
        _wipe(started, args.vms)
        results['converge_forks1'] = converge(1)
        expect_fleet('vms_after_converge_forks1')
        if running:  # where the time goes: definitions alone, then the starts alone
            _wipe(started, args.vms)
            results['split_define'] = converge(args.hosts, 'present')
            expect_fleet('vms_after_split_define', 'present')
            results['split_start'] = converge(args.hosts, 'running')
            expect_fleet('vms_after_split_start')
        if not args.skip_community:
            _wipe(started, args.vms)
            results['community'] = _run(bin_dir, inventory, _community_play(args.vms, args.state, domain_type), args.hosts, env)
            expect_fleet('vms_after_community')
        if args.interrupt:
            _wipe(started, args.vms)
            results['interrupted'] = _interrupted(bin_dir, inventory, started, args.vms, args.state, domain_type, env)
        results['speedup_forks'] = round(results['converge_forks1']['wall_s'] / results['converge']['wall_s'], 2)
        if 'community' in results:
            results['speedup_vs_community'] = round(results['community']['wall_s'] / results['converge']['wall_s'], 2)
    finally:
        results['load_after'] = load_average()
        virtlab_hosts.stop_hosts(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    report(results_name('fleet_hosts', args.venv, args.results_name), results)
    return 0


if __name__ == '__main__':
    sys.exit(main())
