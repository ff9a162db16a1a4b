# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt snapshots: observe a domain's snapshots, refuse what this libvirt cannot do, run one snapshot step.

Internal snapshots only (kept inside the qcow2 disks): a stopped VM gets a disk snapshot
(``qemu-img snapshot``), a running or paused VM a system checkpoint with its memory (``savevm``).
Whatever libvirt would refuse or do half way is refused before anything changes, naming the
reason: a disk that is not qcow2, UEFI firmware in pflash, a managed save image, a disk-only
snapshot of a running VM (that needs an external snapshot, which libvirt before 9.9 cannot revert).

Every step holds the VM's task (``snapshot`` / ``restore_snapshot`` / ``delete_snapshot`` of the action
table), taken with the same compare-and-swap as the vm and volume modules.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    ConvergeError, DataSafetyRefusal, InvalidDeclaration, TaskConflict)
from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_read, taskstore
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile, states, tasks
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_state import power_state_from_libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id


def _iso(epoch):
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def snapshot_from_xml(xml, children=()):
    """:class:`phase.ActualSnapshot` from a ``<domainsnapshot>`` document."""
    root = ET.fromstring(xml)
    created = root.findtext('creationTime')
    memory = root.find('memory')
    return phase.ActualSnapshot(
        name=root.findtext('name'), created=float(created) if created else None, parent=root.findtext('parent/name'),
        children=tuple(sorted(children)), vm_state_at_snapshot=root.findtext('state'),
        memory=memory is not None and memory.get('snapshot') == 'internal', description=root.findtext('description'))


def public_snapshot(snap, vm, current=None):
    """A snapshot as modules report it."""
    return {'name': snap.name, 'vm': vm, 'phase': phase.READY, 'created': _iso(snap.created), 'creation_time': snap.created,
            'vm_state_at_snapshot': snap.vm_state_at_snapshot, 'memory': snap.memory, 'description': snap.description,
            'parent': snap.parent, 'children': list(snap.children), 'current': snap.name == current,
            'kind': 'internal', 'consistency': phase.CRASH_CONSISTENT}


