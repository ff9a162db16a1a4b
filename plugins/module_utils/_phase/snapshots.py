# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Snapshots of a VM: their phases, the VM's task while one runs, and the plan that reaches a declaration.

A snapshot is a long transition with phases of its own (KubeVirt's VirtualMachineSnapshot):

- create: Pending -> Creating -> Ready | Failed
- restore: Ready -> Restoring -> Restored | Failed (the snapshot itself stays Ready)
- delete: Deleting -> absent

While a snapshot is created, restored or deleted the VM holds a task (the ``snapshot``,
``restore_snapshot`` and ``delete_snapshot`` rows of :mod:`.actions`; Nova's ``IMAGE_SNAPSHOT``
for the first, vm_state unchanged), so a snapshot never overlaps another task on the VM.

Everything here is pure: the backends observe snapshots as :class:`ActualSnapshot` and run the
:class:`SnapshotStep` list of :func:`plan_snapshot`.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile, tasks

# ---------------------------------------------------------------------------------------------------------------------
# Phases and their transitions (data)
# ---------------------------------------------------------------------------------------------------------------------

PENDING = 'Pending'
CREATING = 'Creating'
READY = 'Ready'
FAILED = 'Failed'
RESTORING = 'Restoring'
RESTORED = 'Restored'
DELETING = 'Deleting'
ABSENT = 'absent'
PHASES = (PENDING, CREATING, READY, FAILED, RESTORING, RESTORED, DELETING, ABSENT)

# (phase, event, next phase): the only moves a snapshot or a restore makes
TRANSITIONS = (
    (PENDING, 'the VM task is taken', CREATING),
    (PENDING, 'refused (VM busy, a disk or firmware that cannot be snapshotted)', FAILED),
    (CREATING, 'the hypervisor reports the snapshot', READY),
    (CREATING, 'the hypervisor failed', FAILED),
    (READY, 'restore asked, the VM task is taken', RESTORING),
    (RESTORING, 'the VM runs (or is stopped) as at the snapshot', RESTORED),
    (RESTORING, 'the hypervisor failed', FAILED),
    (READY, 'delete asked, the VM task is taken', DELETING),
    (FAILED, 'delete asked', DELETING),
    (DELETING, 'gone from the hypervisor', ABSENT),
)

NEXT: Dict[str, List[str]] = {}
for _source, _event, _target in TRANSITIONS:
    NEXT.setdefault(_source, []).append(_target)
del _source, _event, _target

# task_state held on the VM while each snapshot action runs (Nova task_states.IMAGE_SNAPSHOT for the first)
TASK_STATE_OF_ACTION = {
    'snapshot': 'IMAGE_SNAPSHOT',
    'restore_snapshot': 'RESTORING_SNAPSHOT',
    'delete_snapshot': 'DELETING_SNAPSHOT',
}
SNAPSHOT_ACTIONS = tuple(sorted(TASK_STATE_OF_ACTION))
SNAPSHOT_TASK_STATES = tuple(TASK_STATE_OF_ACTION[a] for a in SNAPSHOT_ACTIONS)

# Consistency of the data in a snapshot: the guest agent froze the filesystems, or not (as after a power cut).
CRASH_CONSISTENT = 'crash-consistent'
FS_CONSISTENT = 'filesystem-consistent'


def can_move(phase: str, target: str) -> bool:
    """True when ``phase`` -> ``target`` is a row of :data:`TRANSITIONS`."""
    return target in NEXT.get(phase, ())


# ---------------------------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------------------------

ActualSnapshot = namedtuple('ActualSnapshot', ['name', 'created', 'parent', 'children', 'vm_state_at_snapshot', 'memory', 'description'])

SnapshotStep = namedtuple('SnapshotStep', ['op', 'name', 'detail'])
CREATE = 'create_snapshot'
RESTORE = 'restore_snapshot'
DELETE = 'delete_snapshot'
ACTION_OF_STEP = {CREATE: 'snapshot', RESTORE: 'restore_snapshot', DELETE: 'delete_snapshot'}

STATES = ('present', 'absent', 'restored')


def _step(op: str, name: str, **detail: Any) -> SnapshotStep:
    return SnapshotStep(op, name, tuple(sorted(detail.items())))


def _depth(snap: ActualSnapshot, by_name: Dict[str, ActualSnapshot]) -> int:
    depth, seen, parent = 0, set(), snap.parent
    while parent in by_name and parent not in seen:
        seen.add(parent)
        depth += 1
        parent = by_name[parent].parent
    return depth


def age_order(snapshots: Iterable[ActualSnapshot]) -> List[ActualSnapshot]:
    """``snapshots`` oldest first: by creation time, then (libvirt keeps whole seconds) a parent before its children, then name."""
    by_name = dict((snap.name, snap) for snap in snapshots)
    return sorted(snapshots, key=lambda snap: (snap.created or 0, _depth(snap, by_name), snap.name))


def retention_victims(snapshots: Sequence[ActualSnapshot], keep_last: Optional[int], keep: Iterable[str] = ()) -> List[str]:
    """Names of the snapshots ``keep_last`` removes, oldest first (:func:`age_order`): the snapshots named in ``keep``
    stay and count in ``keep_last``, the newest others fill the rest. Each one is named in the plan before anything is deleted."""
    if keep_last is None:
        return []
    others = [snap for snap in age_order(snapshots) if snap.name not in keep]
    room = max(0, keep_last - (len(snapshots) - len(others)))  # the kept ones count in keep_last
    return [snap.name for snap in others[:max(0, len(others) - room)]]


def plan_snapshot(declared: Dict[str, Any], snapshots: List[ActualSnapshot], safety_name: Optional[str] = None) -> List[SnapshotStep]:
    """Ordered :class:`SnapshotStep` list that reaches ``declared`` from the observed ``snapshots`` (pure).

    ``declared``: dict with state, name, description, memory, children, keep_last, safety_snapshot.
    ``snapshots``: the VM's :class:`ActualSnapshot` list. ``safety_name``: the name a safety snapshot
    before a restore gets.

    - present: create it when missing (a present snapshot is never changed: its data is what it is);
      then ``keep_last`` deletes the oldest others, each named in the plan.
    - absent: delete it when present (``children``: its descendants too; else they are kept and
      re-parented by the hypervisor).
    - restored: a restore is an action on the VM's current data, which no observation can prove is
      still the snapshot's: it always runs (changed), after a safety snapshot unless declined.
    """
    state, name = declared['state'], declared['name']
    if state not in STATES:
        raise InvalidDeclaration('state', 'must be one of %s, got %r' % (', '.join(STATES), state))
    keep_last: Optional[int] = declared.get('keep_last')
    if keep_last is not None and keep_last < 1:
        raise InvalidDeclaration('keep_last', 'must be 1 or more (keeping no snapshot is state=absent), got %r' % keep_last)
    if keep_last is not None and state != 'present':
        raise InvalidDeclaration('keep_last', 'applies with state=present only')
    by_name = dict((snap.name, snap) for snap in snapshots)
    steps = []
    if state == 'present':
        after = list(snapshots)
        if name not in by_name:
            steps.append(_step(CREATE, name, description=declared.get('description'), memory=bool(declared.get('memory'))))
            after.append(ActualSnapshot(name, float('inf'), declared.get('current'), (), None, bool(declared.get('memory')),
                                        declared.get('description')))
        for victim in retention_victims(after, keep_last, keep=(name,)):
            steps.append(_step(DELETE, victim, children=False, reason='keep_last %s' % (keep_last,)))
    elif state == 'absent':
        if name in by_name:
            steps.append(_step(DELETE, name, children=bool(declared.get('children'))))
    else:
        if name not in by_name:
            raise InvalidDeclaration('name', 'snapshot %r does not exist: nothing to restore (existing: %s)'
                                     % (name, ', '.join(sorted(by_name)) or 'none'))
        if declared.get('safety_snapshot', True):
            if not safety_name:
                raise InvalidDeclaration('safety_snapshot', 'needs a name for the safety snapshot')
            if safety_name in by_name:
                raise InvalidDeclaration('safety_snapshot', 'a snapshot named %r exists already' % safety_name)
            steps.append(_step(CREATE, safety_name, description='converge.virt safety snapshot before restoring %s' % name,
                               memory=bool(declared.get('memory')), safety=True))
        steps.append(_step(RESTORE, name))
    return steps


def vm_state_after_restore(vm_state_at_snapshot: Optional[str], current: str) -> str:
    """vm_state once a restore finished: the VM runs, is paused or is stopped as it was at the snapshot."""
    after: Dict[Optional[str], str] = {'running': 'ACTIVE', 'paused': 'PAUSED', 'shutoff': 'STOPPED', 'disk-snapshot': current}
    return after.get(vm_state_at_snapshot, current)


def stale_snapshot_task(record: tasks.TaskRecord, now: float, run_gone: Callable[[Optional[str]], bool]) -> bool:
    """True when ``record`` holds a snapshot task whose lease ran out or whose run is known dead.

    ``run_gone(owner)`` answers whether the run that took the task is gone (the backends pass
    ``_base/owner.owner_gone``: this layer does no process I/O).
    """
    return not record.idle() and record.action in SNAPSHOT_ACTIONS and (record.stale(now) or run_gone(record.owner))


def clear_stale_snapshot_task(store: tasks.TaskStore, now: float, run_gone: Callable[[Optional[str]], bool], name: str = 'vm',
                              check_mode: bool = False) -> Optional[Dict[str, Any]]:
    """Clear the task a killed snapshot run left, for a run that has no step to take (the killed run's step had finished).

    A run with steps clears such a task when it takes its own; a run with none would leave it, and the VM would stay
    busy until the lease ran out. Both backends call this with their task store. Returns the operation (a dict) to
    report, or None when the VM holds no stale snapshot task.
    """
    record, _version = store.load()
    if not stale_snapshot_task(record, now, run_gone):
        return None
    if not check_mode:
        recovery = reconcile.recover_stale_task(record.task_state, record.vm_state, record.action)
        tasks.clear_stale_task(store, record.task_id, recovery.vm_state, name=name)
    return {'op': 'clear_stale_task', 'task_state': record.task_state, 'task_id': record.task_id}
