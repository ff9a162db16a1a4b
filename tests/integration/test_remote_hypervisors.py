"""Modules on remote hypervisors (issue 22): over SSH, and through qemu+ssh:// from one controller.

Two private hosts with their own sshd (``start_hosts(ssh=True)``, :mod:`tools.virtlab.sshd`).
One playbook (vm in its fleet form, volume, host, drift then reconcile, a live migration
between the two hosts, vm_info) runs three times, at the same time, with three inventories
of the same two hypervisors (each run with its own VM and pool names):

* ``local``  -- connection local, ``uri`` the host's unix socket (how every other test runs);
* ``ssh``    -- the lab's own inventory: Ansible's ssh connection to each hypervisor, the
  module runs there with its Python and ``uri: qemu:///system``, which inside an SSH
  session on host N is host N's daemon; the target of the migration is host 2's TCP URI;
* ``qemu+ssh`` -- connection local on one controller, ``uri: qemu+ssh://root@<address>/system?keyfile=...&no_verify=1``
  (libvirt's ssh transport; the controller's ssh reads the lab's ssh_config, not ~/.ssh).

The results are compared task by task after removing what is different by nature (URIs,
timings, free memory, the other runs' VMs, each run's own names); the key path never appears in any result of the qemu+ssh run, nor in
the libvirt inventory plugin's output over the two qemu+ssh URIs.  What the SSH runs leave on
the managed hosts (their private $HOME) is checked: no Ansible temporary directory, a
bytecode cache of at most one file per module_utils module, owner-only.

The roles: on two more pairs of hosts at once (an evacuation drains a whole host), locally and over SSH, one playbook
runs the lifecycle role (present) on both hosts, the evacuate role on the first (a running VM live, a stopped one
offline, onto the second), then the lifecycle role (absent, volumes purged) on the second; every task's result and
the roles' reports are compared the same way.

The interrupted fleet (the reduced form of ``bench/fleet_hosts.py --interrupt``): two hosts over SSH, a fleet per
host, ``strategy: free``; the second host's libvirtd is killed once its first VMs are defined
(:mod:`tools.virtlab.outage`): the first host finishes, the second is reported failed naming the lost daemon; with
the daemon started again a re-run completes the second host only, and a further re-run changes nothing.
"""

import json
import os
import socket
import subprocess
import time

import libvirt
import pytest
import yaml

from tests.integration.ansible_run import BIN, ROOT, ansible_env
from tools.procs import pid_alive
from tools.virtlab import domains, hosts as virtlab_hosts
from tools.virtlab import outage, sshd as virtlab_sshd

POOL = 'rhpool'
VMS = ('rh-a', 'rh-m')
# what differs by nature between runs of the same scenario: timings, ids, URIs, the mode's own words
VOLATILE = {'duration', 'elapsed', 'started', 'finished', 'start', 'end', 'delta', 'time_elapsed', 'task_id', 'lease_until', 'progress',
            'timestamp', 'took', 'invocation', 'uri', 'target_uri', 'libvirt_uri', 'source_uri', 'uuid', 'updated_at',
            '_ansible_no_log', 'ansible_facts', 'discovered_interpreter_python', 'last_change', 'since',
            'phase_times', 'downtime_ms', 'timings', 'elapsed_s', 'seconds', 'free_memory'}
DRIFT = 'drift behind the collection'   # a virsh command, not the collection: its stderr/cmd differ by transport


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    state_dir = str(tmp_path_factory.mktemp('sshlab'))
    began = time.monotonic()
    started = virtlab_hosts.start_hosts(2, state_dir, ssh=True, **virtlab_layout(4))
    print('\nlab with sshd: 2 hosts ready in %.2f s' % (time.monotonic() - began))
    try:
        yield state_dir, started
    finally:
        virtlab_hosts.stop_hosts(state_dir)


