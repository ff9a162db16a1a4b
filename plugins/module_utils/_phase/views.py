# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every state word of one VM from one observation, for every consumer.

Modules, ``*_info`` modules and inventory plugins all call :func:`libvirt_vm_view`
(and its KubeVirt sibling), so a word the inventory reports is the word a
module returns. Pure: the backend passes what it read.
"""

from __future__ import annotations

from typing import NamedTuple

from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile, tasks
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase import status as st
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get

# recorded vm_states that the hypervisor's word never overrides
STICKY_VM_STATES = (s.ERROR, s.RESCUED, s.RESIZED, s.SOFT_DELETED, s.BUILDING)
START_TASKS = ('STARTING', 'REBOOTING', 'REBOOTING_HARD', 'RESUMING', 'UNPAUSING', 'RESTORING')


def effective_vm_state(recorded, power_state, managed_save=False, task_state=None):
    """The vm_state a new task starts from: the record, unless the hypervisor contradicts it.

    power_state is authoritative (Nova); with no task in flight, a record the
    power-sync table does not find in sync is replaced by the state read off
    the hypervisor (the guest shut itself down: STOPPED). Sticky states
    (ERROR, RESCUED, ...) are kept; an unrecorded VM gets the inferred state.
    """
    inferred = s.infer_vm_state(power_state, managed_save)
    if not recorded:
        return inferred
    if recorded in STICKY_VM_STATES or task_state is not None:
        return recorded
    if recorded == s.VM_SUSPENDED:
        return recorded if managed_save else inferred
    decision = reconcile.power_sync_decision(recorded, power_state)
    return recorded if decision.action == reconcile.IN_SYNC else inferred


def stale_recovery(record, power_state, managed_save=False):
    """``(Recovery, vm_state to record)`` for the stale task of ``record`` (a :class:`.tasks.TaskRecord`), Nova _init_instance.

    What the interrupted task left behind is read off the hypervisor (redo, reset after locating the guest,
    clear, and an interrupted delete, which is never finished here: the planner, or the user's declaration,
    decides what happens next); an interrupted build is set ERROR (STOPPED when the guest is plainly there and off).
    """
    recovery = reconcile.recover_stale_task(record.task_state, record.vm_state, record.action, power_state)
    vm_state = recovery.vm_state
    if recovery.action in (reconcile.REDO, reconcile.RESET_AFTER_LOCATING, reconcile.CLEAR, reconcile.FINISH_DELETE):
        vm_state = effective_vm_state(record.vm_state, power_state, managed_save)
    return recovery, vm_state


class StaleTaskCleared(NamedTuple):
    """What :func:`clear_stale` found and did: the stale record, why it is stale, the recovery and the vm_state recorded."""

    record: tasks.TaskRecord
    reason: str
    recovery: reconcile.Recovery
    vm_state: str

    def as_dict(self):
        """The ``recovered`` entry of a vm result."""
        return {'recovered_task': self.record.task_state, 'recovered_task_id': self.record.task_id, 'recovery': self.recovery.action,
                'vm_state': self.vm_state, 'reason': self.reason}

    def note(self, dry_run=False):
        """One line for a result's notes."""
        if dry_run:
            return 'would recover the stale task %s (%s): %s' % (self.record.task_id, self.record.task_state, self.reason)
        return 'recovered the stale task %s (%s, %s): %s' % (self.record.task_id, self.record.task_state, self.recovery.action, self.reason)


def clear_stale(store, power_state, now, run_gone, name='vm', managed_save=False, dry_run=False):
    """Clear the stale task of ``store``'s record (Nova _init_instance); a :class:`StaleTaskCleared`, or None when none is stale.

    One recovery for every backend and every module that meets a task left behind: ``run_gone(owner)`` tells whether
    the run that holds it is known dead (the backend's owner check), else the lease decides (:meth:`.tasks.TaskRecord.stale_reason`).
    ``dry_run`` (check mode): nothing is written, the result says what would be recorded.
    """
    record, _version = store.load()
    reason = record.stale_reason(now, run_gone=run_gone(record.owner))
    if reason is None:
        return None
    recovery, vm_state = stale_recovery(record, power_state, managed_save)
    if not dry_run:
        tasks.clear_stale_task(store, record.task_id, vm_state, name=name)
    return StaleTaskCleared(record, reason, recovery, vm_state)


