# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a libvirt migration reads: the domain's state words and record, its migration job's progress, the host's UUID,
whether a connection was lost (and which daemon), and the reports of migration_info and host (the migrations of a
host's VMs, in flight and recent; a host's free memory, drain mark and VMs).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone
from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata, migration_phase, views as libvirt_views
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import is_no_domain, libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.drain import drain_mark
from ansible_collections.converge.virt.plugins.module_utils._libvirt.migration_history import read_history
from ansible_collections.converge.virt.plugins.module_utils._phase import migration

ACTIVE_STATES = (1, 2, 3)  # running, blocked, paused
PROGRESS_KEYS = ('time_elapsed', 'data_total', 'data_processed', 'data_remaining', 'memory_total', 'memory_processed', 'memory_remaining',
                 'memory_dirty_rate', 'memory_iteration', 'memory_bps', 'downtime', 'setup_time', 'disk_total', 'disk_processed')


# ------------------------------------------------------------------ the domain and its job
def progress_of(stats):
    """The progress fields of a ``jobStats()`` dict (bytes, bytes/s, ms)."""
    out = dict((key, stats.get(key)) for key in PROGRESS_KEYS if key in stats)
    out['job_type'] = stats.get('type', 0)
    return out


def job_stats(dom, completed=False):
    """``dom.jobStats()`` or {} when it cannot be read."""
    try:
        return dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED if completed else 0) or {}
    except libvirt.libvirtError:
        return {}


def lookup(conn, name):
    """The virDomain called ``name`` on ``conn``, or None."""
    try:
        return conn.lookupByName(name)
    except libvirt.libvirtError as exc:
        if is_no_domain(exc):
            return None
        raise


def host_uuid(conn):
    """The host UUID of ``conn``'s daemon (from the capabilities)."""
    try:
        return ET.fromstring(conn.getCapabilities()).findtext('host/uuid')
    except (libvirt.libvirtError, ET.ParseError):
        return None


def vm_view(dom):
    """State words and record of ``dom`` (the same words vm and vm_info report)."""
    state, reason = dom.state()
    meta = metadata.read_converge_metadata('<vm/>')
    try:
        meta = metadata.read_converge_metadata(dom.metadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.CONVERGE_NS,
            libvirt.VIR_DOMAIN_AFFECT_CONFIG if dom.isPersistent() else libvirt.VIR_DOMAIN_AFFECT_LIVE))
    except libvirt.libvirtError:
        pass
    job_active = state in ACTIVE_STATES and job_stats(dom).get('type', 0) in (migration_phase.LIBVIRT_JOB_BOUNDED, migration_phase.LIBVIRT_JOB_UNBOUNDED)
    view = libvirt_views.libvirt_vm_view(state, reason, meta, job_active=job_active)
    view.update(state_code=state, job_active=job_active, last_action=meta.get('last_action'), owner=meta.get('owner'),
                lease_until=meta.get('lease_until'))
    return view


def domain_running(dom):
    try:
        return dom is not None and dom.isActive() and dom.state()[0] in (1, 2, 3)
    except libvirt.libvirtError:
        return False


def domain_memory_kib(dom):
    try:
        return int(dom.info()[1])
    except libvirt.libvirtError:
        return 0


def is_connection_error(error):
    text = error.lower()
    return any(word in text for word in ('end of file', 'connection', 'unable to connect', 'broken pipe', 'reset by peer', 'remote', 'cannot recv',
                                         'cannot send', 'no route', 'refused', 'closed'))


def connection_alive(connection):
    """False when the libvirt connection of ``connection`` (a :class:`Connection`) is known to be lost, else True."""
    try:
        return bool(connection.conn.isAlive())
    except (AttributeError, libvirt.libvirtError):
        return False


def lost_connection(error, source_alive, dest_alive):
    """Which daemon went away when ``error`` (the text of a libvirt error raised outside the transfer) is a lost connection.

    The transfer's own failures get their reason in :meth:`Migration._failed`; an error raised while this run read or
    prepared the VM (e.g. ``internal error: client socket is closed`` when a libvirtd dies under a call) used to reach
    the user bare. ``dest_alive`` None: the target was not connected. Returns None when ``error`` is no lost connection.
    """
    if not is_connection_error(error):
        return None
    if dest_alive is False:
        return '%s: its libvirtd closed the connection' % migration.TARGET_FAILED
    if not source_alive:
        return "the source's libvirtd died or restarted: it closed the connection; the guest stays where libvirt left it"
    return 'a libvirtd connection was lost (the source or the target died or restarted)'


# ------------------------------------------------------------------ reports (migration_info, host)
def migrations_on(connection, names=None):
    """In-flight and recent migrations of the VMs of ``connection`` (a :class:`Connection`)."""
    out = []
    for dom in connection.conn.listAllDomains(0):
        name = dom.name()
        if names and name not in names:
            continue
        try:
            view = vm_view(dom)
            history = read_history(dom)
        except libvirt.libvirtError:
            continue
        in_flight = None
        if view['task_state'] == 'MIGRATING':
            stats = job_stats(dom)
            last = history[-1] if history else {}
            phase = migration.RUNNING if view['job_active'] else (last.get('phase') or migration.PENDING)
            in_flight = {'id': view.get('task_id'), 'phase': phase, 'target': last.get('target'), 'started_at': last.get('started_at'),
                         'owner': view.get('owner'), 'progress': progress_of(stats) if stats else {},
                         'owner_gone': owner_gone(view.get('owner'))}
        if in_flight is None and not history:
            continue
        out.append({'name': name, 'host': connection.display_uri, 'vm_state': view['vm_state'], 'task_state': view['task_state'],
                    'power_state': view['power_state'], 'status': view['status'], 'in_flight': in_flight, 'recent': history,
                    'last': history[-1] if history else None})
    return out


def host_summary(connection):
    """Free memory, drain mark and VMs of one host (for the host module and placement)."""
    conn = connection.conn
    vms = []
    for dom in conn.listAllDomains(0):
        view = vm_view(dom)
        vms.append({'name': dom.name(), 'vm_state': view['vm_state'], 'power_state': view['power_state'], 'task_state': view['task_state'],
                    'running': view['state_code'] in ACTIVE_STATES, 'persistent': bool(dom.isPersistent()), 'memory_kib': domain_memory_kib(dom)})
    mark = drain_mark(conn)
    return {'uri': connection.display_uri, 'hostname': conn.getHostname(), 'host_uuid': host_uuid(conn), 'free_memory': conn.getFreeMemory(),
            'draining': mark is not None, 'drain': mark, 'vms': sorted(vms, key=lambda v: v['name']),
            'running_vms': sorted(v['name'] for v in vms if v['running']),
            'stopped_vms': sorted(v['name'] for v in vms if not v['running'] and v['persistent'])}
