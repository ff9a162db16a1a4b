# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a KubeVirt migration reads: the VirtualMachineInstanceMigration (VMIM) and the instance mapped to a
:class:`~.._phase.migration.MigrationObservation` (the shared phase machine decides the phase and the reason of a
failure), its progress, and the migrations of a namespace for migration_info (in flight and recent).
"""

from __future__ import annotations

import calendar
import time

from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_API
from ansible_collections.converge.virt.plugins.module_utils._phase import migration

VMIM = 'virtualmachineinstancemigrations'
TASK_LABEL = 'converge.virt/task-id'
HISTORY_LENGTH = 5


def _ts(value):
    """Epoch seconds of an RFC 3339 timestamp, or None."""
    if not value:
        return None
    try:
        return float(calendar.timegm(time.strptime(value, '%Y-%m-%dT%H:%M:%SZ')))
    except (TypeError, ValueError):
        return None


def kubevirt_phase(vmim):
    """The VMIM's own phase ('' before the controller saw it)."""
    return _get(vmim, 'status', 'phase') or ''


def _reached(kphase, phase):
    return kphase in migration.ORDER and migration.ORDER.index(kphase) >= migration.ORDER.index(phase)


def condition_of(obj, ctype):
    for cond in _get(obj, 'status', 'conditions') or []:
        if cond.get('type') == ctype:
            return cond
    return None


def _vmi_state_of(vmi, uid):
    state = _get(vmi, 'status', 'migrationState') or {}
    return state if uid and state.get('migrationUid') == uid else {}


# KubeVirt's virt-launcher (v1.8.0 live-migration-source.go processInflightMigration) aborts a transfer by itself when it
# makes no progress for progressTimeout seconds ("Live migration stuck for N seconds and has been aborted") or is not
# done within completionTimeoutPerGiB x the data size ("Live migration is not completed after N seconds and has been
# aborted"): migrationState then has failed, abortStatus Succeeded and that failureReason, and no abortRequested.
TIMEOUT_ABORT_MARKS = ('Live migration stuck for ', 'Live migration is not completed after ')


def abort_was_requested(vmim, states):
    """Someone asked for the abort: the VMIM is being deleted, carries KubeVirt's migrationAbortRequested condition
    (virt-controller writes the type with a lower-case m; the emulation with a capital), or a migrationState says
    abortRequested (virt-controller's markMigrationAbortInVmiStatus)."""
    if _get(vmim, 'metadata', 'deletionTimestamp'):
        return True
    if any((cond.get('type') or '').lower() == 'migrationabortrequested' for cond in _get(vmim, 'status', 'conditions') or []):
        return True
    return any(state.get('abortRequested') for state in states)


def timed_out_by_itself(states):
    """KubeVirt's own time-out abort: an abortStatus with one of virt-launcher's time-out failureReasons."""
    return any(state.get('abortStatus') and str(state.get('failureReason') or '').startswith(TIMEOUT_ABORT_MARKS) for state in states)


def failure_kind(vmim, vmi, uid=None):
    """Why a VMIM failed, as the phase machine's fields: 'aborted', 'timeout', 'vm', 'pending', 'target', 'source' (None
    when not failed). 'timeout' is KubeVirt's own abort of a stalled or too long transfer that nobody requested."""
    uid = uid or _get(vmim, 'metadata', 'uid')
    vstate = _vmi_state_of(vmi, uid)
    mstate = _get(vmim, 'status', 'migrationState') or {}
    states = (mstate, vstate)
    if vmim is None:
        if vstate.get('completed') and not vstate.get('failed'):
            return None
        if vstate.get('failed') and not vstate.get('abortRequested') and timed_out_by_itself((vstate,)):
            return 'timeout'    # the object went (garbage-collected) after KubeVirt's own time-out abort
        return 'aborted'    # the migration object was deleted: KubeVirt's abort
    if kubevirt_phase(vmim) != migration.FAILED:
        return None
    if abort_was_requested(vmim, states):
        return 'aborted'
    if timed_out_by_itself(states):
        return 'timeout'
    if mstate.get('abortStatus') or vstate.get('abortStatus'):
        return 'aborted'    # the source's job was aborted by a client nobody here knows of (not a time-out)
    if vmi is None or _get(vmi, 'status', 'phase') in ('Succeeded', 'Failed') or _get(vmi, 'metadata', 'deletionTimestamp'):
        return 'vm'
    cond = condition_of(vmim, 'PodScheduled')
    if cond is not None and cond.get('status') == 'False' and cond.get('reason') == 'Unschedulable':
        return 'pending'
    if vstate.get('startTimestamp') or mstate.get('startTimestamp'):
        return 'source'
    if never_scheduled(vmim):
        return 'pending'
    return 'target'


