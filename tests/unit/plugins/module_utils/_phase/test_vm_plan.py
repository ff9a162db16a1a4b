# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VM planner: chains of actions, refusals, fixpoint (phase-model section 5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._phase import vm_plan as p
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration as D, VmObservation as O


def actions_of(decl, obs):
    return [step.action for step in p.plan_vm(decl, obs)]


# one case per POWER_CHAINS row
CHAIN_CASES = [
    ('running', 'ACTIVE', []), ('running', 'STOPPED', ['start']), ('running', 'PAUSED', ['unpause']),
    ('running', 'SUSPENDED', ['resume']), ('running', 'ERROR', ['reboot_hard']),
    ('stopped', 'STOPPED', []), ('stopped', 'ACTIVE', ['stop']), ('stopped', 'PAUSED', ['unpause', 'stop']),
    ('stopped', 'SUSPENDED', ['resume', 'stop']), ('stopped', 'ERROR', ['stop']),
    ('paused', 'PAUSED', []), ('paused', 'ACTIVE', ['pause']), ('paused', 'SUSPENDED', ['resume', 'pause']),
    ('paused', 'ERROR', ['reboot_hard', 'pause']),
    ('suspended', 'SUSPENDED', []), ('suspended', 'ACTIVE', ['suspend']), ('suspended', 'PAUSED', ['unpause', 'suspend']),
    ('suspended', 'ERROR', ['reboot_hard', 'suspend']),
    ('restarted', 'ACTIVE', ['reboot_soft']), ('restarted', 'STOPPED', ['start']), ('restarted', 'PAUSED', ['reboot_hard']),
    ('restarted', 'SUSPENDED', ['reboot_hard']), ('restarted', 'ERROR', ['reboot_hard']),
]


@pytest.mark.parametrize('declared,vm_state,expected', CHAIN_CASES)
def test_chains(declared, vm_state, expected):
    assert actions_of(D(declared), O(exists=True, vm_state=vm_state)) == expected


def test_every_chain_row_has_a_case():
    assert {(d, vm) for d, vm, _e in CHAIN_CASES} == set(p.POWER_CHAINS)


@pytest.mark.parametrize('declared', ['paused', 'suspended'])
def test_refused_from_stopped_names_state(declared):
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D(declared), O(exists=True, vm_state='STOPPED'))
    assert 'vm_state is STOPPED' in str(err.value)


@pytest.mark.parametrize('declared,vm_state', [('running', 'RESIZED'), ('stopped', 'RESCUED'), ('paused', 'SOFT_DELETED')])
def test_no_chain_refused(declared, vm_state):
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D(declared), O(exists=True, vm_state=vm_state))
    assert vm_state in str(err.value)


def test_absent_vm():
    assert actions_of(D('running'), O()) == ['create', 'start']
    assert actions_of(D('present'), O()) == ['create']
    assert actions_of(D('stopped'), O()) == ['create']
    assert actions_of(D('absent'), O()) == []
    with pytest.raises(TransitionRefused):
        p.plan_vm(D('paused'), O())


def test_delete_preempts_a_task():
    steps = p.plan_vm(D('absent'), O(exists=True, vm_state='ACTIVE', task_state='MIGRATING'))
    assert [(s.action, s.task_state, s.vm_state_after) for s in steps] == [('delete', 'DELETING', 'DELETED')]


def test_a_vm_being_deleted_is_not_deleted_again():
    # a finalizer holds a deleted KubeVirt VM: the next absent run has nothing to do (it waits for the world)
    assert actions_of(D('absent'), O(exists=True, vm_state='STOPPED', deleting=True)) == []
    assert actions_of(D('absent'), O(exists=True, vm_state='ACTIVE', task_state='DELETING', deleting=True)) == []


@pytest.mark.parametrize('declared', ['present', 'running', 'stopped', 'paused', 'restarted'])
def test_a_vm_being_deleted_refuses_other_declarations(declared):
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D(declared), O(exists=True, vm_state='STOPPED', deleting=True))
    assert 'being deleted' in str(err.value) and 'STOPPED' in str(err.value)
    assert 'converge to %s' % declared in str(err.value) and '%s' not in str(err.value), str(err.value)


