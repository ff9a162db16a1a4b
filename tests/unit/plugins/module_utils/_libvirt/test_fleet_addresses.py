# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible_host for the inventory: DHCP leases matched by MAC, then the guest agent (libvirt faked)."""

from __future__ import annotations

import libvirt

from ansible_collections.converge.virt.plugins.module_utils._libvirt import fleet

DOMAIN = """<domain type='qemu'><name>{name}</name><devices>
<interface type='network'><mac address='{mac}'/><source network='default'/><model type='virtio'/></interface>
</devices></domain>"""


class FakeNet:
    def DHCPLeases(self):  # pylint: disable=invalid-name
        return [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'mac': '52:54:00:AA:00:01', 'ipaddr': '192.0.2.11'},
                {'type': libvirt.VIR_IP_ADDR_TYPE_IPV6, 'mac': '52:54:00:aa:00:02', 'ipaddr': '2001:db8::2'}]


class FakeDom:
    def __init__(self, name, mac, agent=None):
        self.name_, self.mac, self.agent = name, mac, agent

    def XMLDesc(self, flags=0):  # pylint: disable=invalid-name
        del flags
        return DOMAIN.format(name=self.name_, mac=self.mac)

    def interfaceAddresses(self, source, flags=0):  # pylint: disable=invalid-name
        del flags
        assert source == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT
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
        return self.doms[name]


class FakeConnection:
    def __init__(self, doms):
        self.conn = FakeConn(doms)


AGENT = {'lo': {'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '127.0.0.1'}]},
         'eth0': {'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV6, 'addr': 'fe80::1'}, {'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '198.51.100.7'}]}}


def test_lease_matched_by_mac_case_insensitively():
    doms = {'a': FakeDom('a', '52:54:00:aa:00:01'), 'b': FakeDom('b', '52:54:00:aa:00:02')}
    assert fleet.guest_addresses(FakeConnection(doms), ['a', 'b']) == {'a': '192.0.2.11'}


def test_agent_only_when_asked_and_no_lease():
    doms = {'a': FakeDom('a', '52:54:00:aa:00:01', agent=AGENT), 'c': FakeDom('c', '52:54:00:cc:00:03', agent=AGENT),
            'd': FakeDom('d', '52:54:00:dd:00:04')}
    assert fleet.guest_addresses(FakeConnection(doms), ['a', 'c', 'd']) == {'a': '192.0.2.11'}
    assert fleet.guest_addresses(FakeConnection(doms), ['a', 'c', 'd'], agent=True) == {'a': '192.0.2.11', 'c': '198.51.100.7'}
    assert fleet.guest_addresses(FakeConnection(doms), ['c'], leases=False, agent=True) == {'c': '198.51.100.7'}


def test_only_an_ip_address_of_another_machine_is_taken_from_the_agent():
    # the guest writes what its agent reports: a name, its own loopback or a metadata address never become ansible_host
    forged = {'eth0': {'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': 'controller.example'},
                                 {'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '127.0.0.1'}]},
              'eth1': {'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '169.254.169.254'},
                                 {'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '-oProxyCommand=id'}]},
              'eth2': {'addrs': [{'type': libvirt.VIR_IP_ADDR_TYPE_IPV4, 'addr': '198.51.100.9'}]}}
    only_forged = {'eth0': forged['eth0'], 'eth1': forged['eth1']}
    doms = {'e': FakeDom('e', '52:54:00:ee:00:05', agent=forged), 'f': FakeDom('f', '52:54:00:ff:00:06', agent=only_forged)}
    assert fleet.guest_addresses(FakeConnection(doms), ['e', 'f'], leases=False, agent=True) == {'e': '198.51.100.9'}
