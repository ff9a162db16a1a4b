# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Observe every VM of a connection with bulk calls (vm_info, the inventory plugin).

One ``listAllDomains`` per flag set (autostart, managed save, persistent) and
one ``getAllDomainStats`` give state, reason, vcpus and memory of every domain.
Only the converge metadata needs one call per domain; those run on a small
thread pool, since libvirt multiplexes calls on one connection. The domain XML
is read only where the phase depends on it (a destroyed domain: ACPI or not).
The state words come from the same :func:`libvirt_views.libvirt_vm_view` the vm module uses.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._common.readiness import pick_address
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_read, metadata, xml_util
from ansible_collections.converge.virt.plugins.module_utils._libvirt import readiness as libvirt_readiness
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt import views as libvirt_views
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import Readiness

READ_THREADS = 8
# domains per task of the read pool
CHUNK = 64


def _names(conn, flag):
    return set(dom.name() for dom in conn.listAllDomains(flag))


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


def guest_readiness(connection, names, leases=True, agent=False):
    """name -> ``Readiness`` of the running VMs ``names`` (``port_open`` None: no port is tried), by the vm module's rules.

    The guest agent's channel and its state come from each domain's live XML (one call per running VM); the address is
    matched by MAC: the guest agent's (with ``agent``, when its channel is connected), else the DHCP leases of the host's
    networks (with ``leases``; read once per network, not per VM); of those, :func:`pick_address` takes the first IPv4
    address of another machine, else the first IPv6 one - as ``_libvirt.readiness.probe`` does for the vm module.
    """
    conn = connection.conn
    by_mac = {}
    if leases:
        try:
            for net in conn.listAllNetworks(libvirt.VIR_CONNECT_LIST_NETWORKS_ACTIVE):
                for lease in net.DHCPLeases():
                    if lease.get('mac') and lease.get('ipaddr'):
                        by_mac.setdefault(lease['mac'].lower(), []).append(lease['ipaddr'])
        except libvirt.libvirtError:
            by_mac = {}
    found = {}
    for name in names:
        try:
            dom = conn.lookupByName(name)
            root = xml_util.parse_xml(dom.XMLDesc(0))
        except libvirt.libvirtError:
            continue
        channel = domain_read.guest_agent_channel(root)
        connected = channel is not None and channel.get('state') == 'connected'
        macs = set(nic['mac'] for nic in (domain_read.interface_from_element(elem) for elem in root.findall('./devices/interface')) if nic['mac'])
        candidates = []
        if agent and connected and macs:
            candidates = libvirt_readiness.guest_addresses(dom, macs, (libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT,))
        if not candidates:
            candidates = [address for mac in sorted(macs) for address in by_mac.get(mac, ())]
        found[name] = Readiness(running=True, has_agent=channel is not None, agent=connected, address=pick_address(candidates), port_open=None)
    return found


def _per_domain_calls(chunk, with_title):
    """The one-call-per-domain reads of a chunk of (domain, persistent, ACPI matters): (UUID, converge metadata XML
    or None when unreadable, ACPI, title). Only libvirt calls, which let other threads run: the Python work stays on
    the main thread."""
    out = []
    for dom, persistent, needs_acpi in chunk:
        try:
            raw = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.CONVERGE_NS,
                               libvirt.VIR_DOMAIN_AFFECT_CONFIG if persistent else libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError:
            raw = None
        out.append((dom.UUIDString(), raw, _acpi(dom) if needs_acpi else True, _title(dom) if with_title else None))
    return out


def list_vms(connection, names=None, threads=READ_THREADS, with_title=False, domains=None):  # pylint: disable=too-many-locals
    """Every VM of ``connection`` (or only ``names``, or only the virDomain objects ``domains``) as result dicts with the state words.

    ``domains`` reads just those (one stats call for them, not a walk over every domain: an event source re-reads
    the one VM an event names).
    ``with_title`` adds each VM's title (one more call per VM). The per-domain calls (UUID, converge metadata,
    title, ACPI of a destroyed domain) run on a thread pool in chunks and do nothing else, so they hardly wait
    for each other's Python work; the state words are computed once per distinct (state, reason, converge
    record, ACPI, managed save, autostart), not once per domain; the persistent domains are the complement of
    the (few) transient ones.
    """
    conn = connection.conn
    try:
        host = conn.getHostname()
    except libvirt.libvirtError:
        host = None
    autostart = _names(conn, libvirt.VIR_CONNECT_LIST_DOMAINS_AUTOSTART)
    managed = _names(conn, libvirt.VIR_CONNECT_LIST_DOMAINS_MANAGEDSAVE)
    transient = _names(conn, libvirt.VIR_CONNECT_LIST_DOMAINS_TRANSIENT)
    stats_flags = libvirt.VIR_DOMAIN_STATS_STATE | libvirt.VIR_DOMAIN_STATS_VCPU | libvirt.VIR_DOMAIN_STATS_BALLOON
    wanted = set(names) if names else None
    records, calls = [], []
    all_stats = conn.domainListGetStats(list(domains), stats_flags, 0) if domains is not None else conn.getAllDomainStats(stats_flags, 0)
    for dom, stats in all_stats:
        name = dom.name()
        if wanted is not None and name not in wanted:
            continue
        state, reason = stats.get('state.state', 0), stats.get('state.reason', 0)
        records.append((name, state, reason, int(stats.get('vcpu.maximum', stats.get('vcpu.current', 0)) or 0),
                        int(stats.get('balloon.maximum', 0) or 0)))
        # the ACPI feature (domain XML) matters only to the phase of a destroyed domain
        calls.append((dom, name not in transient, state == 5 and reason == 2))
    chunks = [calls[start:start + CHUNK] for start in range(0, len(calls), CHUNK)]
    if len(chunks) > 1 and threads > 1:
        from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel  # only for many domains
        with ThreadPoolExecutor(max_workers=min(threads, len(chunks))) as pool:
            answers = [answer for chunk in pool.map(_per_domain_calls, chunks, [with_title] * len(chunks)) for answer in chunk]
    else:
        answers = [answer for chunk in chunks for answer in _per_domain_calls(chunk, with_title)]
    words = {}  # (state, reason, record XML, acpi, managed save, autostart) -> (state words, words from the record)
    vms = []
    for (name, state, reason, vcpus, memory), (uuid, raw, acpi, title) in zip(records, answers):
        is_autostart, is_managed = name in autostart, name in managed
        key = (state, reason, raw, acpi, is_managed, is_autostart)
        known = words.get(key)
        if known is None:
            meta = {} if raw is None else metadata.read_converge_metadata(raw)
            view = libvirt_views.libvirt_vm_view(state, reason, meta, acpi=acpi, managed_save=is_managed, autostart=is_autostart, job_active=False)
            view.pop('effective_vm_state', None)
            known = words[key] = (view, (bool(meta.get('pending_restart')) and state not in (0, 5, 6), meta.get('lease_until'),
                                         meta.get('owner') or None, bool(meta.get('vm_state'))))
        view, (pending_restart, lease_until, task_owner, recorded) = known
        vm = dict(view)
        vm.update(
            name=name, exists=True, uuid=uuid, host=host, autostart=is_autostart, managed_save=is_managed, persistent=name not in transient,
            vcpus=vcpus, memory_kib=memory, pending_restart=pending_restart, lease_until=lease_until, task_owner=task_owner, recorded=recorded,
        )
        if with_title:
            vm['title'] = title
        vms.append(vm)
    return vms
