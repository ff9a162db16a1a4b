"""A guest Ansible can log into, end to end: converge.virt.vm with cloud_init and wait_for, the converge.virt.libvirt
inventory, then Ansible modules inside the guests over SSH.

The login guest (tools/virtlab/loginguest.py: Debian's kernel, busybox, dropbear, Python 3.11 and
qemu-guest-agent from Debian's packages, a tiny NoCloud reader) boots from the seed ``converge.virt.vm``
writes. Its NIC is on an isolated libvirt network (dnsmasq) of the private host, inside the test's own
network namespace: nothing reaches any address outside it. One fleet task creates two guests from one
declaration (host names and an SSH key the test made in their seeds) and waits until port 22 of each
answers; the addresses it reports (from the guest agent, matched by MAC) are the DHCP leases of those host
names; the inventory plugin lists them with those addresses as ``ansible_host``; through that inventory,
``command`` reads back each guest's own host name, ``copy`` writes a file and ``slurp`` reads it back. Waiting
for the agent reports the address too; a closed port times out naming what is missing.
"""

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from tests.integration.ansible_run import BIN, ansible_env, ok, run_module
from tests.integration.event_sources import EventSource
from tools.virtlab import domains, jumphost, loginguest, netns

POOL = 'loginpool'
NETWORK = 'cvlogin'
BRIDGE = 'cvlogin0'
GATEWAY = '192.168.231.1'
NAMES = ('login-web-1', 'login-web-2')
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
def login_image():
    return loginguest.build_login_guest()


@pytest.fixture(scope='module')
def host(libvirt_hosts):
    return libvirt_hosts[1]


@pytest.fixture(scope='module')
def conn(host):
    c = libvirt.open(host.uri)
    yield c
    c.close()


def network_xml():
    """An isolated network (no <forward>): dnsmasq hands out addresses of a subnet that exists only in this namespace."""
    net = ET.Element('network')
    ET.SubElement(net, 'name').text = NETWORK
    ET.SubElement(net, 'bridge', name=BRIDGE)
    ip = ET.SubElement(net, 'ip', address=GATEWAY, netmask='255.255.255.0')
    dhcp = ET.SubElement(ip, 'dhcp')
    ET.SubElement(dhcp, 'range', start='192.168.231.10', end='192.168.231.60')
    return ET.tostring(net, encoding='unicode')


@pytest.fixture(scope='module')
def network(conn):
    assert netns.in_private_network_namespace(), 'the guest network must live in the test network namespace'
    net = conn.networkDefineXML(network_xml())
    net.create()
    yield net
    try:
        net.destroy()
    finally:
        net.undefine()


@pytest.fixture(scope='module')
def ssh_key(tmp_path_factory):
    path = str(tmp_path_factory.mktemp('loginkey') / 'id_ed25519')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', 'converge-test', '-f', path], check=True)
    with open(path + '.pub', encoding='utf-8') as handle:
        return path, handle.read().strip()


def vm_args(host, image, name, public_key, **extra):
    out = {'uri': host.uri, 'name': name, 'memory': '448MiB', 'vcpus': 1, 'domain_type': 'qemu', 'state': 'running',
           'shutdown_timeout': 1, 'serial': domains.console_log_path(host, name),
           'boot': {'kernel': image.kernel, 'initrd': image.initrd, 'cmdline': image.cmdline},
           'disks': [], 'interfaces': [{'network': NETWORK}], 'guest_agent': True, 'wait_for': 'port', 'wait_timeout': 240,
           'cloud_init': {'meta_data': {'local-hostname': name}, 'ssh_authorized_keys': [public_key], 'pool': POOL}}
    out.update(extra)
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


def ssh_ad_hoc(inventory, module, module_args, key_path, timeout=150):
    """Run an ad-hoc module over SSH on the guests of ``inventory`` (the converge.virt.libvirt plugin's source) named NAMES.

    The connection settings a user would put in ansible.cfg or group_vars come from the environment: root, the test's
    key, no host key kept (the guests make theirs at first boot), files piped (dropbear has no SFTP server).
    Returns {host: result} (results_json callback).
    """
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


