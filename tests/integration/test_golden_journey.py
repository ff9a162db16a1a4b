"""From one golden image to configured guests, end to end: playbooks/demo_golden.yml (what `make demo` runs), and the
same guests as a user's Ansible reaches them - directly, through the converge.virt.libvirt inventory, and through
the hypervisor as a jump host. The guests boot once (TCG boots cost about 30 s each on a loaded machine).

Run 1 of the playbook (keep_guests=true). Play 1 imports the golden ISO9660 disk of tools/virtlab/golden.py once and,
through the lifecycle role's golden tasks, gives each of two login guests (tools/virtlab/loginguest.py: Debian's
kernel, busybox, dropbear, Python 3.11 and qemu-guest-agent, a tiny NoCloud reader) a qcow2 overlay on it grown to
64 MiB, its own host name and one SSH key (cloud-init NoCloud), in one fleet task that returns once port 22 of each
answers; their NICs are on an isolated libvirt network (dnsmasq) inside the test's network namespace: nothing reaches
any address outside it. Meanwhile the collection's libvirt_events source sees each guest agent connect. The
converge.virt.libvirt inventory (refreshed) finds them with ansible_host; play 2 logs in over SSH, reads back the host
name cloud-init set, mounts the golden disk and reads its release file, sees the grown size, writes a file (copy) and
a marker into the grown part of its disk; play 3 checks the golden volume's sha256 is the imported image's.

Then, on the running guests: the addresses the role reported (from the guest agent, matched by MAC) are the DHCP
leases of those host names; the inventory lists them with those addresses as ansible_host; an ad-hoc ``slurp`` (the
connection settings a user would put in ansible.cfg, from the environment) reads back what play 2's ``copy`` wrote;
waiting for the agent reports the address too; a closed port times out naming what is missing; a controller that
cannot reach the guests logs in through the hypervisor's sshd (ssh_proxy_jump, tools/virtlab/jumphost.py).

Run 2 (--limit localhost, keep_guests=false): play 1 again changes no VM, play 3 removes the guests, their volumes and
the network.
"""

import base64
import ipaddress
import json
import os
import subprocess
import sys
import time

import libvirt
import pytest

from tests.integration.ansible_run import BIN, ROOT, ansible_env, ok, run_module
from tests.integration.event_sources import EventSource
from tools.virtlab import golden, jumphost, loginguest, netns

NAMES = ['gold-web-1', 'gold-web-2']
POOL = 'golden-pool'
JUMP_PORT = 2222
# from the controller's namespace: how a TCP connection to a guest's port 22 ends
PROBE = '''
import errno, socket, sys
try:
    socket.create_connection((sys.argv[1], 22), timeout=5).close()
    print('connected')
except OSError as exc:
    print(errno.errorcode.get(exc.errno, 'timeout'))
'''


@pytest.fixture(scope='module')
def host(libvirt_hosts):
    return libvirt_hosts[1]


def play_tasks(out, index):
    return dict((task['task']['name'], task['hosts']) for task in out['plays'][index]['tasks'])


def unsafe_free(obj):
    """Values ansible-core marks unsafe come as {"__ansible_unsafe": value} on recent versions."""
    return obj['__ansible_unsafe'] if list(obj) == ['__ansible_unsafe'] else obj


