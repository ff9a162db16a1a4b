"""KubeVirt readiness from the instance's status: the address of a declared interface, matched by MAC."""

from ansible_collections.converge.virt.plugins.module_utils._kubevirt.readiness import readiness_of


def instance(interfaces, macs=()):
    return {'spec': {'domain': {'devices': {'interfaces': [{'name': 'n%d' % i, 'macAddress': mac} for i, mac in enumerate(macs)]}}},
            'status': {'phase': 'Running', 'conditions': [{'type': 'AgentConnected', 'status': 'True'}], 'interfaces': interfaces}}


GUEST_BRIDGE = {'interfaceName': 'docker0', 'mac': '02:42:ac:11:00:01', 'ipAddress': '172.17.0.1', 'infoSource': 'guest-agent'}
POD_NIC = {'name': 'default', 'mac': '52:54:00:AA:BB:01', 'ipAddress': '10.244.1.7', 'ipAddresses': ['10.244.1.7', 'fd00::7']}


def test_a_declared_mac_picks_its_interface_over_a_guest_bridge_listed_first():
    seen = readiness_of(instance([GUEST_BRIDGE, POD_NIC], macs=['52-54-00-aa-bb-01']))
    assert (seen.running, seen.agent, seen.address) == (True, True, '10.244.1.7')


def test_without_declared_macs_every_interface_counts_ipv4_first():
    seen = readiness_of(instance([{'name': 'default', 'mac': '52:54:00:aa:bb:01', 'ipAddresses': ['fd00::7', '10.244.1.7']}]))
    assert seen.address == '10.244.1.7'
    assert readiness_of(instance([GUEST_BRIDGE, POD_NIC])).address == '172.17.0.1'   # no MAC declared: the first IPv4


def test_a_declared_mac_without_an_address_yet_gives_none():
    assert readiness_of(instance([GUEST_BRIDGE, dict(POD_NIC, ipAddress=None, ipAddresses=[])], macs=['52:54:00:aa:bb:01'])).address is None
