# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Nova's own test cases, expressed in our tables.

Each case names the upstream test it restates. Read from openstack/nova at 00a03040 (2026-08):
- API = nova/tests/unit/compute/test_api.py (the @check_instance_state rows of nova/compute/api.py);
- MGR = nova/tests/unit/compute/test_compute_mgr.py (_sync_instance_power_state, handle_lifecycle_event, _init_instance).
Nova's REBOOT_PENDING / REBOOT_STARTED are REBOOTING here, POWERING_ON / POWERING_OFF are STARTING / STOPPING
(both listed in docs/states.md). A case with no counterpart (launched_at, force_stop, SHELVED) is left out.
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._phase import actions
from ansible_collections.converge.virt.plugins.module_utils._phase import deviations
from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_state as ds
from ansible_collections.converge.virt.plugins.module_utils._phase import views
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord

# Nova's vm_states the test suite iterates (_get_vm_states), less SHELVED / SHELVED_OFFLOADED: ours have none.
NOVA_VM_STATES = ('ACTIVE', 'BUILDING', 'PAUSED', 'SUSPENDED', 'RESCUED', 'STOPPED', 'RESIZED', 'SOFT_DELETED', 'DELETED', 'ERROR')

# (test_api.py test, action, vm_state, task_state, accepted)
API_CASES = [
    ('test_reboot_hard_active', 'reboot_hard', 'ACTIVE', None, True),
    ('test_reboot_hard_error', 'reboot_hard', 'ERROR', None, True),
    ('test_reboot_hard_rebooting', 'reboot_hard', 'ACTIVE', 'REBOOTING', True),
    ('test_reboot_hard_reboot_started (REBOOT_STARTED is REBOOTING)', 'reboot_hard', 'ACTIVE', 'REBOOTING', True),
    ('test_reboot_hard_reboot_pending (REBOOT_PENDING is REBOOTING)', 'reboot_hard', 'ACTIVE', 'REBOOTING', True),
    ('test_reboot_hard_rescued', 'reboot_hard', 'RESCUED', None, False),
    ('test_reboot_hard_resuming', 'reboot_hard', 'ACTIVE', 'RESUMING', True),
    ('test_reboot_hard_unpausing', 'reboot_hard', 'ACTIVE', 'UNPAUSING', True),
    ('test_reboot_hard_suspending', 'reboot_hard', 'ACTIVE', 'SUSPENDING', True),
    ('test_reboot_soft', 'reboot_soft', 'ACTIVE', None, True),
    ('test_reboot_soft_error', 'reboot_soft', 'ERROR', None, False),
    ('test_reboot_soft_paused', 'reboot_soft', 'PAUSED', None, False),
    ('test_reboot_soft_stopped', 'reboot_soft', 'STOPPED', None, False),
    ('test_reboot_soft_suspended', 'reboot_soft', 'SUSPENDED', None, False),
    ('test_reboot_soft_rebooting', 'reboot_soft', 'ACTIVE', 'REBOOTING', False),
    ('test_reboot_soft_rebooting_hard', 'reboot_soft', 'ACTIVE', 'REBOOTING_HARD', False),
    ('test_reboot_soft_reboot_started (REBOOT_STARTED is REBOOTING)', 'reboot_soft', 'ACTIVE', 'REBOOTING', False),
    ('test_reboot_soft_reboot_pending (REBOOT_PENDING is REBOOTING)', 'reboot_soft', 'ACTIVE', 'REBOOTING', False),
    ('test_reboot_soft_rescued', 'reboot_soft', 'RESCUED', None, False),
    ('test_reboot_soft_resuming', 'reboot_soft', 'ACTIVE', 'RESUMING', False),
    ('test_reboot_soft_pausing', 'reboot_soft', 'ACTIVE', 'PAUSING', False),
    ('test_reboot_soft_unpausing', 'reboot_soft', 'ACTIVE', 'UNPAUSING', False),
    ('test_reboot_soft_suspending', 'reboot_soft', 'ACTIVE', 'SUSPENDING', False),
    ('test_suspend', 'suspend', 'ACTIVE', None, True),
    ('test_resume', 'resume', 'SUSPENDED', None, True),
    ('test_start', 'start', 'STOPPED', None, True),
    ('test_start_invalid_state', 'start', 'ACTIVE', None, False),
    ('test_stop', 'stop', 'ACTIVE', None, True),
    ('test_stop_a_stopped_inst', 'stop', 'STOPPED', None, False),
    ('test_pause', 'pause', 'ACTIVE', None, True),
    ('test_unpause', 'unpause', 'PAUSED', None, True),
    ('test_live_migrate_active_vm_state', 'live_migrate', 'ACTIVE', None, True),
    ('test_live_migrate_paused_vm_state', 'live_migrate', 'PAUSED', None, True),
    ('test_live_migrate_abort_succeeded', 'migrate_abort', 'ACTIVE', 'MIGRATING', True),
    ('test_live_migrate_abort_in_queue_succeeded', 'migrate_abort', 'ACTIVE', 'MIGRATING', True),
    ('test_volume_ops_invalid_task_state (attach_volume)', 'attach_volume', 'ACTIVE', 'MIGRATING', False),
    ('test_volume_ops_invalid_task_state (detach_volume)', 'detach_volume', 'ACTIVE', 'MIGRATING', False),
    ('test_delete_in_resized', 'delete', 'RESIZED', None, True),
    ('test_delete_in_resizing (RESIZE_FINISH is RESIZING)', 'delete', 'ACTIVE', 'RESIZING', True),
    ('test_delete_soft_in_resized', 'soft_delete', 'RESIZED', None, True),
    ('test_delete_soft', 'soft_delete', 'ACTIVE', None, True),
    ('test_restore_by_admin', 'restore', 'SOFT_DELETED', None, True),
    ('test_restore_by_instance_owner', 'restore', 'SOFT_DELETED', None, True),
    ('test_resize', 'resize', 'ACTIVE', None, True),
    ('test_confirm_resize', 'confirm_resize', 'RESIZED', None, True),
]


