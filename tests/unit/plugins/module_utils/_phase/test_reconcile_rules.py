# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Power sync and stale-task recovery, rule by rule, with the words a backend reads (new string objects).

The table tests are in test_reconcile.py; Nova's own cases in test_upstream_nova.py.
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile as r


def fresh(word):
    """The same text in a new string object (a record's words are never the module's constants)."""
    return ''.join(list(word))


def test_a_task_in_flight_is_skipped_and_named():
    decision = r.power_sync_decision('ACTIVE', 'SHUTDOWN', fresh('STOPPING'))
    assert decision == r.Decision(r.SKIP_TASK_IN_FLIGHT, 'task_state is STOPPING', False, None)


@pytest.mark.parametrize('vm_state, power_state, action', [
    ('ACTIVE', 'SHUTDOWN', r.RECORD_STOPPED), ('STOPPED', 'RUNNING', r.FORCE_STOP), ('PAUSED', 'CRASHED', r.FORCE_STOP),
    ('ERROR', 'RUNNING', r.LEAVE_ALONE), ('ACTIVE', 'RUNNING', r.IN_SYNC),
])
def test_power_sync_reads_outside_words(vm_state, power_state, action):
    decision = r.power_sync_decision(fresh(vm_state), fresh(power_state))
    assert decision.action == action
    assert decision.reason in ('vm_state %s, power_state %s' % (vm_state, power_state),
                               'vm_state %s agrees with power_state %s' % (vm_state, power_state))


@pytest.mark.parametrize('power_state, vm_state', [('SHUTDOWN', 'STOPPED'), ('SUSPENDED', 'ERROR'), ('RUNNING', 'ERROR'),
                                                   ('CRASHED', 'ERROR'), ('NOSTATE', 'ERROR'), (None, 'ERROR')])
def test_an_interrupted_build_is_stopped_only_when_plainly_off(power_state, vm_state):
    recovery = r.recover_stale_task(fresh('SPAWNING'), 'BUILDING', 'create', None if power_state is None else fresh(power_state))
    assert recovery == r.Recovery(r.SET_ERROR, vm_state, None)


@pytest.mark.parametrize('task_state, kind', [('STOPPING', r.REDO), ('DELETING', r.FINISH_DELETE), ('MIGRATING', r.RESET_AFTER_LOCATING),
                                              ('REBUILDING', r.SET_ERROR), ('NOT_A_TASK', r.CLEAR)])
def test_recovery_kinds_read_outside_words(task_state, kind):
    assert r.recover_stale_task(fresh(task_state), 'ACTIVE', 'x', 'RUNNING').action == kind


@pytest.mark.parametrize('declared, power_state, destructive', [
    ('absent', 'SHUTDOWN', True), ('stopped', 'RUNNING', True), ('stopped', 'PAUSED', True), ('stopped', 'CRASHED', True),
    ('stopped', 'SHUTDOWN', False), ('running', 'RUNNING', False), ('suspended', 'RUNNING', False), ('paused', 'RUNNING', False),
    ('present', 'RUNNING', False), ('', 'RUNNING', False), ('abc', 'RUNNING', False), ('zzz', 'RUNNING', False),
])
def test_destructive_fix(declared, power_state, destructive):
    assert r.destructive_fix(fresh(declared), fresh(power_state)) is destructive
