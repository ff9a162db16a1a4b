# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Power-state reconciliation and stale-task recovery.

Source: Nova nova/compute/manager.py _sync_instance_power_state and
_init_instance (phase-model section 6, seed 002).
"""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import actions
from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile as r

# one case per row of POWER_SYNC_TABLE, plus the fall-through
SYNC_CASES = [
    ('ACTIVE', 'SHUTDOWN', ('record STOPPED', True, 'start')),
    ('ACTIVE', 'CRASHED', ('record STOPPED', True, 'start')),
    ('ACTIVE', 'SUSPENDED', ('stop', False, None)),
    ('ACTIVE', 'PAUSED', ('report only', False, None)),
    ('ACTIVE', 'NOSTATE', ('report only', False, None)),
    ('STOPPED', 'RUNNING', ('force stop', False, 'record ACTIVE')),
    ('STOPPED', 'PAUSED', ('force stop', False, 'record ACTIVE')),
    ('STOPPED', 'SUSPENDED', ('force stop', False, 'record ACTIVE')),
    ('PAUSED', 'SHUTDOWN', ('force stop', False, None)),
    ('PAUSED', 'CRASHED', ('force stop', False, None)),
    ('DELETED', 'RUNNING', ('finish delete', False, None)),
    ('SOFT_DELETED', 'PAUSED', ('finish delete', False, None)),
    ('RESCUED', 'SHUTDOWN', ('leave alone', False, None)),
    ('RESIZED', 'RUNNING', ('leave alone', False, None)),
    ('SUSPENDED', 'RUNNING', ('leave alone', False, None)),
    ('ERROR', 'RUNNING', ('leave alone', False, None)),
    ('BUILDING', 'SHUTDOWN', ('leave alone', False, None)),
    ('ACTIVE', 'RUNNING', ('in sync', False, None)),
    ('STOPPED', 'SHUTDOWN', ('in sync', False, None)),
    ('PAUSED', 'PAUSED', ('in sync', False, None)),
]


@pytest.mark.parametrize('vm_state,power_state,expected', SYNC_CASES)
def test_power_sync(vm_state, power_state, expected):
    decision = r.power_sync_decision(vm_state, power_state)
    assert (decision.action, decision.reread, decision.alternative) == expected


def test_every_sync_row_has_a_case():
    rows = {(row[0], row[2]) for row in r.POWER_SYNC_TABLE}
    assert rows <= {(vm, exp[0]) for vm, _p, exp in SYNC_CASES}


def test_task_in_flight_is_skipped():
    assert r.power_sync_decision('ACTIVE', 'SHUTDOWN', 'STOPPING').action == r.SKIP_TASK_IN_FLIGHT


@pytest.mark.parametrize('task_state,vm_state,action,power,expected', [
    ('STARTING', 'STOPPED', 'start', 'SHUTDOWN', ('redo', 'STOPPED', 'start')),
    ('STOPPING', 'ACTIVE', 'stop', 'RUNNING', ('redo', 'ACTIVE', 'stop')),
    ('REBOOTING', 'ACTIVE', 'reboot_soft', 'RUNNING', ('redo', 'ACTIVE', 'reboot_soft')),
    # nova test_compute_mgr test_init_instance_retries_reboot_pending_hard / _started_hard: a hard reboot is retried, hard
    ('REBOOTING_HARD', 'ACTIVE', 'reboot_hard', 'RUNNING', ('redo', 'ACTIVE', 'reboot_hard')),
    ('PAUSING', 'ACTIVE', 'pause', 'RUNNING', ('redo', 'ACTIVE', 'pause')),
    ('UNPAUSING', 'PAUSED', 'unpause', 'PAUSED', ('redo', 'PAUSED', 'unpause')),
    ('SUSPENDING', 'ACTIVE', 'suspend', 'RUNNING', ('redo', 'ACTIVE', 'suspend')),
    ('RESUMING', 'SUSPENDED', 'resume', 'SHUTDOWN', ('redo', 'SUSPENDED', 'resume')),
    ('UPDATING', 'STOPPED', 'update', 'SHUTDOWN', ('redo', 'STOPPED', 'update')),
    ('RESIZING', 'STOPPED', 'resize', 'SHUTDOWN', ('redo', 'STOPPED', 'resize')),
    ('RESTORING', 'SOFT_DELETED', 'restore', 'SHUTDOWN', ('redo', 'SOFT_DELETED', 'restore')),
    ('DELETING', 'ACTIVE', 'delete', 'RUNNING', ('finish delete', 'DELETED', 'delete')),
    ('MIGRATING', 'ACTIVE', 'live_migrate', 'RUNNING', ('reset after locating the guest', 'ACTIVE', None)),
    ('SPAWNING', 'DELETED', 'create', 'NOSTATE', ('set ERROR', 'ERROR', None)),
    ('SPAWNING', 'DELETED', 'create', 'SHUTDOWN', ('set ERROR', 'STOPPED', None)),
    ('REBUILDING', 'ACTIVE', None, 'RUNNING', ('set ERROR', 'ERROR', None)),
    ('SOMETHING', 'ACTIVE', None, 'RUNNING', ('clear', 'ACTIVE', None)),
])
def test_stale_task_recovery(task_state, vm_state, action, power, expected):
    assert tuple(r.recover_stale_task(task_state, vm_state, action, power)) == expected


def test_every_stale_row_has_a_case():
    assert set(r.STALE_TASK_TABLE) == {
        'STARTING', 'STOPPING', 'REBOOTING', 'REBOOTING_HARD', 'PAUSING', 'UNPAUSING', 'SUSPENDING', 'RESUMING', 'UPDATING',
        'RESIZING', 'DELETING', 'MIGRATING', 'SPAWNING', 'REBUILDING', 'RESTORING', 'IMAGE_SNAPSHOT', 'RESTORING_SNAPSHOT', 'DELETING_SNAPSHOT'}


def test_every_task_an_action_records_has_an_explicit_recovery():
    # a task_state missing from the table falls to 'clear': an interrupted hard reboot was forgotten, not retried
    recorded = {row.task_state for row in actions.ACTIONS.values() if row.task_state}
    assert recorded <= set(r.STALE_TASK_TABLE), sorted(recorded - set(r.STALE_TASK_TABLE))


@pytest.mark.parametrize('vm_state,power_state,alternative,expected', [
    ('ACTIVE', 'SHUTDOWN', False, ('stopped', {})),
    ('ACTIVE', 'SHUTDOWN', True, ('running', {})),
    ('ACTIVE', 'SUSPENDED', False, ('stopped', {})),
    ('STOPPED', 'RUNNING', False, ('stopped', {'shutdown_timeout': 0})),
    ('STOPPED', 'RUNNING', True, ('running', {})),
    ('PAUSED', 'CRASHED', False, ('stopped', {'shutdown_timeout': 0})),
    ('DELETED', 'RUNNING', False, None),            # a record alone never deletes a VM (issue 24, finding 5)
    ('SOFT_DELETED', 'PAUSED', True, None),
    ('ACTIVE', 'PAUSED', False, None),
    ('ERROR', 'RUNNING', False, None),
    ('ACTIVE', 'RUNNING', False, None),
])
def test_fix_declaration(vm_state, power_state, alternative, expected):
    assert r.fix_declaration(r.power_sync_decision(vm_state, power_state), alternative) == expected


def test_no_decision_is_fixed_by_a_delete():
    """Whoever may write a VM's record may write any record: no table row turns into state=absent."""
    for vm_state, _power, _expected in SYNC_CASES:
        for power in ('RUNNING', 'PAUSED', 'SUSPENDED', 'SHUTDOWN', 'CRASHED', 'NOSTATE'):
            for alternative in (False, True):
                fix = r.fix_declaration(r.power_sync_decision(vm_state, power), alternative)
                assert fix is None or fix[0] != 'absent', (vm_state, power, fix)
    assert 'absent' not in [declared for declared, _options in r.FIX_DECLARATIONS.values()]


