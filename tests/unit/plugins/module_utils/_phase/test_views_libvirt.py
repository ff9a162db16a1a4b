# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt_views.libvirt_vm_view and effective_vm_state: every state word of a libvirt domain from dom.state() and the record."""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_state as ds
from ansible_collections.converge.virt.plugins.module_utils._phase import views
from ansible_collections.converge.virt.plugins.module_utils._libvirt import views as libvirt_views

KEYS = ('power_state', 'state', 'state_reason', 'vm_state', 'effective_vm_state', 'task_state', 'task_id', 'status', 'phase', 'phase_reason')


def fresh(word):
    """The same text in a new string object (words read from a record are never the module's constants)."""
    return ''.join(list(word))


def words(state, reason, record=None, **kwargs):
    view = libvirt_views.libvirt_vm_view(state, reason, record, **kwargs)
    return (view['power_state'], view['vm_state'], view['effective_vm_state'], view['status'], view['phase'])


# (libvirt state, reason, record, kwargs) -> (power_state, vm_state, effective_vm_state, status, phase)
CASES = [
    ((1, 1, None, {}), ('RUNNING', 'ACTIVE', 'ACTIVE', 'Running', 'Running')),
    ((2, 0, None, {}), ('RUNNING', 'ACTIVE', 'ACTIVE', 'Running', 'Running')),
    ((3, 1, None, {}), ('PAUSED', 'PAUSED', 'PAUSED', 'Paused', 'Running')),
    ((3, 2, None, {}), ('PAUSED', 'PAUSED', 'PAUSED', 'Running', 'Running')),              # paused by a migration: not Paused
    ((3, 2, None, {'job_active': True}), ('PAUSED', 'PAUSED', 'PAUSED', 'Migrating', 'Running')),
    ((1, 1, None, {'job_active': True}), ('RUNNING', 'ACTIVE', 'ACTIVE', 'Migrating', 'Running')),
    ((4, 1, None, {}), ('SHUTDOWN', 'STOPPED', 'STOPPED', 'Stopping', '')),                # shutting down
    ((5, 1, None, {}), ('SHUTDOWN', 'STOPPED', 'STOPPED', 'Stopped', 'Succeeded')),
    ((5, 0, None, {}), ('SHUTDOWN', 'STOPPED', 'STOPPED', 'Stopped', '')),
    ((5, 2, None, {'acpi': False}), ('SHUTDOWN', 'STOPPED', 'STOPPED', 'Stopped', 'Succeeded')),
    ((5, 2, None, {}), ('SHUTDOWN', 'STOPPED', 'STOPPED', 'Stopped', 'Failed')),
    ((5, 2, None, {'grace_period': 0}), ('SHUTDOWN', 'STOPPED', 'STOPPED', 'Stopped', 'Succeeded')),
    ((5, 3, None, {}), ('SHUTDOWN', 'STOPPED', 'STOPPED', 'Stopped', 'Failed')),
    ((5, 5, None, {'managed_save': True}), ('SHUTDOWN', 'SUSPENDED', 'SUSPENDED', 'Stopped', 'Succeeded')),
    ((6, 1, None, {}), ('CRASHED', 'ERROR', 'ERROR', 'Stopped', 'Failed')),
    ((7, 0, None, {}), ('SUSPENDED', 'ACTIVE', 'ACTIVE', 'Running', 'Running')),
    ((0, 0, None, {}), ('NOSTATE', 'ERROR', 'ERROR', 'Stopped', '')),
    # with a record
    ((1, 1, {'vm_state': 'ACTIVE'}, {}), ('RUNNING', 'ACTIVE', 'ACTIVE', 'Running', 'Running')),
    ((5, 1, {'vm_state': 'ACTIVE'}, {}), ('SHUTDOWN', 'ACTIVE', 'STOPPED', 'Stopped', 'Succeeded')),     # the guest stopped itself
    ((5, 1, {'vm_state': 'ACTIVE', 'task_state': 'STOPPING'}, {}), ('SHUTDOWN', 'ACTIVE', 'ACTIVE', 'Stopped', 'Succeeded')),
    ((1, 1, {'vm_state': 'STOPPED', 'task_state': 'STARTING'}, {}), ('RUNNING', 'STOPPED', 'STOPPED', 'Running', 'Running')),
    ((1, 1, {'vm_state': 'ACTIVE', 'task_state': 'STOPPING'}, {}), ('RUNNING', 'ACTIVE', 'ACTIVE', 'Stopping', 'Running')),
    ((1, 1, {'vm_state': 'ACTIVE', 'task_state': 'DELETING'}, {}), ('RUNNING', 'ACTIVE', 'ACTIVE', 'Terminating', 'Running')),
    ((5, 0, {'vm_state': 'ACTIVE', 'task_state': 'DELETING'}, {}), ('SHUTDOWN', 'ACTIVE', 'ACTIVE', 'Terminating', '')),
    ((1, 1, {'vm_state': 'ACTIVE', 'task_state': 'MIGRATING'}, {}), ('RUNNING', 'ACTIVE', 'ACTIVE', 'Migrating', 'Running')),
    ((1, 1, {'vm_state': 'ERROR'}, {}), ('RUNNING', 'ERROR', 'ERROR', 'Running', 'Running')),              # sticky
    ((5, 1, {'vm_state': 'SUSPENDED'}, {'managed_save': True}), ('SHUTDOWN', 'SUSPENDED', 'SUSPENDED', 'Stopped', 'Succeeded')),
    ((5, 1, {'vm_state': 'SUSPENDED'}, {}), ('SHUTDOWN', 'SUSPENDED', 'STOPPED', 'Stopped', 'Succeeded')),  # the save image is gone
]