def test_task_in_flight_refuses_other_declarations():
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D('stopped'), O(exists=True, vm_state='ACTIVE', task_state='MIGRATING'))
    assert 'MIGRATING' in str(err.value)


def test_definition_change_and_restart_on_change():
    obs = O(exists=True, vm_state='ACTIVE', definition_differs=True)
    assert actions_of(D('running'), obs) == ['update']
    assert actions_of(D('running', restart_on_change=True), obs) == ['update', 'reboot_soft']
    assert actions_of(D('running', restart_on_change=True), O(exists=True, vm_state='ACTIVE', restart_needed=True)) == ['reboot_soft']
    assert actions_of(D('stopped', restart_on_change=True), O(exists=True, vm_state='STOPPED', definition_differs=True)) == ['update']


def test_autostart_change_is_an_update():
    assert actions_of(D('present', autostart=True), O(exists=True, vm_state='STOPPED', autostart=False)) == ['update']
    assert actions_of(D('present', autostart=True), O(exists=True, vm_state='STOPPED', autostart=True)) == []


def test_steps_carry_states():
    step = p.plan_vm(D('running'), O(exists=True, vm_state='STOPPED'))[0]
    assert step.as_dict() == {'action': 'start', 'task_state': 'STARTING', 'vm_state_before': 'STOPPED', 'vm_state_after': 'ACTIVE'}


def test_unknown_declared_state():
    with pytest.raises(ValueError):
        p.plan_vm(D('floating'), O())


observations = st.builds(
    O, st.booleans(), st.sampled_from(['ACTIVE', 'STOPPED', 'PAUSED', 'SUSPENDED', 'ERROR', 'RESIZED', 'RESCUED']),
    st.none(), st.booleans(), st.booleans(), st.one_of(st.none(), st.booleans()))
declarations = st.builds(D, st.sampled_from(['present', 'running', 'stopped', 'paused', 'suspended', 'absent']),
                         st.one_of(st.none(), st.booleans()), st.booleans())


@settings(settings.get_profile('converge-phase'))
@given(declarations, observations)
def test_fixpoint(decl, obs):
    if not obs.exists:
        obs = O()
    try:
        _steps, final = p.converge_model(decl, obs)
    except TransitionRefused:
        return
    assert p.plan_vm(decl, final) == [], 'not a fixpoint: %r -> %r' % (obs, final)


@settings(settings.get_profile('converge-phase'))
@given(declarations, observations)
def test_every_step_is_accepted_by_the_action_table(decl, obs):
    from ansible_collections.converge.virt.plugins.module_utils._phase import actions
    if not obs.exists:
        obs = O()
    try:
        steps = p.plan_vm(decl, obs)
    except TransitionRefused:
        return
    for step in steps:
        assert actions.accepts(step.action, step.vm_state_before, None)


def steps_of(decl, obs):
    return [(step.action, dict(step.detail)) for step in p.plan_vm(decl, obs)]


def test_defaults_and_constants():
    assert O()._field_defaults == {'exists': False, 'vm_state': 'DELETED', 'task_state': None, 'definition_differs': False,
                                   'restart_needed': False, 'autostart': None, 'deleting': False}
    assert D()._field_defaults == {'state': 'present', 'autostart': None, 'restart_on_change': False}
    assert p.DECLARED_STATES == ('present', 'running', 'stopped', 'paused', 'suspended', 'absent', 'restarted')
    assert p.COLD_ACTIONS == ('start', 'stop', 'reboot_soft', 'reboot_hard')
    assert p.RUNS_IN == ('ACTIVE', 'PAUSED', 'RESCUED')
    assert set(p.REFUSED) == {('paused', 'STOPPED'), ('suspended', 'STOPPED')}


