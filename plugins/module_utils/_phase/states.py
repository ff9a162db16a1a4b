# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State words and the observed axes: power_state and phase.

Sources: Nova ``compute/power_state.py``, ``vm_states.py``, ``task_states.py``
(seeds 002 and 004); KubeVirt ``pkg/virt-handler/vm.go`` ``getVMIPhaseFromDomain``
(seed 000, second table). Where seed 000 and the upstream code disagree (the
ACPI rule for a destroyed domain) the upstream code is followed.

Everything here is pure: no libvirt or kubernetes import. libvirt's numeric
states and reasons are repeated as data so that the tables can be tested
without the binding installed.
"""

from __future__ import annotations

from collections import namedtuple

# ---------------------------------------------------------------- power_state
NOSTATE = 'NOSTATE'
RUNNING = 'RUNNING'
PAUSED = 'PAUSED'
SHUTDOWN = 'SHUTDOWN'
CRASHED = 'CRASHED'
SUSPENDED = 'SUSPENDED'
POWER_STATES = (NOSTATE, RUNNING, PAUSED, SHUTDOWN, CRASHED, SUSPENDED)

# ------------------------------------------------------------------- vm_state
ACTIVE = 'ACTIVE'
BUILDING = 'BUILDING'
INITIALIZED = 'INITIALIZED'
STOPPED = 'STOPPED'
VM_PAUSED = 'PAUSED'
VM_SUSPENDED = 'SUSPENDED'
RESCUED = 'RESCUED'
RESIZED = 'RESIZED'
SOFT_DELETED = 'SOFT_DELETED'
DELETED = 'DELETED'
ERROR = 'ERROR'
VM_STATES = (ACTIVE, BUILDING, INITIALIZED, STOPPED, VM_PAUSED, VM_SUSPENDED, RESCUED, RESIZED, SOFT_DELETED, DELETED, ERROR)

# ----------------------------------------------------------------- task_state
# A verb + "ing"; None when idle (seed 004 lists Nova's full set; these are
# the ones a converge task can hold).
TASK_STATES = (
    'SPAWNING', 'STARTING', 'STOPPING', 'REBOOTING', 'PAUSING', 'UNPAUSING', 'SUSPENDING', 'RESUMING',
    'MIGRATING', 'RESIZING', 'UPDATING', 'DELETING', 'RESTORING', 'REBUILDING',
)

# ---------------------------------------------------------------------- phase
PHASE_UNSET = ''
PENDING = 'Pending'
SCHEDULING = 'Scheduling'
SCHEDULED = 'Scheduled'
PHASE_RUNNING = 'Running'
SUCCEEDED = 'Succeeded'
FAILED = 'Failed'
UNKNOWN = 'Unknown'
PHASES = (PHASE_UNSET, PENDING, SCHEDULING, SCHEDULED, PHASE_RUNNING, SUCCEEDED, FAILED, UNKNOWN)
FINAL_PHASES = (SUCCEEDED, FAILED)

# ---------------------------------------------------- libvirt states, as data
# virDomainState
LIBVIRT_STATES = {
    0: 'nostate', 1: 'running', 2: 'blocked', 3: 'paused', 4: 'shutdown', 5: 'shutoff', 6: 'crashed', 7: 'pmsuspended',
}
# Reasons per state (virDomainRunningReason, virDomainPausedReason, ...).
LIBVIRT_REASONS = {
    'nostate': {0: 'unknown'},
    'running': {
        0: 'unknown', 1: 'booted', 2: 'migrated', 3: 'restored', 4: 'from_snapshot', 5: 'unpaused',
        6: 'migration_canceled', 7: 'save_canceled', 8: 'wakeup', 9: 'crashed', 10: 'postcopy', 11: 'postcopy_failed',
    },
    'blocked': {0: 'unknown'},
    'paused': {
        0: 'unknown', 1: 'user', 2: 'migration', 3: 'save', 4: 'dump', 5: 'ioerror', 6: 'watchdog', 7: 'from_snapshot',
        8: 'shutting_down', 9: 'snapshot', 10: 'crashed', 11: 'starting_up', 12: 'postcopy', 13: 'postcopy_failed',
        14: 'api_error',
    },
    'shutdown': {0: 'unknown', 1: 'user'},
    'shutoff': {
        0: 'unknown', 1: 'shutdown', 2: 'destroyed', 3: 'crashed', 4: 'migrated', 5: 'saved', 6: 'failed',
        7: 'from_snapshot', 8: 'daemon',
    },
    'crashed': {0: 'unknown', 1: 'panicked'},
    'pmsuspended': {0: 'unknown'},
}

# Nova power_state.py: BLOCKED is RUNNING, SHUTDOWN (shutting down) and SHUTOFF
# are SHUTDOWN, PMSUSPENDED is SUSPENDED, FAILED/unknown is NOSTATE.
POWER_STATE_OF_LIBVIRT_STATE = {
    'nostate': NOSTATE,
    'running': RUNNING,
    'blocked': RUNNING,
    'paused': PAUSED,
    'shutdown': SHUTDOWN,
    'shutoff': SHUTDOWN,
    'crashed': CRASHED,
    'pmsuspended': SUSPENDED,
}

PowerObservation = namedtuple('PowerObservation', ['power_state', 'state', 'reason'])


def libvirt_state_words(state, reason):
    """Turn libvirt's numeric (state, reason) into words, e.g. (5, 2) -> ('shutoff', 'destroyed').

    Unknown numbers become 'nostate' / 'unknown' rather than raising: a newer
    libvirt may add reasons, and observation must never fail on them.
    """
    state_word = LIBVIRT_STATES.get(state, 'nostate') if isinstance(state, int) else str(state)
    reasons = LIBVIRT_REASONS.get(state_word, {})
    reason_word = reasons.get(reason, 'unknown') if isinstance(reason, int) else str(reason or 'unknown')
    return state_word, reason_word


def power_state_from_libvirt(state, reason=0):
    """power_state from a libvirt (state, reason) pair, keeping the reason.

    ``state`` and ``reason`` may be libvirt's integers or the words of
    :data:`LIBVIRT_STATES` / :data:`LIBVIRT_REASONS`. Returns a
    :class:`PowerObservation` (power_state, state word, reason word).
    """
    state_word, reason_word = libvirt_state_words(state, reason)
    return PowerObservation(POWER_STATE_OF_LIBVIRT_STATE.get(state_word, NOSTATE), state_word, reason_word)


# (state word, reason word or None for "any other", acpi or None for "either") -> phase.
# None as the phase means "unchanged: keep the previous phase". Order matters:
# the first matching row wins. KubeVirt virt-handler getVMIPhaseFromDomain.
DOMAIN_PHASE_TABLE = (
    (('shutoff', 'crashed'), None, FAILED),
    # libvirt's CRASHED state (reason panicked or unknown) is a crash whatever the
    # reason; KubeVirt's own reason words only name 'panicked' (extension, see docs).
    (('crashed', None), None, FAILED),
    (('shutoff', 'destroyed'), True, FAILED),       # ACPI on: graceful stop timed out, then forced
    (('shutoff', 'destroyed'), False, SUCCEEDED),   # no ACPI: destroying is the normal stop
    (('shutoff', 'shutdown'), None, SUCCEEDED),
    (('shutoff', 'saved'), None, SUCCEEDED),
    (('shutoff', 'from_snapshot'), None, SUCCEEDED),
    (('shutoff', 'migrated'), None, None),          # the domain left: we no longer know the phase
    (('paused', 'postcopy_failed'), None, FAILED),
    (('running', None), None, PHASE_RUNNING),
    (('blocked', None), None, PHASE_RUNNING),
    (('paused', None), None, PHASE_RUNNING),
    (('pmsuspended', None), None, PHASE_RUNNING),
)


def phase_from_domain(state, reason=0, acpi=True, previous=PHASE_UNSET):
    """VMI phase from a domain's (state, reason), ACPI / grace-period aware.

    A domain destroyed while ACPI was available means a graceful shutdown was
    tried and the grace period ran out: Failed. Without ACPI, destroy is the
    normal way to stop: Succeeded. A migrated-away domain keeps ``previous``.
    States and reasons the table does not name keep ``previous`` too, as
    virt-handler does.
    """
    state_word, reason_word = libvirt_state_words(state, reason)
    for (row_state, row_reason), row_acpi, phase in DOMAIN_PHASE_TABLE:
        if row_state != state_word:
            continue
        if row_reason is not None and row_reason != reason_word:
            continue
        if row_acpi is not None and row_acpi != bool(acpi):
            continue
        return previous if phase is None else phase
    return previous


def phase_without_domain(host_reachable, launcher_present=True, final=False, previous=PHASE_UNSET):
    """VMI phase when no domain exists (virt-handler, seed 000).

    - the host cannot be asked at all: Unknown;
    - the launcher (for libvirt: the daemon / the host record) is gone: Failed;
    - the instance is already final: keep ``previous``;
    - otherwise the domain is not created yet: Scheduled.
    """
    if not host_reachable:
        return UNKNOWN
    if final:
        return previous
    if not launcher_present:
        return FAILED
    return SCHEDULED


def phase_before_domain(phase, launcher_exists=False, launcher_ready=False, sync_failed=False,
                        image_pull_error=False, launcher_failed=False, deletion_requested=False):
    """Controller-side phase progression before a domain exists (virt-controller, seed 000).

    Pending/"" -> Scheduling when the launcher exists; Scheduling -> Scheduled
    when it is ready and nothing failed to sync; image pull errors keep
    Scheduling; a launcher that fails (or a deletion before start) -> Failed.
    """
    if phase in FINAL_PHASES:
        return phase
    if launcher_failed:
        return FAILED
    if phase in (PHASE_UNSET, PENDING):
        if deletion_requested:
            return FAILED
        return SCHEDULING if launcher_exists else phase or PENDING
    if phase == SCHEDULING:
        if image_pull_error or sync_failed or not launcher_ready:
            return SCHEDULING
        return SCHEDULED
    return phase


def is_final(phase):
    """True for the phases an instance never leaves (Succeeded, Failed)."""
    return phase in FINAL_PHASES


def infer_vm_state(power_state, managed_save=False):
    """vm_state for a VM the collection never tasked (no metadata yet).

    Nova builds vm_state top-down; a domain created by someone else has no
    record, so its first vm_state is read off power_state once, the way an
    operator would describe it. A managed-save image means SUSPENDED.
    """
    if power_state == SHUTDOWN and managed_save:
        return VM_SUSPENDED
    return {
        RUNNING: ACTIVE,
        PAUSED: VM_PAUSED,
        SUSPENDED: ACTIVE,
        SHUTDOWN: STOPPED,
        CRASHED: ERROR,
        NOSTATE: ERROR,
    }.get(power_state, ERROR)
