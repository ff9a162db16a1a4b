# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task protocol, rule by rule: the bounds it trusts, the words it reads, what each refusal says.

The protocol's scenarios are in test_tasks.py.
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import re

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import MemoryTaskStore, TaskRecord


def fresh(word):
    """The same text in a new string object (a record's words are never the caller's literals)."""
    return ''.join(list(word))


class RefusingStore(MemoryTaskStore):
    """A store whose compare-and-swap always loses (somebody else wrote in between)."""

    def compare_and_swap(self, expected_version, record):
        return False


def test_task_ids_and_bounds():
    assert re.fullmatch('[0-9a-f]{16}', tasks.new_task_id())
    assert tasks.MAX_TIMEOUT_SECONDS == 86400                       # one day
    assert tasks.MAX_LEASE_SECONDS == 2 * 86400 + 120.0
    assert tasks.CLOCK_SKEW_SECONDS == 300.0
    assert tasks.LEASE_HORIZON_SECONDS == 2 * 86400 + 120.0 + 300.0
    assert tasks.check_timeout('t', 86400) == 86400


def test_stale_reasons_say_how_far():
    now = 1000.0
    assert tasks.lease_stale_reason(now, now) is None                 # a lease that ends now still holds
    assert tasks.lease_stale_reason(repr(now), now) is None
    assert tasks.lease_stale_reason(300.0, now) == 'the lease ran out 700.0 s ago'
    far = now + tasks.LEASE_HORIZON_SECONDS + 1000.0
    expected = ('the lease ends %.0f s from now, further ahead than the longest possible task (%.0f s with clock skew): '
                'no task of this collection wrote it' % (tasks.LEASE_HORIZON_SECONDS + 1000.0, tasks.LEASE_HORIZON_SECONDS))
    assert tasks.lease_stale_reason(far, now) == expected


def test_a_store_must_implement_both_methods():
    with pytest.raises(TypeError):
        tasks.TaskStore()   # pylint: disable=abstract-class-instantiated

    class LoadOnly(tasks.TaskStore):
        def load(self):
            return TaskRecord('ACTIVE'), 0

    with pytest.raises(TypeError):
        LoadOnly()   # pylint: disable=abstract-class-instantiated

    class SwapOnly(tasks.TaskStore):
        def compare_and_swap(self, expected_version, record):
            return False

    with pytest.raises(TypeError):
        SwapOnly()   # pylint: disable=abstract-class-instantiated


@pytest.mark.parametrize('action', ['create', 'stop', 'update', 'soft_delete'])
def test_a_busy_vm_refuses_every_action_but_delete(action):
    store = MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', 't1', 'stop', lease_until=2000.0))
    with pytest.raises(TaskConflict) as err:
        tasks.take_task(store, fresh(action), 't2', now=1000.0)
    assert err.value.to_result()['task_id'] == 't1'
    # delete, however it is spelled, preempts it
    assert tasks.take_task(store, fresh('delete'), 't3', now=1000.0).task_state == 'DELETING'


def test_short_leases_are_valid():
    store = MemoryTaskStore(TaskRecord('STOPPED'))
    assert tasks.take_task(store, 'start', 't', now=0.0, lease_seconds=0.5).lease_until == 0.5


def test_losing_the_race_says_so():
    store = RefusingStore(TaskRecord('STOPPED'))
    with pytest.raises(TaskConflict) as err:
        tasks.take_task(store, 'start', 't', now=0.0)
    assert err.value.to_result()['lost_race'] is True
    with pytest.raises(TaskConflict) as err:
        tasks.record_vm_state(store, 'ACTIVE')
    assert err.value.to_result()['lost_race'] is True
    stale = RefusingStore(TaskRecord('ACTIVE', 'STOPPING', 't1', 'stop'))
    with pytest.raises(TaskConflict) as err:
        tasks.clear_stale_task(stale, 't1', 'STOPPED')
    assert err.value.to_result()['lost_race'] is True


