# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration phase machine (KubeVirt ``pkg/virt-controller/watch/migration.go``, seed 001).

Unset -> Pending -> Scheduling -> Scheduled -> PreparingTarget -> TargetReady
-> Running -> Succeeded, with Failed reachable from every non-final phase.
:data:`TRANSITIONS` is the graph as data; :func:`next_phase` advances one
observation at a time, first checking the failure rules of
:data:`FAILURE_RULES` in order.

Abort is the deletion of the migration object: before the hand-off of the
target to the nodes (PreparingTarget) it fails at once; after it, the source is
asked to abort and the migration ends as the source reports: Failed (aborted,
the guest keeps running on the source) or, when the transfer completed first,
Succeeded.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

UNSET = ''
PENDING = 'Pending'
SCHEDULING = 'Scheduling'
SCHEDULED = 'Scheduled'
PREPARING_TARGET = 'PreparingTarget'
TARGET_READY = 'TargetReady'
RUNNING = 'Running'
SUCCEEDED = 'Succeeded'
FAILED = 'Failed'
PHASES = (UNSET, PENDING, SCHEDULING, SCHEDULED, PREPARING_TARGET, TARGET_READY, RUNNING, SUCCEEDED, FAILED)
FINAL = (SUCCEEDED, FAILED)
ORDER = (UNSET, PENDING, SCHEDULING, SCHEDULED, PREPARING_TARGET, TARGET_READY, RUNNING, SUCCEEDED)
# KubeVirt TargetIsHandedOff: from PreparingTarget on, the nodes drive the migration.
HANDED_OFF = (PREPARING_TARGET, TARGET_READY, RUNNING)
# KubeVirt checks the target's pending timeouts while the migration is Pending or Scheduling (migration.go sync).
PENDING_TIMEOUT_PHASES = (PENDING, SCHEDULING)
# KubeVirt's defaults: an unschedulable target pod, and a target pod pending for any other reason.
UNSCHEDULABLE_TIMEOUT_SECONDS = 300.0
PENDING_TIMEOUT_SECONDS = 900.0

# phase -> the phases it may move to (Failed from any non-final phase).
TRANSITIONS = {
    UNSET: (PENDING, FAILED),
    PENDING: (SCHEDULING, FAILED),
    SCHEDULING: (SCHEDULED, FAILED),
    SCHEDULED: (PREPARING_TARGET, FAILED),
    PREPARING_TARGET: (TARGET_READY, FAILED),
    TARGET_READY: (RUNNING, FAILED),
    RUNNING: (SUCCEEDED, FAILED),
    SUCCEEDED: (),
    FAILED: (),
}

# Failure reasons, as reported to the user.
VM_GONE = 'the VM is gone or no longer running'
TARGET_FAILED = 'the target died or vanished'
SUPERSEDED = 'another migration of this VM took over'
SOURCE_FAILED = 'the source reported the migration failed'
PENDING_TIMEOUT = 'the target stayed pending too long'
UNSCHEDULABLE_TIMEOUT = 'the target stayed unschedulable too long'
ABORTED = 'aborted'
# the hypervisor's side gave up by itself, nobody asked (KubeVirt's progressTimeout / completionTimeoutPerGiB)
TRANSFER_TIMED_OUT = 'the transfer timed out'
DRAINING_TARGET = 'the target host is being drained'


class MigrationObservation(NamedTuple):
    """What is known of one migration now. Defaults describe a healthy one."""

    phase: str = UNSET
    vm_running: bool = True             # the VM exists and its instance is not final
    target_exists: bool = False         # target created (libvirt: destination connection opened)
    target_ready: bool = False          # target checked and accepts (Scheduled)
    target_node_known: bool = False     # PreparingTarget
    target_address_known: bool = False  # TargetReady (libvirt: Prepare done)
    target_failed: bool = False
    target_draining: bool = False
    transfer_started: bool = False      # the source's job is active
    transfer_completed: bool = False    # job completed and the guest runs on the target
    source_failed: bool = False
    transfer_timed_out: bool = False    # the source aborted the transfer by its own timeout, not on request
    superseded: bool = False
    abort_requested: bool = False
    pending_seconds: float = 0.0        # how long the target has been pending (KubeVirt: the target pod's age)
    pending_timeout: float = PENDING_TIMEOUT_SECONDS
    target_unschedulable: bool = False  # the target is pending because it cannot be scheduled
    unschedulable_timeout: float = UNSCHEDULABLE_TIMEOUT_SECONDS


