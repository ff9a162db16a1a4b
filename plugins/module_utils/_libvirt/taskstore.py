# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task record in a domain's ``<metadata>``, with a compare-and-swap.

libvirt offers no compare-and-swap on metadata, so one is built from a
primitive that is atomic in the daemon: defining a secret whose usage is
already taken by another secret fails. A short-lived ephemeral secret with
usage ``converge-lock:<domain uuid>`` is the mutex; under it the record's
``generation`` is compared and the new record written. The mutex is held for a
few milliseconds; one left behind by a killed process is broken after
:data:`STALE_MUTEX_SECONDS`. The task itself is held by the record (its lease),
not by the mutex, so a task survives daemon restarts and is visible to
``vm_info``, the inventory and every other controller.
"""

from __future__ import annotations

import math
import random
import time
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._base.errors import TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord, TaskStore, record_fields, record_from_fields, stored_number
from ansible_collections.converge.virt.plugins.module_utils._base.owner import expire_if_owner_gone, owner_gone

STALE_MUTEX_SECONDS = 30.0
MUTEX_TIMEOUT = 15.0
# names a file to which each acting task appends one JSON line when it begins and ends (an audit journal)
AUDIT_JOURNAL_ENV = journal.AUDIT_JOURNAL_ENV


def _mutex_xml(usage, owner):
    import uuid  # pylint: disable=import-outside-toplevel  # only when acting: no-op runs skip the import
    root = ET.Element('secret', {'ephemeral': 'yes', 'private': 'yes'})
    ET.SubElement(root, 'uuid').text = str(uuid.uuid4())
    ET.SubElement(root, 'description').text = 'converge.virt task mutex %s held by %s' % (repr(time.time()), owner)
    usage_elem = ET.SubElement(root, 'usage', {'type': 'volume'})
    ET.SubElement(usage_elem, 'volume').text = usage
    return ET.tostring(root, encoding='unicode')


class DomainMutex:
    """A daemon-side mutex for one domain (see the module docstring)."""

    def __init__(self, conn, dom_uuid, owner, timeout=MUTEX_TIMEOUT, name=None):
        self.conn = conn
        self.name = name or dom_uuid
        self.usage = 'converge-lock:%s' % dom_uuid
        self.owner = owner
        self.timeout = timeout
        self.secret = None

    def __enter__(self):
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.secret = self.conn.secretDefineXML(_mutex_xml(self.usage, self.owner), 0)
                return self
            except libvirt.libvirtError:
                self._break_if_stale()
            if time.monotonic() > deadline:
                raise TaskConflict(self.name, 'mutex', 'busy', reason='its task mutex (%s) stayed taken for %ss' % (self.usage, self.timeout))
            time.sleep(random.uniform(0.005, 0.03))

    def _break_if_stale(self):
        try:
            held = self.conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_VOLUME, self.usage)
            desc = ET.fromstring(held.XMLDesc(0)).findtext('description') or ''
        except (libvirt.libvirtError, ET.ParseError):
            return
        if mutex_stale_reason(desc, time.time()) is not None:
            try:
                held.undefine()
            except libvirt.libvirtError:
                pass

    def __exit__(self, *exc_info):
        if self.secret is not None:
            try:
                self.secret.undefine()
            except libvirt.libvirtError:
                pass
            self.secret = None


def mutex_stale_reason(description, now):
    """Why the mutex secret with ``description`` is stale and may be broken, or None while its holder may be alive.

    The holder writes "converge.virt task mutex <time> held by <host:pid>" and keeps the mutex a few
    milliseconds. Anybody who may define secrets on the daemon can define one with the same usage, so the
    description is trusted only as far as a real holder can have written it: a time that is no number, not
    finite, or more than :data:`STALE_MUTEX_SECONDS` away from ``now`` (either way: a clock that far ahead is
    as wrong as one that far behind), a description in another form, or a holder on this host whose process
    is gone, all make it stale.
    """
    prefix = 'converge.virt task mutex '
    if not description.startswith(prefix) or ' held by ' not in description:
        return 'its description is not one this collection writes'
    stamp, _sep, holder = description[len(prefix):].partition(' held by ')
    try:
        since = float(stamp)
    except ValueError:
        return 'its time %r is not a number' % stamp
    if not math.isfinite(since):
        return 'its time %r is not a finite number' % stamp
    if abs(now - since) > STALE_MUTEX_SECONDS:
        return 'it was taken %.0f s %s' % (abs(now - since), 'ago' if since < now else 'in the future')
    if owner_gone(holder):
        return 'its holder %s is gone' % holder
    return None


def audit(event, vm, task_id, action, **extra):
    """Append one record of VM ``vm`` to the audit journal (:func:`.._common.journal.append`; nothing when it is unset).

    ``begin`` is written once the task is held, ``end`` before it is released,
    so the intervals of one VM never overlap while the task protocol holds.
    """
    journal.append(event, vm, task_id, action, kind='vm', **extra)


def record_from_metadata(meta):
    """A :class:`TaskRecord` from the metadata dict of :func:`metadata.read_converge_metadata` (vm_state None when none is recorded)."""
    return record_from_fields(meta)


def metadata_from_record(record, generation, pending_restart=False, last_action=None, stop_grace_period=None):
    """The metadata dict to store for ``record`` (``stop_grace_period``: kept from the stored record, see
    :meth:`LibvirtTaskStore.set_stop_grace_period`)."""
    return dict(record_fields(record, last_action), pending_restart=bool(pending_restart), generation=str(generation),
                stop_grace_period=stop_grace_period)


def read_metadata(dom):
    """The converge metadata of ``dom`` (persistent config when there is one)."""
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG if dom.isPersistent() else libvirt.VIR_DOMAIN_AFFECT_LIVE
    try:
        fragment = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.CONVERGE_NS, flags)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            return metadata.read_converge_metadata('<vm/>')
        raise
    return metadata.read_converge_metadata(fragment)


def metadata_flags(dom):
    """The flags of a metadata write that reaches the persistent config and, when running, the live one."""
    flags = 0
    if dom.isPersistent():
        flags |= libvirt.VIR_DOMAIN_AFFECT_CONFIG
    if dom.isActive():
        flags |= libvirt.VIR_DOMAIN_AFFECT_LIVE
    return flags


def write_metadata(dom, meta):
    """Write the converge metadata to the persistent config and, when running, the live one."""
    dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.converge_metadata_element(meta), metadata.CONVERGE_PREFIX,
                    metadata.CONVERGE_NS, metadata_flags(dom))


class LibvirtTaskStore(TaskStore):
    """:class:`TaskStore` on a libvirt domain; version = the record's generation."""

    def __init__(self, conn, dom, owner, inferred_vm_state=None):
        self.conn = conn
        self.dom = dom
        self.owner = owner
        self.inferred_vm_state = inferred_vm_state
        self.pending_restart = False
        self.stop_grace_period = None

    def load(self):
        meta = read_metadata(self.dom)
        self.pending_restart = meta.get('pending_restart', False)
        self.stop_grace_period = meta.get('stop_grace_period')
        record = record_from_metadata(meta)
        # the run holding the task was killed: its lease is over now
        record = expire_if_owner_gone(record)
        if record.vm_state is None:
            record = TaskRecord(vm_state=self.inferred_vm_state or 'STOPPED', task_state=record.task_state, task_id=record.task_id)
        return record, int(stored_number(meta.get('generation')) or 0)

    def compare_and_swap(self, expected_version, record):
        with DomainMutex(self.conn, self.dom.UUIDString(), self.owner, name=self.dom.name()):
            _current, version = self.load()
            if version != expected_version:
                return False
            write_metadata(self.dom, metadata_from_record(record, version + 1, self.pending_restart, stop_grace_period=self.stop_grace_period))
            return True

    def _set_field(self, key, value):
        # a field beside the task record, written under the mutex with a new generation; False when already so
        with DomainMutex(self.conn, self.dom.UUIDString(), self.owner, name=self.dom.name()):
            meta = read_metadata(self.dom)
            if meta.get(key) == value:
                return False
            meta[key] = value
            meta['generation'] = str(int(stored_number(meta.get('generation')) or 0) + 1)
            write_metadata(self.dom, meta)
            return True

    def set_pending_restart(self, value):
        """Record whether the running guest runs an older definition (under the mutex)."""
        self._set_field('pending_restart', bool(value))
        self.pending_restart = bool(value)

    def set_stop_grace_period(self, seconds):
        """Record the seconds a stop gave a graceful shutdown before it destroyed the domain (0: powered off at once;
        None: forget it, as a new boot does).

        KubeVirt reads a destroyed domain by it (``isACPIEnabled``): Failed after a graceful shutdown ran out of
        time, Succeeded after an immediate power-off (libvirt_views.libvirt_vm_view reads the field back).
        """
        value = None if seconds is None else repr(float(seconds))
        self._set_field('stop_grace_period', value)
        self.stop_grace_period = value
