# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task lock protocol: at most one task acts on a VM at a time.

Nova takes a task with a compare-and-swap on the instance row
(``instance.save(expected_task_state=[None])``) and checks on every mid-task
save that the task is still its own. A backend has no database, so the record
(vm_state, task_state, task id, lease) lives with the VM itself: the libvirt
domain's ``<metadata>``, or Kubernetes annotations guarded by resourceVersion.

A backend implements :class:`TaskStore` (load a record with an opaque version,
store it only if the version is unchanged). Everything else here is shared:
taking, renewing, finishing and abandoning a task, delete preemption, and the
lease that tells a task in flight from one left behind by a killed run.
"""

from __future__ import annotations

import abc
import math
import os
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple, cast

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration, TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._phase import actions


def new_task_id() -> str:
    """A fresh task id: 16 random hex digits (every backend, every module)."""
    return os.urandom(8).hex()


DEFAULT_LEASE_SECONDS = 120.0

# The record lives with the VM, so whoever may write the VM's metadata (libvirt) or annotations (KubeVirt) can
# write any lease. A lease is trusted only as far as a real task can reach: every timeout option of every module
# is at most MAX_TIMEOUT_SECONDS (check_timeout), and the longest lease a module takes is two of them plus a
# margin (the libvirt migration: wait_timeout + completion_timeout + 120 s; a vm task: wait_timeout +
# shutdown_timeout + 30 s). A lease that is no number, not finite, or ends further ahead than MAX_LEASE_SECONDS
# plus the clock skew allowed between two controllers cannot have been written by a live task: it is stale.
MAX_TIMEOUT_SECONDS = 86400
MAX_LEASE_SECONDS = 2.0 * MAX_TIMEOUT_SECONDS + 120.0
CLOCK_SKEW_SECONDS = 300.0
LEASE_HORIZON_SECONDS = MAX_LEASE_SECONDS + CLOCK_SKEW_SECONDS


def check_timeout(field: str, value: Optional[float]) -> Optional[float]:
    """Refuse a timeout option that is negative or longer than :data:`MAX_TIMEOUT_SECONDS` (None passes); return it.

    The bound is what keeps a real task's lease inside :data:`LEASE_HORIZON_SECONDS`, past which a lease counts
    as forged (stale).
    """
    if value is None:
        return value
    if value < 0:
        raise InvalidDeclaration(field, 'must be 0 or more, got %r' % (value,))
    if value > MAX_TIMEOUT_SECONDS:
        raise InvalidDeclaration(field, 'must be at most %d seconds (one day: a task record\'s lease is bounded by the longest task), got %r'
                                 % (MAX_TIMEOUT_SECONDS, value))
    return value


def lease_stale_reason(lease_until: Any, now: float) -> Optional[str]:
    """Why a recorded lease (a number, its text as stored, or None) no longer holds at ``now``; None while it holds.

    A missing or unreadable lease counts as over: nobody can prove the task is alive. So does a lease that no
    task of this collection can have written: not a finite number (NaN, inf), or ending more than
    :data:`LEASE_HORIZON_SECONDS` after ``now`` (the longest task plus the allowed clock skew).
    """
    if lease_until is None or lease_until == '':
        return 'no lease is recorded'
    try:
        until = float(lease_until)
    except (TypeError, ValueError):
        return 'the lease %r is not a number' % (lease_until,)
    if not math.isfinite(until):
        return 'the lease %r is not a finite number' % (lease_until,)
    if until > now + LEASE_HORIZON_SECONDS:
        return ('the lease ends %.0f s from now, further ahead than the longest possible task (%.0f s with clock skew): '
                'no task of this collection wrote it' % (until - now, LEASE_HORIZON_SECONDS))
    if until < now:
        return 'the lease ran out %.1f s ago' % (now - until)
    return None


def lease_expired(lease_until: Any, now: float) -> bool:
    """True when a recorded lease (a number, its text as stored in metadata, or None) no longer holds at ``now``.

    See :func:`lease_stale_reason`: missing, unreadable, non-finite and impossibly long leases count as expired.
    """
    return lease_stale_reason(lease_until, now) is not None


class TaskRecord(NamedTuple):
    """The collection's record on a VM. ``task_state`` None means idle."""

    vm_state: str
    task_state: Optional[str] = None
    task_id: Optional[str] = None
    action: Optional[str] = None
    started_at: Optional[float] = None
    lease_until: Optional[float] = None
    previous_vm_state: Optional[str] = None
    owner: Optional[str] = None

    def idle(self) -> bool:
        """True when no task is recorded."""
        return self.task_state is None

    def stale(self, now: float) -> bool:
        """True when a task is recorded but its lease no longer holds (ran out, or is one no task can have written)."""
        return not self.idle() and lease_expired(self.lease_until, now)

    def stale_reason(self, now: float, run_gone: bool = False) -> Optional[str]:
        """Why the recorded task is stale, or None (idle, or its lease holds).

        ``run_gone``: the backend knows the run that holds it is dead (its owner process on this host is gone).
        Otherwise the lease decides (see :func:`lease_stale_reason`).
        """
        if self.idle():
            return None
        if run_gone:
            return 'the run that held it (%s) is gone' % self.owner
        return lease_stale_reason(self.lease_until, now)