class SnapshotObserver:
    """A domain's snapshots and what decides whether libvirt can snapshot it."""

    def __init__(self, connection, vm):
        self.connection = connection
        self.vm = vm
        try:
            self.dom = connection.conn.lookupByName(vm)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                raise InvalidDeclaration('vm', 'VM %r does not exist on %s' % (vm, connection.display_uri)) from None
            raise connection.error(exc, 'cannot look up VM %s' % vm) from None

    def snapshots(self):
        """``(list of ActualSnapshot, name of the current snapshot or None)``."""
        try:
            snaps = self.dom.listAllSnapshots(0)
            parsed = {}
            children = {}
            for snap in snaps:
                item = snapshot_from_xml(snap.getXMLDesc(0))
                parsed[item.name] = item
                if item.parent:
                    children.setdefault(item.parent, []).append(item.name)
            current = None
            if self.dom.hasCurrentSnapshot(0):
                current = self.dom.snapshotCurrent(0).getName()
        except libvirt.libvirtError as exc:
            raise self.connection.error(exc, 'cannot list the snapshots of VM %s' % self.vm) from None
        result = [item._replace(children=tuple(sorted(children.get(name, ())))) for name, item in sorted(parsed.items())]
        return result, current

    def power_state(self):
        """power_state of the domain now."""
        state, reason = self.dom.state()
        return power_state_from_libvirt(state, reason).power_state

    def inferred_vm_state(self):
        """vm_state of a VM the collection never tasked."""
        managed = (not self.dom.isActive()) and bool(self.dom.hasManagedSaveImage(0))
        return states.infer_vm_state(self.power_state(), managed_save=managed)

    def daemon_version(self):
        """The daemon's libvirt version ("9.0.0"), for messages."""
        try:
            number = self.connection.conn.getLibVersion()
        except libvirt.libvirtError:
            return '(unknown version)'
        return '%d.%d.%d' % (number // 1000000, number // 1000 % 1000, number % 1000)

    def refusal(self, memory):
        """Why libvirt cannot take an internal snapshot of this domain now (``memory``: with the guest's memory), or None."""
        running = bool(self.dom.isActive())
        xml = self.dom.XMLDesc(0 if running else libvirt.VIR_DOMAIN_XML_INACTIVE)
        root = ET.fromstring(xml)
        loader = root.find('os/loader')
        os_elem = root.find('os')
        if (loader is not None and loader.get('type') == 'pflash') or (os_elem is not None and os_elem.get('firmware') == 'efi'):
            return ('the VM boots UEFI firmware from pflash (%s): libvirt refuses internal snapshots of a VM with pflash firmware '
                    '(this daemon runs libvirt %s)' % (loader.text if loader is not None else 'firmware efi', self.daemon_version()))
        if not running and self.dom.hasManagedSaveImage(0):
            return 'the VM has a managed save image (suspended): libvirt refuses to snapshot it; resume or discard the saved state first'
        if running and not memory:
            return ('a disk-only snapshot of a running VM must be an external snapshot: this module takes internal snapshots only '
                    '(libvirt reverts external snapshots from 9.9 on; this daemon runs %s); take it with memory: true, or stop the VM'
                    % self.daemon_version())
        if not running and memory:
            return 'memory: true needs a running or paused VM; the VM is stopped and has no memory to save (use memory: false)'
        snapshotted = 0
        for disk in domain_read.disks_in(xml):
            if disk.get('device') in ('cdrom', 'floppy') or disk.get('readonly'):
                continue
            fmt = disk.get('format') or 'raw'
            if fmt != 'qcow2':
                return ('disk %s (%s) is %s: internal snapshots need qcow2 disks; nothing was changed'
                        % (disk.get('dev'), disk.get('path') or disk.get('volume') or 'no source', fmt))
            snapshotted += 1
        if snapshotted == 0 and not memory:
            return 'the VM has no writable disk: a disk snapshot would hold nothing'
        return None


def snapshot_xml(name, description):
    """``<domainsnapshot>`` for an internal snapshot (ElementTree: names and descriptions are data)."""
    root = ET.Element('domainsnapshot')
    ET.SubElement(root, 'name').text = name
    if description:
        ET.SubElement(root, 'description').text = description
    return ET.tostring(root, encoding='unicode')


class LeaseKeeper:
    """Renews our task's lease every ``every`` seconds while a long libvirt call blocks (the binding releases the GIL).

    A snapshot with memory takes as long as the guest's memory takes to write: the lease stays short (a killed run on
    another controller is recovered soon) and is renewed as long as this process lives. A renewal that finds the task
    no longer ours (preempted by a delete or a recovery) is kept in :attr:`error` and raised by :meth:`stop`.
    """

    def __init__(self, store, task_id, name, *, every=30.0, lease_seconds=tasks.DEFAULT_LEASE_SECONDS, clock=time.time):
        self.store, self.task_id, self.name = store, task_id, name
        self.every, self.lease_seconds, self.clock = every, lease_seconds, clock
        self.error = None
        self.renewals = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name='converge-lease-%s' % task_id, daemon=True)

    def start(self):
        """Start renewing."""
        self._thread.start()
        return self

    def _run(self):
        while not self._stopped.wait(self.every):
            try:
                tasks.renew_task(self.store, self.task_id, self.clock(), lease_seconds=self.lease_seconds, name=self.name)
                self.renewals += 1
            except ConvergeError as exc:
                self.error = exc
                return
            except Exception:  # pylint: disable=broad-except  # a daemon hiccup: the next renewal tries again
                continue

    def stop(self):
        """Stop renewing; raise the renewal's error when the task stopped being ours."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.error is not None:
            raise self.error


class SnapshotTask:
    """The VM's task for one snapshot step (compare-and-swap in the domain metadata)."""

    def __init__(self, observer, action, owner=None):
        self.observer = observer
        self.store = LibvirtTaskStore(observer.connection.conn, observer.dom, owner or owner_id(), inferred_vm_state=observer.inferred_vm_state())
        self.action = action
        self.task_id = os.urandom(8).hex()
        self.owner = owner or owner_id()
        self.vm_state_after = None
        self.keeper = None

    def __enter__(self):
        record, _version = self.store.load()
        if record.stale(time.time()) and record.action in phase.SNAPSHOT_ACTIONS:
            # left by a killed snapshot run: Nova clears IMAGE_SNAPSHOT (vm_state unchanged); the plan is made from what libvirt lists
            recovery = reconcile.recover_stale_task(record.task_state, record.vm_state, record.action)
            tasks.clear_stale_task(self.store, record.task_id, recovery.vm_state, name=self.observer.vm)
        tasks.take_task(self.store, self.action, self.task_id, time.time(), owner=self.owner, name=self.observer.vm)
        journal.append('begin', self.observer.vm, self.task_id, self.action)
        self.keeper = LeaseKeeper(self.store, self.task_id, self.observer.vm).start()
        return self

    def __exit__(self, exc_type, exc, _tb):
        journal.append('end', self.observer.vm, self.task_id, self.action, outcome='failed' if exc_type else 'done')
        if exc_type is None:
            self.keeper.stop()  # raises when the task stopped being ours: then it is not ours to finish
        else:
            try:
                self.keeper.stop()
            except ConvergeError:
                pass
        if exc_type is None:
            tasks.finish_task(self.store, self.task_id, name=self.observer.vm, vm_state=self.vm_state_after)
        else:
            try:
                tasks.abandon_task(self.store, self.task_id, name=self.observer.vm, rolled_back=True)
            except (ConvergeError, libvirt.libvirtError):
                pass
        return False