def _play(pool_dir, sfx):
    """The scenario, on every hypervisor of group virtlab (hv_uri / hv_target_uri come from the inventory); sfx ends every name."""
    vm = {'uri': '{{ hv_uri }}', 'memory': '64MiB', 'domain_type': 'qemu', 'shutdown_timeout': 0}
    vm_a, vm_m = 'rh-a' + sfx, 'rh-m' + sfx
    first = "inventory_hostname == groups['virtlab'][0]"
    second = "inventory_hostname == groups['virtlab'][1]"
    volume = {'uri': '{{ hv_uri }}', 'pool': POOL + sfx, 'pool_path': pool_dir + '/{{ inventory_hostname }}', 'name': 'disk.raw', 'capacity': '1MiB'}
    tasks = [
        # the fleet form: rh-a on every host, rh-m (to migrate) on the first as well
        {'name': 'vms created',
         'converge.virt.vm': dict(vm, state='running', vms="{{ [{'name': '%s'}] + ([{'name': '%s'}] if %s else []) }}" % (vm_a, vm_m, first))},
        {'name': 'volume created', 'converge.virt.volume': volume},
        {'name': 'host', 'converge.virt.host': {'uri': '{{ hv_uri }}'}},
        {'name': DRIFT, 'ansible.builtin.command': {'argv': ['virsh', '-q', '-c', '{{ hv_uri }}', 'destroy', vm_a]}},
        {'name': 'reconcile fix', 'converge.virt.reconcile': {'uri': '{{ hv_uri }}', 'name': [vm_a], 'fix': True}},
        {'name': 'migration', 'when': first, 'converge.virt.migration': {'uri': '{{ hv_uri }}', 'name': vm_m, 'target_uri': '{{ hv_target_uri }}',
                                                                         'peer_to_peer': False}},
        {'name': 'vm_info after migration', 'when': second, 'converge.virt.vm_info': {'uri': '{{ hv_uri }}', 'name': [vm_m]}},
    ]
    return [{'hosts': 'virtlab', 'gather_facts': False, 'tasks': tasks}]


def _inventory(path, members):
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump({'all': {'children': {'virtlab': {'hosts': members}}}}, handle)
    return str(path)


def _start(argv, env=None):
    return subprocess.Popen(argv, env=ansible_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # pylint: disable=consider-using-with


def _finish(proc, began, timeout=600):
    out, err = proc.communicate(timeout=timeout)
    took = time.monotonic() - began
    try:
        return out, err, json.loads(out), took
    except ValueError:
        raise AssertionError('no JSON (rc %d):\n%s\n%s' % (proc.returncode, out[-3000:], err[-3000:]))


def _results(data):
    """{(task name, host): result} of a playbook run."""
    found = {}
    for task in data['plays'][0]['tasks']:
        for host, result in task['hosts'].items():
            found[(task['task']['name'] if isinstance(task.get('task'), dict) else task['name'], host)] = result
    return found


def _normal(value, words, foreign, volatile=frozenset(VOLATILE)):
    """value without the keys that differ by nature and without the other modes' VMs, the mode's own strings replaced by placeholders."""
    if isinstance(value, dict):
        return {key: _normal(item, words, foreign, volatile) for key, item in value.items() if key not in volatile and not key.startswith('_ansible')}
    if isinstance(value, list):
        return [_normal(item, words, foreign, volatile) for item in value if (item.get('name') if isinstance(item, dict) else item) not in foreign]
    if isinstance(value, str):
        for word, placeholder in words:
            value = value.replace(word, placeholder)
        return value
    return value


def _where(value, needle, path=''):
    """Paths (a.b[0].c) in value whose string contains needle."""
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _where(item, needle, '%s.%s' % (path, key))]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _where(item, needle, '%s[%d]' % (path, index))]
    return [path] if isinstance(value, str) and needle in value else []


def _strings(value, needle):
    """Every string in value that contains needle."""
    if isinstance(value, dict):
        return [found for item in value.values() for found in _strings(item, needle)]
    if isinstance(value, list):
        return [found for item in value for found in _strings(item, needle)]
    return [value] if isinstance(value, str) and needle in value else []


def _clean(started, sfx):
    """Remove what the scenario of one mode made (directly, through the unix socket)."""
    for host in started:
        conn = libvirt.open(host.uri)
        try:
            for name in VMS:
                domains.remove_domain(conn, name + sfx)
            pool = conn.storagePoolLookupByName(POOL + sfx)
            for volume in pool.listAllVolumes():
                volume.delete()
            if pool.isActive():
                pool.destroy()
            pool.undefine()
        except libvirt.libvirtError:
            pass
        finally:
            conn.close()