def never_scheduled(vmim):
    """KubeVirt's record of the VMIM (phaseTransitionTimestamps) went from Pending/Scheduling straight to Failed: its
    target pod vanished before it was ever scheduled. KubeVirt v1.8.0's virt-controller deletes a target pod that stays
    pending past its pending timeouts (``handlePendingPodTimeout``: the unschedulable one - the annotation
    pending_timeout sets - or the catch-all one) and then fails the migration with no condition saying why (seen on two
    real nodes, 2026-11-29: phases Pending, Scheduling, Failed); a record without phases says nothing."""
    phases = phases_of(vmim)
    return bool(phases) and not any(phase in phases for phase in (
        migration.SCHEDULED, migration.PREPARING_TARGET, migration.TARGET_READY, migration.RUNNING))


def failure_message(vmim, vmi=None, uid=None):
    """The message KubeVirt gave for a failed VMIM (Failed / MigrationAbortRequested condition, else the failureReason
    virt-handler wrote into its migrationState, e.g. QEMU's own error on the source), or None. The VMIM's copy of the
    migrationState is written by virt-controller after the VMIM is final (it may lag its phase), so the VMI's state of
    the same migration (``uid``) is read too."""
    for ctype in ('Failed', 'MigrationAbortRequested', 'PodScheduled'):
        cond = condition_of(vmim, ctype)
        if cond is not None and cond.get('message'):
            return '%s: %s' % (cond.get('reason') or ctype, cond['message'])
    reason = (_get(vmim, 'status', 'migrationState') or {}).get('failureReason') \
        or _vmi_state_of(vmi, uid or _get(vmim, 'metadata', 'uid')).get('failureReason')
    if reason:
        return 'failureReason: %s' % reason
    return None


def observation(phase, vmim, vmi, uid=None, vmim_gone=False):
    """The :class:`MigrationObservation` of a VMIM (None when it vanished) and its VMI."""
    uid = uid or _get(vmim, 'metadata', 'uid')
    vstate = _vmi_state_of(vmi, uid)
    kphase = kubevirt_phase(vmim) if vmim is not None else ''
    if vmim is None and vmim_gone:
        kphase = migration.SUCCEEDED if vstate.get('completed') and not vstate.get('failed') else migration.FAILED
    kind = failure_kind(vmim, vmi, uid) if kphase == migration.FAILED or vmim is None else None
    mstate = _get(vmim, 'status', 'migrationState') or {}
    vm_running = vmi is not None and _get(vmi, 'status', 'phase') not in ('Succeeded', 'Failed') \
        and not _get(vmi, 'metadata', 'deletionTimestamp')
    return migration.MigrationObservation(
        phase=phase,
        vm_running=vm_running and kind != 'vm',
        target_exists=_reached(kphase, migration.SCHEDULING) or bool(mstate.get('targetPod')),
        target_ready=_reached(kphase, migration.SCHEDULED),
        target_node_known=_reached(kphase, migration.PREPARING_TARGET) or bool(vstate.get('targetNode')),
        target_address_known=_reached(kphase, migration.TARGET_READY) or bool(vstate.get('targetNodeAddress')),
        transfer_started=_reached(kphase, migration.RUNNING) or bool(vstate.get('startTimestamp')),
        transfer_completed=kphase == migration.SUCCEEDED,
        target_failed=kind == 'target',
        # a VMIM that ended Failed (or vanished unfinished) after an abort is the source's answer to it: the transfer is over
        source_failed=kind in ('source', 'timeout') or (kind == 'aborted' and kphase == migration.FAILED),
        transfer_timed_out=kind == 'timeout',
        abort_requested=kind == 'aborted' or bool(_get(vmim, 'metadata', 'deletionTimestamp')),
        pending_seconds=1.0 if kind == 'pending' else 0.0,
        pending_timeout=0.0 if kind == 'pending' else 300.0,
    )


def migration_reason(vmim, vmi):
    """The phase machine's failure reason of a final VMIM (None when it succeeded)."""
    if kubevirt_phase(vmim) != migration.FAILED:
        return None
    _phase, reason, _path = migration.run_to_phase(observation(migration.UNSET, vmim, vmi))
    return reason or migration.SOURCE_FAILED


