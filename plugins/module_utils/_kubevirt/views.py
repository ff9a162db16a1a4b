# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every state word of one KubeVirt VirtualMachine from its objects (VM, VMI, DataVolumes, PVCs as dicts).

The sibling of :func:`.._libvirt.views.libvirt_vm_view`: both feed the pure
phase layer (``_phase``), so the two backends report the same words.
Pure: no kubernetes import.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase import status as st
from ansible_collections.converge.virt.plugins.module_utils._phase.views import effective_vm_state

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
# run strategies whose automatic start waits out a start failure backoff (KubeVirt syncRunStrategy:
# startFailureBackoffTimeLeft is asked for these two; Manual and Once create at once)
BACKOFF_RUN_STRATEGIES = ('Always', 'RerunOnFailure')


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


def _create_coming(vm, strategy, failures, start_requested):
    """Whether virt-controller creates an instance for a VM that has none when it next syncs it.

    KubeVirt's printable status asks isVMIStartExpected, which counts only a create in flight (expectations raised by
    startVMI, lowered when the create is refused or the informer sees the instance). From the objects that is: the
    run strategy asks for an instance (syncRunStrategy: Always and Once always, RerunOnFailure, Manual and Halted on a
    Start request, RerunOnFailure also right after a switch to it), Always and RerunOnFailure are not waiting out a start
    failure backoff (``status.startFailure``; virt-controller requeues the VM for ``retryAfterTimestamp`` and the
    word stays CrashLoopBackOff until that sync creates the instance), the last sync did not fail to create it (VM
    condition Failure, reason FailedCreate: the API server refused the instance, e.g. a ResourceQuota) and the VM
    needs no manual recovery (startVMI creates nothing then).
    """
    if strategy in ('Always', 'Once'):
        wanted = True
    elif strategy in ('RerunOnFailure', 'Manual', 'Halted'):
        wanted = start_requested    # Halted: virt-controller switches the strategy to Always on a Start request, then creates
    else:
        wanted = False      # WaitAsReceiver, unknown strategies
    if not wanted:
        return False
    if failures != 0 and strategy in BACKOFF_RUN_STRATEGIES:
        return False
    return not (_cond_is(vm, 'Failure', 'True', 'FailedCreate') or _cond_is(vm, 'ManualRecoveryRequired'))


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
    start_expected = vmi is None and _create_coming(vm, strategy, failures, start_requested or rerun_switched)
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
    if not live and (inp.start_expected or _restarts_by_itself(inp)):
        return s.RUNNING
    return power_state


def _restarts_by_itself(inp):
    """The run strategy (or a pending Start request) brings an instance back, even if not right now.

    Broader than ``start_expected`` (a create about to happen): a crash-looping VM in backoff, an instance that
    Failed under Always or RerunOnFailure (virt-controller deletes it and creates a new one) and a VM whose instance
    the API server refused (virt-controller retries the create) all count.
    """
    instance = inp.instance
    if inp.start_requested or inp.run_strategy == 'Always':
        return True
    if inp.start_failures > 0 and inp.run_strategy in AUTO_START_RUN_STRATEGIES:
        return True     # crash looping (KubeVirt's word for Once too)
    if inp.run_strategy == 'RerunOnFailure':
        return instance is not None and instance.phase == s.FAILED
    return inp.run_strategy == 'Once' and instance is None


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