def _grace_seconds(value):
    """A recorded grace period (a number or its text) in seconds; None when absent or unreadable."""
    if isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def libvirt_vm_view(state, reason, metadata=None, acpi=True, managed_save=False, autostart=False, job_active=False, grace_period=None):
    """All state words of a libvirt domain.

    ``state`` / ``reason``: ``dom.state()``; ``metadata``: the converge record
    (vm_state, task_state, task_id ...); ``acpi``: the domain has ACPI;
    ``job_active``: a migration job runs; ``grace_period``: the seconds the last
    stop gave a graceful shutdown before destroying the domain (0: forced at once),
    None to read ``stop_grace_period`` from the record (unknown when absent).
    Returns a dict with power_state, vm_state (as recorded, or inferred when
    there is no record), effective_vm_state, task_state, task_id, status, phase,
    phase_reason (why a final phase is what it is), state and state_reason.
    """
    metadata = metadata or {}
    if grace_period is None:
        grace_period = _grace_seconds(metadata.get('stop_grace_period'))
    power = s.power_state_from_libvirt(state, reason)
    task_state = metadata.get('task_state') or None
    phase = s.phase_from_domain(power.state, power.reason, acpi=acpi, previous=s.PHASE_UNSET, grace_period=grace_period)
    active = power.state not in ('shutoff', 'nostate')
    instance = None
    if active:
        instance = st.InstanceView(
            phase=phase, paused=power.state == 'paused' and power.reason != 'migration',
            migrating=job_active or task_state == 'MIGRATING')
    elif s.is_final(phase) and not managed_save:
        instance = st.InstanceView(phase=phase)
    inp = st.StatusInput(
        deletion_requested=task_state == 'DELETING',    # Terminating: before Stopping, so no marked_for_deletion is needed
        instance=instance,
        start_expected=task_state in START_TASKS,
        stop_expected=task_state == 'STOPPING' or power.state == 'shutdown',
        run_strategy='Always' if autostart else 'Manual',
    )
    recorded = metadata.get('vm_state') or None
    shown_phase = phase if active or s.is_final(phase) else s.PHASE_UNSET
    return {
        'power_state': power.power_state,
        'state': power.state,
        'state_reason': power.reason,
        'vm_state': recorded or s.infer_vm_state(power.power_state, managed_save),
        'effective_vm_state': effective_vm_state(recorded, power.power_state, managed_save, task_state),
        'task_state': task_state,
        'task_id': metadata.get('task_id') or None,
        'status': st.printable_status(inp),
        'phase': shown_phase,
        'phase_reason': s.domain_phase_reason(power.state, power.reason, acpi=acpi, grace_period=grace_period)
        if s.is_final(shown_phase) else None,
    }


def absent_view():
    """The words for a VM that does not exist."""
    return {'power_state': s.NOSTATE, 'state': None, 'state_reason': None, 'vm_state': s.DELETED, 'effective_vm_state': s.DELETED,
            'task_state': None, 'task_id': None, 'status': None, 'phase': None, 'phase_reason': None}


# ------------------------------------------------------------------ KubeVirt
# The collection's record on a VirtualMachine: annotations (the libvirt
# backend keeps the same fields in the domain's <metadata>).
ANNOTATION_PREFIX = 'converge.virt/'
RECORD_ANNOTATIONS = {
    'vm_state': ANNOTATION_PREFIX + 'vm-state',
    'task_state': ANNOTATION_PREFIX + 'task-state',
    'task_id': ANNOTATION_PREFIX + 'task-id',
    'last_action': ANNOTATION_PREFIX + 'task-action',
    'task_started_at': ANNOTATION_PREFIX + 'task-started-at',
    'lease_until': ANNOTATION_PREFIX + 'lease-until',
    'previous_vm_state': ANNOTATION_PREFIX + 'previous-vm-state',
    'owner': ANNOTATION_PREFIX + 'task-owner',
}
# run strategies that start an instance without a request (KubeVirt syncRunStrategy)
AUTO_START_RUN_STRATEGIES = ('Always', 'RerunOnFailure', 'Once')
STARTING_PHASES = (s.PHASE_UNSET, s.PENDING, s.SCHEDULING, s.SCHEDULED)


def _condition(obj, ctype):
    for cond in _get(obj, 'status', 'conditions') or []:
        if isinstance(cond, dict) and cond.get('type') == ctype:
            return cond
    return None


def _cond_is(obj, ctype, status='True', reason=None):
    cond = _condition(obj, ctype)
    return cond is not None and cond.get('status') == status and (reason is None or cond.get('reason') == reason)


