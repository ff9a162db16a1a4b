# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task lock protocol (Nova instance.save(expected_task_state=...), seed 002 "task ids")."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration, TaskConflict, TransitionRefused
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


# Forged leases (issue 24, finding 5): whoever may write the record may write any lease. A lease that is no finite
# number, or ends further ahead than the longest task a module can run, is stale like a lease that ran out.
FORGED_LEASES = ['nan', 'NaN', 'inf', '-inf', 'infinity', '1e400', '1e18', float('nan'), float('inf'), 1e18]


@pytest.mark.parametrize('lease', FORGED_LEASES)
def test_a_forged_lease_is_expired(lease):
    assert tasks.lease_expired(lease, now=1000.0) is True
    assert tasks.lease_stale_reason(lease, now=1000.0)


def test_the_lease_horizon_is_the_longest_task_plus_clock_skew():
    now = 1.0e9
    assert tasks.LEASE_HORIZON_SECONDS == tasks.MAX_LEASE_SECONDS + tasks.CLOCK_SKEW_SECONDS
    assert not tasks.lease_expired(now + tasks.LEASE_HORIZON_SECONDS, now)
    assert tasks.lease_expired(now + tasks.LEASE_HORIZON_SECONDS + 1, now)
    assert 'longest possible task' in tasks.lease_stale_reason(now + tasks.LEASE_HORIZON_SECONDS + 1, now)
    assert tasks.lease_stale_reason(now + 60, now) is None
    assert tasks.lease_stale_reason(now - 60, now) == 'the lease ran out 60.0 s ago'
    assert 'not a finite number' in tasks.lease_stale_reason('nan', now)
    assert 'not a number' in tasks.lease_stale_reason('soon', now)
    assert tasks.lease_stale_reason(None, now) == 'no lease is recorded'


@pytest.mark.parametrize('lease', [float('nan'), float('inf'), 1e18])
def test_a_forged_lease_does_not_hold_the_vm_forever(lease):
    """The next run sees the forged task as stale, recovers it, and takes the VM."""
    store = MemoryTaskStore(TaskRecord('ACTIVE', 'STOPPING', 'forged', 'stop', lease_until=lease, owner='elsewhere:1'))
    now = 1.7e9
    assert store.record.stale(now) and store.record.stale_reason(now)
    with pytest.raises(TaskConflict) as err:
        tasks.take_task(store, 'stop', 'next', now=now)
    assert err.value.details['stale'] is True
    tasks.clear_stale_task(store, 'forged', 'ACTIVE')
    assert tasks.take_task(store, 'stop', 'next', now=now).task_id == 'next'


def test_stale_reason_names_a_dead_run_first():
    record = TaskRecord('ACTIVE', 'STOPPING', 't', 'stop', lease_until=160.0, owner='hv1:42')
    assert record.stale_reason(100.0) is None
    assert record.stale_reason(100.0, run_gone=True) == 'the run that held it (hv1:42) is gone'
    assert TaskRecord('ACTIVE').stale_reason(100.0, run_gone=True) is None


def test_every_module_lease_fits_the_horizon():
    """The longest lease any module takes, with every timeout at its maximum, is one the horizon still trusts."""
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as lmb
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_options
    from ansible_collections.converge.virt.plugins.module_utils._libvirt.vm_backend import VmOptions
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_options as kmo
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt.vm_backend import KubevirtOptions
    top = tasks.MAX_TIMEOUT_SECONDS
    leases = [VmOptions(wait_timeout=top, shutdown_timeout=top).lease_seconds,
              KubevirtOptions(wait_timeout=top, shutdown_timeout=top).lease_seconds,
              lmb.task_lease_seconds(migration_options.MigrationOptions(wait_timeout=top, completion_timeout=top)),
              kmb.task_lease_seconds(kmo.KubevirtMigrationOptions(wait_timeout=top)),
              tasks.DEFAULT_LEASE_SECONDS]
    assert max(leases) <= tasks.MAX_LEASE_SECONDS
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    taken = tasks.take_task(store, 'stop', 'long', now=0.0, lease_seconds=max(leases))
    assert not taken.stale(0.0) and taken.stale_reason(0.0) is None


@pytest.mark.parametrize('lease_seconds', [tasks.MAX_LEASE_SECONDS + 1, 0, -5, float('nan'), float('inf')])
def test_no_task_writes_a_lease_past_the_bound(lease_seconds):
    store = MemoryTaskStore(TaskRecord('ACTIVE'))
    with pytest.raises(InvalidDeclaration) as err:
        tasks.take_task(store, 'stop', 't', now=0.0, lease_seconds=lease_seconds)
    assert err.value.field == 'lease_seconds'
    assert store.version == 0


@pytest.mark.parametrize('value, ok', [(None, True), (0, True), (300, True), (tasks.MAX_TIMEOUT_SECONDS, True),
                                       (tasks.MAX_TIMEOUT_SECONDS + 1, False), (-1, False), (10 ** 18, False)])
def test_check_timeout(value, ok):
    if ok:
        assert tasks.check_timeout('wait_timeout', value) == value
    else:
        with pytest.raises(InvalidDeclaration) as err:
            tasks.check_timeout('wait_timeout', value)
        assert err.value.field == 'wait_timeout' and err.value.message.startswith('wait_timeout: must be')
