# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task lock protocol (Nova instance.save(expected_task_state=...), seed 002 "task ids")."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common.errors import TaskConflict, TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import MemoryTaskStore, TaskRecord


def test_take_and_finish():
    store = MemoryTaskStore(TaskRecord('STOPPED'))
    taken = tasks.take_task(store, 'start', 't1', now=100.0)
    assert (taken.task_state, taken.task_id, taken.lease_until) == ('STARTING', 't1', 220.0)
    done = tasks.finish_task(store, 't1')
    assert (done.vm_state, done.task_state, done.task_id) == ('ACTIVE', None, None)


def test_second_taker_loses():
    store = MemoryTaskStore(TaskRecord('STOPPED'))
    tasks.take_task(store, 'start', 't1', now=0.0)
    with pytest.raises(TaskConflict) as err:
        tasks.take_task(store, 'start', 't2', now=1.0)
    assert err.value.held_by == 't1' and 'STARTING' in str(err.value)


def test_cas_race_is_a_conflict():
    class Racy(MemoryTaskStore):
        def compare_and_swap(self, expected_version, record):
            # somebody else writes between our load and our write
            MemoryTaskStore.compare_and_swap(self, self.version, TaskRecord('STOPPED', 'STARTING', 'other'))
            return MemoryTaskStore.compare_and_swap(self, expected_version, record)
    store = Racy(TaskRecord('STOPPED'))
    with pytest.raises(TaskConflict) as err:
        tasks.take_task(store, 'start', 'mine', now=0.0)
    assert err.value.held_by == 'other'
    assert store.record.task_id == 'other'


def test_delete_preempts_and_the_loser_notices():
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    tasks.take_task(store, 'live_migrate', 'mig', now=0.0)
    deleting = tasks.take_task(store, 'delete', 'del', now=1.0)
    assert deleting.task_state == 'DELETING'
    with pytest.raises(tasks.TaskPreempted):
        tasks.renew_task(store, 'mig', now=2.0)
    with pytest.raises(tasks.TaskPreempted):
        tasks.finish_task(store, 'mig')
    assert tasks.finish_task(store, 'del').vm_state == 'DELETED'


def test_refused_action_changes_nothing():
    store = MemoryTaskStore(TaskRecord('STOPPED'))
    with pytest.raises(TransitionRefused):
        tasks.take_task(store, 'pause', 't', now=0.0)
    assert store.record == TaskRecord('STOPPED') and store.version == 0


def test_stale_detection_and_clear():
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    tasks.take_task(store, 'stop', 'dead', now=0.0, lease_seconds=10)
    assert not store.record.stale(5.0) and store.record.stale(11.0)
    with pytest.raises(TaskConflict) as err:
        tasks.take_task(store, 'stop', 'new', now=11.0)
    assert err.value.details['stale'] is True
    cleared = tasks.clear_stale_task(store, 'dead', 'ACTIVE')
    assert cleared.idle()
    assert tasks.take_task(store, 'stop', 'new', now=12.0).task_id == 'new'


def test_renew_extends_lease():
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    tasks.take_task(store, 'pause', 't', now=0.0, lease_seconds=10)
    assert tasks.renew_task(store, 't', now=8.0, lease_seconds=10).lease_until == 18.0


@pytest.mark.parametrize('rolled_back,expected', [(True, 'ACTIVE'), (False, 'ERROR')])
def test_abandon(rolled_back, expected):
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    tasks.take_task(store, 'live_migrate', 't', now=0.0)
    assert tasks.abandon_task(store, 't', rolled_back=rolled_back).vm_state == expected
    assert store.record.task_state is None


def test_suspend_remembers_previous_for_resume():
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    tasks.take_task(store, 'suspend', 'a', now=0.0)
    assert tasks.finish_task(store, 'a').vm_state == 'SUSPENDED'
    tasks.take_task(store, 'resume', 'b', now=1.0)
    assert tasks.finish_task(store, 'b').vm_state == 'ACTIVE'


@pytest.mark.parametrize('lease,expected', [(None, True), ('', True), ('garbage', True), ('99.5', False), (99.5, False), ('10', True), (10.0, True)])
def test_lease_expired(lease, expected):
    assert tasks.lease_expired(lease, now=50.0) is expected