@pytest.mark.parametrize('decl, obs, expected', [
    # a paused guest is restarted hard (a soft reboot needs ACTIVE), and stays paused
    (D('running', restart_on_change=True), O(True, 'PAUSED', definition_differs=True),
     [('update', {}), ('reboot_hard', {'reason': 'apply definition changes'})]),
    (D('paused', restart_on_change=True), O(True, 'PAUSED', restart_needed=True),
     [('reboot_hard', {'reason': 'apply definition changes'}), ('pause', {})]),
    # a suspended guest is resumed first, then restarted
    (D('running', restart_on_change=True), O(True, 'SUSPENDED', restart_needed=True),
     [('resume', {}), ('reboot_soft', {'reason': 'apply definition changes'})]),
    (D('suspended', restart_on_change=True), O(True, 'ACTIVE', definition_differs=True),
     [('update', {}), ('reboot_soft', {'reason': 'apply definition changes'}), ('suspend', {})]),
    # the chain itself starts a new guest: no extra restart
    (D('running', restart_on_change=True), O(True, 'STOPPED', restart_needed=True), [('start', {})]),
    (D('running', restart_on_change=True), O(True, 'ERROR', definition_differs=True), [('update', {}), ('reboot_hard', {})]),
    (D('restarted', restart_on_change=True), O(True, 'ACTIVE', definition_differs=True), [('update', {}), ('reboot_soft', {})]),
    (D('stopped', restart_on_change=True), O(True, 'PAUSED', definition_differs=True), [('update', {}), ('unpause', {}), ('stop', {})]),
    # present never powers anything, and a changed definition without restart_on_change is only written
    (D('present', restart_on_change=True), O(True, 'ACTIVE', definition_differs=True), [('update', {})]),
    (D('running'), O(True, 'ACTIVE', restart_needed=True), []),
    (D('running', restart_on_change=True), O(False), [('create', {}), ('start', {})]),
    # autostart: None is "not declared"; a declared one that differs is an update
    (D('running', autostart=False), O(True, 'ACTIVE', autostart=None), [('update', {})]),
    (D('running', autostart=False), O(True, 'ACTIVE', autostart=False), []),
    (D('running', autostart=None), O(True, 'ACTIVE', autostart=True), []),
])
def test_restart_on_change_and_autostart(decl, obs, expected):
    assert steps_of(decl, obs) == expected


def test_apply_step_model():
    changed = O(True, 'ACTIVE', definition_differs=True)
    update = p.plan_vm(D('present'), changed)[0]
    # a running guest keeps its old definition until restarted
    assert p.apply_step(changed, update) == O(True, 'ACTIVE', definition_differs=False, restart_needed=True)
    stopped = O(True, 'STOPPED', definition_differs=True)
    assert p.apply_step(stopped, p.plan_vm(D('present'), stopped)[0]) == O(True, 'STOPPED')
    pending = O(True, 'ACTIVE', restart_needed=True)
    assert p.apply_step(pending, p.plan_vm(D('paused'), pending)[0]) == O(True, 'PAUSED', restart_needed=True)
    assert p.apply_step(pending, p.plan_vm(D('stopped'), pending)[0]) == O(True, 'STOPPED', restart_needed=False)
    assert p.apply_step(O(True, 'ACTIVE'), p.plan_vm(D('absent'), O(True, 'ACTIVE'))[0]) == O()
    created = p.apply_step(O(definition_differs=True, restart_needed=True), p.plan_vm(D('present'), O())[0])
    assert created == O(True, 'STOPPED')


def test_converge_model_records_the_declared_autostart():
    steps, final = p.converge_model(D('running', autostart=True), O(True, 'STOPPED', autostart=False))
    assert [s.action for s in steps] == ['update', 'start'] and final == O(True, 'ACTIVE', autostart=True)
    steps, final = p.converge_model(D('running', autostart=True), O(True, 'ACTIVE', autostart=True))
    assert steps == [] and final == O(True, 'ACTIVE', autostart=True)
    steps, final = p.converge_model(D('running'), O(True, 'STOPPED', autostart=False))
    assert final.autostart is False