def _failure(obs: MigrationObservation) -> Optional[str]:
    # Order follows migration.go updateStatus: the VM first, an abort before hand-off, then the target, another
    # migration, the source; the pending timeouts come from sync() (they delete the pending target).
    if not obs.vm_running and not (obs.phase == RUNNING and obs.transfer_completed):
        return VM_GONE
    if obs.abort_requested and obs.phase not in HANDED_OFF:
        return ABORTED
    if obs.target_draining and obs.phase != RUNNING:
        return DRAINING_TARGET
    if obs.target_failed:
        return TARGET_FAILED
    if obs.superseded:
        return SUPERSEDED
    if obs.source_failed:
        if obs.abort_requested:
            return ABORTED
        return TRANSFER_TIMED_OUT if obs.transfer_timed_out else SOURCE_FAILED
    if obs.abort_requested and not obs.transfer_started:
        # handed off but no transfer runs (any more): nothing is left to stop, the abort took effect
        return ABORTED
    if obs.phase in PENDING_TIMEOUT_PHASES:
        if obs.target_unschedulable and obs.pending_seconds >= obs.unschedulable_timeout:
            return UNSCHEDULABLE_TIMEOUT
        if obs.pending_seconds >= obs.pending_timeout:
            return PENDING_TIMEOUT
    return None


def walk(start: str, end: str) -> List[str]:
    """The phases crossed going from ``start`` to ``end`` along the first edge of TRANSITIONS (``end`` included).

    next_phase may jump several edges at once; the modules report each phase on the way.
    """
    crossed, step = [], start
    while step != end and TRANSITIONS.get(step):
        step = TRANSITIONS[step][0]
        crossed.append(step)
    return crossed


def next_phase(obs: MigrationObservation) -> Tuple[str, Optional[str]]:
    """Advance by one observation; return ``(phase, failure_reason or None)``.

    A final phase never changes. Failure rules are checked first. Otherwise
    the phase moves forward as far as the observation allows, one edge of
    :data:`TRANSITIONS` at a time (the result is always reachable). An abort
    requested after the hand-off waits for the source while a transfer runs
    (it completes: Succeeded; the source stops it: Failed, aborted).
    """
    if obs.phase in FINAL:
        return obs.phase, None
    reason = _failure(obs)
    if reason:
        return FAILED, reason
    phase = obs.phase
    gates = {
        UNSET: True,
        PENDING: obs.target_exists,
        SCHEDULING: obs.target_ready,
        SCHEDULED: obs.target_node_known,
        PREPARING_TARGET: obs.target_address_known,
        TARGET_READY: obs.transfer_started,
        RUNNING: obs.transfer_completed,
    }
    while phase in gates and gates[phase]:
        phase = TRANSITIONS[phase][0]
    return phase, None


def abort_plan(phase: str) -> str:
    """What aborting (deleting the migration) does in ``phase`` (KubeVirt migration.go updateStatus).

    Returns 'nothing' for a final migration, 'fail' before the hand-off
    (:data:`HANDED_OFF`), 'ask source to abort' after it: the guest keeps
    running on the source unless the transfer completes first.
    """
    if phase in FINAL:
        return 'nothing'
    if phase in HANDED_OFF:
        return 'ask source to abort'
    return 'fail'


def may_start(vm_state: str, task_state: Optional[str], other_migration_phase: Optional[str] = None) -> bool:
    """Only one migration per VM at a time, and only from ACTIVE or PAUSED with no task."""
    if other_migration_phase is not None and other_migration_phase not in FINAL:
        return False
    return vm_state in ('ACTIVE', 'PAUSED') and task_state is None


def run_to_phase(obs: MigrationObservation, max_steps: int = 16) -> Tuple[str, Optional[str], List[str]]:
    """Apply :func:`next_phase` until it settles; return (phase, reason, path)."""
    path = [obs.phase]
    reason: Optional[str] = None
    current = obs
    for _step in range(max_steps):
        phase, reason = next_phase(current)
        if phase == current.phase:
            break
        path.append(phase)
        current = current._replace(phase=phase)
        if phase in FINAL:
            break
    return current.phase, reason, path
