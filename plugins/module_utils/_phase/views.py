# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The backend-neutral part of every VM view: the effective vm_state, stale-task recovery, the absent VM.

Each backend reads its own objects into state words (``_libvirt/views.py``,
``_kubevirt/views.py``) and builds on these, so a word the inventory reports is
the word a module returns. Pure: the backend passes what it read.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile, tasks
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

# recorded vm_states that the hypervisor's word never overrides
STICKY_VM_STATES = (s.ERROR, s.RESCUED, s.RESIZED, s.SOFT_DELETED, s.BUILDING)


def effective_vm_state(recorded: Optional[str], power_state: str, managed_save: bool = False, task_state: Optional[str] = None) -> str:
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


def stale_recovery(record: tasks.TaskRecord, power_state: str, managed_save: bool = False) -> Tuple[reconcile.Recovery, str]:
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

    def as_dict(self) -> Dict[str, Any]:
        """The ``recovered`` entry of a vm result."""
        return {'recovered_task': self.record.task_state, 'recovered_task_id': self.record.task_id, 'recovery': self.recovery.action,
                'vm_state': self.vm_state, 'reason': self.reason}

    def note(self, dry_run: bool = False) -> str:
        """One line for a result's notes."""
        if dry_run:
            return 'would recover the stale task %s (%s): %s' % (self.record.task_id, self.record.task_state, self.reason)
        return 'recovered the stale task %s (%s, %s): %s' % (self.record.task_id, self.record.task_state, self.recovery.action, self.reason)


def clear_stale(store: tasks.TaskStore, power_state: str, now: float, run_gone: Callable[[Optional[str]], bool], name: str = 'vm',
                managed_save: bool = False, dry_run: bool = False) -> Optional[StaleTaskCleared]:
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


def absent_view() -> Dict[str, Any]:
    """The words for a VM that does not exist."""
    return {'power_state': s.NOSTATE, 'state': None, 'state_reason': None, 'vm_state': s.DELETED, 'effective_vm_state': s.DELETED,
            'task_state': None, 'task_id': None, 'status': None, 'phase': None, 'phase_reason': None}
