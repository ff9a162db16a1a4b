# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""views.clear_stale: the one stale-task recovery every backend and module uses (Nova _init_instance)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import views
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import MemoryTaskStore, TaskRecord

NOW = 1000.0


def alive(_owner):
    return False


def gone(_owner):
    return True


def stopping(lease_until):
    return TaskRecord('ACTIVE', 'STOPPING', 't-1', 'stop', started_at=NOW - 10, lease_until=lease_until, owner='host:1')


def test_a_live_task_is_left_alone():
    store = MemoryTaskStore(stopping(NOW + 60))
    assert views.clear_stale(store, 'RUNNING', NOW, alive) is None
    assert store.record.task_state == 'STOPPING' and store.version == 0


def test_a_task_whose_lease_ran_out_is_cleared_and_the_hypervisor_decides_the_vm_state():
    store = MemoryTaskStore(stopping(NOW - 5))
    cleared = views.clear_stale(store, 'SHUTDOWN', NOW, alive)
    assert store.record.task_state is None and store.record.vm_state == 'STOPPED' and store.version == 1
    assert (cleared.record.task_id, cleared.recovery.action, cleared.vm_state) == ('t-1', 'redo', 'STOPPED')
    assert cleared.reason == 'the lease ran out 5.0 s ago'
    assert cleared.as_dict() == {'recovered_task': 'STOPPING', 'recovered_task_id': 't-1', 'recovery': 'redo', 'vm_state': 'STOPPED',
                                 'reason': 'the lease ran out 5.0 s ago'}
    assert cleared.note() == 'recovered the stale task t-1 (STOPPING, redo): the lease ran out 5.0 s ago'


def test_a_task_of_a_run_known_dead_is_stale_whatever_its_lease():
    store = MemoryTaskStore(stopping(NOW + 60))
    cleared = views.clear_stale(store, 'RUNNING', NOW, gone, name='web-1')
    assert cleared.reason == 'the run that held it (host:1) is gone'
    assert store.record.task_state is None and store.record.vm_state == 'ACTIVE'


def test_a_dry_run_writes_nothing_and_says_what_it_would_do():
    store = MemoryTaskStore(stopping(NOW - 5))
    cleared = views.clear_stale(store, 'SHUTDOWN', NOW, alive, dry_run=True)
    assert store.record.task_state == 'STOPPING' and store.version == 0
    assert cleared.vm_state == 'STOPPED'
    assert cleared.note(dry_run=True) == 'would recover the stale task t-1 (STOPPING): the lease ran out 5.0 s ago'


def test_a_managed_save_image_keeps_a_suspended_vm_suspended():
    record = TaskRecord('SUSPENDED', 'RESUMING', 't-2', 'resume', lease_until=NOW - 1)
    saved = MemoryTaskStore(record)
    assert views.clear_stale(saved, 'SHUTDOWN', NOW, alive, managed_save=True).vm_state == 'SUSPENDED'
    assert saved.record.vm_state == 'SUSPENDED'
    plain = MemoryTaskStore(record)
    assert views.clear_stale(plain, 'SHUTDOWN', NOW, alive).vm_state == 'STOPPED'