@pytest.mark.parametrize('args, expected', CASES)
def test_libvirt_words(args, expected):
    state, reason, record, kwargs = args
    assert words(state, reason, record, **kwargs) == expected


@pytest.mark.parametrize('task_state', ['STARTING', 'REBOOTING', 'REBOOTING_HARD', 'RESUMING', 'UNPAUSING', 'RESTORING'])
def test_a_start_under_way_reads_starting(task_state):
    # a domain that is off while a task that starts it runs
    view = libvirt_views.libvirt_vm_view(5, 0, {'vm_state': 'STOPPED', 'task_state': fresh(task_state)})
    assert view['status'] == 'Starting' and view['task_state'] == task_state
    assert libvirt_views.START_TASKS == ('STARTING', 'REBOOTING', 'REBOOTING_HARD', 'RESUMING', 'UNPAUSING', 'RESTORING')


@pytest.mark.parametrize('task_state', ['STOPPING', 'PAUSING', 'SUSPENDING', 'UPDATING', 'MIGRATING', 'SPAWNING'])
def test_other_tasks_do_not_read_starting(task_state):
    assert libvirt_views.libvirt_vm_view(5, 0, {'vm_state': 'STOPPED', 'task_state': task_state})['status'] == 'Stopped'


def test_record_words_outside_and_empty():
    view = libvirt_views.libvirt_vm_view(1, 1, {'vm_state': fresh('ACTIVE'), 'task_state': fresh('DELETING'), 'task_id': fresh('t1')})
    assert (view['status'], view['task_id']) == ('Terminating', 't1')
    view = libvirt_views.libvirt_vm_view(1, 1, {'vm_state': '', 'task_state': '', 'task_id': ''})
    assert (view['vm_state'], view['task_state'], view['task_id']) == ('ACTIVE', None, None)
    assert libvirt_views.libvirt_vm_view(1, 1, {'vm_state': 'STOPPED', 'task_state': fresh('MIGRATING')})['status'] == 'Migrating'
    assert libvirt_views.libvirt_vm_view(1, 1, {'vm_state': 'ACTIVE', 'task_state': fresh('STOPPING')})['status'] == 'Stopping'


