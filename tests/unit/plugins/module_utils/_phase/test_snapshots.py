# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snapshot phase tables, the KubeVirt mapping, the VM task of a snapshot and the snapshot plan."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration, TaskConflict, TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshot_status
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, reconcile, tasks
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as sn
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import MemoryTaskStore, TaskRecord


def test_transitions_are_exactly_the_phase_model():
    moves = set((a, b) for a, _event, b in sn.TRANSITIONS)
    assert moves == {
        ('Pending', 'Creating'), ('Pending', 'Failed'), ('Creating', 'Ready'), ('Creating', 'Failed'),
        ('Ready', 'Restoring'), ('Restoring', 'Restored'), ('Restoring', 'Failed'),
        ('Ready', 'Deleting'), ('Failed', 'Deleting'), ('Deleting', 'absent')}
    assert set(a for a, _b in moves) | set(b for _a, b in moves) == set(sn.PHASES)


@pytest.mark.parametrize('source,target,allowed', [
    ('Pending', 'Creating', True), ('Creating', 'Ready', True), ('Ready', 'Creating', False), ('absent', 'Ready', False),
    ('Restored', 'Restoring', False), ('Deleting', 'Ready', False)])
def test_can_move(source, target, allowed):
    assert sn.can_move(source, target) is allowed


def test_snapshot_actions_hold_their_task_state_and_keep_vm_state():
    for action, task_state in sn.TASK_STATE_OF_ACTION.items():
        row = actions.ACTIONS[action]
        assert row.task_state == task_state and row.vm_state_after == actions.UNCHANGED
        assert row.task_states == (None,), 'a snapshot never overlaps another task'
        assert reconcile.STALE_TASK_TABLE[task_state] == reconcile.CLEAR
    assert actions.ACTIONS['snapshot'].task_state == 'IMAGE_SNAPSHOT'  # Nova's name
    assert actions.vm_state_after('snapshot', 'PAUSED') == 'PAUSED'


@pytest.mark.parametrize('vm_state,accepted', [
    ('ACTIVE', True), ('STOPPED', True), ('PAUSED', True), ('SUSPENDED', False), ('ERROR', False), ('DELETED', False),
    ('SOFT_DELETED', False), ('RESIZED', False)])
def test_snapshot_vm_states(vm_state, accepted):
    assert actions.accepts('snapshot', vm_state) is accepted


def test_snapshot_refused_while_another_task_holds_the_vm():
    store = MemoryTaskStore(TaskRecord(vm_state='ACTIVE', task_state='MIGRATING', task_id='mig', action='live_migrate',
                                       lease_until=1000.0))
    with pytest.raises(TaskConflict) as err:
        tasks.take_task(store, 'snapshot', 'snap', now=10.0, name='web-1')
    assert err.value.task_state == 'MIGRATING' and store.record.task_id == 'mig'
    with pytest.raises(TransitionRefused):
        actions.check_action('snapshot', 'SUSPENDED')


def test_snapshot_task_round_trip_keeps_vm_state():
    store = MemoryTaskStore(TaskRecord(vm_state='STOPPED'))
    taken = tasks.take_task(store, 'snapshot', 'snap', now=10.0)
    assert (taken.task_state, taken.action) == ('IMAGE_SNAPSHOT', 'snapshot')
    # a second snapshot (or any task) cannot start meanwhile
    with pytest.raises(TaskConflict):
        tasks.take_task(store, 'restore_snapshot', 'other', now=11.0)
    done = tasks.finish_task(store, 'snap')
    assert (done.vm_state, done.task_state) == ('STOPPED', None)
    tasks.take_task(store, 'restore_snapshot', 'restore', now=12.0)
    assert tasks.finish_task(store, 'restore', vm_state=sn.vm_state_after_restore('running', 'STOPPED')).vm_state == 'ACTIVE'


@pytest.mark.parametrize('at_snapshot,current,expected', [
    ('running', 'STOPPED', 'ACTIVE'), ('paused', 'ACTIVE', 'PAUSED'), ('shutoff', 'ACTIVE', 'STOPPED'), ('disk-snapshot', 'ACTIVE', 'ACTIVE'),
    (None, 'ERROR', 'ERROR')])
def test_vm_state_after_restore(at_snapshot, current, expected):
    assert sn.vm_state_after_restore(at_snapshot, current) == expected


# --- KubeVirt VirtualMachineSnapshot / VirtualMachineRestore ------------------------------------------------------------