@pytest.mark.parametrize('upstream, action, vm_state, task_state, accepted', API_CASES, ids=[c[0] for c in API_CASES])
def test_action_as_nova_api_tests_it(upstream, action, vm_state, task_state, accepted):
    assert actions.accepts(action, vm_state, task_state) is accepted, upstream
    if not accepted:
        with pytest.raises(TransitionRefused) as err:
            actions.check_action(action, vm_state, task_state)
        assert action in str(err.value) and vm_state in str(err.value)


# (test, action, the only vm_states Nova accepts): every other vm_state of _get_vm_states is refused
@pytest.mark.parametrize('upstream, action, accepted', [
    ('test_suspend_fails_invalid_states', 'suspend', {'ACTIVE'}),
    ('test_stop_fails_invalid_states', 'stop', {'ACTIVE', 'ERROR'}),
    ('test_pause_fails_invalid_states', 'pause', {'ACTIVE'}),
])
def test_invalid_states_as_nova_api_tests_them(upstream, action, accepted):
    for vm_state in NOVA_VM_STATES:
        assert actions.accepts(action, vm_state) is (vm_state in accepted), (upstream, vm_state)


@pytest.mark.parametrize('upstream, action, task_state', [
    ('test_suspend: SUSPENDING', 'suspend', 'SUSPENDING'), ('test_resume: RESUMING', 'resume', 'RESUMING'),
    ('test_start: POWERING_ON', 'start', 'STARTING'), ('_test_stop: POWERING_OFF', 'stop', 'STOPPING'),
    ('test_pause: PAUSING', 'pause', 'PAUSING'), ('test_unpause: UNPAUSING', 'unpause', 'UNPAUSING'),
    ('test_restore_by_admin: RESTORING', 'restore', 'RESTORING'), ('_test_reboot_type HARD: REBOOTING_HARD', 'reboot_hard', 'REBOOTING_HARD'),
    ('_test_reboot_type SOFT: REBOOTING', 'reboot_soft', 'REBOOTING'),
])
def test_task_state_while_running_as_nova_api_sets_it(upstream, action, task_state):
    assert actions.ACTIONS[action].task_state == task_state, upstream
    # POWERING_ON / POWERING_OFF / SOFT_DELETING are named as a verb + "ing" here
    assert deviations.by_key('task-words')


def test_hard_reboot_accepts_novas_allow_reboot_and_soft_reboot_only_idle():
    # _test_reboot_type: instance.save(expected_task_state=ALLOW_REBOOT) for HARD, [None] for SOFT
    assert set(actions.ACTIONS['reboot_hard'].task_states) == {None, 'REBOOTING', 'REBOOTING_HARD', 'RESUMING', 'UNPAUSING', 'PAUSING',
                                                               'SUSPENDING'}
    assert actions.ACTIONS['reboot_soft'].task_states == (None,)
    for task_state in ('STOPPING', 'STARTING', 'MIGRATING', 'DELETING', 'RESIZING'):
        assert not actions.accepts('reboot_hard', 'ACTIVE', task_state), task_state
    # the reboot sub-steps and the task lock are listed deviations
    assert deviations.by_key('reboot-substeps') and deviations.by_key('preempting-tasks')