def test_every_key_and_its_words():
    view = libvirt_views.libvirt_vm_view(5, 2, {'vm_state': 'STOPPED', 'task_id': None}, acpi=True, grace_period=30)
    assert tuple(sorted(view)) == tuple(sorted(KEYS))
    assert (view['state'], view['state_reason'], view['phase'], view['phase_reason']) == (
        'shutoff', 'destroyed', 'Failed', 'forced off (destroyed) after a graceful shutdown (ACPI) did not finish within the grace period')
    assert libvirt_views.libvirt_vm_view(1, 1)['phase_reason'] is None
    assert libvirt_views.libvirt_vm_view(5, 0)['phase_reason'] is None
    # a migrated-away domain shows no phase (it had one elsewhere)
    assert (libvirt_views.libvirt_vm_view(5, 4)['phase'], libvirt_views.libvirt_vm_view(5, 4)['phase_reason']) == ('', None)


def test_absent_view():
    view = views.absent_view()
    assert tuple(sorted(view)) == tuple(sorted(KEYS))
    assert view == {'power_state': 'NOSTATE', 'state': None, 'state_reason': None, 'vm_state': 'DELETED', 'effective_vm_state': 'DELETED',
                    'task_state': None, 'task_id': None, 'status': None, 'phase': None, 'phase_reason': None}


@pytest.mark.parametrize('record, grace, phase', [
    ({'stop_grace_period': '0'}, None, 'Succeeded'),
    ({'stop_grace_period': 0}, None, 'Succeeded'),
    ({'stop_grace_period': '0.0'}, None, 'Succeeded'),
    ({'stop_grace_period': '60'}, None, 'Failed'),
    ({'stop_grace_period': ''}, None, 'Failed'),
    ({'stop_grace_period': 'soon'}, None, 'Failed'),
    ({'stop_grace_period': '-5'}, None, 'Failed'),
    ({'stop_grace_period': True}, None, 'Failed'),
    ({'stop_grace_period': False}, None, 'Failed'),
    ({'stop_grace_period': [0]}, None, 'Failed'),
    ({'stop_grace_period': None}, None, 'Failed'),
    ({'stop_grace_period': '60'}, 0, 'Succeeded'),           # the argument wins over the record
    ({'stop_grace_period': '0'}, 30, 'Failed'),
])
def test_grace_period_from_the_record(record, grace, phase):
    assert libvirt_views.libvirt_vm_view(5, 2, record, acpi=True, grace_period=grace)['phase'] == phase


def test_a_grace_period_of_zero_reads_as_known():
    assert libvirt_views.libvirt_vm_view(5, 2, {'stop_grace_period': '0'})['phase_reason'].startswith('powered off at once')
    assert libvirt_views.libvirt_vm_view(5, 2, {'stop_grace_period': 'x'})['phase_reason'] == ds.DESTROYED_GRACE_UNKNOWN


# effective_vm_state: (recorded, power_state, managed_save, task_state) -> vm_state a new task starts from
EFFECTIVE = [
    (None, 'RUNNING', False, None, 'ACTIVE'), ('', 'SHUTDOWN', False, None, 'STOPPED'), (None, 'SHUTDOWN', True, None, 'SUSPENDED'),
    ('ACTIVE', 'RUNNING', False, None, 'ACTIVE'), ('ACTIVE', 'SHUTDOWN', False, None, 'STOPPED'), ('ACTIVE', 'CRASHED', False, None, 'ERROR'),
    ('ACTIVE', 'PAUSED', False, None, 'PAUSED'), ('ACTIVE', 'SHUTDOWN', False, 'STOPPING', 'ACTIVE'),
    ('STOPPED', 'RUNNING', False, None, 'ACTIVE'), ('STOPPED', 'SHUTDOWN', False, None, 'STOPPED'),
    ('PAUSED', 'PAUSED', False, None, 'PAUSED'), ('PAUSED', 'SHUTDOWN', False, None, 'STOPPED'),
    ('SUSPENDED', 'SHUTDOWN', True, None, 'SUSPENDED'), ('SUSPENDED', 'SHUTDOWN', False, None, 'STOPPED'),
    ('SUSPENDED', 'RUNNING', False, None, 'ACTIVE'), ('SUSPENDED', 'RUNNING', True, None, 'SUSPENDED'),
    ('ERROR', 'RUNNING', False, None, 'ERROR'), ('RESCUED', 'SHUTDOWN', False, None, 'RESCUED'), ('RESIZED', 'RUNNING', False, None, 'RESIZED'),
    ('SOFT_DELETED', 'SHUTDOWN', False, None, 'SOFT_DELETED'), ('BUILDING', 'SHUTDOWN', False, None, 'BUILDING'),
    ('DELETED', 'RUNNING', False, None, 'ACTIVE'),
]


