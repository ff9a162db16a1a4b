# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State words and the observed axes: power_state and phase.

Sources: Nova ``compute/power_state.py``, ``vm_states.py``, ``task_states.py``
(seeds 002 and 004); KubeVirt ``pkg/virt-handler/vm.go`` ``getVMIPhaseFromDomain``
(seed 000, second table). Where seed 000 and the upstream code disagree (the
ACPI rule for a destroyed domain) the upstream code is followed.

Everything here is pure: no libvirt or kubernetes import. A domain's state and
reason are words here; a backend translates its own numbers or objects first.
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
    'SPAWNING', 'STARTING', 'STOPPING', 'REBOOTING', 'REBOOTING_HARD', 'PAUSING', 'UNPAUSING', 'SUSPENDING', 'RESUMING',
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
WAITING_FOR_SYNC = 'WaitingForSync'     # a receiver of a decentralized migration waits for its source
PHASES = (PHASE_UNSET, PENDING, SCHEDULING, SCHEDULED, PHASE_RUNNING, SUCCEEDED, FAILED, UNKNOWN, WAITING_FOR_SYNC)
FINAL_PHASES = (SUCCEEDED, FAILED)

# ---------------------------------------------------- domain states, as words
# A domain's state and reason are words: libvirt's virDomainState names (running, shutoff, ...) and their
# reasons (booted, destroyed, ...), which KubeVirt's virt-launcher reports too. A backend that reads numbers
# turns them into these words first (the libvirt backend: _libvirt/views.py).

# Nova power_state.py: BLOCKED is RUNNING, SHUTDOWN (shutting down) and SHUTOFF
# are SHUTDOWN, PMSUSPENDED is SUSPENDED, FAILED/unknown is NOSTATE.
POWER_STATE_OF_DOMAIN_STATE = {
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


def domain_state_words(state, reason=None):
    """A domain's (state, reason) as words: ``reason`` None or empty is 'unknown'."""
    return str(state), str(reason or 'unknown')


def power_state_from_domain(state, reason=None):
    """power_state from a domain's (state word, reason word), keeping the reason.

    Returns a :class:`PowerObservation` (power_state, state word, reason word);
    a state word the Nova table does not name is NOSTATE.
    """
    state_word, reason_word = domain_state_words(state, reason)
    return PowerObservation(POWER_STATE_OF_DOMAIN_STATE.get(state_word, NOSTATE), state_word, reason_word)


# (state word, reason word or None for "any other"), graceful stop tried (True / False / None for
# "either"), phase (None: unchanged, keep the previous phase), why (shown as phase_reason). Order matters:
# the first matching row wins. KubeVirt virt-handler calculateVmPhaseForStatusReason (pkg/virt-handler/vm.go).
DOMAIN_PHASE_TABLE = (
    (('shutoff', 'crashed'), None, FAILED, 'the guest crashed'),
    # libvirt's CRASHED state (reason panicked or unknown) is a crash whatever the reason; KubeVirt fails only
    # the reasons it names (Crashed, Panicked) and keeps the phase for crashed/unknown (deviation, see docs).
    (('crashed', None), None, FAILED, 'the guest crashed'),
    (('shutoff', 'destroyed'), True, FAILED,
     'forced off (destroyed) after a graceful shutdown (ACPI) did not finish within the grace period'),
    (('shutoff', 'destroyed'), False, SUCCEEDED, 'powered off at once: no graceful shutdown was asked for (no ACPI or no grace period)'),
    (('shutoff', 'shutdown'), None, SUCCEEDED, 'the guest shut down'),
    (('shutoff', 'saved'), None, SUCCEEDED, 'the guest state was saved to disk'),
    (('shutoff', 'from_snapshot'), None, SUCCEEDED, 'stopped by reverting to a snapshot'),
    (('shutoff', 'migrated'), None, None, 'the domain migrated away: the phase is the one it had'),
    (('paused', 'postcopy_failed'), None, FAILED, 'a post-copy migration failed: the guest cannot be recovered'),
    (('running', None), None, PHASE_RUNNING, None),
    (('blocked', None), None, PHASE_RUNNING, None),
    (('paused', None), None, PHASE_RUNNING, None),
    (('pmsuspended', None), None, PHASE_RUNNING, None),
)

# The reason shown while the graceful-stop attempt is not known (a destroyed ACPI domain whose record does not say
# how it was stopped): KubeVirt's default (a grace period is set) reads it as Failed.
DESTROYED_GRACE_UNKNOWN = ('forced off (destroyed) while ACPI was available: read as a graceful shutdown that did not finish in '
                           'time (KubeVirt\'s rule when the grace period is not known)')


def graceful_stop_tried(acpi, grace_period=None):
    """KubeVirt ``isACPIEnabled``: a graceful shutdown was tried before a destroy.

    True when the domain has ACPI and the termination grace period is above zero. ``grace_period`` None means not
    known: KubeVirt then uses its default grace period (30 s), so an ACPI domain counts as tried.
    """
    return bool(acpi) and (grace_period is None or grace_period > 0)


def _domain_row(state, reason, acpi, grace_period):
    state_word, reason_word = domain_state_words(state, reason)
    tried = graceful_stop_tried(acpi, grace_period)
    for row in DOMAIN_PHASE_TABLE:
        (row_state, row_reason), row_tried = row[0], row[1]
        if row_state == state_word and row_reason in (None, reason_word) and row_tried in (None, tried):
            return row
    return None


def phase_from_domain(state, reason=None, acpi=True, previous=PHASE_UNSET, grace_period=None):
    """VMI phase from a domain's (state, reason), grace-period aware (KubeVirt calculateVmPhaseForStatusReason).

    A domain destroyed after a graceful shutdown was tried (ACPI and a grace period above zero) means the grace
    period ran out: Failed. With no graceful attempt (no ACPI, or ``grace_period`` 0: an immediate power-off)
    destroy is the normal way to stop: Succeeded. A migrated-away domain keeps ``previous``; so do states and
    reasons the table does not name, as virt-handler does.
    """
    row = _domain_row(state, reason, acpi, grace_period)
    if row is None or row[2] is None:
        return previous
    return row[2]


def domain_phase_reason(state, reason=None, acpi=True, grace_period=None):
    """Why :func:`phase_from_domain` gives its phase, in words (None for a live domain or an unnamed state).

    For a destroyed ACPI domain whose grace period is not known the reason says that the phase is read, not known.
    """
    row = _domain_row(state, reason, acpi, grace_period)
    if row is None:
        return None
    if row[2] == FAILED and row[0] == ('shutoff', 'destroyed') and grace_period is None:
        return DESTROYED_GRACE_UNKNOWN
    return row[3]


def phase_without_domain(host_reachable, launcher_present=True, final=False, previous=PHASE_UNSET):
    """VMI phase when no domain exists (virt-handler calculateVmPhaseForStatusReason with a nil domain).

    - the host cannot be asked at all: Unknown (extension: KubeVirt has no such case);
    - an instance already Scheduled or Running keeps its phase while its launcher (for libvirt: the daemon, the
      host record) answers (a domain briefly not found is no reason to go backwards), and is Failed once the
      launcher is gone or unresponsive;
    - an instance that is already final keeps ``previous`` (``final`` says so when ``previous`` is not given);
    - otherwise the domain is not created yet: Scheduled.
    """
    if not host_reachable:
        return UNKNOWN
    if previous in (SCHEDULED, PHASE_RUNNING):
        return previous if launcher_present else FAILED
    if final or is_final(previous):
        return previous
    return SCHEDULED


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