def _by_name(objects):
    if isinstance(objects, dict):
        return dict(objects)
    return dict((_get(o, 'metadata', 'name'), o) for o in objects or [] if _get(o, 'metadata', 'name'))


def kubevirt_metadata(vm):
    """The converge record of a VirtualMachine from its annotations (same keys as the libvirt metadata dict)."""
    annotations = _get(vm, 'metadata', 'annotations') or {}
    return dict((field, annotations.get(key)) for field, key in RECORD_ANNOTATIONS.items())


def kubevirt_run_strategy(vm):
    """spec.runStrategy, or the legacy spec.running (true: Always, false/absent: Halted)."""
    spec = _get(vm, 'spec') or {}
    if spec.get('runStrategy'):
        return spec['runStrategy']
    return 'Always' if spec.get('running') else 'Halted'


def kubevirt_volume_claims(vm):
    """(claim names, DataVolume names) the VM's template volumes reference."""
    claims, dvs = [], []
    for vol in _get(vm, 'spec', 'template', 'spec', 'volumes') or []:
        if not isinstance(vol, dict):
            continue
        if isinstance(vol.get('persistentVolumeClaim'), dict) and vol['persistentVolumeClaim'].get('claimName'):
            claims.append(vol['persistentVolumeClaim']['claimName'])
        if isinstance(vol.get('dataVolume'), dict) and vol['dataVolume'].get('name'):
            dvs.append(vol['dataVolume']['name'])
    return claims, dvs


def kubevirt_instance_migrating(vmi):
    """A migration has started and not ended (KubeVirt isMigrating: startTimestamp set, endTimestamp not)."""
    state = _get(vmi, 'status', 'migrationState')
    return isinstance(state, dict) and bool(state.get('startTimestamp')) and not state.get('endTimestamp') and not state.get('completed')


def _datavolume_view(dv):
    running = _condition(dv, 'Running')
    running_error = running is not None and running.get('status') == 'False' and running.get('reason') in ('Error', 'ImagePullFailed')
    return st.DataVolumeView(phase=_get(dv, 'status', 'phase') or '', running_error=running_error, bound=_cond_is(dv, 'Bound'))


def kubevirt_status_input(vm, vmi, datavolumes=None, pvcs=None):
    """The :class:`status.StatusInput` of a VirtualMachine, its VMI and the DataVolumes / PVCs it references."""
    strategy = kubevirt_run_strategy(vm)
    requests = _get(vm, 'status', 'stateChangeRequests') or []
    first = requests[0] if requests and isinstance(requests[0], dict) else {}
    vmi_uid = _get(vmi, 'metadata', 'uid')
    phase = _get(vmi, 'status', 'phase') or s.PHASE_UNSET
    live = vmi is not None and not s.is_final(phase)
    failures = int(_get(vm, 'status', 'startFailure', 'consecutiveFailCount') or 0)
    start_requested = first.get('action') == 'Start'
    stop_requested = first.get('action') == 'Stop' and (not first.get('uid') or first.get('uid') == vmi_uid)
    # RerunOnFailure starts without a request only right after the strategy was switched to it (KubeVirt
    # shouldStartRerunOnFailure: status.runStrategy differs), and restarts an instance that Failed, not one that Succeeded
    rerun_switched = strategy == 'RerunOnFailure' and (_get(vm, 'status', 'runStrategy') or '') != strategy
    automatic = (strategy == 'Always' or (strategy == 'Once' and vmi is None)
                 or (strategy == 'RerunOnFailure' and (phase == s.FAILED if vmi is not None else rerun_switched)))
    # an automatic start is expected while no instance is live, unless start failures put it in backoff
    start_expected = start_requested or (not live and failures == 0 and automatic)
    stop_expected = live and (stop_requested or strategy == 'Halted')
    instance = None
    if vmi is not None:
        instance = st.InstanceView(phase=phase, marked_for_deletion=bool(_get(vmi, 'metadata', 'deletionTimestamp')),
                                   paused=_cond_is(vmi, 'Paused'), migrating=kubevirt_instance_migrating(vmi))
    sync = _condition(vmi, 'Synchronized') if vmi is not None else None
    sync_reason = sync.get('reason') if sync is not None and sync.get('status') == 'False' else None
    claims, dv_names = kubevirt_volume_claims(vm)
    dvs = _by_name(datavolumes)
    claim_objects = _by_name(pvcs)
    dv_views = tuple(_datavolume_view(dvs[name]) for name in dv_names if dvs.get(name) is not None)
    unbound = any(claim_objects.get(name) is not None and _get(claim_objects[name], 'status', 'phase') != 'Bound'
                  for name in claims + dv_names)
    return st.StatusInput(
        deletion_requested=bool(_get(vm, 'metadata', 'deletionTimestamp')),
        instance=instance, start_expected=start_expected, stop_expected=stop_expected, synchronized_false_reason=sync_reason,
        pod_unschedulable=vmi is not None and _cond_is(vmi, 'PodScheduled', 'False', 'Unschedulable'),
        datavolumes=dv_views, unbound_claims=unbound, start_failures=failures, run_strategy=strategy,
        start_requested=start_requested or rerun_switched, stop_requested=stop_requested)