def record_fields(record: TaskRecord, last_action: Optional[str] = None) -> Dict[str, Optional[str]]:
    """The text a backend stores for ``record`` (the libvirt metadata's fields, the KubeVirt annotations' values), None where
    nothing is recorded. ``last_action``: kept as ``last_action`` when the record has no action (an idle record)."""
    return {
        'vm_state': record.vm_state, 'task_state': record.task_state, 'task_id': record.task_id,
        'last_action': record.action or last_action,
        'task_started_at': repr(record.started_at) if record.started_at is not None else None,
        'lease_until': repr(record.lease_until) if record.lease_until is not None else None,
        'previous_vm_state': record.previous_vm_state, 'owner': record.owner,
    }


def stored_number(value: Any) -> Optional[float]:
    """A number as a backend stored it (text), or None when absent, empty or no number."""
    try:
        return float(value) if value not in (None, '') else None
    except (TypeError, ValueError):
        return None


def record_from_fields(fields: Mapping[str, Any], vm_state: Optional[str] = None) -> TaskRecord:
    """The :class:`TaskRecord` of stored ``fields`` (those of :func:`record_fields`; empty text counts as absent).

    ``vm_state``: the state when none is stored (None keeps it None: the backend decides). The action counts only while a
    task is recorded (an idle record's ``last_action`` is history).
    """
    return TaskRecord(
        vm_state=cast(str, fields.get('vm_state') or vm_state), task_state=fields.get('task_state') or None,
        task_id=fields.get('task_id') or None, action=fields.get('last_action') if fields.get('task_state') else None,
        started_at=stored_number(fields.get('task_started_at')), lease_until=stored_number(fields.get('lease_until')),
        previous_vm_state=fields.get('previous_vm_state') or None, owner=fields.get('owner') or None)


class TaskStore(abc.ABC):
    """What a backend provides: a record with a version, and a compare-and-swap."""

    @abc.abstractmethod
    def load(self) -> Tuple[TaskRecord, Any]:
        """Return ``(TaskRecord, version)``; version is opaque to the caller."""

    @abc.abstractmethod
    def compare_and_swap(self, expected_version: Any, record: TaskRecord) -> bool:
        """Store ``record`` only if the stored version is still ``expected_version``.

        Return True when stored, False when somebody else wrote in between.
        """


class TaskPreempted(TaskConflict):
    """Our task is no longer the recorded one (a delete or a recovery took over)."""


def take_task(store: TaskStore, action: str, task_id: str, now: float, lease_seconds: float = DEFAULT_LEASE_SECONDS,
              owner: Optional[str] = None, name: str = 'vm') -> TaskRecord:
    """Take the VM for ``action``; return the stored :class:`TaskRecord`.

    - A live task of somebody else: :class:`TaskConflict` (delete preempts it).
    - A stale task (lease ran out) is reported as a conflict too, unless the
      action is delete: the caller runs stale-task recovery first (see
      :mod:`.reconcile`) and then takes the task.
    - The action table is checked against the recorded vm_state:
      :class:`TransitionRefused` names the state.
    - The write is a compare-and-swap; losing it is a :class:`TaskConflict`.
    """
    _check_lease_seconds(lease_seconds)
    record, version = store.load()
    if not record.idle() and action != 'delete':
        raise TaskConflict(name, record.task_id, record.task_state, stale=record.stale(now), action=record.action)
    # only a delete gets here with a task recorded (the check above): the action table decides whether it may preempt it
    row = actions.check_action(action, record.vm_state, record.task_state)
    new = record._replace(task_state=row.task_state or 'UPDATING', task_id=task_id, action=action, started_at=now,
                          lease_until=now + lease_seconds, owner=owner,
                          previous_vm_state=record.vm_state if action in ('suspend', 'resize') else record.previous_vm_state)
    if not store.compare_and_swap(version, new):
        latest, _version = store.load()
        raise TaskConflict(name, latest.task_id, latest.task_state, lost_race=True)
    return new