def test_same_scenarios_local_over_ssh_and_over_qemu_ssh(lab, tmp_path):  # pylint: disable=too-many-locals
    """The three runs go at the same time (own VM and pool names per mode, as three teams would), against the same two hosts."""
    state_dir, started = lab
    key = os.path.join(state_dir, 'ssh', 'id_ed25519')
    with open(os.path.join(state_dir, virtlab_sshd.INVENTORY_FILE), encoding='utf-8') as handle:
        lab_inventory = json.load(handle)['all']['children']['virtlab']['hosts']
    assert sorted(lab_inventory) == [host.name for host in started]
    query = '?keyfile=%s&no_verify=1' % key
    modes = {
        'local': {host.name: {'ansible_connection': 'local', 'hv_uri': host.uri, 'hv_target_uri': started[1].uri} for host in started},
        'ssh': {host.name: dict(lab_inventory[host.name], hv_uri='qemu:///system', hv_target_uri=started[1].tcp_uri) for host in started},
        'qemu+ssh': {host.name: {'ansible_connection': 'local', 'hv_uri': lab_inventory[host.name]['virtlab_qemu_ssh_uri'] + query,
                                 'hv_target_uri': lab_inventory[started[1].name]['virtlab_qemu_ssh_uri'] + query} for host in started},
    }
    suffix = {'local': '-l', 'ssh': '-s', 'qemu+ssh': '-q'}
    running = {}
    for mode, members in modes.items():
        tag = mode.replace('+', '_')
        pool_dir = str(tmp_path / 'pools' / tag)
        os.makedirs(pool_dir)
        playbook = tmp_path / ('%s.yml' % tag)
        playbook.write_text(yaml.safe_dump(_play(pool_dir, suffix[mode])))
        argv = [os.path.join(BIN, 'ansible-playbook'), '-i', _inventory(tmp_path / ('%s.json' % tag), members), '-f', '2', str(playbook)]
        if mode == 'qemu+ssh':  # the controller's ssh client trusts the lab's known_hosts, never touches ~/.ssh
            argv = virtlab_sshd.controller_argv(state_dir, argv)
        env = {'ANSIBLE_HOST_KEY_CHECKING': '1', 'ANSIBLE_PYTHON_INTERPRETER': 'auto_silent'} if mode == 'ssh' else None
        running[mode] = (_start(argv, env), time.monotonic(), pool_dir)
    outcome, times = {}, {}
    for mode, (proc, began, pool_dir) in running.items():
        out, err, data, times[mode] = _finish(proc, began)
        results = _results(data)
        assert proc.returncode == 0 and not any(r.get('failed') or r.get('unreachable') for r in results.values()), \
            (mode, {k: r.get('msg') for k, r in results.items() if r.get('failed') or r.get('unreachable')}, err[-2000:])
        if mode == 'qemu+ssh':  # (the virsh command task echoes its own argv: not a result of the collection)
            collection = [r for (task, _host), r in results.items() if task != DRIFT]
            assert len(collection) > 10 and not _where(collection, key), _where(collection, key)
            assert all('keyfile=********&' in uri for uri in _strings(collection, 'keyfile')), 'the key path is masked'
            assert key not in err, [line for line in err.splitlines() if key in line]
            assert key not in json.dumps([r for task in data['plays'][0]['tasks'] if task['task']['name'] != DRIFT for r in task['hosts'].values()])
        members, sfx = modes[mode], suffix[mode]
        words = {(member['hv_uri'], '<uri>') for member in members.values()} | {(started[1].tcp_uri, '<target>'), (started[1].uri, '<target>'),
                                                                                (members[started[1].name]['hv_target_uri'], '<target>')}
        words |= {(name + sfx, name) for name in VMS} | {(POOL + sfx, POOL), (pool_dir, '<pools>')}
        foreign = {name + other for name in VMS for other in suffix.values() if other != sfx}
        outcome[mode] = {k: _normal(r, sorted(words, key=lambda w: -len(w[0])), foreign) for k, r in results.items() if k[0] != DRIFT}
        _clean(started, sfx)
    print('\nscenario wall time, the three at once (s): ' + ', '.join('%s %.1f' % item for item in times.items()))

    # the scenario did what it says, on the right daemon each time
    for mode, results in outcome.items():
        first, second = (host.name for host in started)
        assert sorted(vm['name'] for vm in results[('vms created', first)]['results'] if vm['changed']) == ['rh-a', 'rh-m'], mode
        assert results[('volume created', second)]['changed'], mode
        assert results[('host', second)]['host']['hostname'] == second and results[('host', second)]['host']['running_vms'] == ['rh-a'], mode
        fixed = results[('reconcile fix', first)]['disagreements']
        assert [(d['name'], d['decision'], d['done']) for d in fixed] == [('rh-a', 'record STOPPED', True)], (mode, fixed)
        assert results[('migration', first)]['changed'] and results[('migration', first)]['phase'] == 'Succeeded', mode
        assert results[('vm_info after migration', second)]['vms'][0]['host'] == second, mode
    for mode in ('ssh', 'qemu+ssh'):
        differences = {k: (outcome['local'][k], outcome[mode][k]) for k in outcome['local'] if outcome['local'][k] != outcome[mode].get(k)}
        assert not differences and set(outcome[mode]) == set(outcome['local']), (mode, differences)

    # what the SSH runs left on each managed host: its private $HOME
    for host in started:
        home = host.ssh_home
        leftovers = os.listdir(os.path.join(home, '.ansible', 'tmp')) if os.path.isdir(os.path.join(home, '.ansible', 'tmp')) else []
        assert leftovers == [], (host.name, leftovers)
        cache = os.path.join(home, '.cache', 'converge.virt', 'bytecode')
        assert os.stat(cache).st_mode & 0o077 == 0
        utils = [name for _dir, _subdirs, files in os.walk(os.path.join(ROOT, 'plugins', 'module_utils')) for name in files if name.endswith('.py')]
        entries = os.listdir(cache)
        assert entries and len(entries) <= len(utils), (len(utils), entries)  # at most one entry per module_utils source
        print('%s: bytecode cache %d files, %d bytes' % (host.name, len(entries), sum(os.path.getsize(os.path.join(cache, n)) for n in entries)))