def run_playbook(host, work, inventory, *extra):
    cmd = [os.path.join(BIN, 'ansible-playbook'), '-i', os.path.join(ROOT, 'playbooks', 'inventory', 'localhost.yml'), '-i', inventory,
           os.path.join(ROOT, 'playbooks', 'demo_golden.yml'),
           '-e', json.dumps({'golden_uri': host.uri, 'golden_count': len(NAMES), 'golden_dir': work})] + list(extra)
    proc = subprocess.run(cmd, env=ansible_env(), capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    failures = [(t['task']['name'], h, r.get('msg')) for p in out['plays'] for t in p['tasks'] for h, r in t['hosts'].items() if r.get('failed')]
    assert proc.returncode == 0 and not failures, (failures, proc.stderr[-2000:])
    return out


def lease_of(net, hostname, timeout=180.0):
    """The IPv4 address dnsmasq leased to the guest that sent ``hostname``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for lease in net.DHCPLeases():
            if lease.get('hostname') == hostname and lease.get('type') == libvirt.VIR_IP_ADDR_TYPE_IPV4:
                return lease['ipaddr']
        time.sleep(1)
    raise AssertionError(f'no DHCP lease for {hostname} within {timeout:.0f} s: {net.DHCPLeases()}')


def vm_args(host, work, name, **extra):
    """The declaration the role gave ``name`` in play 1 (so a run with it changes nothing)."""
    image = loginguest.build_login_guest()
    with open(os.path.join(work, 'id_ed25519.pub'), encoding='utf-8') as handle:
        public_key = handle.read().strip()
    out = {'uri': host.uri, 'name': name, 'memory': '448MiB', 'vcpus': 1, 'domain_type': 'qemu', 'state': 'running',
           'shutdown_timeout': 1, 'serial': os.path.join(work, name + '.console.log'),
           'boot': {'kernel': image.kernel, 'initrd': image.initrd, 'cmdline': image.cmdline},
           'disks': [{'dev': 'vda', 'pool': POOL, 'volume': '%s-vda.qcow2' % name, 'format': 'qcow2'}],
           'interfaces': [{'network': golden.NETWORK}], 'guest_agent': True, 'wait_for': 'port', 'wait_timeout': 240,
           'cloud_init': {'meta_data': {'local-hostname': name}, 'ssh_authorized_keys': [public_key], 'pool': POOL}}
    out.update(extra)
    return out


def ssh_ad_hoc(inventory, module, module_args, key_path, timeout=150):
    """Run an ad-hoc module over SSH on the guests NAMES of ``inventory``; the connection settings a user would put in
    ansible.cfg come from the environment: root, the key, no host key kept, files piped (dropbear has no SFTP server).
    Returns {host: result} (results_json callback)."""
    cmd = [os.path.join(BIN, 'ansible'), ':'.join(NAMES), '-i', inventory, '-m', module, '-a', json.dumps(module_args)]
    env = {'ANSIBLE_PYTHON_INTERPRETER': '/usr/bin/python3', 'ANSIBLE_TIMEOUT': '60', 'ANSIBLE_REMOTE_USER': 'root',
           'ANSIBLE_PRIVATE_KEY_FILE': key_path, 'ANSIBLE_SSH_TRANSFER_METHOD': 'piped',
           'ANSIBLE_SSH_COMMON_ARGS': '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'}
    proc = subprocess.run(cmd, env=ansible_env(env), capture_output=True, text=True, timeout=timeout, check=False)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    return data['plays'][0]['tasks'][0]['hosts']


def test_golden_image_to_configured_guests_over_ssh(host, tmp_path):
    assert netns.in_private_network_namespace(), 'the guest network must live in the test network namespace'
    work = str(tmp_path / 'golden')
    inventory = os.path.join(work, 'guests.converge_libvirt.yml')
    key_path = os.path.join(work, 'id_ed25519')
    # the collection's event source sees each guest agent connect (libvirt's agent lifecycle event)
    events = EventSource('libvirt_events', [host.uri])
    try:
        events.next(lambda event: event['type'] == 'sync_done', timeout=60)
        out = run_playbook(host, work, inventory, '-e', json.dumps({'keep_guests': True}))
        agents = {}
        while len(agents) < len(NAMES):  # in whichever order the guests' agents connected
            event = events.next(lambda event: event['type'] == 'agent' and event['agent'] == 'connected' and event['vm']['name'] in NAMES
                                and event['vm']['name'] not in agents, timeout=60)
            agents[event['vm']['name']] = event
    finally:
        events.stop()
    # libvirt says disconnected when the domain starts (reason domain_started), connected once the agent opens its channel
    assert {name: (e['reason'], e['vm']['status']) for name, e in agents.items()} == {name: ('channel', 'Running') for name in NAMES}, agents
    started = [(e['vm']['name'], e['agent'], e['reason']) for e in events.seen if e['type'] == 'agent' and e['agent'] == 'disconnected']
    assert sorted(started) == [(name, 'disconnected', 'domain_started') for name in NAMES], events.seen

    provision = play_tasks(out, 0)
    report = provision['What the role reported']['localhost']['lifecycle_golden_report']
    assert [(r['name'], r['readiness'], r['volume'], r['changed']) for r in report] == [
        (name, 'port', '%s/%s-vda.qcow2' % (POOL, name), True) for name in NAMES], report
    addresses = dict((r['name'], r['address']) for r in report)
    assert len(set(addresses.values())) == len(NAMES)
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network('192.168.232.0/24') for a in addresses.values()), addresses
    volumes = provision['converge.virt.lifecycle : Golden image - import it (once) and give every VM its overlay or copy, grown to the declared size']
    by_name = dict((v['name'], v) for v in volumes['localhost']['volumes'])
    assert by_name['golden.raw']['format'] == 'raw'
    assert all(by_name['%s-vda.qcow2' % n]['capacity'] == 64 * 1024 * 1024 and by_name['%s-vda.qcow2' % n]['backing_chain'][0]['volume']
               == '%s/golden.raw' % POOL for n in NAMES), by_name

    # the second play ran on exactly the guests the inventory found, at the addresses the module reported
    configure = play_tasks(out, 1)
    assert sorted(configure['The host name cloud-init set']) == NAMES
    assert {h: r['stdout'] for h, r in configure['The host name cloud-init set'].items()} == {n: n for n in NAMES}
    assert {h: base64.b64decode(r['content']).decode() for h, r in configure['Read the golden release file'].items()} == {
        n: 'converge-golden 1\n' for n in NAMES}
    sizes = configure["The disk's size in 512-byte sectors (grown from the golden image's 64 KiB)"]
    assert {h: int(base64.b64decode(r['content'])) * 512 for h, r in sizes.items()} == {n: 64 * 1024 * 1024 for n in NAMES}
    assert all(r['changed'] for r in configure['Write a file'].values())
    assert {h: r['msg'].split(' ', 2)[1] for h, r in configure['Summary line'].items()} == {n: '(%s):' % addresses[n] for n in NAMES}
    kept = play_tasks(out, 2)
    assert not kept['The guests wrote only to their overlays']['localhost'].get('failed')
    assert kept['Remove the VMs (their cloud-init seeds go with them)']['localhost'].get('skipped'), kept

    conn = libvirt.open(host.uri)
    try:
        on_the_running_guests(host, conn, work, inventory, key_path, addresses)
        through_the_hypervisor(host, tmp_path, key_path, addresses)

        again = run_playbook(host, work, inventory, '--limit', 'localhost', '-e', json.dumps({'keep_guests': False}))
        report = play_tasks(again, 0)['What the role reported']['localhost']['lifecycle_golden_report']
        assert [(r['name'], r['readiness'], r['address'], r['changed']) for r in report] == [
            (name, 'port', addresses[name], False) for name in NAMES], report
        cleanup = play_tasks(again, len(again['plays']) - 1)  # the guests' play has no host with --limit localhost
        assert not cleanup['The guests wrote only to their overlays']['localhost'].get('failed')
        assert cleanup['Remove the VMs (their cloud-init seeds go with them)']['localhost']['changed']
        assert not set(NAMES) & set(dom.name() for dom in conn.listAllDomains(0))
        assert golden.NETWORK not in conn.listNetworks() + conn.listDefinedNetworks()
        pool = conn.storagePoolLookupByName(POOL)
        pool.refresh(0)
        assert pool.listVolumes() == []
        pool.destroy()
        pool.undefine()
    finally:
        for name in set(NAMES) & set(dom.name() for dom in conn.listAllDomains(0)):  # only after a failure above
            run_module('vm', {'uri': host.uri, 'name': name, 'state': 'absent', 'shutdown_timeout': 1})
        conn.close()


def on_the_running_guests(host, conn, work, inventory, key_path, addresses):
    """What the running guests show a user: leases, the inventory, an ad-hoc module, the vm module's waits."""
    # the address the module found (the guest agent's report, matched by MAC) is the one dnsmasq leased to that host name
    network = conn.networkLookupByName(golden.NETWORK)
    assert {name: lease_of(network, name) for name in NAMES} == addresses
    # the collection's inventory finds them, with ansible_host from the network's DHCP leases, in the group play 2 used
    listed = subprocess.run([os.path.join(BIN, 'ansible-inventory'), '-i', inventory, '--list'], env=ansible_env(), capture_output=True, text=True,
                            timeout=120, check=True)
    data = json.loads(listed.stdout, object_hook=unsafe_free)
    hostvars = data['_meta']['hostvars']
    assert {name: (hostvars[name]['ansible_host'], hostvars[name]['status']) for name in NAMES} == {
        name: (addresses[name], 'Running') for name in NAMES}, hostvars
    assert sorted(data['golden_guests']['hosts']) == NAMES, data
    # an ad-hoc slurp, connection settings from the environment, reads back what play 2's copy wrote
    read = ssh_ad_hoc(inventory, 'ansible.builtin.slurp', {'src': '/root/configured'}, key_path)
    assert {name: base64.b64decode(result.get('content', '')).decode() for name, result in read.items()} == {
        name: 'configured %s at %s\n' % (name, addresses[name]) for name in NAMES}, read

    again = ok(run_module('vm', vm_args(host, work, NAMES[0], wait_for='agent')))
    # waiting for the agent, the run still reports how far the guest is: its address is known too (it does not try the port)
    assert not again['changed'] and again['vm']['readiness'] == 'address' and again['vm']['address'] == addresses[NAMES[0]], again
    # a port nothing listens on: the timeout names what is missing and the readiness reached, and changes nothing
    closed = run_module('vm', vm_args(host, work, NAMES[0], wait_for_port=2222, wait_timeout=3))
    assert closed.get('failed') and not closed['changed'], closed
    assert 'port 2222 of %s does not accept connections (readiness reached: address)' % addresses[NAMES[0]] in closed['msg'], closed['msg']


def through_the_hypervisor(host, tmp_path, key_path, addresses):
    """The same guests from a controller that cannot reach them (tools/virtlab/jumphost.py: a network namespace nested in the
    test's, linked to it by one veth /30, no route to the guests' subnet), through the hypervisor's sshd: the inventory
    reads the host over qemu+ssh and, with ssh_proxy_jump, gives each guest ProxyJump args from that URI; Ansible logs in
    through them."""
    root = str(tmp_path / 'jump')
    os.makedirs(root)
    with open(key_path + '.pub', encoding='utf-8') as handle:
        public_key = handle.read().strip()
    controller = jumphost.ControllerNamespace()
    sshd_pid = None
    try:
        controller.start()
        sshd_pid = jumphost.start_jump_sshd(host, root, JUMP_PORT, public_key)
        config = jumphost.write_client_config(root, JUMP_PORT, key_path)
        probe = subprocess.run(controller.argv([sys.executable, '-c', PROBE, addresses[NAMES[0]]]), capture_output=True, text=True,
                               timeout=30, check=True)
        assert probe.stdout.strip() == 'ENETUNREACH', 'the guest must not be reachable from the controller: %s' % probe.stdout
        uri = 'qemu+ssh://root@%s:%d/system' % (jumphost.JUMP_ADDRESS, JUMP_PORT)
        inventory = str(tmp_path / 'jump.converge_libvirt.yml')
        with open(inventory, 'w', encoding='utf-8') as handle:
            json.dump({'plugin': 'converge.virt.libvirt', 'uris': [uri], 'ssh_proxy_jump': True}, handle)
        listed = subprocess.run(controller.argv([os.path.join(BIN, 'ansible-inventory'), '-i', inventory, '--list'], config), env=ansible_env(),
                                capture_output=True, text=True, timeout=120, check=False)
        assert listed.returncode == 0, listed.stderr[-3000:]
        hostvars = json.loads(listed.stdout, object_hook=unsafe_free)['_meta']['hostvars']
        jump = '-o ProxyJump=ssh://root@%s:%d' % (jumphost.JUMP_ADDRESS, JUMP_PORT)
        assert {name: (hostvars[name]['ansible_host'], hostvars[name]['ansible_ssh_common_args']) for name in NAMES} == {
            name: (addresses[name], jump) for name in NAMES}, hostvars
        env = {'ANSIBLE_PYTHON_INTERPRETER': '/usr/bin/python3', 'ANSIBLE_TIMEOUT': '60', 'ANSIBLE_REMOTE_USER': 'root',
               'ANSIBLE_PRIVATE_KEY_FILE': key_path, 'ANSIBLE_SSH_TRANSFER_METHOD': 'piped'}
        cmd = [os.path.join(BIN, 'ansible'), ':'.join(NAMES), '-i', inventory, '-m', 'ansible.builtin.command', '-a', json.dumps({'argv': ['hostname']})]
        proc = subprocess.run(controller.argv(cmd, config), env=ansible_env(env), capture_output=True, text=True, timeout=150, check=False)
        try:
            results = json.loads(proc.stdout)['plays'][0]['tasks'][0]['hosts']
        except ValueError:
            raise AssertionError('ansible printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
        assert {name: (r.get('rc'), r.get('stdout')) for name, r in results.items()} == {name: (0, name) for name in NAMES}, results
    finally:
        if sshd_pid is not None:
            jumphost.stop_sshd(sshd_pid)
        controller.stop()
