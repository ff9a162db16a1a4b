# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VM planner: chains of actions, refusals, fixpoint (phase-model section 5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._common.errors import TransitionRefused
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


@settings(max_examples=500)
@given(declarations, observations)
def test_fixpoint(decl, obs):
    if not obs.exists:
        obs = O()
    try:
        _steps, final = p.converge_model(decl, obs)
    except TransitionRefused:
        return
    assert p.plan_vm(decl, final) == [], 'not a fixpoint: %r -> %r' % (obs, final)


@settings(max_examples=300)
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
