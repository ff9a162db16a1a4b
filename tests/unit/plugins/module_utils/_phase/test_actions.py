# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action table.

Source: Nova nova/compute/api.py, the @check_instance_state decorators of
start, stop, reboot, pause, unpause, suspend, resume, live_migrate,
live_migrate_abort, resize, attach_volume, detach_volume, soft_delete,
restore, delete (phase-model section 5).
"""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._phase import actions
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

ALL = set(s.VM_STATES)

# action -> (accepted vm_states, task_state while running, vm_state after from the first accepted state)
EXPECTED = {
    'create': ({'DELETED'}, 'SPAWNING', 'STOPPED'),
    'update': ({'ACTIVE', 'STOPPED', 'PAUSED', 'SUSPENDED', 'ERROR'}, 'UPDATING', None),
    'start': ({'STOPPED'}, 'STARTING', 'ACTIVE'),
    'stop': ({'ACTIVE', 'ERROR'}, 'STOPPING', 'STOPPED'),
    'reboot_soft': ({'ACTIVE'}, 'REBOOTING', 'ACTIVE'),
    'reboot_hard': ({'ACTIVE', 'STOPPED', 'PAUSED', 'SUSPENDED', 'ERROR'}, 'REBOOTING_HARD', 'ACTIVE'),
    'pause': ({'ACTIVE'}, 'PAUSING', 'PAUSED'),
    'unpause': ({'PAUSED'}, 'UNPAUSING', 'ACTIVE'),
    'suspend': ({'ACTIVE'}, 'SUSPENDING', 'SUSPENDED'),
    'resume': ({'SUSPENDED'}, 'RESUMING', 'ACTIVE'),
    'live_migrate': ({'ACTIVE', 'PAUSED'}, 'MIGRATING', None),
    'migrate_abort': (ALL, 'MIGRATING', None),
    'offline_migrate': ({'STOPPED'}, 'MIGRATING', None),
    'resize': ({'ACTIVE', 'STOPPED'}, 'RESIZING', 'RESIZED'),
    'confirm_resize': ({'RESIZED'}, None, 'ACTIVE'),
    'attach_volume': ({'ACTIVE', 'PAUSED', 'STOPPED', 'RESIZED', 'SOFT_DELETED'}, None, None),
    'detach_volume': ({'ACTIVE', 'PAUSED', 'STOPPED', 'RESIZED', 'SOFT_DELETED'}, None, None),
    'soft_delete': (ALL, 'DELETING', 'SOFT_DELETED'),
    'restore': ({'SOFT_DELETED'}, 'RESTORING', 'ACTIVE'),
    'delete': (ALL, 'DELETING', 'DELETED'),
    # Nova snapshot (IMAGE_SNAPSHOT) without SUSPENDED (a libvirt managed save cannot be snapshotted); restore / delete: extensions
    'snapshot': ({'ACTIVE', 'STOPPED', 'PAUSED'}, 'IMAGE_SNAPSHOT', None),
    'restore_snapshot': ({'ACTIVE', 'STOPPED', 'PAUSED', 'ERROR'}, 'RESTORING_SNAPSHOT', None),
    'delete_snapshot': ({'ACTIVE', 'STOPPED', 'PAUSED', 'ERROR'}, 'DELETING_SNAPSHOT', None),
}


def test_table_has_exactly_the_expected_actions():
    assert set(actions.ACTIONS) == set(EXPECTED)


@pytest.mark.parametrize('action', sorted(EXPECTED))
def test_row(action):
    accepted, task_state, after = EXPECTED[action]
    idle_task = 'MIGRATING' if action == 'migrate_abort' else None
    for vm_state in sorted(ALL):
        if vm_state in accepted:
            row = actions.check_action(action, vm_state, idle_task)
            assert row.task_state == task_state
            expected_after = vm_state if after is None else after
            assert actions.vm_state_after(action, vm_state) == expected_after
        else:
            with pytest.raises(TransitionRefused) as err:
                actions.check_action(action, vm_state, idle_task)
            assert vm_state in str(err.value) and action in str(err.value)


@pytest.mark.parametrize('action', sorted(set(EXPECTED) - {'delete', 'soft_delete', 'migrate_abort'}))
def test_task_in_flight_refuses(action):
    accepted = sorted(EXPECTED[action][0])
    with pytest.raises(TransitionRefused) as err:
        actions.check_action(action, accepted[0], 'STOPPING')
    assert 'STOPPING' in str(err.value)


def test_migrate_abort_needs_a_migration():
    with pytest.raises(TransitionRefused):
        actions.check_action('migrate_abort', 'ACTIVE', None)


def test_delete_preempts_any_task():
    assert actions.check_action('delete', 'ACTIVE', 'MIGRATING').task_state == 'DELETING'


def test_refusal_message_names_action_and_states():
    with pytest.raises(TransitionRefused) as err:
        actions.check_action('pause', 'STOPPED', None)
    assert str(err.value) == "action 'pause' refused: vm_state is STOPPED, task_state is None"
    assert err.value.to_result()['accepted_vm_states'] == ['ACTIVE']


def test_resume_returns_to_previous():
    assert actions.vm_state_after('resume', 'SUSPENDED', previous='PAUSED') == 'PAUSED'
    assert actions.vm_state_after('confirm_resize', 'RESIZED', previous='STOPPED') == 'STOPPED'


def test_unknown_action():
    with pytest.raises(TransitionRefused):
        actions.check_action('teleport', 'ACTIVE')
    assert not actions.accepts('teleport', 'ACTIVE')


def fresh(word):
    """The same text in a new string object (a vm_state read from a record is never the module's constant)."""
    return ''.join(list(word))


@pytest.mark.parametrize('action', sorted(EXPECTED))
def test_rows_read_outside_words(action):
    accepted, _task_state, _after = EXPECTED[action]
    task = fresh('MIGRATING') if action == 'migrate_abort' else None
    for vm_state in sorted(ALL):
        assert actions.accepts(fresh(action), fresh(vm_state), task) is (vm_state in accepted), (action, vm_state)


def test_the_refusal_says_why_and_what_is_accepted():
    with pytest.raises(TransitionRefused) as err:
        actions.check_action('migrate_abort', 'ACTIVE', None)
    assert 'another task is in flight' in str(err.value)
    assert err.value.to_result()['accepted_vm_states'] == sorted(s.VM_STATES)
    with pytest.raises(TransitionRefused) as err:
        actions.check_action('start', 'ACTIVE', 'STOPPING')
    assert 'another task is in flight' in str(err.value) and err.value.to_result()['accepted_vm_states'] == ['STOPPED']
    with pytest.raises(TransitionRefused) as err:
        actions.check_action('teleport', 'ACTIVE')
    assert 'unknown action' in str(err.value)
    with pytest.raises(TransitionRefused) as err:
        actions.check_action('start', 'ACTIVE')
    assert 'in flight' not in str(err.value) and err.value.to_result()['accepted_vm_states'] == ['STOPPED']


def test_vm_state_after_every_kind():
    assert actions.vm_state_after('pause', 'ACTIVE') == 'PAUSED'
    assert actions.vm_state_after('update', 'SUSPENDED') == 'SUSPENDED'          # unchanged
    assert actions.vm_state_after('resume', 'SUSPENDED') == 'ACTIVE'             # previous unknown: ACTIVE
    assert actions.vm_state_after('resume', 'SUSPENDED', None) == 'ACTIVE'
    assert actions.vm_state_after('resume', 'SUSPENDED', '') == 'ACTIVE'
    assert actions.vm_state_after('confirm_resize', 'RESIZED', 'STOPPED') == 'STOPPED'
    assert (actions.ANY, actions.PREVIOUS, actions.UNCHANGED) == ('*', 'previous', 'unchanged')


def test_hard_reboot_and_volume_rows():
    assert actions.ALLOW_HARD_REBOOT_TASKS == (None, 'REBOOTING', 'REBOOTING_HARD', 'RESUMING', 'UNPAUSING', 'PAUSING', 'SUSPENDING')
    assert actions.VOLUME_VM_STATES == ('ACTIVE', 'PAUSED', 'STOPPED', 'RESIZED', 'SOFT_DELETED')
    assert actions.accepts('reboot_hard', 'PAUSED', fresh('SUSPENDING')) and not actions.accepts('reboot_hard', 'PAUSED', 'STOPPING')