@pytest.mark.parametrize('recorded, power, managed, task, expected', EFFECTIVE)
def test_effective_vm_state(recorded, power, managed, task, expected):
    recorded = fresh(recorded) if recorded else recorded
    assert views.effective_vm_state(recorded, fresh(power), managed, task) == expected
    assert views.STICKY_VM_STATES == ('ERROR', 'RESCUED', 'RESIZED', 'SOFT_DELETED', 'BUILDING')


def test_effective_vm_state_defaults():
    assert views.effective_vm_state('ACTIVE', 'SHUTDOWN') == 'STOPPED'
    assert views.effective_vm_state(None, 'SHUTDOWN') == 'STOPPED'


@pytest.mark.parametrize('reason, status', [
    (1, 'Paused'), (5, 'Paused'), (0, 'Paused'), (3, 'Paused'), (10, 'Paused'), (12, 'Paused'), (2, 'Running'),
    (fresh('migration'), 'Running'), (fresh('ioerror'), 'Paused'), (fresh('api_error'), 'Paused'),
])
def test_only_a_migration_pause_is_not_paused(reason, status):
    # every pause reads Paused but the one a migration makes (virt-handler: "by qemu during migration should skip paused condition")
    assert libvirt_views.libvirt_vm_view(3, reason)['status'] == status
    assert libvirt_views.libvirt_vm_view(fresh('paused'), reason)['status'] == status


def test_words_given_as_words():
    # a backend may pass libvirt's words (new string objects) instead of numbers
    assert libvirt_views.libvirt_vm_view(fresh('shutdown'), 1)['status'] == 'Stopping'
    assert libvirt_views.libvirt_vm_view(fresh('running'), 1)['status'] == 'Running'
    assert libvirt_views.libvirt_vm_view(fresh('shutoff'), fresh('shutdown'))['phase'] == 'Succeeded'


def test_a_saved_guest_being_resumed_reads_starting():
    # a managed-save image is no final instance: the resume under way reads Starting; a shut-off guest's final phase
    # wins over a start under way (as KubeVirt's old final VMI does until the new one exists)
    resuming = {'vm_state': 'SUSPENDED', 'task_state': 'RESUMING'}
    assert libvirt_views.libvirt_vm_view(5, 5, resuming, managed_save=True)['status'] == 'Starting'
    assert libvirt_views.libvirt_vm_view(5, 1, {'vm_state': 'STOPPED', 'task_state': 'STARTING'})['status'] == 'Stopped'


def test_a_forged_record_word_is_kept_when_the_power_sync_table_has_no_row_for_it():
    assert views.effective_vm_state('ZOMBIE', 'RUNNING') == 'ZOMBIE'
    assert views.effective_vm_state('ZOMBIE', 'SHUTDOWN', managed_save=True) == 'ZOMBIE'


def test_a_saved_record_of_an_active_vm_reads_suspended():
    assert views.effective_vm_state('ACTIVE', 'SHUTDOWN', managed_save=True) == 'SUSPENDED'


def test_recorded_grace_periods_are_read_as_seconds():
    assert libvirt_views.libvirt_vm_view(5, 2, {'stop_grace_period': '-0.5'})['phase'] == 'Failed'          # no negative grace: not known
    reason = libvirt_views.libvirt_vm_view(5, 2, {'stop_grace_period': '60'})['phase_reason']
    assert reason.startswith('forced off (destroyed) after a graceful shutdown')