def _check_lease_seconds(lease_seconds: float) -> None:
    # a longer lease would be read as forged by every other run (lease_stale_reason): never write one
    if not 0 < lease_seconds <= MAX_LEASE_SECONDS:
        raise InvalidDeclaration('lease_seconds', 'must be more than 0 and at most %.0f, got %r' % (MAX_LEASE_SECONDS, lease_seconds))


def _ours(store: TaskStore, task_id: str, name: str) -> Tuple[TaskRecord, Any]:
    record, version = store.load()
    if record.task_id != task_id:
        raise TaskPreempted(name, record.task_id, record.task_state, preempted=True)
    return record, version


def renew_task(store: TaskStore, task_id: str, now: float, lease_seconds: float = DEFAULT_LEASE_SECONDS, name: str = 'vm') -> TaskRecord:
    """Extend our lease; raise :class:`TaskPreempted` if the task is no longer ours."""
    _check_lease_seconds(lease_seconds)
    record, version = _ours(store, task_id, name)
    new = record._replace(lease_until=now + lease_seconds)
    if not store.compare_and_swap(version, new):
        raise TaskPreempted(name, None, None, preempted=True)
    return new


def finish_task(store: TaskStore, task_id: str, name: str = 'vm', vm_state: Optional[str] = None) -> TaskRecord:
    """End our task successfully: vm_state becomes the action's 'after' state, task cleared."""
    record, version = _ours(store, task_id, name)
    after = vm_state or actions.vm_state_after(cast(str, record.action), record.vm_state, record.previous_vm_state)
    new = record._replace(vm_state=after, task_state=None, task_id=None, action=None, started_at=None, lease_until=None, owner=None,
                          previous_vm_state=record.previous_vm_state if after in ('SUSPENDED', 'RESIZED') else None)
    if not store.compare_and_swap(version, new):
        raise TaskPreempted(name, None, None, preempted=True)
    return new


def abandon_task(store: TaskStore, task_id: str, name: str = 'vm', rolled_back: bool = True) -> TaskRecord:
    """End our task unsuccessfully.

    Rolled back cleanly: vm_state unchanged. Not rolled back: vm_state ERROR
    (Nova: a failed task that cannot be rolled back sets ERROR).
    """
    record, version = _ours(store, task_id, name)
    new = record._replace(vm_state=record.vm_state if rolled_back else 'ERROR', task_state=None, task_id=None, action=None,
                          started_at=None, lease_until=None, owner=None)
    if not store.compare_and_swap(version, new):
        raise TaskPreempted(name, None, None, preempted=True)
    return new


def clear_stale_task(store: TaskStore, expected_task_id: Optional[str], vm_state: str, name: str = 'vm') -> TaskRecord:
    """Recovery: replace a stale record (still ``expected_task_id``) by an idle one with ``vm_state``."""
    record, version = store.load()
    if record.task_id != expected_task_id:
        raise TaskConflict(name, record.task_id, record.task_state, lost_race=True)
    new = TaskRecord(vm_state=vm_state, previous_vm_state=record.previous_vm_state)
    if not store.compare_and_swap(version, new):
        latest, _version = store.load()
        raise TaskConflict(name, latest.task_id, latest.task_state, lost_race=True)
    return new


def record_vm_state(store: TaskStore, vm_state: str, name: str = 'vm') -> None:
    """Write ``vm_state`` into an idle record (compare-and-swap); a task in flight or a lost race is a TaskConflict."""
    record, version = store.load()
    if not record.idle():
        raise TaskConflict(name, record.task_id, record.task_state)
    if not store.compare_and_swap(version, TaskRecord(vm_state=vm_state, previous_vm_state=record.previous_vm_state)):
        latest, _version = store.load()
        raise TaskConflict(name, latest.task_id, latest.task_state, lost_race=True)


class MemoryTaskStore(TaskStore):
    """An in-memory store, the reference implementation used by tests and check mode."""

    def __init__(self, record: TaskRecord) -> None:
        self.record = record
        self.version = 0

    def load(self) -> Tuple[TaskRecord, int]:
        return self.record, self.version

    def compare_and_swap(self, expected_version: Any, record: TaskRecord) -> bool:
        if expected_version != self.version:
            return False
        self.record = record
        self.version += 1
        return True