@pytest.mark.parametrize('declared, power_state, expected', [
    ('stopped', 'RUNNING', True),
    ('stopped', 'PAUSED', True),
    ('stopped', 'SUSPENDED', True),
    ('stopped', 'CRASHED', True),
    ('stopped', 'SHUTDOWN', False),     # recording STOPPED for a guest that is off
    ('running', 'SHUTDOWN', False),
    ('running', 'RUNNING', False),
    ('absent', 'SHUTDOWN', True),
])
def test_destructive_fix(declared, power_state, expected):
    assert r.destructive_fix(declared, power_state) is expected


@pytest.mark.parametrize('task_state, vm_state, power, expected', [
    ('DELETING', 'ACTIVE', 'RUNNING', ('finish delete', 'ACTIVE')),     # the record says delete: the hypervisor says it runs
    ('DELETING', 'DELETED', 'RUNNING', ('finish delete', 'ACTIVE')),
    ('STOPPING', 'ACTIVE', 'SHUTDOWN', ('redo', 'STOPPED')),
    ('SPAWNING', 'DELETED', 'SHUTDOWN', ('set ERROR', 'STOPPED')),
    ('SPAWNING', 'DELETED', 'NOSTATE', ('set ERROR', 'ERROR')),
])
def test_stale_recovery_reads_the_hypervisor(task_state, vm_state, power, expected):
    from ansible_collections.converge.virt.plugins.module_utils._phase import views
    from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord
    recovery, recorded = views.stale_recovery(TaskRecord(vm_state, task_state, 'x', None, lease_until=float('nan')), power)
    assert (recovery.action, recorded) == expected