def test_inventory_plugin_over_two_qemu_ssh_uris(lab, tmp_path):
    state_dir, started = lab
    key = os.path.join(state_dir, 'ssh', 'id_ed25519')
    for host in started:
        conn = libvirt.open(host.uri)
        try:
            domains.remove_domain(conn, 'inv-' + host.name)
            conn.defineXML(domains.diskless_domain_xml('inv-' + host.name, domain_type='qemu', memory_mib=32))
        finally:
            conn.close()
    config = tmp_path / 'hv.converge_libvirt.yml'
    # the first host's key is checked against the lab's known_hosts (strict), the second is not (no_verify)
    uris = [virtlab_sshd.qemu_ssh_uri(started[0].address) + '?keyfile=%s' % key,
            virtlab_sshd.qemu_ssh_uri(started[1].address) + '?keyfile=%s&no_verify=1' % key]
    config.write_text(yaml.safe_dump({'plugin': 'converge.virt.libvirt', 'uris': uris}))
    proc = subprocess.run(virtlab_sshd.controller_argv(state_dir, [os.path.join(BIN, 'ansible-inventory'), '-i', str(config), '--list']),
                          env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = json.loads(proc.stdout)
    hostvars = listed['_meta']['hostvars']
    assert {'inv-' + host.name for host in started} <= set(hostvars), sorted(hostvars)
    for host in started:
        variables = {key: value.get('__ansible_unsafe', value) if isinstance(value, dict) else value for key, value in hostvars['inv-' + host.name].items()}
        assert variables['host'] == host.name and 'keyfile=********' in variables['libvirt_uri'], variables
    with open(os.path.join(state_dir, 'ssh', 'known_hosts'), encoding='utf-8') as handle:  # what made the strict check pass
        assert handle.read().startswith(started[0].address + ' ssh-ed25519 ')
    assert not _where(listed, key) and key not in proc.stdout, ('the key path must never be shown', _where(listed, key))
    assert key not in proc.stderr, [line for line in proc.stderr.splitlines() if key in line]


def _ssh(state_dir, host, key, *command):
    argv = ['ssh', '-i', key, '-p', str(host.ssh_port), *virtlab_sshd.ssh_args(state_dir), 'root@' + host.address, '--', *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_each_sshd_is_its_host_and_takes_only_the_lab_key(lab, tmp_path, virtlab_layout):
    state_dir, started = lab
    key = os.path.join(state_dir, 'ssh', 'id_ed25519')
    for host in started:
        seen = _ssh(state_dir, host, key, 'virsh', '-q', '-c', 'qemu:///system', 'hostname')
        assert seen.returncode == 0 and seen.stdout.strip() == host.name, (host.name, seen.stdout, seen.stderr)
        assert _ssh(state_dir, host, key, 'printenv', 'HOME').stdout.strip() == host.ssh_home
    other = str(tmp_path / 'other_key')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', other], check=True)
    refused = _ssh(state_dir, started[0], other, 'true')
    assert refused.returncode == 255 and 'Permission denied' in refused.stderr, refused.stderr

    own_dir = str(tmp_path / 'one')  # stop_hosts ends the sshd (and its sessions) with the host
    one = virtlab_hosts.start_hosts(1, own_dir, ssh=True, ssh_public_key=other + '.pub', **virtlab_layout(3))[0]
    try:
        assert _ssh(own_dir, one, other, 'true').returncode == 0
        with open(os.path.join(own_dir, virtlab_sshd.INVENTORY_FILE), encoding='utf-8') as handle:
            assert 'ansible_ssh_private_key_file' not in json.load(handle)['all']['children']['virtlab']['hosts'][one.name]
    finally:
        virtlab_hosts.stop_hosts(own_dir)
    assert not pid_alive(one.pids['sshd'])  # gone or a zombie of this process
    with pytest.raises(OSError):
        socket.create_connection((one.address, one.ssh_port), timeout=2).close()


def test_a_key_ssh_refuses_is_masked_in_the_error(lab, tmp_path):
    """ssh names the key file in its own error text (Load key "<path>": ...), which libvirt passes on: masked too."""
    state_dir, started = lab
    garbage = str(tmp_path / 'not_a_key')
    with open(os.open(garbage, os.O_WRONLY | os.O_CREAT, 0o600), 'w', encoding='utf-8') as handle:
        handle.write('not a key\n')
    uri = virtlab_sshd.qemu_ssh_uri(started[0].address) + '?keyfile=%s&no_tty=1' % garbage
    argv = [os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', 'converge.virt.vm_info', '-a', json.dumps({'uri': uri})]
    proc = subprocess.run(virtlab_sshd.controller_argv(state_dir, argv), env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    result = json.loads(proc.stdout)['plays'][0]['tasks'][0]['hosts']['localhost']
    assert proc.returncode != 0 and result['failed'] and 'Load key "********"' in result['msg'], result.get('msg')
    assert garbage not in proc.stdout + proc.stderr


# ---- the evacuate and lifecycle roles over SSH -------------------------------------------------------------------------------

ROLE_VMS = ('ro-a', 'ro-b', 'ro-c')
ROLE_POOL = 'ropool'
# the role's facts are its report: compared too; what differs by nature besides: who set the drain mark (the machine the
# module ran on, checked on its own), the other pair's host UUIDs, the free space of the file system holding the pool
ROLE_VOLATILE = (VOLATILE - {'ansible_facts'}) | {'by', 'host_uuid', 'allocation', 'available'}


@pytest.fixture(scope='module')
def role_lab(tmp_path_factory, virtlab_layout):
    """Four hosts with sshd: the local run drives the first two, the SSH run the last two (evacuation drains a whole host)."""
    state_dir = str(tmp_path_factory.mktemp('sshroles'))
    started = virtlab_hosts.start_hosts(4, state_dir, ssh=True, **virtlab_layout(5))
    try:
        yield state_dir, started
    finally:
        virtlab_hosts.stop_hosts(state_dir)


def _role_plays(pool_dir, sfx):
    """lifecycle present on both hosts, evacuate the first onto the second, lifecycle absent on the second (everything there)."""
    first = "inventory_hostname == groups['virtlab'][0]"
    vm = {'memory': '64MiB', 'domain_type': 'qemu'}
    volume = {'name': 'ro-disk.raw', 'pool': ROLE_POOL + sfx, 'pool_path': pool_dir, 'capacity': '1MiB'}
    disk = {'dev': 'vdb', 'pool': ROLE_POOL + sfx, 'volume': 'ro-disk.raw', 'format': 'raw'}
    fleet_first = [dict(vm, name='ro-a' + sfx), dict(vm, name='ro-b' + sfx, state='stopped')]
    fleet_second = [dict(vm, name='ro-c' + sfx, disks=[disk])]
    common = {'lifecycle_uri': '{{ hv_uri }}', 'lifecycle_wait_timeout': 120, 'lifecycle_shutdown_timeout': 0}
    present = dict(common, lifecycle_vms='{{ %s if %s else %s }}' % (json.dumps(fleet_first), first, json.dumps(fleet_second)),
                   lifecycle_volumes='{{ [] if %s else [%s] }}' % (first, json.dumps(volume)))
    absent = dict(common, lifecycle_state='absent', lifecycle_purge_volumes=True,
                  lifecycle_vms=[{'name': name + sfx} for name in ROLE_VMS], lifecycle_volumes=[volume])
    evacuate = {'evacuate_uri': '{{ hv_uri }}', 'evacuate_target_uris': ['{{ hv_target_uri }}'], 'evacuate_reason': 'maintenance over ssh',
                'evacuate_wait_timeout': 120}
    return [
        {'name': 'lifecycle present', 'hosts': 'virtlab', 'gather_facts': False,
         'tasks': [{'name': 'lifecycle', 'ansible.builtin.include_role': {'name': 'converge.virt.lifecycle'}, 'vars': present}]},
        {'name': 'evacuate', 'hosts': 'virtlab', 'gather_facts': False,
         'tasks': [{'name': 'evacuate', 'when': first, 'ansible.builtin.include_role': {'name': 'converge.virt.evacuate'}, 'vars': evacuate}]},
        {'name': 'lifecycle absent', 'hosts': 'virtlab', 'gather_facts': False,
         'tasks': [{'name': 'lifecycle', 'when': 'not (%s)' % first, 'ansible.builtin.include_role': {'name': 'converge.virt.lifecycle'},
                    'vars': absent}]},
    ]


def _play_results(data, host_index):
    """{(play, task name, n-th of that name, host index): result} of a playbook run (host_index: inventory name -> 0 or 1)."""
    found = {}
    for play in data['plays']:
        seen = {}
        for task in play['tasks']:
            name = task['task']['name']
            seen[name] = seen.get(name, 0) + 1
            for host, result in task['hosts'].items():
                found[(play['play']['name'], name, seen[name], host_index[host])] = result
    return found


def test_evacuate_and_lifecycle_roles_over_ssh_as_locally(role_lab, tmp_path):  # pylint: disable=too-many-locals
    """The roles, run by ansible-playbook with the modules on the hypervisors (their Python and libvirt-python), give the local results."""
    state_dir, started = role_lab
    with open(os.path.join(state_dir, virtlab_sshd.INVENTORY_FILE), encoding='utf-8') as handle:
        lab_inventory = json.load(handle)['all']['children']['virtlab']['hosts']
    pairs = {'local': started[:2], 'ssh': started[2:]}
    modes = {
        'local': {host.name: {'ansible_connection': 'local', 'hv_uri': host.uri, 'hv_target_uri': pairs['local'][1].uri} for host in pairs['local']},
        'ssh': {host.name: dict(lab_inventory[host.name], hv_uri='qemu:///system', hv_target_uri=pairs['ssh'][1].tcp_uri) for host in pairs['ssh']},
    }
    suffix = {'local': '-l', 'ssh': '-s'}
    running = {}
    for mode, members in modes.items():
        pool_dir = str(tmp_path / 'pools' / mode)
        os.makedirs(pool_dir)
        playbook = tmp_path / ('roles-%s.yml' % mode)
        playbook.write_text(yaml.safe_dump(_role_plays(pool_dir, suffix[mode])))
        argv = [os.path.join(BIN, 'ansible-playbook'), '-i', _inventory(tmp_path / ('roles-%s.json' % mode), members), '-f', '2', str(playbook)]
        env = {'ANSIBLE_HOST_KEY_CHECKING': '1'} if mode == 'ssh' else None
        running[mode] = (_start(argv, env), time.monotonic(), pool_dir)
    outcome, times = {}, {}
    for mode, (proc, began, pool_dir) in running.items():
        _out, err, data, times[mode] = _finish(proc, began)
        pair, sfx = pairs[mode], suffix[mode]
        results = _play_results(data, {host.name: index for index, host in enumerate(pair)})
        assert proc.returncode == 0 and not any(r.get('failed') or r.get('unreachable') for r in results.values()), \
            (mode, {k: r.get('msg') for k, r in results.items() if r.get('failed') or r.get('unreachable')}, err[-2000:])
        words = {(member['hv_uri'], '<uri>') for member in modes[mode].values()} | {(pair[1].uri, '<target>'), (pair[1].tcp_uri, '<target>')}
        words |= {(name + sfx, name) for name in ROLE_VMS} | {(ROLE_POOL + sfx, ROLE_POOL), (pool_dir, '<pools>')}
        words |= {(host.name, '<hv%d>' % index) for index, host in enumerate(pair)} | {(host.address, '<address%d>' % index) for index, host in enumerate(pair)}
        outcome[mode] = {k: _normal(r, sorted(words, key=lambda w: -len(w[0])), set(), ROLE_VOLATILE) for k, r in results.items()}
        # the drain mark names where the module ran: the controller locally, the hypervisor itself over SSH
        drained_by = [r['host']['drain']['by'] for k, r in results.items() if k[1].endswith('Read the host again')]
        assert len(drained_by) == 1 and drained_by[0].split(':')[0] == (socket.gethostname() if mode == 'local' else pair[0].name), (mode, drained_by)
        # what the roles did, on the right daemons: nothing on the drained first host, everything gone from the second
        for host in pair:
            conn = libvirt.open(host.uri)
            try:
                assert [dom.name() for dom in conn.listAllDomains() if dom.name().startswith('ro-')] == [], (mode, host.name)
            finally:
                conn.close()
    print('\nroles wall time, the two at once (s): ' + ', '.join('%s %.1f' % item for item in times.items()))

    for mode, results in outcome.items():
        report = [r for k, r in results.items() if k[1].endswith('Report per VM what happened')][0]['ansible_facts']['evacuate_report']
        assert sorted((r['name'], r['mode'], r['changed'], r.get('failed', False)) for r in report) == \
            [('ro-a', 'live', True, False), ('ro-b', 'offline', True, False)], (mode, report)
        lifecycle = [r for k, r in results.items() if k[0] == 'lifecycle present' and k[1].endswith(': Report per VM')][:2]
        rows = sorted((row['name'], row['declared'], row['vm_state'], row['changed'])
                      for fact in lifecycle for row in fact['ansible_facts']['lifecycle_report'])
        assert rows == [('ro-a', 'running', 'ACTIVE', True), ('ro-b', 'stopped', 'STOPPED', True), ('ro-c', 'running', 'ACTIVE', True)], (mode, rows)
    assert set(outcome['ssh']) == set(outcome['local']), sorted(set(outcome['ssh']) ^ set(outcome['local']))
    differences = [(k, outcome['local'][k], outcome['ssh'][k]) for k in outcome['local'] if outcome['local'][k] != outcome['ssh'][k]]
    assert not differences, json.dumps(differences, indent=1, sort_keys=True)


# ---- a fleet on two hosts, one host's libvirtd killed mid-run (the reduced form of bench/fleet_hosts.py --interrupt) ---------

FLEET = 20
# what libvirt says when the daemon of an open connection goes away (the cause the failed host must name)
CAUSES = ('End of file while reading data', 'Connection reset by peer', 'Cannot recv data', 'Failed to connect socket', 'client socket is closed')


def _fleet_run(inventory, playbook):
    """One ansible-playbook run; {host: [its results of the fleet task]}, stats (strategy free: a result may land on any entry)."""
    proc = _start([os.path.join(BIN, 'ansible-playbook'), '-i', inventory, '-f', '2', playbook], {'ANSIBLE_HOST_KEY_CHECKING': '1'})
    return proc


def _fleet_outcome(proc, began):
    _out, err, data, took = _finish(proc, began)
    per_host = {}
    for task in data['plays'][0]['tasks']:
        for host, result in task['hosts'].items():
            per_host.setdefault(host, []).append(result)
    return proc.returncode, per_host, data['stats'], took, err


def test_interrupted_fleet_strategy_free_then_reruns(tmp_path, virtlab_layout):  # pylint: disable=too-many-locals
    """strategy free over SSH, a fleet per host; host 2's libvirtd killed once its first VMs exist: host 1 finishes, host 2 is
    reported failed naming the lost daemon; with the daemon back a re-run completes host 2 only, a further re-run changes nothing."""
    state_dir = str(tmp_path / 'lab')
    started = virtlab_hosts.start_hosts(2, state_dir, ssh=True, **virtlab_layout(6))
    try:
        healthy, victim = started
        names = ['fl-%02d' % index for index in range(1, FLEET + 1)]
        play = [{'name': 'fleet', 'hosts': 'virtlab', 'gather_facts': False, 'strategy': 'free', 'tasks': [
            {'name': 'the fleet of this hypervisor',
             'converge.virt.vm': {'uri': 'qemu:///system', 'state': 'present', 'memory': '32MiB', 'domain_type': 'qemu', 'parallel': 4,
                                  'vms': [{'name': name} for name in names]}}]}]
        playbook = str(tmp_path / 'fleet.yml')
        with open(playbook, 'w', encoding='utf-8') as handle:
            yaml.safe_dump(play, handle)
        inventory = os.path.join(state_dir, virtlab_sshd.INVENTORY_FILE)

        began = time.monotonic()
        proc = _fleet_run(inventory, playbook)
        at_kill = outage.kill_libvirtd_when(victim, 'fl-', still_running=lambda: proc.poll() is None)
        rc, per_host, stats, took, err = _fleet_outcome(proc, began)
        assert 0 < len(at_kill) < FLEET, ('killed mid-fleet', at_kill)
        assert rc == 2, (rc, err[-2000:])
        # the other host finished: its whole fleet, no failure
        assert stats[healthy.name]['failures'] == 0 and stats[healthy.name]['unreachable'] == 0, stats
        done = [r for r in per_host[healthy.name] if not r.get('skipped')]
        assert len(done) == 1 and not done[0].get('failed') and done[0]['changed'], done
        assert sorted(vm['name'] for vm in done[0]['results'] if vm['changed'] and not vm.get('failed')) == names
        # the failed host is reported failed, naming the cause (its libvirt daemon went away)
        assert stats[victim.name]['failures'] == 1, stats
        failed = [r for r in per_host[victim.name] if r.get('failed')]
        assert len(failed) == 1, per_host[victim.name]
        said = ' '.join([failed[0].get('msg', '')] + [vm.get('msg', '') for vm in failed[0].get('results', []) if vm.get('failed')])
        assert any(word in said for word in CAUSES), said
        assert set(outage.defined(victim, 'fl-')) >= set(at_kill) and len(outage.defined(victim, 'fl-')) < FLEET

        outage.restart_libvirtd(victim)
        for round_ in ('re-run', 'further re-run'):
            began = time.monotonic()
            rc, per_host, stats, rerun_took, err = _fleet_outcome(_fleet_run(inventory, playbook), began)
            assert rc == 0 and all(s['failures'] == 0 and s['unreachable'] == 0 for s in stats.values()), (round_, stats, err[-2000:])
            changed = {host: [vm['name'] for r in results for vm in r.get('results', []) if vm.get('changed')] for host, results in per_host.items()}
            if round_ == 're-run':  # only what the kill left undone, on the victim only
                assert changed == {healthy.name: [], victim.name: sorted(set(names) - set(at_kill))}, changed
                assert stats[victim.name]['changed'] == 1 and stats[healthy.name]['changed'] == 0, stats
            else:
                assert changed == {healthy.name: [], victim.name: []} and all(s['changed'] == 0 for s in stats.values()), (changed, stats)
            for host in started:
                conn = libvirt.open(host.uri)
                try:
                    assert sorted(dom.name() for dom in conn.listAllDomains() if dom.name().startswith('fl-')) == names, (round_, host.name)
                finally:
                    conn.close()
        print('\ninterrupted fleet: killed with %d of %d defined, run %.1f s, re-run %.1f s; the failed host said: %s'
              % (len(at_kill), FLEET, took, rerun_took, said[:300]))
    finally:
        virtlab_hosts.stop_hosts(state_dir)