@pytest.mark.parametrize('status,deleting,expected', [
    (None, False, 'Pending'),
    ({}, False, 'Pending'),
    ({'phase': 'Unknown'}, False, 'Pending'),
    ({'phase': 'InProgress', 'readyToUse': False}, False, 'Creating'),
    ({'phase': 'Succeeded', 'readyToUse': False}, False, 'Creating'),
    ({'phase': 'Succeeded', 'readyToUse': True}, False, 'Ready'),
    ({'phase': 'Failed'}, False, 'Failed'),
    ({'phase': 'Succeeded', 'readyToUse': True}, True, 'Deleting'),
])
def test_kubevirt_snapshot_phase(status, deleting, expected):
    assert snapshot_status.phase_from_kubevirt_snapshot(status, deleting=deleting) == expected


def test_kubevirt_failure_deadline():
    status = {'phase': 'InProgress'}
    assert snapshot_status.phase_from_kubevirt_snapshot(status, now=100.0, created_at=0.0, failure_deadline=300) == 'Creating'
    assert snapshot_status.phase_from_kubevirt_snapshot(status, now=400.0, created_at=0.0, failure_deadline=300) == 'Failed'
    assert snapshot_status.phase_from_kubevirt_snapshot({'phase': 'Succeeded', 'readyToUse': True}, now=400.0, created_at=0.0, failure_deadline=300) == 'Ready'


@pytest.mark.parametrize('indications,expected', [
    (['Online', 'GuestAgent'], 'filesystem-consistent'), (['Online', 'NoGuestAgent'], 'crash-consistent'), ([], 'crash-consistent'),
    (None, 'crash-consistent')])
def test_kubevirt_consistency(indications, expected):
    assert snapshot_status.consistency_from_kubevirt({'indications': indications}) == expected


@pytest.mark.parametrize('status,expected', [
    (None, 'Restoring'),
    ({'complete': False, 'conditions': [{'type': 'Progressing', 'status': 'True'}]}, 'Restoring'),
    ({'complete': True}, 'Restored'),
    ({'complete': False, 'conditions': [{'type': 'Failure', 'status': 'True'}]}, 'Failed'),
    ({'complete': False, 'conditions': [{'type': 'Ready', 'status': 'False', 'reason': 'Failed'}]}, 'Failed'),
    ({'complete': False, 'conditions': [{'type': 'Ready', 'status': 'False', 'reason': 'Pending'}]}, 'Restoring'),
])
def test_kubevirt_restore_phase(status, expected):
    assert snapshot_status.phase_from_kubevirt_restore(status) == expected


# --- the plan -------------------------------------------------------------------------------------------------------------

def snap(name, created, parent=None):
    return sn.ActualSnapshot(name, created, parent, (), 'shutoff', False, None)


def ops(steps):
    return [(s.op, s.name) for s in steps]


def declared(**extra):
    result = {'state': 'present', 'name': 's1', 'memory': False, 'children': False, 'keep_last': None, 'safety_snapshot': True}
    result.update(extra)
    return result


def test_present_creates_once():
    assert ops(sn.plan_snapshot(declared(), [])) == [('create_snapshot', 's1')]
    assert sn.plan_snapshot(declared(), [snap('s1', 5.0)]) == []


def test_absent_deletes_once_with_or_without_children():
    steps = sn.plan_snapshot(declared(state='absent', children=True), [snap('s1', 5.0)])
    assert ops(steps) == [('delete_snapshot', 's1')] and dict(steps[0].detail)['children'] is True
    assert sn.plan_snapshot(declared(state='absent'), []) == []


def test_restore_takes_a_safety_snapshot_first_unless_declined():
    existing = [snap('s1', 5.0)]
    assert ops(sn.plan_snapshot(declared(state='restored'), existing, safety_name='safe')) == [
        ('create_snapshot', 'safe'), ('restore_snapshot', 's1')]
    assert ops(sn.plan_snapshot(declared(state='restored', safety_snapshot=False), existing)) == [('restore_snapshot', 's1')]
    with pytest.raises(InvalidDeclaration) as err:
        sn.plan_snapshot(declared(state='restored'), [], safety_name='safe')
    assert err.value.field == 'name' and 'does not exist' in err.value.message
    with pytest.raises(InvalidDeclaration):
        sn.plan_snapshot(declared(state='restored'), existing + [snap('safe', 6.0)], safety_name='safe')