def test_refusals_name_the_declaration_and_the_reason():
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D('paused'), O(True, 'STOPPED'))
    assert "'converge to paused'" in str(err.value) and 'not started only to be paused' in str(err.value)
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D('running'), O(True, 'RESCUED'))
    assert 'no chain of actions reaches running from RESCUED' in str(err.value)
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D('running'), O(True, 'ACTIVE', task_state='STOPPING'))
    assert 'another task is in flight' in str(err.value)
    with pytest.raises(ValueError) as err:
        p.plan_vm(D('floating'), O())
    assert "got 'floating'" in str(err.value) and 'present, running' in str(err.value)


def test_steps_read_outside_words():
    obs = O(True, ''.join(list('STOPPED')))
    assert [s.action for s in p.plan_vm(D(''.join(list('running'))), obs)] == ['start']
    assert p.plan_vm(D('absent'), O(False, 'ACTIVE')) == []
    assert p.plan_vm(D('restarted'), O(True, 'ACTIVE'))[0].as_dict() == {'action': 'reboot_soft', 'task_state': 'REBOOTING',
                                                                         'vm_state_before': 'ACTIVE', 'vm_state_after': 'ACTIVE'}
    step = p.plan_vm(D('running', restart_on_change=True), O(True, 'ACTIVE', restart_needed=True))[0]
    assert step.as_dict() == {'action': 'reboot_soft', 'task_state': 'REBOOTING', 'vm_state_before': 'ACTIVE', 'vm_state_after': 'ACTIVE',
                              'reason': 'apply definition changes'}


def fresh(word):
    """The same text in a new string object (a declaration read from a task's arguments is never the module's constant)."""
    return ''.join(list(word))


def test_declarations_as_read_from_arguments():
    assert p.plan_vm(D(fresh('present')), O(True, 'ACTIVE')) == []
    assert [s.action for s in p.plan_vm(D(fresh('absent')), O(True, 'ACTIVE'))] == ['delete']
    assert [s.action for s in p.plan_vm(D(fresh('restarted')), O(True, 'PAUSED'))] == ['reboot_hard']
    assert [s.action for s in p.plan_vm(D('running', restart_on_change=True), O(True, fresh('ACTIVE'), restart_needed=True))] == ['reboot_soft']


def test_refusal_messages_name_the_declaration():
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D('running'), O(True, 'RESCUED'))
    assert str(err.value).startswith("action 'converge to running' refused")
    with pytest.raises(TransitionRefused) as err:
        p.plan_vm(D('stopped'), O(True, 'ACTIVE', task_state='MIGRATING'))
    assert str(err.value).startswith("action 'converge to stopped' refused")


@pytest.mark.parametrize('decl, obs, expected', [
    # a restart wanted while suspended waits for the resume, then comes before the pause
    (D('paused', restart_on_change=True), O(True, 'SUSPENDED', restart_needed=True),
     ['resume', 'reboot_soft', 'pause']),
    # a chain that restarts first (reboot_hard) applies the change: no second restart after it
    (D('paused', restart_on_change=True), O(True, 'ERROR', definition_differs=True), ['update', 'reboot_hard', 'pause']),
    (D('suspended', restart_on_change=True), O(True, 'ERROR', definition_differs=True), ['update', 'reboot_hard', 'suspend']),
])
def test_restart_points_in_two_action_chains(decl, obs, expected):
    assert [s.action for s in p.plan_vm(decl, obs)] == expected


def test_apply_step_reads_any_step():
    assert p.apply_step(O(True, 'ACTIVE'), p.Step(fresh('delete'), 'DELETING', 'ACTIVE', 'DELETED')) == O()
    assert p.apply_step(O(definition_differs=True), p.Step(fresh('create'), 'SPAWNING', 'DELETED', 'STOPPED')) == O(True, 'STOPPED')
    updated = p.apply_step(O(True, 'ACTIVE', definition_differs=True), p.Step(fresh('update'), 'UPDATING', 'ACTIVE', 'ACTIVE'))
    assert updated == O(True, 'ACTIVE', restart_needed=True)
    # an action that is not cold keeps a pending restart (and confirm_resize is no create)
    resized = O(True, 'RESIZED', definition_differs=True, restart_needed=True)
    assert p.apply_step(resized, p.Step('confirm_resize', None, 'RESIZED', 'ACTIVE')) == resized._replace(vm_state='ACTIVE')
