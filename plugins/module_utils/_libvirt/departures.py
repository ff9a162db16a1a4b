# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Departure records: a host remembers the VMs that migrated away from it.

A libvirt host knows only the domains defined on it. Once a VM has migrated to
another host (``VIR_MIGRATE_UNDEFINE_SOURCE``), a ``vm`` task that declares it on
its old host finds nothing there and would define and start a second copy on
the same disks: a split brain that no error reports. The same happens after a
migration whose run was killed once libvirt had moved the guest (peer-to-peer
migrations finish without the client), and with ``undefine_source: false``,
where the old host keeps a stopped copy that a start would run.

So the migration backend leaves a departure record on the source host when it
starts moving a VM (``leaving``), turns it into ``left`` once the VM runs on the
target, and removes it when the guest stays on the source (failure, abort) or
arrives back (the host is the target). The ``vm`` module refuses to declare a
VM present on a host it departed from, unless the guest runs there.

A record is a private, persistent libvirt secret of the host (like the drain
mark): every controller that connects sees it, it survives daemon restarts,
and it never appears among the domains. Its description holds JSON: name, UUID,
target (the URI without credentials), task id, phase and time.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_state import LIBVIRT_STATES

USAGE_PREFIX = 'converge-virt-departed/'
LEAVING, LEFT = 'leaving', 'left'
SNAPSHOT_KEY = ('converge-virt', 'departures')  # where a fleet's bulk snapshot keeps the host's records (never a VM name)


def _usage(name):
    return USAGE_PREFIX + name


def _unsupported(exc):
    """True when the host's libvirt keeps no secrets (a driver without a secret driver, such as test:///): no records there."""
    return exc.get_error_code() in (getattr(libvirt, 'VIR_ERR_NO_SUPPORT', 3), getattr(libvirt, 'VIR_ERR_OPERATION_UNSUPPORTED', 84))


def _secret(conn, name):
    try:
        return conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_VOLUME, _usage(name))
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == getattr(libvirt, 'VIR_ERR_NO_SECRET', 66) or _unsupported(exc):
            return None
        raise


def _parse(secret):
    try:
        record = json.loads(ET.fromstring(secret.XMLDesc(0)).findtext('description') or '{}')
    except (ValueError, ET.ParseError):
        record = {}
    return record if isinstance(record, dict) else {}


def departure(conn, name):
    """The departure record of VM ``name`` on the host of ``conn`` (a dict), or None."""
    secret = _secret(conn, name)
    return None if secret is None else _parse(secret)


def departures(conn):
    """Every departure record of the host of ``conn``: name -> dict (one call lists them all, for fleets)."""
    out = {}
    try:
        secrets = conn.listAllSecrets(libvirt.VIR_CONNECT_LIST_SECRETS_PRIVATE)
    except libvirt.libvirtError as exc:
        if _unsupported(exc):
            return out
        raise
    for secret in secrets:
        try:
            usage = secret.usageID()
        except libvirt.libvirtError:
            continue
        if usage and usage.startswith(USAGE_PREFIX):
            out[usage[len(USAGE_PREFIX):]] = _parse(secret)
    return out


def mark(conn, name, phase, target, task_id, vm_uuid=None):
    """Record (or update) that VM ``name`` is ``leaving`` / has ``left`` the host of ``conn`` for ``target``.

    True when recorded; False when the host's libvirt keeps no secrets (then it keeps no departure records either).
    """
    import uuid as uuidlib  # pylint: disable=import-outside-toplevel  # only when a record is written (a migration)
    existing = _secret(conn, name)
    root = ET.Element('secret', {'ephemeral': 'no', 'private': 'yes'})
    ET.SubElement(root, 'uuid').text = existing.UUIDString() if existing is not None else str(uuidlib.uuid4())
    ET.SubElement(root, 'description').text = json.dumps(
        {'name': name, 'uuid': vm_uuid, 'target': target, 'task_id': task_id, 'phase': phase, 'since': time.time()}, sort_keys=True)
    usage = ET.SubElement(root, 'usage', {'type': 'volume'})
    ET.SubElement(usage, 'volume').text = _usage(name)
    try:
        conn.secretDefineXML(ET.tostring(root, encoding='unicode'), 0)
    except libvirt.libvirtError as exc:
        if _unsupported(exc):
            return False
        raise
    return True


def clear(conn, name):
    """Remove the departure record of VM ``name`` from the host of ``conn``; True when there was one."""
    secret = _secret(conn, name)
    if secret is None:
        return False
    try:
        secret.undefine()
    except libvirt.libvirtError:
        if _secret(conn, name) is not None:
            raise
        return False  # removed by another run at the same time
    return True


def runs_here(state):
    """True when a domain in libvirt ``state`` holds the guest on this host (the departure does not apply to it).

    Only a running (or blocked) guest is the VM here: it came back, or the move failed. A paused copy is not, whatever
    paused it (an outgoing migration, or an operator who started the leftover definition paused while the guest runs
    on the target): resuming it would run a second guest (tests/reliability/test_split_brain_libvirt.py).
    """
    return state in RUNS_HERE_STATES


# virDomainState RUNNING and BLOCKED, and the same as libvirt's state words (vm_info's ``state``)
RUNS_HERE_STATES = (getattr(libvirt, 'VIR_DOMAIN_RUNNING', 1), getattr(libvirt, 'VIR_DOMAIN_BLOCKED', 2))
RUNS_HERE_WORDS = tuple(LIBVIRT_STATES[state] for state in RUNS_HERE_STATES)


def refusal(name, record):
    """The message of a declaration refused because VM ``name`` departed (``record``)."""
    target = record.get('target') or 'another host'
    since = record.get('since')
    when = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(since)) if isinstance(since, (int, float)) else 'an unknown time'
    if record.get('phase') == LEFT:
        how = 'migrated to %s (task %s, %s)' % (target, record.get('task_id'), when)
    else:
        how = ('was being migrated to %s by a run that did not finish (task %s, started %s); it may be running there'
               % (target, record.get('task_id'), when))
    return ('VM %r left this host: it %s. Declaring it here would run a second copy on the same disks. Declare it on %s '
            '(or re-run converge.virt.migration, which finds the guest on either host), set if_moved: skip to leave it alone here, '
            'or declare state: absent here to forget the departure (the VM on the other host is not touched)' % (name, how, target))
