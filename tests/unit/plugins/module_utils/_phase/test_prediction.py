# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check mode's predicted VM: every word from the plan, nothing left over from the observation (issue 17, Part 2 item 4)."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase.prediction import predict_view

RUNNING_VM = {'name': 'a', 'exists': True, 'vm_state': 'ACTIVE', 'power_state': 'RUNNING', 'task_state': None, 'status': 'Running',
              'phase': 'Running', 'phase_reason': None, 'state_reason': 'booted', 'printable_status': 'Running', 'vmi_uid': 'u1', 'managed_save': False}


def step(action, after):
    return {'action': action, 'task_state': None, 'vm_state_before': 'x', 'vm_state_after': after}


@pytest.mark.parametrize('steps, words', [
    ([step('stop', 'STOPPED')], ('STOPPED', 'SHUTDOWN', 'Stopped', None, True)),
    ([step('pause', 'PAUSED')], ('PAUSED', 'PAUSED', 'Paused', 'Running', True)),
    ([step('suspend', 'SUSPENDED')], ('SUSPENDED', 'SHUTDOWN', 'Stopped', None, True)),
    ([step('reboot_soft', 'ACTIVE')], ('ACTIVE', 'RUNNING', 'Running', 'Running', True)),
    ([step('stop', 'STOPPED'), step('delete', 'DELETED')], ('DELETED', 'NOSTATE', None, None, False)),
])
def test_power_actions_predict_every_word(steps, words):
    got = predict_view(RUNNING_VM, steps)
    assert (got['vm_state'], got['power_state'], got['status'], got['phase'], got['exists']) == words
    assert got['task_state'] is None and got['printable_status'] is None
    assert got['state_reason'] is None and got['vmi_uid'] is None
    assert got['managed_save'] == (words[0] == 'SUSPENDED')
    assert RUNNING_VM['power_state'] == 'RUNNING', 'the observation is not changed'


def test_create_of_a_missing_vm_predicts_it_exists_and_stopped():
    missing = {'name': 'a', 'exists': False, 'vm_state': 'DELETED', 'power_state': 'NOSTATE', 'task_state': None, 'status': None, 'phase': None}
    got = predict_view(missing, [step('create', 'STOPPED')])
    assert (got['exists'], got['vm_state'], got['power_state'], got['status']) == (True, 'STOPPED', 'SHUTDOWN', 'Stopped')


def test_without_a_power_action_the_hypervisor_words_stay():
    got = predict_view(RUNNING_VM, [step('update', 'ACTIVE')])
    assert got == RUNNING_VM
    drift = dict(RUNNING_VM, power_state='SHUTDOWN', status='Stopped', phase='Failed')
    got = predict_view(drift, [], vm_state='STOPPED')
    assert got == dict(drift, vm_state='STOPPED')


def test_words_that_come_back_as_data_are_compared_by_value():
    # steps and states read back from a result or a record (JSON, XML) are equal to the table's words, not the same
    # objects: a delete still predicts a missing VM, a suspend still predicts the managed save image
    import json  # pylint: disable=import-outside-toplevel
    steps = json.loads(json.dumps([step('suspend', 'SUSPENDED')]))
    assert predict_view(RUNNING_VM, steps)['managed_save'] is True
    deleted = json.loads(json.dumps([step('stop', 'STOPPED'), step('delete', 'DELETED')]))
    assert predict_view(RUNNING_VM, deleted)['exists'] is False