def test_soft_delete_accepts_any_vm_state_and_any_task_state():
    # api.py soft_delete: @check_instance_state(vm_state=None, task_state=None)
    for vm_state in s.VM_STATES:
        for task_state in (None,) + s.TASK_STATES:
            assert actions.accepts('soft_delete', vm_state, task_state), (vm_state, task_state)


def test_volume_attach_and_detach_accept_resized():
    # api.py attach_volume / detach_volume: vm_state=[ACTIVE, PAUSED, STOPPED, RESIZED, SOFT_DELETED, SHELVED, SHELVED_OFFLOADED]
    for action in ('attach_volume', 'detach_volume'):
        assert {v for v in s.VM_STATES if actions.accepts(action, v)} == {'ACTIVE', 'PAUSED', 'STOPPED', 'RESIZED', 'SOFT_DELETED'}


def test_migrate_abort_checks_only_the_task_state():
    # api.py live_migrate_abort: @check_instance_state(task_state=[task_states.MIGRATING]), no vm_state
    for vm_state in s.VM_STATES:
        assert actions.accepts('migrate_abort', vm_state, 'MIGRATING')
        assert not actions.accepts('migrate_abort', vm_state, None)


# ------------------------------------------------------------------ _sync_instance_power_state
# (test_compute_mgr.py test, vm_state, driver power_state, our decision)
SYNC_CASES = [
    ('test_sync_instance_power_state_match', 'ACTIVE', 'RUNNING', reconcile.IN_SYNC),
    ('test_sync_instance_power_state_running_stopped (re-read, then saved)', 'ACTIVE', 'SHUTDOWN', reconcile.RECORD_STOPPED),
    ('test_sync_instance_power_state_to_stop: ACTIVE, SHUTDOWN', 'ACTIVE', 'SHUTDOWN', reconcile.RECORD_STOPPED),
    ('test_sync_instance_power_state_to_stop: ACTIVE, CRASHED', 'ACTIVE', 'CRASHED', reconcile.RECORD_STOPPED),
    ('test_sync_instance_power_state_to_stop: ACTIVE, SUSPENDED', 'ACTIVE', 'SUSPENDED', reconcile.STOP),
    ('test_sync_instance_power_state_to_stop: PAUSED, SHUTDOWN (force)', 'PAUSED', 'SHUTDOWN', reconcile.FORCE_STOP),
    ('test_sync_instance_power_state_to_stop: PAUSED, CRASHED (force)', 'PAUSED', 'CRASHED', reconcile.FORCE_STOP),
    ('test_sync_instance_power_state_to_stop: STOPPED, RUNNING (force)', 'STOPPED', 'RUNNING', reconcile.FORCE_STOP),
    ('test_sync_instance_power_state_to_no_stop: ACTIVE, PAUSED', 'ACTIVE', 'PAUSED', reconcile.REPORT_ONLY),
    ('test_sync_instance_power_state_to_no_stop: ACTIVE, NOSTATE', 'ACTIVE', 'NOSTATE', reconcile.REPORT_ONLY),
    ('test_sync_instance_power_state_to_no_stop: SOFT_DELETED, NOSTATE', 'SOFT_DELETED', 'NOSTATE', reconcile.IN_SYNC),
    ('test_sync_instance_power_state_to_no_stop: SOFT_DELETED, SHUTDOWN', 'SOFT_DELETED', 'SHUTDOWN', reconcile.IN_SYNC),
    ('test_sync_instance_power_state_to_no_stop: DELETED, NOSTATE', 'DELETED', 'NOSTATE', reconcile.IN_SYNC),
    ('test_sync_instance_power_state_to_no_stop: DELETED, SHUTDOWN', 'DELETED', 'SHUTDOWN', reconcile.IN_SYNC),
    ('test_query_driver_power_state_and_sync_not_found_driver (synced as NOSTATE)', 'ACTIVE', 'NOSTATE', reconcile.REPORT_ONLY),
]


@pytest.mark.parametrize('upstream, vm_state, power_state, decision', SYNC_CASES, ids=[c[0] for c in SYNC_CASES])
def test_power_sync_as_nova_tests_it(upstream, vm_state, power_state, decision):
    result = reconcile.power_sync_decision(vm_state, power_state)
    assert result.action == decision, upstream
    # "the guest stopped itself" is read again before it is recorded (get_info(use_cache=False) in Nova)
    assert result.reread is (vm_state == 'ACTIVE' and power_state in ('SHUTDOWN', 'CRASHED'))


def test_power_sync_records_stopped_instead_of_calling_stop_a_listed_deviation():
    assert reconcile.fix_declaration(reconcile.power_sync_decision('ACTIVE', 'SHUTDOWN')) == ('stopped', {})
    assert deviations.by_key('power-sync-stop-recorded')