def test_keep_last_names_every_victim_oldest_first():
    existing = [snap('a', 1.0), snap('b', 2.0), snap('c', 3.0)]
    steps = sn.plan_snapshot(declared(name='d', keep_last=2), existing)
    assert ops(steps) == [('create_snapshot', 'd'), ('delete_snapshot', 'a'), ('delete_snapshot', 'b')]
    assert sn.plan_snapshot(declared(name='c', keep_last=3), existing) == []
    assert ops(sn.plan_snapshot(declared(name='c', keep_last=5), existing)) == []
    # the named snapshot is kept even when it is the oldest
    assert ops(sn.plan_snapshot(declared(name='a', keep_last=1), existing)) == [('delete_snapshot', 'b'), ('delete_snapshot', 'c')]


def test_same_second_snapshots_are_ordered_by_parentage():
    # libvirt records whole seconds: a child taken in the same second as its parent is still the younger
    existing = [snap('z', 7.0), snap('y', 7.0, parent='z'), snap('x', 7.0, parent='y')]
    assert [s.name for s in sn.age_order(existing)] == ['z', 'y', 'x']
    assert sn.retention_victims(existing, 1) == ['z', 'y']


@pytest.mark.parametrize('extra,field', [
    ({'keep_last': 0}, 'keep_last'), ({'keep_last': 2, 'state': 'absent'}, 'keep_last'), ({'state': 'gone'}, 'state')])
def test_bad_declarations_name_the_field(extra, field):
    with pytest.raises(InvalidDeclaration) as err:
        sn.plan_snapshot(declared(**extra), [])
    assert err.value.field == field


# ---------------------------------------------------------------- rules pinned by the mutation tier (issue 17, Part 3)

def _json(value):
    # objects read from the API or a result are equal to the table's words, never the same objects
    import json  # pylint: disable=import-outside-toplevel
    return json.loads(json.dumps(value))


def test_in_progress_fails_only_strictly_after_its_failure_deadline():
    # KubeVirt's snapshot controller: failed once time.Now() is after creation + failureDeadline
    status = {'phase': 'InProgress'}
    assert snapshot_status.phase_from_kubevirt_snapshot(status, now=150.0, created_at=100.0, failure_deadline=50.0) != sn.FAILED
    assert snapshot_status.phase_from_kubevirt_snapshot(status, now=150.5, created_at=100.0, failure_deadline=50.0) == sn.FAILED
    assert snapshot_status.phase_from_kubevirt_snapshot(status, now=120.0, created_at=100.0, failure_deadline=50.0) != sn.FAILED


@pytest.mark.parametrize('conditions,phase', [
    ([{'type': 'Failure', 'status': 'True'}], sn.FAILED),
    ([{'type': 'Ready', 'status': 'False', 'reason': 'Failed'}], sn.FAILED),
    ([{'type': 'Available', 'status': 'True'}], sn.RESTORING),
    ([{'type': 'Failure', 'status': 'Unknown'}], sn.RESTORING),
    ([{'type': 'Failure', 'status': 'False'}], sn.RESTORING),
    ([{'type': 'Ready', 'status': 'True', 'reason': 'Failed'}], sn.RESTORING),
    ([{'type': 'Progressing', 'status': 'False', 'reason': 'Failed'}], sn.RESTORING),
    ([{'type': 'Ready', 'status': 'False', 'reason': 'Pending'}], sn.RESTORING),
    ([{'type': 'Ready', 'status': 'False', 'reason': 'Creating'}], sn.RESTORING),
])
def test_a_restore_fails_only_on_its_failure_conditions(conditions, phase):
    assert snapshot_status.phase_from_kubevirt_restore(_json({'conditions': conditions})) == phase


def test_age_order_puts_a_snapshot_without_a_time_at_time_zero():
    snapshots = [snap('z', None), snap('a', 0), snap('b', 1)]
    assert [s.name for s in sn.age_order(snapshots)] == ['a', 'z', 'b']


def test_keep_last_counts_the_declared_snapshot_among_the_kept():
    steps = sn.plan_snapshot({'state': 'present', 'name': 'new', 'keep_last': 1}, [snap('new', 5), snap('a', 1)])
    assert [(s.op, s.name, dict(s.detail)) for s in steps] == [(sn.DELETE, 'a', {'children': False, 'reason': 'keep_last 1'})]


