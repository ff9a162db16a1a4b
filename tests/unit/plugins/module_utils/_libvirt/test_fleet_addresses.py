# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness and ansible_host for the inventory (fleet.guest_readiness), by the vm module's rules (libvirt faked).

The agent's addresses (asked only when the inventory is told to, and only while the agent's channel is connected),
else the DHCP leases, both matched by MAC; IPv4 first; only an address of another machine; the readiness word is the
furthest phase without a gap (a guest with an agent channel whose agent does not answer stays at ``running``).
"""

from __future__ import annotations

import libvirt

from ansible_collections.converge.virt.plugins.module_utils._libvirt import fleet
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import readiness_word

CHANNEL = "<channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'{state}/></channel>"
DOMAIN = """<domain type='qemu'><name>{name}</name><devices>
<interface type='network'><mac address='{mac}'/><source network='default'/><model type='virtio'/></interface>
{channel}</devices></domain>"""


class FakeNet:
    def DHCPLeases(self):  # pylint: disable=invalid-name
        return [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'mac': '52:54:00:AA:00:01', 'ipaddr': '192.0.2.11'},
                {'type': libvirt.VIR_IP_ADDR_TYPE_IPV6, 'mac': '52:54:00:aa:00:02', 'ipaddr': '2001:db8::2'},
                {'type': libvirt.VIR_IP_ADDR_TYPE_IPV6, 'mac': '52:54:00:aa:00:03', 'ipaddr': '2001:db8::3'},
                {'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'mac': '52:54:00:aa:00:03', 'ipaddr': '192.0.2.13'},
                {'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'mac': '52:54:00:aa:00:04', 'ipaddr': '127.0.0.1'}]


class FakeDom:
    def __init__(self, name, mac, agent=None, channel=None):
        self.name_, self.mac, self.agent, self.channel = name, mac, agent, channel
        self.asked = 0

    def XMLDesc(self, flags=0):  # pylint: disable=invalid-name
        del flags
        channel = '' if self.channel is None else CHANNEL.format(state=" state='%s'" % self.channel if self.channel else '')
        return DOMAIN.format(name=self.name_, mac=self.mac, channel=channel)

    def interfaceAddresses(self, source, flags=0):  # pylint: disable=invalid-name
        del flags
        assert source == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT
        self.asked += 1
        if self.agent is None:
            raise libvirt.libvirtError('QEMU guest agent is not connected')
        return self.agent


class FakeConn:
    def __init__(self, doms):
        self.doms = doms

    def listAllNetworks(self, flags=0):  # pylint: disable=invalid-name
        del flags
        return [FakeNet()]

    def lookupByName(self, name):  # pylint: disable=invalid-name
        if name not in self.doms:
            raise libvirt.libvirtError('Domain not found: %s' % name)
        return self.doms[name]


class FakeConnection:
    def __init__(self, doms):
        self.conn = FakeConn(doms)


def agent_answer(mac, *addresses):
    return {'lo': {'hwaddr': '00:00:00:00:00:00', 'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '127.0.0.1'}]},
            'eth0': {'hwaddr': mac, 'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV6 if ':' in a else libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': a}
                                              for a in addresses]},
            'docker0': {'hwaddr': '02:42:00:00:00:01', 'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '172.17.0.1'}]}}


def words(found):
    return dict((name, (readiness_word(seen), seen.address)) for name, seen in found.items())


def test_leases_matched_by_mac_case_insensitively_ipv4_first():
    doms = {'a': FakeDom('a', '52:54:00:aa:00:01'), 'b': FakeDom('b', '52:54:00:aa:00:02'), 'c': FakeDom('c', '52:54:00:aa:00:03'),
            'loop': FakeDom('loop', '52:54:00:aa:00:04'), 'none': FakeDom('none', '52:54:00:aa:00:09')}
    assert words(fleet.guest_readiness(FakeConnection(doms), sorted(doms))) == {
        'a': ('address', '192.0.2.11'), 'b': ('address', '2001:db8::2'), 'c': ('address', '192.0.2.13'),
        'loop': ('running', None), 'none': ('running', None)}


def test_agent_channel_gates_the_readiness_and_the_agent_is_asked_only_when_told_and_connected():
    mac = '52:54:00:cc:00:03'
    answer = agent_answer(mac, 'fe80::1', '198.51.100.7')
    doms = {'up': FakeDom('up', mac, agent=answer, channel='connected'),
            'down': FakeDom('down', '52:54:00:aa:00:01', agent=answer, channel='disconnected'),
            'nostate': FakeDom('nostate', '52:54:00:aa:00:01', agent=answer, channel='')}
    # without address_from_agent: the agent answers (readiness agent) but only a lease could give the address
    assert words(fleet.guest_readiness(FakeConnection(doms), sorted(doms))) == {
        'up': ('agent', None), 'down': ('running', '192.0.2.11'), 'nostate': ('running', '192.0.2.11')}
    assert [doms[name].asked for name in sorted(doms)] == [0, 0, 0]
    # with it: the connected one is asked (its NIC's address, not docker0's nor lo's); a disconnected one never is,
    # and its lease is its address (ansible_host) while its readiness stays running: no phase is skipped
    assert words(fleet.guest_readiness(FakeConnection(doms), sorted(doms), agent=True)) == {
        'up': ('address', '198.51.100.7'), 'down': ('running', '192.0.2.11'), 'nostate': ('running', '192.0.2.11')}
    assert [doms[name].asked for name in sorted(doms)] == [0, 0, 1]


def test_the_agent_wins_over_a_lease_as_in_the_vm_module():
    mac = '52:54:00:aa:00:01'
    doms = {'a': FakeDom('a', mac, agent=agent_answer(mac, '198.51.100.5'), channel='connected')}
    assert words(fleet.guest_readiness(FakeConnection(doms), ['a'], agent=True)) == {'a': ('address', '198.51.100.5')}
    assert words(fleet.guest_readiness(FakeConnection(doms), ['a'], agent=False)) == {'a': ('address', '192.0.2.11')}
    assert words(fleet.guest_readiness(FakeConnection(doms), ['a'], leases=False)) == {'a': ('agent', None)}


def test_only_an_ip_address_of_another_machine_is_taken_from_the_agent():
    # the guest writes what its agent reports: a name, its own loopback or a metadata address never become ansible_host
    mac = '52:54:00:ee:00:05'
    forged = agent_answer(mac, 'controller.example', '127.0.0.1', '169.254.169.254', '-oProxyCommand=id', '198.51.100.9')
    only_forged = agent_answer('52:54:00:ff:00:06', 'controller.example', '127.0.0.1', '169.254.169.254', '-oProxyCommand=id')
    doms = {'e': FakeDom('e', mac, agent=forged, channel='connected'), 'f': FakeDom('f', '52:54:00:ff:00:06', agent=only_forged, channel='connected')}
    assert words(fleet.guest_readiness(FakeConnection(doms), ['e', 'f'], leases=False, agent=True)) == {
        'e': ('address', '198.51.100.9'), 'f': ('agent', None)}


def test_a_vm_gone_since_the_listing_is_left_out():
    assert not fleet.guest_readiness(FakeConnection({}), ['gone'])
