# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""State words and the observed axes: power_state and phase.

Sources: Nova ``compute/power_state.py``, ``vm_states.py``, ``task_states.py``
(seeds 002 and 004); KubeVirt ``pkg/virt-handler/vm.go`` ``getVMIPhaseFromDomain``
(seed 000, second table). Where seed 000 and the upstream code disagree (the
ACPI rule for a destroyed domain) the upstream code is followed.

Everything here is pure and backend-neutral: no libvirt or kubernetes import and no backend's
words. A backend translates its own numbers, words or objects into these records first (libvirt's
domain states: ``_libvirt/domain_state.py``).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Optional

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

# ---------------------------------------------------- observed power, neutral
# What a backend observed of a guest's power: power_state (one of POWER_STATES) and the backend's own state and
# reason words, kept for the view. Each backend translates its words at its boundary (libvirt: _libvirt/domain_state.py).
PowerObservation = namedtuple('PowerObservation', ['power_state', 'state', 'reason'])


def graceful_stop_tried(acpi: Any, grace_period: Optional[float] = None) -> bool:
    """KubeVirt ``isACPIEnabled``: a graceful shutdown was tried before a destroy.

    True when the domain has ACPI and the termination grace period is above zero. ``grace_period`` None means not
    known: KubeVirt then uses its default grace period (30 s), so an ACPI domain counts as tried.
    """
    return bool(acpi) and (grace_period is None or grace_period > 0)


def phase_without_domain(host_reachable: bool, launcher_present: bool = True, final: bool = False, previous: str = PHASE_UNSET) -> str:
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


def is_final(phase: Optional[str]) -> bool:
    """True for the phases an instance never leaves (Succeeded, Failed)."""
    return phase in FINAL_PHASES


def infer_vm_state(power_state: str, managed_save: bool = False) -> str:
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