def test_keep_last_messages_and_states_read_as_data():
    with pytest.raises(InvalidDeclaration) as raised:
        sn.plan_snapshot({'state': 'present', 'name': 'x', 'keep_last': 0}, [])
    assert raised.value.field == 'keep_last' and raised.value.reason.endswith('got 0')
    with pytest.raises(InvalidDeclaration) as restored:
        sn.plan_snapshot({'state': 'restored', 'name': 'x', 'keep_last': 2}, [snap('x', 1)], safety_name='safe')
    assert restored.value.field == 'keep_last'
    declared = _json({'state': 'present', 'name': 'x', 'keep_last': 2})
    assert [s.op for s in sn.plan_snapshot(declared, [snap('x', 1)])] == []
    assert [s.op for s in sn.plan_snapshot(_json({'state': 'absent', 'name': 'x'}), [snap('x', 1)])] == [sn.DELETE]


def test_restore_takes_a_safety_snapshot_unless_declined_and_says_so():
    steps = sn.plan_snapshot({'state': 'restored', 'name': 's1'}, [snap('s1', 1)], safety_name='safe-1')
    create, restore = steps
    assert (create.op, create.name, restore.op, restore.name) == (sn.CREATE, 'safe-1', sn.RESTORE, 's1')
    assert dict(create.detail) == {'description': 'converge.virt safety snapshot before restoring s1', 'memory': False, 'safety': True}
    with pytest.raises(InvalidDeclaration) as raised:
        sn.plan_snapshot({'state': 'restored', 'name': 's1'}, [snap('s1', 1), snap('safe-1', 2)], safety_name='safe-1')
    assert "'safe-1'" in raised.value.reason
    with pytest.raises(InvalidDeclaration) as missing:
        sn.plan_snapshot({'state': 'restored', 'name': 'gone'}, [snap('s1', 1)], safety_name='safe-1')
    assert missing.value.reason.endswith('(existing: s1)')


# ------------------------------------------------- a snapshot task left by a killed run
DEAD = 'here:4242'


def _run_gone(owner):
    """The phase layer is told whether a run is gone (the backends pass _base/owner.owner_gone): here only DEAD is."""
    return owner == DEAD


def _record(action='snapshot', task_state='IMAGE_SNAPSHOT', lease_until=2000.0, owner='elsewhere:1'):
    return TaskRecord(vm_state='ACTIVE', task_state=task_state, task_id='t1-' + action, action=action, started_at=1000.0,
                      lease_until=lease_until, owner=owner)


def test_stale_snapshot_task_needs_a_snapshot_task_and_a_lease_over_or_a_dead_owner():
    now = 1500.0
    assert not sn.stale_snapshot_task(TaskRecord(vm_state='ACTIVE'), now, _run_gone), 'an idle record holds no task'
    assert not sn.stale_snapshot_task(_record(), now, _run_gone), 'lease holds, owner on another host: alive'
    assert sn.stale_snapshot_task(_record(lease_until=1400.0), now, _run_gone), 'lease over'
    assert sn.stale_snapshot_task(_record(owner=DEAD), now, _run_gone), 'its run on this host is gone, lease or not'
    assert not sn.stale_snapshot_task(_record(action='stop', task_state='POWERING_OFF', lease_until=1400.0), now, _run_gone), \
        'a stale task of another kind is not a snapshot run\'s to clear'
    assert not sn.stale_snapshot_task(_record(action='stop', task_state='POWERING_OFF', owner=DEAD), now, _run_gone)


def test_clear_stale_snapshot_task_clears_only_a_stale_one_and_check_mode_writes_nothing():
    now = 1500.0
    live = MemoryTaskStore(_record())
    assert sn.clear_stale_snapshot_task(live, now, _run_gone, name='a') is None
    assert live.load()[0] == _record(), 'a live snapshot task stays'
    stale = _record(lease_until=1400.0)
    store = MemoryTaskStore(stale)
    op = sn.clear_stale_snapshot_task(store, now, _run_gone, name='a', check_mode=True)
    assert op == {'op': 'clear_stale_task', 'task_state': 'IMAGE_SNAPSHOT', 'task_id': 't1-snapshot'}
    assert store.load()[0] == stale, 'check mode (given) writes nothing'
    assert sn.clear_stale_snapshot_task(store, now, _run_gone, name='a') == op
    assert store.load()[0].idle() and store.load()[0].vm_state == 'ACTIVE', 'cleared by default: the VM is free again'