@pytest.mark.parametrize('ours, recorded', [('a1', 'b2'), ('b2', 'a1')])
def test_a_task_that_is_no_longer_ours_is_preempted(ours, recorded):
    for call in (lambda store: tasks.renew_task(store, ours, now=0.0), lambda store: tasks.finish_task(store, ours),
                 lambda store: tasks.abandon_task(store, ours)):
        store = MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', recorded, 'stop', lease_until=100.0))
        with pytest.raises(tasks.TaskPreempted) as err:
            call(store)
        assert err.value.to_result()['preempted'] is True
    with pytest.raises(TaskConflict) as err:
        tasks.clear_stale_task(MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', recorded, 'stop')), ours, 'STOPPED')
    assert err.value.to_result()['lost_race'] is True


def test_our_task_is_recognised_by_value():
    record = TaskRecord('ACTIVE', 'STOPPING', 'task-1', 'stop', lease_until=100.0)
    assert tasks.renew_task(MemoryTaskStore(record), fresh('task-1'), now=50.0).lease_until == 50.0 + tasks.DEFAULT_LEASE_SECONDS
    assert tasks.finish_task(MemoryTaskStore(record), fresh('task-1')).vm_state == 'STOPPED'
    assert tasks.clear_stale_task(MemoryTaskStore(record), fresh('task-1'), 'STOPPED') == TaskRecord('STOPPED')


@pytest.mark.parametrize('preempted_call', ['renew', 'finish', 'abandon'])
def test_a_write_lost_after_the_check_is_a_preemption(preempted_call):
    store = RefusingStore(TaskRecord('ACTIVE', 'STOPPING', 't1', 'stop', lease_until=100.0))
    call = {'renew': lambda: tasks.renew_task(store, 't1', now=0.0), 'finish': lambda: tasks.finish_task(store, 't1'),
            'abandon': lambda: tasks.abandon_task(store, 't1')}[preempted_call]
    with pytest.raises(tasks.TaskPreempted) as err:
        call()
    assert err.value.to_result()['preempted'] is True


def test_previous_vm_state_is_kept_only_where_it_is_read_again():
    kept = tasks.finish_task(MemoryTaskStore(TaskRecord('ACTIVE', 'SUSPENDING', 't', 'suspend', previous_vm_state='ACTIVE')), 't')
    assert (kept.vm_state, kept.previous_vm_state) == ('SUSPENDED', 'ACTIVE')
    dropped = tasks.finish_task(MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', 't', 'stop', previous_vm_state='PAUSED')), 't')
    assert (dropped.vm_state, dropped.previous_vm_state) == ('STOPPED', None)


def test_abandon_rolls_back_by_default():
    assert tasks.abandon_task(MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', 't', 'stop')), 't').vm_state == 'ACTIVE'
    assert tasks.abandon_task(MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', 't', 'stop')), 't', rolled_back=False).vm_state == 'ERROR'


def test_record_vm_state_needs_an_idle_vm():
    store = MemoryTaskStore(TaskRecord('ACTIVE', previous_vm_state='PAUSED'))
    tasks.record_vm_state(store, 'STOPPED')
    assert store.load() == (TaskRecord('STOPPED', previous_vm_state='PAUSED'), 1)
    busy = MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', 't1', 'stop'))
    with pytest.raises(TaskConflict) as err:
        tasks.record_vm_state(busy, 'STOPPED')
    assert err.value.to_result()['task_id'] == 't1' and busy.load()[1] == 0


def test_memory_store_versions():
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    assert not store.compare_and_swap(1, TaskRecord('STOPPED')) and not store.compare_and_swap(-1, TaskRecord('STOPPED'))
    assert store.load() == (TaskRecord('ACTIVE'), 0)
    assert store.compare_and_swap(0, TaskRecord('STOPPED')) and store.load() == (TaskRecord('STOPPED'), 1)
    assert store.compare_and_swap(1, TaskRecord('ACTIVE')) and store.load()[1] == 2
