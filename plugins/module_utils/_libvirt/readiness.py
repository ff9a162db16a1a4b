# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness of a libvirt domain: the guest agent's channel state, and its address from the agent or a DHCP lease."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.readiness import pick_address
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_read import guest_agent_channel, interface_from_element
from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import parse_xml
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import Readiness


def guest_addresses(dom, macs, sources):
    """The addresses the ``sources`` (libvirt VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_*) give for the NICs with ``macs``."""
    found = []
    for source in sources:
        try:
            interfaces = dom.interfaceAddresses(source, 0)
        except libvirt.libvirtError:
            continue  # the agent does not answer yet, or the NIC is on no libvirt network (no lease)
        for info in (interfaces or {}).values():
            if (info.get('hwaddr') or '').lower() in macs:
                found.extend(entry.get('addr') for entry in info.get('addrs') or [] if entry.get('addr'))
        if found:
            break
    return found


def probe(dom):
    """What the domain shows now, as a ``Readiness`` (the port is tried by the caller)."""
    running = dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
    root = parse_xml(dom.XMLDesc(0))
    channel = guest_agent_channel(root)
    agent = channel is not None and channel.get('state') == 'connected'
    address = None
    if running:
        macs = set(nic['mac'] for nic in (interface_from_element(elem) for elem in root.findall('./devices/interface')) if nic['mac'])
        sources = ((libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT,) if agent else ()) + (libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE,)
        address = pick_address(guest_addresses(dom, macs, sources)) if macs else None
    return Readiness(running=running, has_agent=channel is not None, agent=agent, address=address, port_open=None)