def check_task_free(observer):
    """Raise :class:`TaskConflict` when another live task holds the VM (before any step, check mode too)."""
    store = LibvirtTaskStore(observer.connection.conn, observer.dom, owner_id(), inferred_vm_state=observer.inferred_vm_state())
    record, _version = store.load()
    if not record.idle() and not (record.stale(time.time()) and record.action in phase.SNAPSHOT_ACTIONS):
        raise TaskConflict(observer.vm, record.task_id, record.task_state, stale=record.stale(time.time()), action=record.action)
    return record


def clear_stale_snapshot_task(observer, check_mode=False):
    """Clear the task a killed snapshot run left when this run has no step to take (see phase.clear_stale_snapshot_task)."""
    store = LibvirtTaskStore(observer.connection.conn, observer.dom, owner_id(), inferred_vm_state=observer.inferred_vm_state())
    return phase.clear_stale_snapshot_task(store, time.time(), owner_gone, name=observer.vm, check_mode=check_mode)


def plan_action(steps):
    """The VM task a plan holds from its first step to its last: a restore (after its safety snapshot) is
    ``restore_snapshot``, a plan that creates one is ``snapshot`` (its retention deletes included), else ``delete_snapshot``."""
    ops = set(step.op for step in steps)
    if phase.RESTORE in ops:
        return 'restore_snapshot'
    return 'snapshot' if phase.CREATE in ops else 'delete_snapshot'


# fields of the converge metadata that describe the definition, not the task: a revert brings the snapshot's back
REVERTED_FIELDS = ('pending_restart',)


def _run_step(observer, task, step):
    detail = dict(step.detail)
    dom = observer.dom
    try:
        if step.op == phase.CREATE:
            dom.snapshotCreateXML(snapshot_xml(step.name, detail.get('description')), 0)
        elif step.op == phase.DELETE:
            flags = libvirt.VIR_DOMAIN_SNAPSHOT_DELETE_CHILDREN if detail.get('children') else 0
            dom.snapshotLookupByName(step.name, 0).delete(flags)
        else:
            snap = dom.snapshotLookupByName(step.name, 0)
            at_snapshot = snapshot_from_xml(snap.getXMLDesc(0)).vm_state_at_snapshot
            # the snapshot holds the domain XML of its time, <metadata> included (the record of the task that took it):
            # a revert brings that record back, so ours (this restore's task) is written again over it
            record = taskstore.read_metadata(dom)
            dom.revertToSnapshot(snap, 0)
            # ... but what describes the definition comes from the snapshot's time with it: the revert brought back that
            # definition (live and persistent), so a restart pending now (a change made after the snapshot) is gone
            reverted = taskstore.read_metadata(dom)
            for key in REVERTED_FIELDS:
                if key in reverted:
                    record[key] = reverted[key]
                else:
                    record.pop(key, None)
            with taskstore.DomainMutex(observer.connection.conn, dom.UUIDString(), task.owner, name=observer.vm):
                taskstore.write_metadata(dom, record)
            task.vm_state_after = phase.vm_state_after_restore(at_snapshot, task.store.load()[0].vm_state)
    except libvirt.libvirtError as exc:
        raise observer.connection.error(exc, '%s %s of VM %s failed' % (step.op.replace('_', ' '), step.name, observer.vm)) from None
    result = {'op': step.op, 'snapshot': step.name}
    result.update(detail)
    return result


def execute_plan(observer, steps):
    """Run ``steps`` in order under one VM task (:func:`plan_action`); return what was done (dicts).

    One task for the whole plan: nothing else acts on the VM between a safety snapshot and the restore it protects.
    A step that fails ends the task with vm_state unchanged and fails the run; the steps before it stay done.
    """
    if not steps:
        return []
    done = []
    with SnapshotTask(observer, plan_action(steps)) as task:
        for step in steps:
            done.append(_run_step(observer, task, step))
    return done


def refuse_or_plan(observer, declared, safety_name):
    """``(steps, snapshots, current)``; raises before anything changes when a step cannot be done."""
    snaps, current = observer.snapshots()
    steps = phase.plan_snapshot(dict(declared, current=current), snaps, safety_name=safety_name)
    for step in steps:
        if step.op == phase.CREATE:
            why = observer.refusal(dict(step.detail).get('memory'))
            if why:
                raise DataSafetyRefusal('snapshot %s of VM %s refused: %s' % (step.name, observer.vm, why), reason=why, vm=observer.vm,
                                        snapshot=step.name)
    return steps, snaps, current