def kubevirt_power_state(vmi):
    """power_state from a VMI: Running -> RUNNING (PAUSED with the Paused condition), none/final -> SHUTDOWN, Unknown -> NOSTATE.

    An instance not yet running (Pending, Scheduling, Scheduled) has no guest
    yet: NOSTATE, as Nova reports an instance without a domain.
    """
    if vmi is None:
        return s.SHUTDOWN
    phase = _get(vmi, 'status', 'phase') or s.PHASE_UNSET
    if s.is_final(phase):
        return s.SHUTDOWN
    if phase == s.PHASE_RUNNING:
        return s.PAUSED if _cond_is(vmi, 'Paused') else s.RUNNING
    return s.NOSTATE


def kubevirt_intended_power(inp, power_state):
    """The power_state vm_state is reconciled against on KubeVirt.

    KubeVirt acts on a VM by itself (a run strategy starts and restarts the
    instance), so a start or stop already under way counts as done: an
    instance being started (or expected to start, crash-looping included)
    counts as RUNNING, one being stopped or deleted as SHUTDOWN.
    """
    instance = inp.instance
    live = instance is not None and not s.is_final(instance.phase)
    if live and (instance.marked_for_deletion or inp.stop_expected):
        return s.SHUTDOWN
    if power_state in (s.RUNNING, s.PAUSED):
        return power_state
    if live and instance.phase in STARTING_PHASES:
        return s.RUNNING
    if not live and (inp.start_expected or (inp.start_failures > 0 and inp.run_strategy in AUTO_START_RUN_STRATEGIES)):
        return s.RUNNING
    return power_state


def kubevirt_vm_view(vm, vmi, datavolumes=None, pvcs=None):
    """All state words of a KubeVirt VirtualMachine (the sibling of :func:`libvirt_vm_view`).

    ``vm`` / ``vmi``: the objects as dicts (``vmi`` None when there is none);
    ``datavolumes`` / ``pvcs``: the referenced DataVolumes and claims (lists of
    dicts or name -> dict; missing ones are simply absent). Returns power_state,
    vm_state, effective_vm_state, task_state, task_id, status (ours),
    printable_status (KubeVirt's, None when it reports none), phase, phase_reason
    (the VMI's status.reason),
    run_strategy, start_failures and pending_restart. Pure: no kubernetes import.
    """
    meta = kubevirt_metadata(vm)
    inp = kubevirt_status_input(vm, vmi, datavolumes, pvcs)
    power = kubevirt_power_state(vmi)
    intended = kubevirt_intended_power(inp, power)
    task_state = meta.get('task_state') or None
    recorded = meta.get('vm_state') or None
    status_word = st.printable_status(inp)
    desired = _get(vm, 'metadata', 'generation')
    observed = _get(vmi, 'metadata', 'annotations', 'kubevirt.io/vm-generation')
    live = vmi is not None and not s.is_final(_get(vmi, 'status', 'phase') or s.PHASE_UNSET)
    try:
        stale_generation = live and desired is not None and observed is not None and int(observed) < int(desired)
    except (TypeError, ValueError):
        stale_generation = False
    return {
        'power_state': power,
        'vm_state': recorded or s.infer_vm_state(intended),
        'effective_vm_state': effective_vm_state(recorded, intended, False, task_state),
        'task_state': task_state,
        'task_id': meta.get('task_id') or None,
        'status': status_word,
        'printable_status': _get(vm, 'status', 'printableStatus') or None,
        'phase': _get(vmi, 'status', 'phase') or None if vmi is not None else None,
        'phase_reason': _get(vmi, 'status', 'reason') or None if vmi is not None else None,
        'run_strategy': inp.run_strategy,
        'start_failures': inp.start_failures,
        'pending_restart': bool(stale_generation or _cond_is(vm, 'RestartRequired')),
    }
