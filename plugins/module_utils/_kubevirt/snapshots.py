# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt snapshots: a VM's VirtualMachineSnapshots (snapshot.kubevirt.io/v1beta1), the plan's steps run through them.

The sibling of ``_libvirt/snapshots.py``, driven by the same pure plan (``_phase/snapshots.py``):

- create: a VirtualMachineSnapshot of the VM, waited for until KubeVirt reports it Ready
  (``status.phase`` Succeeded and ``status.readyToUse``); its consistency comes from ``status.indications``
  (``GuestAgent``: the agent froze the filesystems);
- delete: the VirtualMachineSnapshot is deleted and waited for until gone (its ``spec.deletionPolicy``,
  set at creation, decides whether KubeVirt keeps the content);
- restore: a VirtualMachineRestore into the same VM, which must be stopped (refused naming the VM's state
  otherwise), waited for until ``status.complete``.

Every plan holds the VM's task (``snapshot`` / ``restore_snapshot`` / ``delete_snapshot``; task_state
``IMAGE_SNAPSHOT`` and family) in the VM's annotations, with the compare-and-swap of :mod:`.taskstore`.
"""

from __future__ import annotations

import datetime
import re
import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, DataSafetyRefusal, InvalidDeclaration, TaskConflict, WaitTimeout)
from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_API, NotFound
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.snapshot_status import (
    consistency_from_kubevirt, phase_from_kubevirt_restore, phase_from_kubevirt_snapshot)
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore, annotations_from_record
from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile, states, tasks
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase

SNAPSHOT_API = '/apis/snapshot.kubevirt.io/v1beta1'
SNAPSHOT_GROUP_VERSION = 'snapshot.kubevirt.io/v1beta1'
DESCRIPTION_ANNOTATION = 'converge.virt/description'
DELETION_POLICIES = ('delete', 'retain')
POLL_SECONDS = 0.5
RENEW_EVERY = 30.0


def parse_time(value):
    """Seconds since the epoch of a Kubernetes timestamp (``2026-11-26T08:00:00Z``), None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.datetime.strptime(value, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


def source_of(snap):
    """Name of the VirtualMachine a VirtualMachineSnapshot was taken of (None when its source is not a VirtualMachine)."""
    source = _get(snap, 'spec', 'source') or {}
    if source.get('kind') not in (None, 'VirtualMachine'):
        return None
    return source.get('name')


def vm_state_at_snapshot(status):
    """running / shutoff from ``status.indications`` (``Online``: the VM ran while it was taken)."""
    return 'running' if 'Online' in ((status or {}).get('indications') or ()) else 'shutoff'


def actual_snapshot(snap):
    """:class:`phase.ActualSnapshot` of a VirtualMachineSnapshot dict (KubeVirt snapshots have no parent and no memory)."""
    meta = snap.get('metadata') or {}
    created = parse_time(_get(snap, 'status', 'creationTime')) or parse_time(meta.get('creationTimestamp'))
    return phase.ActualSnapshot(name=meta.get('name'), created=created, parent=None, children=(),
                                vm_state_at_snapshot=vm_state_at_snapshot(snap.get('status')), memory=False,
                                description=(meta.get('annotations') or {}).get(DESCRIPTION_ANNOTATION))


def public_snapshot(snap):
    """A VirtualMachineSnapshot as the modules report it."""
    meta = snap.get('metadata') or {}
    status = snap.get('status') or {}
    actual = actual_snapshot(snap)
    error = status.get('error') or {}
    return {
        'name': meta.get('name'), 'vm': source_of(snap), 'namespace': meta.get('namespace'),
        'phase': phase_from_kubevirt_snapshot(status, deleting=bool(meta.get('deletionTimestamp'))),
        'kubevirt_phase': status.get('phase') or None, 'ready_to_use': bool(status.get('readyToUse')),
        'indications': list(status.get('indications') or ()), 'consistency': consistency_from_kubevirt(status),
        'created': datetime.datetime.fromtimestamp(actual.created, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')
        if actual.created is not None else None,
        'creation_time': actual.created, 'vm_state_at_snapshot': actual.vm_state_at_snapshot, 'memory': False,
        'description': actual.description, 'content': status.get('virtualMachineSnapshotContentName') or None,
        'deletion_policy': _get(snap, 'spec', 'deletionPolicy') or None, 'error': error.get('message') or None,
        'failure_deadline': failure_deadline_of(snap),
        'kind': 'VirtualMachineSnapshot',
    }


MICRO = '\u00b5s'  # Go writes microseconds with the micro sign
GO_DURATION_PART = re.compile(r'(\d+(?:\.\d+)?)(h|ms|us|' + MICRO + r'|ns|m|s)')
GO_UNITS = {'h': 3600.0, 'm': 60.0, 's': 1.0, 'ms': 1e-3, 'us': 1e-6, MICRO: 1e-6, 'ns': 1e-9}
DEFAULT_FAILURE_DEADLINE = 300.0  # snapshotv1.DefaultFailureDeadline (5m)


def parse_go_duration(value):
    """Seconds of a Kubernetes (Go) duration such as ``5m0s`` or ``300s``; None when absent or unreadable."""
    if not value or not isinstance(value, str):
        return None
    parts = GO_DURATION_PART.findall(value)
    if not parts or ''.join(number + unit for number, unit in parts) != value:
        return None
    return sum(float(number) * GO_UNITS[unit] for number, unit in parts)


def failure_deadline_of(snap):
    """``spec.failureDeadline`` of a VirtualMachineSnapshot in seconds (KubeVirt's default 5m when unset; 0: none)."""
    value = _get(snap, 'spec', 'failureDeadline')
    if value is None:
        return DEFAULT_FAILURE_DEADLINE
    seconds = parse_go_duration(value)
    return DEFAULT_FAILURE_DEADLINE if seconds is None else seconds


def snapshot_body(name, namespace, vm, description=None, deletion_policy=None, failure_deadline=None):
    """The VirtualMachineSnapshot to create (a dict: names and descriptions are data); ``failure_deadline`` in seconds."""
    meta = {'name': name, 'namespace': namespace, 'labels': {'converge.virt/vm': vm}}
    if description:
        meta['annotations'] = {DESCRIPTION_ANNOTATION: description}
    spec = {'source': {'apiGroup': 'kubevirt.io', 'kind': 'VirtualMachine', 'name': vm}}
    if deletion_policy:
        spec['deletionPolicy'] = deletion_policy
    if failure_deadline is not None:
        spec['failureDeadline'] = '%ds' % failure_deadline
    return {'apiVersion': SNAPSHOT_GROUP_VERSION, 'kind': 'VirtualMachineSnapshot', 'metadata': meta, 'spec': spec}


def restore_name(snapshot, now=None):
    """Name of the VirtualMachineRestore of ``snapshot`` into ``vm`` (a DNS subdomain, at most 253 characters)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    suffix = '-restore-%s' % now.strftime('%Y%m%d%H%M%S')
    return (snapshot[:253 - len(suffix)] + suffix).lower()


def restore_body(name, namespace, vm, snapshot, target=None):
    """The VirtualMachineRestore of ``snapshot`` (taken of ``vm``) into ``vm``, or into the new VM ``target``."""
    labels = {'converge.virt/vm': vm}
    if target and target != vm:
        labels[TARGET_LABEL] = target
    return {'apiVersion': SNAPSHOT_GROUP_VERSION, 'kind': 'VirtualMachineRestore',
            'metadata': {'name': name, 'namespace': namespace, 'labels': labels},
            'spec': {'target': {'apiGroup': 'kubevirt.io', 'kind': 'VirtualMachine', 'name': target or vm},
                     'virtualMachineSnapshotName': snapshot}}


LAST_RESTORE_ANNOTATION = 'restore.kubevirt.io/lastRestoreUID'
TARGET_LABEL = 'converge.virt/restore-target'


def restored_into(client, namespace, vm, snapshot, target):
    """The VirtualMachineRestore of ``snapshot`` (of ``vm``) that made the VM ``target``, or None.

    KubeVirt writes ``restore.kubevirt.io/lastRestoreUID`` (``<restore name>-<restore uid>``) on the VM it restored."""
    target_vm = client.get(KUBEVIRT_API, namespace, 'virtualmachines', target)
    mark = _get(target_vm, 'metadata', 'annotations', LAST_RESTORE_ANNOTATION)
    if not mark:
        return None
    for restore in client.list(SNAPSHOT_API, namespace, 'virtualmachinerestores'):
        meta = restore.get('metadata') or {}
        spec = restore.get('spec') or {}
        if ('%s-%s' % (meta.get('name'), meta.get('uid')) == mark and spec.get('virtualMachineSnapshotName') == snapshot
                and _get(spec, 'target', 'name') == target):
            return restore
    return None


def plan_restore_into_new_vm(observer, name, target):
    """Steps restoring snapshot ``name`` of the observed VM into the new VM ``target`` (pure of changes; raises before any).

    - ``target`` does not exist: one restore step (KubeVirt creates it, halted, from the snapshot; the source VM is not
      touched, so it may run and no safety snapshot is needed);
    - ``target`` exists and was made by a restore of this snapshot: nothing to do;
    - ``target`` exists otherwise: refused (a restore would replace that VM's spec and disks).
    """
    snaps, _current = observer.snapshots()
    if name not in set(snap.name for snap in snaps):
        raise InvalidDeclaration('name', 'snapshot %r of VM %s does not exist: nothing to restore (existing: %s)'
                                 % (name, observer.vm, ', '.join(sorted(snap.name for snap in snaps)) or 'none'))
    existing = observer.client.get(KUBEVIRT_API, observer.namespace, 'virtualmachines', target)
    if existing is None:
        return [phase.SnapshotStep(phase.RESTORE, name, (('target', target),))], snaps
    if restored_into(observer.client, observer.namespace, observer.vm, name, target) is not None:
        return [], snaps
    why = ('VirtualMachine %s exists and was not made by a restore of snapshot %s: restoring into it would replace its spec and disks; '
           'name a VM that does not exist yet, nothing was changed' % (target, name))
    raise DataSafetyRefusal('restore of snapshot %s of VM %s/%s into %s refused: %s' % (name, observer.namespace, observer.vm, target, why),
                            reason=why, vm=observer.vm, snapshot=name, target_vm=target)


def restore_refusal(power_state, vm_status):
    """Why a restore cannot run now (KubeVirt restores into a stopped VM only), or None. Names the VM's current state."""
    if power_state in (states.SHUTDOWN, states.NOSTATE, states.CRASHED):
        return None
    return ('KubeVirt restores a snapshot into a stopped VM only; the VM is %s (power_state %s): stop it first (converge.virt.vm '
            'state: stopped), nothing was changed' % (vm_status or 'running', power_state))


class SnapshotObserver:
    """A VirtualMachine's snapshots in a namespace, and its state (for the task and the restore refusal)."""

    def __init__(self, client, namespace, vm):
        self.client = client
        self.namespace = namespace
        self.vm = vm
        self.obs = None
        self.refresh()

    def refresh(self):
        """Read the VM again (raises naming ``vm`` when it does not exist)."""
        self.obs = kobserve.observe_vm(self.client, self.namespace, self.vm)
        if not self.obs.get('exists'):
            raise InvalidDeclaration('vm', 'VirtualMachine %r does not exist in namespace %s' % (self.vm, self.namespace))
        return self.obs

    def objects(self):
        """The VM's VirtualMachineSnapshot dicts, by name."""
        items = self.client.list(SNAPSHOT_API, self.namespace, 'virtualmachinesnapshots')
        return dict((item['metadata']['name'], item) for item in items if source_of(item) == self.vm)

    def snapshots(self):
        """``(list of ActualSnapshot, None)``: KubeVirt has no current snapshot."""
        return [actual_snapshot(obj) for _name, obj in sorted(self.objects().items())], None

    def power_state(self):
        """power_state of the VM's instance now."""
        return self.obs.get('power_state')

    def store(self):
        """The task store on the VM's annotations."""
        return KubevirtTaskStore(self.client, self.namespace, self.vm, inferred_vm_state=self.obs.get('effective_vm_state'))


def check_task_free(observer):
    """Raise :class:`TaskConflict` when another live task holds the VM (before any step, check mode too)."""
    record, _version = observer.store().load()
    now = time.time()
    if not record.idle() and not phase.stale_snapshot_task(record, now, owner_gone):
        raise TaskConflict(observer.vm, record.task_id, record.task_state, stale=record.stale(now), action=record.action)
    return record


def clear_stale_snapshot_task(observer, check_mode=False):
    """Clear the task a killed snapshot run left when this run has no step to take (see phase.clear_stale_snapshot_task)."""
    return phase.clear_stale_snapshot_task(observer.store(), time.time(), owner_gone, name=observer.vm, check_mode=check_mode)


def plan_action(steps):
    """The VM task a plan holds (as on libvirt): restore_snapshot, else snapshot when it creates one, else delete_snapshot."""
    ops = set(step.op for step in steps)
    if phase.RESTORE in ops:
        return 'restore_snapshot'
    return 'snapshot' if phase.CREATE in ops else 'delete_snapshot'


def refuse_or_plan(observer, declared, safety_name):
    """``(steps, snapshots)``; raises before anything changes when a step cannot be done."""
    snaps, _current = observer.snapshots()
    if declared.get('memory'):
        raise InvalidDeclaration('memory', 'KubeVirt snapshots hold the disks only (no guest memory); memory: true is a libvirt option')
    if declared.get('children'):
        raise InvalidDeclaration('children', 'KubeVirt snapshots have no parent and no children; children: true is a libvirt option')
    steps = phase.plan_snapshot(dict(declared, memory=False, children=False), snaps, safety_name=safety_name)
    if any(step.op == phase.RESTORE for step in steps):
        why = restore_refusal(observer.power_state(), observer.obs.get('status'))
        if why:
            raise DataSafetyRefusal('restore of snapshot %s into VM %s/%s refused: %s' % (declared['name'], observer.namespace, observer.vm, why),
                                    reason=why, vm=observer.vm, snapshot=declared['name'], power_state=observer.power_state())
    return steps, snaps


class Runner:
    """Runs the steps of one plan under the VM's task, waiting for KubeVirt (``wait_timeout`` seconds per step)."""

    def __init__(self, observer, wait_timeout=300, deletion_policy=None, owner=None, clock=time.time, sleep=time.sleep,  # pylint: disable=too-many-arguments
                 failure_deadline=None):
        self.observer = observer
        self.client = observer.client
        self.namespace = observer.namespace
        self.vm = observer.vm
        self.wait_timeout = wait_timeout
        self.deletion_policy = deletion_policy
        self.failure_deadline = failure_deadline
        self.owner = owner or owner_id()
        self.clock, self.sleep = clock, sleep
        self.store = None
        self.task_id = None
        self.renewed_at = None
        self._record = None

    # -- the task ------------------------------------------------------------------------------------------------

    def _take(self, action):
        self.store = self.observer.store()
        record, _version = self.store.load()
        if phase.stale_snapshot_task(record, self.clock(), owner_gone):
            # left by a killed snapshot run: cleared with vm_state unchanged; the plan was made from what KubeVirt lists
            recovery = reconcile.recover_stale_task(record.task_state, record.vm_state, record.action)
            tasks.clear_stale_task(self.store, record.task_id, recovery.vm_state, name=self.vm)
        self.task_id = tasks.new_task_id()
        tasks.take_task(self.store, action, self.task_id, self.clock(), owner=self.owner, name=self.vm)
        self.renewed_at = self.clock()

    def _renew(self):
        if self.task_id is not None and self.clock() - self.renewed_at >= RENEW_EVERY:
            tasks.renew_task(self.store, self.task_id, self.clock(), name=self.vm)
            self.renewed_at = self.clock()

    def _wait(self, what, probe):
        """Poll ``probe()`` (returns ``(done, last_seen)``) until done; renew the task meanwhile; WaitTimeout after wait_timeout."""
        deadline = self.clock() + self.wait_timeout
        while True:
            done, seen = probe()
            if done:
                return seen
            if self.clock() >= deadline:
                raise WaitTimeout('%s of VM %s/%s did not finish within wait_timeout %d s; last seen: %s'
                                  % (what, self.namespace, self.vm, self.wait_timeout, seen), last=seen)
            self._renew()
            self.sleep(POLL_SECONDS)

    # -- the steps -----------------------------------------------------------------------------------------------

    def create(self, step):
        detail = dict(step.detail)
        body = snapshot_body(step.name, self.namespace, self.vm, detail.get('description'), self.deletion_policy, self.failure_deadline)
        self.client.create(SNAPSHOT_API, self.namespace, 'virtualmachinesnapshots', body)
        self.await_ready(step.name)
        return {}

    def await_ready(self, name):
        """Wait until VirtualMachineSnapshot ``name`` is Ready; BackendError naming KubeVirt's error when it fails."""
        def probe():
            snap = self.client.get(SNAPSHOT_API, self.namespace, 'virtualmachinesnapshots', name)
            if snap is None:
                raise BackendError('VirtualMachineSnapshot %s/%s vanished while it was created' % (self.namespace, name))
            status = snap.get('status') or {}
            # a deadline declared on it (failure_deadline) ends the wait as KubeVirt would fail it; without one KubeVirt's own
            # default applies on its clock and we see its Failed (no second guess across clocks)
            deadline = failure_deadline_of(snap) if _get(snap, 'spec', 'failureDeadline') else None
            word = phase_from_kubevirt_snapshot(status, now=self.clock(), created_at=parse_time(_get(snap, 'metadata', 'creationTimestamp')),
                                                failure_deadline=deadline or None)
            if word == phase.FAILED:
                message = _get(status, 'error', 'message') or (
                    'phase Failed' if status.get('phase') == 'Failed' else
                    'still %s past its failureDeadline of %d s (KubeVirt fails it)' % (status.get('phase') or 'pending', deadline or 0))
                raise BackendError('snapshot %s of VM %s/%s failed: %s' % (name, self.namespace, self.vm, message),
                                   snapshot=name, kubevirt_phase=status.get('phase'))
            return word == phase.READY, 'phase %s (KubeVirt %s, readyToUse %s)' % (word, status.get('phase'), bool(status.get('readyToUse')))
        return self._wait('snapshot %s' % name, probe)

    def delete(self, step):
        try:
            self.client.delete(SNAPSHOT_API, self.namespace, 'virtualmachinesnapshots', step.name)
        except NotFound:
            return {}

        def probe():
            snap = self.client.get(SNAPSHOT_API, self.namespace, 'virtualmachinesnapshots', step.name)
            return snap is None, 'still present (finalizers %s)' % (_get(snap, 'metadata', 'finalizers') or [])
        self._wait('deleting snapshot %s' % step.name, probe)
        return {}

    def restore(self, step):
        name = restore_name(step.name)
        target = dict(step.detail).get('target') or self.vm
        self.client.create(SNAPSHOT_API, self.namespace, 'virtualmachinerestores', restore_body(name, self.namespace, self.vm, step.name, target))

        def probe():
            obj = self.client.get(SNAPSHOT_API, self.namespace, 'virtualmachinerestores', name)
            if obj is None:
                raise BackendError('VirtualMachineRestore %s/%s vanished while it ran' % (self.namespace, name))
            word = phase_from_kubevirt_restore(obj.get('status'))
            if word == phase.FAILED:
                messages = [c.get('message') for c in _get(obj, 'status', 'conditions') or () if c.get('message')]
                why = '; '.join(messages) or 'Failure'
                raise BackendError('restore %s of snapshot %s into VM %s/%s failed: %s' % (name, step.name, self.namespace, target, why),
                                   restore=name)
            return word == phase.RESTORED, 'phase %s' % word
        self._wait('restore %s' % name, probe)
        if target == self.vm:
            self._keep_record()
        else:
            self._idle_record(target)
        return {'restore': name}

    def _idle_record(self, target):
        """A new VM gets the annotations of the VM at the snapshot's time, the task record of the run that took it included:
        the new VM has no task (stopped, as KubeVirt creates it)."""
        vm = self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachines', target) or {}
        annotations = _get(vm, 'metadata', 'annotations') or {}
        idle = annotations_from_record(tasks.TaskRecord(vm_state='STOPPED'))
        patch = dict((key, value) for key, value in idle.items() if annotations.get(key) != value)
        if patch:
            self.client.merge_patch(KUBEVIRT_API, self.namespace, 'virtualmachines', target, {'metadata': {'annotations': patch}})

    def _keep_record(self):
        """A restore writes the VM of the snapshot's time back; our task record (annotations) is written again over it."""
        vm = self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachines', self.vm)
        annotations = _get(vm, 'metadata', 'annotations') or {}
        record, _version = self.store.load()
        if record.task_id == self.task_id:
            return
        wanted = self._record
        patch = {'metadata': {'annotations': dict((key, value) for key, value in annotations_from_record(wanted).items()
                                                  if annotations.get(key) != value)}}
        self.client.merge_patch(KUBEVIRT_API, self.namespace, 'virtualmachines', self.vm, patch)

    def run(self, steps):
        """Run ``steps`` in order under one VM task; return what was done (dicts). A failed step abandons the task."""
        if not steps:
            return []
        action = plan_action(steps)
        self._take(action)
        # the VM's interval in the audit journal (target: the snapshots the steps name, in order)
        target = ','.join('%s:%s' % (step.op, step.name) for step in steps)
        journal.append('begin', self.vm, self.task_id, action, target=target)
        done = []
        try:
            self._record = self.store.load()[0]
            for step in steps:
                run = {phase.CREATE: self.create, phase.DELETE: self.delete, phase.RESTORE: self.restore}[step.op]
                extra = run(step)
                item = {'op': step.op, 'snapshot': step.name}
                item.update(dict(step.detail))
                item.update(extra)
                done.append(item)
        except BaseException:
            journal.append('end', self.vm, self.task_id, action, target=target, outcome='failed')
            try:
                tasks.abandon_task(self.store, self.task_id, name=self.vm, rolled_back=True)
            except ConvergeError:
                pass
            raise
        journal.append('end', self.vm, self.task_id, action, target=target, outcome='done')
        tasks.finish_task(self.store, self.task_id, name=self.vm)
        return done