def test_guests_from_one_declaration_are_reachable_and_configurable_over_ssh(host, conn, network, login_image, ssh_key, tmp_path):
    key_path, public_key = ssh_key
    ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'pool_path': str(tmp_path / 'pool'), 'name': 'login-scratch.raw',
                             'capacity': '1MiB'}))
    # both guests in one task (vms), waiting until port 22 of each answers: the readiness the result reports
    fleet_args = vm_args(host, login_image, NAMES[0], public_key)
    for key in ('name', 'cloud_init', 'serial'):
        del fleet_args[key]
    fleet_args['vms'] = [{'name': name, 'cloud_init': vm_args(host, login_image, name, public_key)['cloud_init'],
                          'serial': domains.console_log_path(host, name)} for name in NAMES]
    # the collection's event source sees each guest agent connect (libvirt's agent lifecycle event)
    events = EventSource('libvirt_events', [host.uri])
    try:
        events.next(lambda event: event['type'] == 'sync_done', timeout=60)
        fleet = run_module('vm', fleet_args)
        if fleet.get('failed'):
            consoles = dict((name, open(domains.console_log_path(host, name), encoding='utf-8', errors='replace').read()[-1500:]) for name in NAMES)
            raise AssertionError('%s\nconsoles: %s' % (fleet.get('msg'), consoles))
        agents = {}
        while len(agents) < len(NAMES):  # in whichever order the guests' agents connect
            event = events.next(lambda event: event['type'] == 'agent' and event['agent'] == 'connected' and event['vm']['name'] in NAMES
                                and event['vm']['name'] not in agents, timeout=60)
            agents[event['vm']['name']] = event
    finally:
        events.stop()
    # libvirt says disconnected when the domain starts (reason domain_started), connected once the agent opens its channel
    assert {name: (e['reason'], e['vm']['status']) for name, e in agents.items()} == {name: ('channel', 'Running') for name in NAMES}, agents
    started = [(e['vm']['name'], e['agent'], e['reason']) for e in events.seen if e['type'] == 'agent' and e['agent'] == 'disconnected']
    assert sorted(started) == [(name, 'disconnected', 'domain_started') for name in NAMES], events.seen
    by_name = dict((item['name'], item) for item in fleet['results'])
    assert all(by_name[name]['changed'] and by_name[name]['readiness'] == 'port' for name in NAMES), fleet['results']
    # the address the module found (the guest agent's report, matched by MAC) is the one dnsmasq leased to that host name
    addresses = {name: lease_of(network, name) for name in NAMES}
    assert {name: by_name[name]['address'] for name in NAMES} == addresses, (addresses, fleet['results'])
    assert len(set(addresses.values())) == len(NAMES), addresses
    # the collection's inventory finds them, with ansible_host from the network's DHCP leases
    inventory = str(tmp_path / 'guests.converge_libvirt.yml')
    with open(inventory, 'w', encoding='utf-8') as handle:
        json.dump({'plugin': 'converge.virt.libvirt', 'uris': [host.uri]}, handle)
    listed = subprocess.run([os.path.join(BIN, 'ansible-inventory'), '-i', inventory, '--list'], env=ansible_env(), capture_output=True, text=True,
                            timeout=120, check=True)
    # values ansible-core marks unsafe come as {"__ansible_unsafe": value} on recent versions
    hostvars = json.loads(listed.stdout, object_hook=lambda obj: obj['__ansible_unsafe'] if list(obj) == ['__ansible_unsafe'] else obj)['_meta']['hostvars']
    assert {name: (hostvars[name]['ansible_host'], hostvars[name]['status']) for name in NAMES} == {
        name: (addresses[name], 'Running') for name in NAMES}, hostvars

    hostnames = ssh_ad_hoc(inventory, 'ansible.builtin.command', {'argv': ['hostname']}, key_path)
    assert {name: (result.get('rc'), result.get('stdout')) for name, result in hostnames.items()} == {name: (0, name) for name in NAMES}

    written = ssh_ad_hoc(inventory, 'ansible.builtin.copy', {'dest': '/root/converged', 'content': 'written by ansible\n', 'mode': '0600'}, key_path)
    assert all(result.get('changed') and not result.get('failed') for result in written.values()), written
    read = ssh_ad_hoc(inventory, 'ansible.builtin.slurp', {'src': '/root/converged'}, key_path)
    assert {name: result.get('content') for name, result in read.items()} == {name: 'd3JpdHRlbiBieSBhbnNpYmxlCg==' for name in NAMES}

    again = ok(run_module('vm', vm_args(host, login_image, NAMES[0], public_key, wait_for='agent')))
    # waiting for the agent, the run still reports how far the guest is: its address is known too (it does not try the port)
    assert not again['changed'] and again['vm']['readiness'] == 'address' and again['vm']['address'] == addresses[NAMES[0]], again
    # a port nothing listens on: the timeout names what is missing and the readiness reached, and changes nothing
    closed = run_module('vm', vm_args(host, login_image, NAMES[0], public_key, wait_for_port=2222, wait_timeout=3))
    assert closed.get('failed') and not closed['changed'], closed
    assert 'port 2222 of %s does not accept connections (readiness reached: address)' % addresses[NAMES[0]] in closed['msg'], closed['msg']
    through_the_hypervisor(host, tmp_path, key_path, public_key, addresses)
    for name in NAMES:
        ok(run_module('vm', {'uri': host.uri, 'name': name, 'state': 'absent', 'shutdown_timeout': 1}))


def through_the_hypervisor(host, tmp_path, key_path, public_key, addresses):
    """The same guests from a controller that cannot reach them (tools/virtlab/jumphost.py: a network namespace nested in the
    test's, linked to it by one veth /30, no route to the guests' subnet), through the hypervisor's sshd: the inventory
    reads the host over qemu+ssh and, with ssh_proxy_jump, gives each guest ProxyJump args from that URI; Ansible logs in
    through them."""
    root = str(tmp_path / 'jump')
    os.makedirs(root)
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
        hostvars = json.loads(listed.stdout, object_hook=lambda obj: obj['__ansible_unsafe'] if list(obj) == ['__ansible_unsafe'] else obj)['_meta']['hostvars']
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