def test_power_sync_skips_a_task_in_flight():
    # test_query_driver_power_state_and_sync_pending_task: task_state POWERING_OFF -> no sync
    assert reconcile.power_sync_decision('ACTIVE', 'SHUTDOWN', 'STOPPING').action == reconcile.SKIP_TASK_IN_FLIGHT


# ------------------------------------------------------------------ handle_lifecycle_event
# test_handle_lifecycle_event: event -> power_state; the libvirt driver emits each event for the domain state shown
@pytest.mark.parametrize('event, libvirt_state, power_state', [
    ('EVENT_LIFECYCLE_STOPPED', (5, 1), 'SHUTDOWN'),
    ('EVENT_LIFECYCLE_STARTED', (1, 1), 'RUNNING'),
    ('EVENT_LIFECYCLE_PAUSED', (3, 1), 'PAUSED'),
    ('EVENT_LIFECYCLE_RESUMED', (1, 5), 'RUNNING'),
    ('EVENT_LIFECYCLE_SUSPENDED', (7, 0), 'SUSPENDED'),
    ('EVENT_LIFECYCLE_POSTCOPY_STARTED', (3, 12), 'PAUSED'),
    ('EVENT_LIFECYCLE_MIGRATION_COMPLETED', (3, 2), 'PAUSED'),
])
def test_lifecycle_event_power_state_as_nova_maps_it(event, libvirt_state, power_state):
    assert ds.power_state_from_libvirt(*libvirt_state).power_state == power_state, event


# ------------------------------------------------------------------ _init_instance (stale tasks)
# (test, recorded vm_state, stale task_state, last action, power_state now, vm_state Nova ends with)
INIT_CASES = [
    ('test_init_instance_resets_crashed_live_migration', 'ACTIVE', 'MIGRATING', 'live_migrate', 'RUNNING', 'ACTIVE'),
    ('test_init_instance_sets_building_tasks_error_spawning', 'BUILDING', 'SPAWNING', 'create', 'NOSTATE', 'ERROR'),
    ('test_init_instance_sets_rebuilding_errors (ACTIVE)', 'ACTIVE', 'REBUILDING', None, 'RUNNING', 'ERROR'),
    ('test_init_instance_sets_rebuilding_errors (STOPPED)', 'STOPPED', 'REBUILDING', None, 'RUNNING', 'ERROR'),
    ('test_init_instance_cleans_running_pausing', 'ACTIVE', 'PAUSING', 'pause', 'RUNNING', 'ACTIVE'),
    ('test_init_instance_cleans_running_unpausing', 'ACTIVE', 'UNPAUSING', 'unpause', 'RUNNING', 'ACTIVE'),
    ('test_init_instance_cleans_image_state_rebooting', 'ACTIVE', 'REBOOTING', 'reboot_soft', 'RUNNING', 'ACTIVE'),
    ('test_init_instance_cleans_image_state_rebooting_hard', 'ACTIVE', 'REBOOTING_HARD', 'reboot_hard', 'RUNNING', 'ACTIVE'),
    ('test_init_instance_cleans_shutdown_rebooting', 'STOPPED', 'REBOOTING', 'reboot_soft', 'SHUTDOWN', 'STOPPED'),
    ('test_init_instance_cleans_shutdown_rebooting_hard', 'STOPPED', 'REBOOTING_HARD', 'reboot_hard', 'SHUTDOWN', 'STOPPED'),
    ('test_init_instance_retries_power_off (POWERING_OFF: the stop is redone)', 'ACTIVE', 'STOPPING', 'stop', 'RUNNING', 'ACTIVE'),
    ('test_init_instance_retries_power_on (POWERING_ON: the start is redone)', 'STOPPED', 'STARTING', 'start', 'SHUTDOWN', 'STOPPED'),
]


@pytest.mark.parametrize('upstream, vm_state, task_state, action, power_state, after', INIT_CASES, ids=[c[0] for c in INIT_CASES])
def test_stale_task_vm_state_as_nova_init_instance_leaves_it(upstream, vm_state, task_state, action, power_state, after):
    record = TaskRecord(vm_state=vm_state, task_state=task_state, task_id='t', action=action)
    _recovery, recorded = views.stale_recovery(record, power_state)
    assert recorded == after, upstream


def test_an_interrupted_delete_is_not_finished_by_the_record_a_listed_deviation():
    # test_init_instance_stuck_in_deleting: Nova deletes; ours clears and re-reads (the declaration deletes)
    record = TaskRecord(vm_state='ACTIVE', task_state='DELETING', task_id='t', action='delete')
    _recovery, recorded = views.stale_recovery(record, 'RUNNING')
    assert recorded == 'ACTIVE'
    assert deviations.by_key('stale-tasks')
