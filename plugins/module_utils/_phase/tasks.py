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
import os
from typing import NamedTuple, Optional

from ansible_collections.converge.virt.plugins.module_utils._common.errors import TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._phase import actions


def new_task_id():
    """A fresh task id: 16 random hex digits (every backend, every module)."""
    return os.urandom(8).hex()


DEFAULT_LEASE_SECONDS = 120.0


def lease_expired(lease_until, now):
    """True when a recorded lease (a number, its text as stored in metadata, or None) ran out at ``now``.

    A missing or unreadable lease counts as expired: nobody can prove the task is alive.
    """
    try:
        return lease_until is None or lease_until == '' or float(lease_until) < now
    except (TypeError, ValueError):
        return True


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

    def idle(self):
        """True when no task is recorded."""
        return self.task_state is None

    def stale(self, now):
        """True when a task is recorded but its lease ran out: its run is gone."""
        return not self.idle() and lease_expired(self.lease_until, now)


class TaskStore(abc.ABC):
    """What a backend provides: a record with a version, and a compare-and-swap."""

    @abc.abstractmethod
    def load(self):
        """Return ``(TaskRecord, version)``; version is opaque to the caller."""

    @abc.abstractmethod
    def compare_and_swap(self, expected_version, record):
        """Store ``record`` only if the stored version is still ``expected_version``.

        Return True when stored, False when somebody else wrote in between.
        """


class TaskPreempted(TaskConflict):
    """Our task is no longer the recorded one (a delete or a recovery took over)."""


def take_task(store, action, task_id, now, lease_seconds=DEFAULT_LEASE_SECONDS, owner=None, name='vm'):
    """Take the VM for ``action``; return the stored :class:`TaskRecord`.

    - A live task of somebody else: :class:`TaskConflict` (delete preempts it).
    - A stale task (lease ran out) is reported as a conflict too, unless the
      action is delete: the caller runs stale-task recovery first (see
      :mod:`.reconcile`) and then takes the task.
    - The action table is checked against the recorded vm_state:
      :class:`TransitionRefused` names the state.
    - The write is a compare-and-swap; losing it is a :class:`TaskConflict`.
    """
    record, version = store.load()
    if not record.idle() and action != 'delete':
        raise TaskConflict(name, record.task_id, record.task_state, stale=record.stale(now), action=record.action)
    row = actions.check_action(action, record.vm_state, None if action != 'delete' else record.task_state)
    new = record._replace(task_state=row.task_state or 'UPDATING', task_id=task_id, action=action, started_at=now,
                          lease_until=now + lease_seconds, owner=owner,
                          previous_vm_state=record.vm_state if action in ('suspend', 'resize') else record.previous_vm_state)
    if not store.compare_and_swap(version, new):
        latest, _version = store.load()
        raise TaskConflict(name, latest.task_id, latest.task_state, lost_race=True)
    return new


def _ours(store, task_id, name):
    record, version = store.load()
    if record.task_id != task_id:
        raise TaskPreempted(name, record.task_id, record.task_state, preempted=True)
    return record, version


def renew_task(store, task_id, now, lease_seconds=DEFAULT_LEASE_SECONDS, name='vm'):
    """Extend our lease; raise :class:`TaskPreempted` if the task is no longer ours."""
    record, version = _ours(store, task_id, name)
    new = record._replace(lease_until=now + lease_seconds)
    if not store.compare_and_swap(version, new):
        raise TaskPreempted(name, None, None, preempted=True)
    return new


def finish_task(store, task_id, name='vm', vm_state=None):
    """End our task successfully: vm_state becomes the action's 'after' state, task cleared."""
    record, version = _ours(store, task_id, name)
    after = vm_state or actions.vm_state_after(record.action, record.vm_state, record.previous_vm_state)
    new = record._replace(vm_state=after, task_state=None, task_id=None, action=None, started_at=None, lease_until=None, owner=None,
                          previous_vm_state=record.previous_vm_state if after in ('SUSPENDED', 'RESIZED') else None)
    if not store.compare_and_swap(version, new):
        raise TaskPreempted(name, None, None, preempted=True)
    return new


def abandon_task(store, task_id, name='vm', rolled_back=True):
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


def clear_stale_task(store, expected_task_id, vm_state, name='vm'):
    """Recovery: replace a stale record (still ``expected_task_id``) by an idle one with ``vm_state``."""
    record, version = store.load()
    if record.task_id != expected_task_id:
        raise TaskConflict(name, record.task_id, record.task_state, lost_race=True)
    new = TaskRecord(vm_state=vm_state, previous_vm_state=record.previous_vm_state)
    if not store.compare_and_swap(version, new):
        latest, _version = store.load()
        raise TaskConflict(name, latest.task_id, latest.task_state, lost_race=True)
    return new


def record_vm_state(store, vm_state, name='vm'):
    """Write ``vm_state`` into an idle record (compare-and-swap); a task in flight or a lost race is a TaskConflict."""
    record, version = store.load()
    if not record.idle():
        raise TaskConflict(name, record.task_id, record.task_state)
    if not store.compare_and_swap(version, TaskRecord(vm_state=vm_state, previous_vm_state=record.previous_vm_state)):
        latest, _version = store.load()
        raise TaskConflict(name, latest.task_id, latest.task_state, lost_race=True)


class MemoryTaskStore(TaskStore):
    """An in-memory store, the reference implementation used by tests and check mode."""

    def __init__(self, record):
        self.record = record
        self.version = 0

    def load(self):
        return self.record, self.version

    def compare_and_swap(self, expected_version, record):
        if expected_version != self.version:
            return False
        self.record = record
        self.version += 1
        return True