def progress_of(vmim, vmi):
    """Timestamps, nodes and mode of a migration (KubeVirt reports no byte counts in its objects)."""
    uid = _get(vmim, 'metadata', 'uid')
    state = dict(_get(vmim, 'status', 'migrationState') or {})
    state.update(_vmi_state_of(vmi, uid))
    start, end = _ts(state.get('startTimestamp')), _ts(state.get('endTimestamp'))
    out = {'mode': state.get('mode'), 'started_at': state.get('startTimestamp'), 'ended_at': state.get('endTimestamp'),
           'source_node': state.get('sourceNode'), 'target_node': state.get('targetNode'), 'target_pod': state.get('targetPod'),
           'abort_status': state.get('abortStatus'), 'completed': state.get('completed'), 'failed': state.get('failed')}
    if start is not None:
        out['time_elapsed'] = int(max(0.0, ((end if end is not None else time.time()) - start)) * 1000)
    return out


def phases_of(vmim):
    """The phases KubeVirt recorded for a VMIM (phaseTransitionTimestamps), in order."""
    return [t.get('phase') for t in _get(vmim, 'status', 'phaseTransitionTimestamps') or [] if t.get('phase')]


def migrations_of(client, namespace, vmi_name=None):
    """VMIMs of ``namespace`` (of one VMI when given), oldest first."""
    items = client.list(KUBEVIRT_API, namespace, VMIM)
    if vmi_name is not None:
        items = [m for m in items if _get(m, 'spec', 'vmiName') == vmi_name]
    return sorted(items, key=lambda m: (_get(m, 'metadata', 'creationTimestamp') or '', _get(m, 'metadata', 'name') or ''))


def in_flight(vmims):
    """The VMIMs that are not final (the newest last)."""
    return [m for m in vmims if kubevirt_phase(m) not in migration.FINAL]


def migration_entry(vmim, vmi):
    """One VMIM as migration_info reports it."""
    kphase = kubevirt_phase(vmim)
    prog = progress_of(vmim, vmi)
    final = kphase in migration.FINAL
    reason = migration_reason(vmim, vmi) if final else None
    outcome = None
    if final:
        outcome = 'succeeded' if kphase == migration.SUCCEEDED else ('aborted' if reason == migration.ABORTED else 'failed')
    transitions = _get(vmim, 'status', 'phaseTransitionTimestamps') or []
    return {'id': vmim['metadata']['name'], 'uid': vmim['metadata'].get('uid'), 'phase': kphase or migration.PENDING,
            'phases': phases_of(vmim), 'reason': reason, 'outcome': outcome, 'message': failure_message(vmim, vmi) if kphase == migration.FAILED else None,
            'source': prog.get('source_node'), 'target': prog.get('target_node'), 'mode': prog.get('mode'),
            'created_at': _get(vmim, 'metadata', 'creationTimestamp'), 'started_at': prog.get('started_at'),
            'finished_at': prog.get('ended_at') or (transitions[-1].get('phaseTransitionTimestamp') if final and transitions else None),
            'task_id': (_get(vmim, 'metadata', 'labels') or {}).get(TASK_LABEL), 'deleting': bool(_get(vmim, 'metadata', 'deletionTimestamp')),
            'progress': prog}


def migrations_info(client, namespace, names=None):
    """In-flight and recent migrations per VM of ``namespace``."""
    snapshot = kobserve.NamespaceSnapshot(client, namespace)
    by_vmi = {}
    for vmim in migrations_of(client, namespace):
        by_vmi.setdefault(_get(vmim, 'spec', 'vmiName'), []).append(vmim)
    out = []
    for name in sorted(n for n in by_vmi if n):
        if names and name not in names:
            continue
        obs = snapshot.observe(name)
        vmi = snapshot.vmis.get(name)
        entries = [migration_entry(m, vmi) for m in by_vmi[name]]
        flying = [e for e in entries if e['outcome'] is None]
        recent = [e for e in entries if e['outcome'] is not None][-HISTORY_LENGTH:]
        out.append({'name': name, 'namespace': namespace, 'exists': obs['exists'], 'vm_state': obs.get('vm_state'),
                    'task_state': obs.get('task_state'), 'power_state': obs.get('power_state'), 'status': obs.get('status'),
                    'node': _get(vmi, 'status', 'nodeName'), 'in_flight': flying[-1] if flying else None, 'recent': recent,
                    'last': recent[-1] if recent else None})
    return out
