# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Observe every VM of a connection with bulk calls (vm_info, the inventory plugin).

One ``listAllDomains`` per flag set (autostart, managed save, persistent) and
one ``getAllDomainStats`` give state, reason, vcpus and memory of every domain.
Only the converge metadata needs one call per domain; those run on a small
thread pool, since libvirt multiplexes calls on one connection. The domain XML
is read only where the phase depends on it (a destroyed domain: ACPI or not).
The state words come from the same :func:`views.libvirt_vm_view` the vm module uses.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_xml
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase import views

READ_THREADS = 8


def _names(conn, flag):
    return set(dom.name() for dom in conn.listAllDomains(flag))


def _metadata(dom, persistent):
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG if persistent else libvirt.VIR_DOMAIN_AFFECT_LIVE
    try:
        return domain_xml.read_converge_metadata(dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, domain_xml.CONVERGE_NS, flags))
    except libvirt.libvirtError:
        return {}


def _acpi(dom):
    try:
        return ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)).find('features/acpi') is not None
    except (libvirt.libvirtError, ET.ParseError):
        return True


def _title(dom):
    try:
        return dom.metadata(libvirt.VIR_DOMAIN_METADATA_TITLE, None, 0)
    except libvirt.libvirtError:
        return None


def guest_addresses(connection, names, leases=True, agent=False):
    """name -> first IPv4 address of running VMs ``names``, from DHCP leases of the host's networks or the guest agent."""
    conn = connection.conn
    by_mac = {}
    if leases:
        try:
            for net in conn.listAllNetworks(libvirt.VIR_CONNECT_LIST_NETWORKS_ACTIVE):
                for lease in net.DHCPLeases():
                    if lease.get('type') == libvirt.VIR_IP_ADDR_TYPE_IPV4 and lease.get('mac'):
                        by_mac[lease['mac'].lower()] = lease['ipaddr']
        except libvirt.libvirtError:
            by_mac = {}
    found = {}
    for name in names:
        try:
            dom = conn.lookupByName(name)
            macs = [nic.get('mac') for nic in domain_xml.interfaces_in(dom.XMLDesc(0)) if nic.get('mac')]
        except libvirt.libvirtError:
            continue
        for mac in macs:
            if mac.lower() in by_mac:
                found[name] = by_mac[mac.lower()]
                break
        if name in found or not agent:
            continue
        try:
            ifaces = dom.interfaceAddresses(libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT, 0)
        except libvirt.libvirtError:
            continue
        for iface_name, iface in sorted(ifaces.items()):
            if iface_name == 'lo':
                continue
            addrs = [a['addr'] for a in iface.get('addrs') or () if a.get('type') == libvirt.VIR_IP_ADDR_TYPE_IPV4]
            if addrs:
                found[name] = addrs[0]
                break
    return found


def list_vms(connection, names=None, threads=READ_THREADS, with_title=False):
    """Every VM of ``connection`` (or only ``names``) as result dicts with the state words.

    ``with_title`` adds each VM's title (one more call per VM).
    """
    conn = connection.conn
    try:
        host = conn.getHostname()
    except libvirt.libvirtError:
        host = None
    autostart = _names(conn, libvirt.VIR_CONNECT_LIST_DOMAINS_AUTOSTART)
    managed = _names(conn, libvirt.VIR_CONNECT_LIST_DOMAINS_MANAGEDSAVE)
    persistent = _names(conn, libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT)
    stats_flags = libvirt.VIR_DOMAIN_STATS_STATE | libvirt.VIR_DOMAIN_STATS_VCPU | libvirt.VIR_DOMAIN_STATS_BALLOON
    records = conn.getAllDomainStats(stats_flags, 0)
    wanted = set(names) if names else None
    records = [(dom, stats) for dom, stats in records if wanted is None or dom.name() in wanted]

    def observe(item):
        dom, stats = item
        name = dom.name()
        state, reason = stats.get('state.state', 0), stats.get('state.reason', 0)
        meta = _metadata(dom, name in persistent)
        acpi = _acpi(dom) if (state == 5 and reason == 2) else True
        view = views.libvirt_vm_view(state, reason, meta, acpi=acpi, managed_save=name in managed, autostart=name in autostart,
                                     job_active=False)
        view.pop('effective_vm_state', None)
        view.update(
            name=name, exists=True, uuid=dom.UUIDString(), host=host, autostart=name in autostart, managed_save=name in managed,
            persistent=name in persistent, vcpus=int(stats.get('vcpu.maximum', stats.get('vcpu.current', 0)) or 0),
            memory_kib=int(stats.get('balloon.maximum', 0) or 0), pending_restart=bool(meta.get('pending_restart')) and state not in (0, 5, 6),
            lease_until=meta.get('lease_until'), task_owner=meta.get('owner') or None, recorded=bool(meta.get('vm_state')),
        )
        if with_title:
            view['title'] = _title(dom)
        return view

    if len(records) < 32 or threads <= 1:
        return [observe(item) for item in records]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(observe, records))
