# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared vm converge driver and fleet runner, run on the in-memory backend (no libvirt, no Kubernetes)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import itertools
import time

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import driver
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, InvalidDeclaration, TaskConflict, TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, vm_plan
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import Step, VmDeclaration

from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_backend import InMemoryVm, World

OPTIONS = driver.VmOptions(wait_timeout=30, shutdown_timeout=10)
DEFINITION = {'vcpus': 2, 'memory': '1GiB'}
SPEC = {'definition': DEFINITION}

# what a guest looks like in a vm_state: (power_state, managed_save)
POWER_OF = {s.ACTIVE: (s.RUNNING, False), s.STOPPED: (s.SHUTDOWN, False), s.VM_PAUSED: (s.PAUSED, False),
            s.VM_SUSPENDED: (s.SHUTDOWN, True), s.ERROR: (s.SHUTDOWN, False)}

# every action row the vm driver plans: (declared state, vm_state before (None: no VM), definition differs) -> the steps
DRIVER_ROWS = {
    'create': ('stopped', None, False, ['create']),
    'update': ('present', s.STOPPED, True, ['update']),
    'start': ('running', s.STOPPED, False, ['start']),
    'stop': ('stopped', s.ACTIVE, False, ['stop']),
    'reboot_soft': ('restarted', s.ACTIVE, False, ['reboot_soft']),
    'reboot_hard': ('running', s.ERROR, False, ['reboot_hard']),
    'pause': ('paused', s.ACTIVE, False, ['pause']),
    'unpause': ('running', s.VM_PAUSED, False, ['unpause']),
    'suspend': ('suspended', s.ACTIVE, False, ['suspend']),
    'resume': ('running', s.VM_SUSPENDED, False, ['resume']),
    'delete': ('absent', s.ACTIVE, False, ['delete']),
}


def guest_in(world, name, vm_state, definition=None, **record):
    """A guest in ``vm_state`` (recorded), with ``record`` fields of a task in flight."""
    power, managed = POWER_OF[vm_state]
    return world.add(name, power_state=power, managed_save=managed, definition=DEFINITION if definition is None else definition,
                     record=TaskRecord(vm_state=vm_state, **record))


def record_of(world, name):
    return world.guests[name].store.load()[0]


def planned_actions():
    """Every action :func:`vm_plan.plan_vm` can plan, over every declared state, vm_state and flag."""
    seen = set()
    for state, vm_state, exists, differs, restart, on_change in itertools.product(
            vm_plan.DECLARED_STATES, s.VM_STATES, (True, False), (True, False), (True, False), (True, False)):
        try:
            steps = vm_plan.plan_vm(VmDeclaration(state=state, restart_on_change=on_change),
                                    vm_plan.VmObservation(exists=exists, vm_state=vm_state, definition_differs=differs, restart_needed=restart))
        except TransitionRefused:
            continue
        seen.update(step.action for step in steps)
    return seen


def test_the_rows_below_are_every_row_the_driver_can_plan():
    assert planned_actions() == set(DRIVER_ROWS)


@pytest.mark.parametrize('action', sorted(DRIVER_ROWS))
def test_each_planned_action_row_runs_through_the_driver(action):
    state, before, differs, expected = DRIVER_ROWS[action]
    world = World()
    if before is not None:
        guest_in(world, 'a', before, definition={'vcpus': 1} if differs else None)
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state=state), SPEC, OPTIONS, check_mode=False)
    row = actions.ACTIONS[action]
    assert changed is True
    assert [step['action'] for step in result['steps']] == expected
    assert world.calls == [('a', a) for a in expected]
    assert result['steps'][-1]['task_state'] == row.task_state
    if action == 'delete':
        assert 'a' not in world.guests
        assert result['vm']['exists'] is False and result['vm']['vm_state'] == s.DELETED
        return
    after = actions.vm_state_after(action, before or s.DELETED, s.ACTIVE)
    stored = record_of(world, 'a')
    assert stored.vm_state == after and stored.idle()
    assert result['vm']['vm_state'] == after and result['vm']['task_state'] is None
    assert result['diff']['before']['exists'] is (before is not None)
    assert result['diff']['after']['vm_state'] == after
    if state == 'restarted':
        return      # a restart is asked for each time
    # a second run finds nothing to do
    changed, again = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state=state), SPEC, OPTIONS, check_mode=False)
    assert (changed, again['steps'], again['changes']) == (False, [], [])


# create defines a new VM: it never meets a recorded vm_state (its row runs through the driver above)
@pytest.mark.parametrize('action, vm_state', sorted(itertools.product(set(actions.ACTIONS) - {'create'}, (s.ACTIVE, s.STOPPED, s.VM_PAUSED, s.ERROR))))
def test_every_action_row_is_checked_by_the_backend_task_protocol(action, vm_state):
    """A step the table refuses leaves the record as it was; an accepted one records the row's vm_state after."""
    world = World()
    guest_in(world, 'a', vm_state)
    vm = InMemoryVm(world, 'a')
    row = actions.ACTIONS[action]
    step = Step(action, row.task_state, vm_state, actions.vm_state_after(action, vm_state, s.ACTIVE))
    if not actions.accepts(action, vm_state):
        with pytest.raises(TransitionRefused, match=vm_state):
            vm.run_step(step, SPEC, vm.observe(SPEC), OPTIONS, 'task-1')
        assert record_of(world, 'a') == TaskRecord(vm_state=vm_state)
        assert world.calls == []
        return
    obs = vm.run_step(step, SPEC, vm.observe(SPEC), OPTIONS, 'task-1')
    assert world.calls == [('a', action)]
    if action == 'delete':
        assert obs['exists'] is False
    else:
        stored = record_of(world, 'a')
        assert stored.vm_state == step.vm_state_after and stored.idle()
        # a suspend or resize remembers where it came from (resume and confirm_resize go back there)
        assert stored.previous_vm_state == (vm_state if action in ('suspend', 'resize') else None)


def test_check_mode_predicts_and_touches_nothing():
    world = World()
    guest_in(world, 'a', s.STOPPED)
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=True)
    assert changed is True
    assert world.calls == [] and record_of(world, 'a') == TaskRecord(vm_state=s.STOPPED)
    assert result['observed']['power_state'] == s.SHUTDOWN
    assert result['vm']['vm_state'] == s.ACTIVE and result['vm']['power_state'] == s.RUNNING
    assert result['diff'] == {'before': {'exists': True, 'vm_state': s.STOPPED, 'power_state': s.SHUTDOWN, 'status': 'Shutdown',
                                         'autostart': False, 'pending_restart': False},
                              'after': {'exists': True, 'vm_state': s.ACTIVE, 'power_state': s.RUNNING, 'status': 'Running',
                                        'autostart': False, 'pending_restart': False}}


def test_a_running_guest_with_a_changed_definition_is_restarted_when_asked():
    world = World()
    guest = guest_in(world, 'a', s.ACTIVE, definition={'vcpus': 1, 'memory': '1GiB'})
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running', restart_on_change=True), SPEC, OPTIONS,
                                         check_mode=False)
    assert changed is True
    assert [step['action'] for step in result['steps']] == ['update', 'reboot_soft']
    assert result['changes'] == [{'path': 'vcpus', 'before': 1, 'after': 2}]
    assert guest.definition == DEFINITION and guest.boots == 1 and guest.pending_restart is False


def test_a_changed_definition_without_restart_on_change_is_left_pending():
    world = World()
    guest = guest_in(world, 'a', s.ACTIVE, definition={'vcpus': 1, 'memory': '1GiB'})
    _changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    assert [step['action'] for step in result['steps']] == ['update']
    assert guest.boots == 0 and result['vm']['pending_restart'] is True


def test_check_mode_asks_the_backend_to_validate_the_plan():
    world = World()
    with pytest.raises(InvalidDeclaration, match='definition: is required'):
        driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), {}, OPTIONS, check_mode=True)
    assert world.guests == {}


# ---------------------------------------- a backend that carries out later
def test_the_driver_waits_until_the_backend_carried_out_the_declared_power():
    world = World()
    world.lag = True
    guest_in(world, 'a', s.STOPPED)
    _changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    assert world.guests['a'].power_state == s.RUNNING and world.clock > 1000.0
    assert result['vm']['power_state'] == s.RUNNING and result['vm']['vm_state'] == s.ACTIVE


def test_without_wait_the_driver_returns_before_the_backend_carried_it_out():
    world = World()
    world.lag = True
    guest_in(world, 'a', s.STOPPED)
    _changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, driver.VmOptions(wait=False),
                                          check_mode=False)
    assert result['vm']['power_state'] == s.SHUTDOWN and world.clock == 1000.0


def test_a_deletion_already_requested_is_waited_for_not_repeated():
    world = World()
    guest_in(world, 'a', s.ACTIVE).deleting = True
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='absent'), None, OPTIONS, check_mode=False)
    assert (changed, result['steps'], world.calls) == (False, [], [])
    assert result['vm']['exists'] is False and result['diff']['before']['exists'] is True


# ----------------------------------------------------------- recorded drift
def test_a_record_the_hypervisor_contradicts_is_recorded_first():
    world = World()
    world.add('a', power_state=s.SHUTDOWN, definition=DEFINITION, record=TaskRecord(vm_state=s.ACTIVE))   # the guest shut itself down
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='stopped'), SPEC, OPTIONS, check_mode=False)
    assert changed is True
    assert result['steps'] == [{'action': 'record', 'task_state': None, 'vm_state_before': s.ACTIVE, 'vm_state_after': s.STOPPED}]
    assert world.calls == [] and record_of(world, 'a') == TaskRecord(vm_state=s.STOPPED)
    assert result['vm']['vm_state'] == s.STOPPED


def test_drift_then_the_plan_from_the_corrected_state():
    world = World()
    world.add('a', power_state=s.SHUTDOWN, definition=DEFINITION, record=TaskRecord(vm_state=s.ACTIVE))
    _changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    assert [step['action'] for step in result['steps']] == ['record', 'start']
    assert world.calls == [('a', 'start')] and record_of(world, 'a') == TaskRecord(vm_state=s.ACTIVE)


def test_drift_in_check_mode_is_predicted_not_written():
    world = World()
    world.add('a', power_state=s.SHUTDOWN, definition=DEFINITION, record=TaskRecord(vm_state=s.ACTIVE))
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='stopped'), SPEC, OPTIONS, check_mode=True)
    assert changed is True and result['vm']['vm_state'] == s.STOPPED
    assert record_of(world, 'a') == TaskRecord(vm_state=s.ACTIVE)


# ------------------------------------------------------- stale-task recovery
def test_a_task_whose_lease_ran_out_is_recovered_then_the_plan_runs():
    world = World()
    guest_in(world, 'a', s.STOPPED, task_state='STARTING', task_id='old-1', action='start', owner='other', lease_until=time.time() - 5)
    world.guests['a'].power_state = s.RUNNING     # the killed run's start went through
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='stopped'), SPEC, OPTIONS, check_mode=False)
    assert changed is True
    recovered = result['recovered']
    assert recovered['recovered_task'] == 'STARTING' and recovered['recovered_task_id'] == 'old-1'
    assert 'lease' in recovered['reason']
    assert [step['action'] for step in result['steps']] == ['stop']
    assert record_of(world, 'a') == TaskRecord(vm_state=s.STOPPED)


def test_a_task_of_a_run_that_is_gone_is_recovered_though_its_lease_holds():
    world = World()
    guest_in(world, 'a', s.ACTIVE, task_state='STOPPING', task_id='old-2', action='stop', owner='dead-run', lease_until=time.time() + 600)
    world.dead.add('dead-run')
    _changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    assert result['recovered']['reason'] == 'the run that held it (dead-run) is gone'
    assert record_of(world, 'a').idle()


def test_check_mode_does_not_recover_and_names_the_task_in_flight():
    world = World()
    guest_in(world, 'a', s.STOPPED, task_state='STARTING', task_id='old-1', action='start', owner='other', lease_until=time.time() - 5)
    with pytest.raises(TransitionRefused, match='another task is in flight'):
        driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=True)
    assert record_of(world, 'a').task_id == 'old-1'


# ------------------------------------------------------------ lock contention
def live_task(world):
    return guest_in(world, 'a', s.STOPPED, task_state='STARTING', task_id='theirs', action='start', owner='other',
                    lease_until=time.time() + 600)


def test_a_live_task_of_another_run_is_a_conflict_at_once():
    world = World()
    live_task(world)
    with pytest.raises(TaskConflict) as info:
        driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    assert "VM 'a' is busy: task theirs (task_state STARTING)" in info.value.message
    assert info.value.details['owner'] == 'other' and 'waited' not in info.value.details
    assert world.calls == [] and record_of(world, 'a').task_id == 'theirs'


def test_lock_timeout_waits_for_the_other_task_to_end():
    world = World()
    guest = live_task(world)

    def the_other_run_finishes(_world):
        if world.clock > 1001.0:
            guest.power_state = s.RUNNING
            guest.store.compare_and_swap(guest.store.version, TaskRecord(vm_state=s.ACTIVE))
    world.on_wait = the_other_run_finishes
    options = driver.VmOptions(lock_timeout=30)
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, options, check_mode=False)
    assert (changed, result['steps']) == (False, [])
    assert 1001.0 < world.clock < 1030.0 and world.calls == []
    waited = dict(result['waited_for'])
    assert waited.pop('seconds') >= 0 and waited == {'task_id': 'theirs', 'task_state': 'STARTING', 'owner': 'other'}, result
    _changed, again = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, options, check_mode=False)
    assert 'waited_for' not in again, 'a run that found the VM idle waited for nothing'


def test_a_task_whose_lease_runs_out_during_the_wait_is_recovered_then_the_plan_runs():
    """The holder died where its process cannot be judged from here (another host, another container's pid namespace:
    found through the AWX mesh, tests/integration/test_awx_mesh.py): only its lease ends its task. The run that waited it
    out recovers it and converges, instead of refusing 'another task is in flight'."""
    world = World()
    guest = guest_in(world, 'a', s.ACTIVE, task_state='STOPPING', task_id='theirs', action='stop', owner='elsewhere:36',
                     lease_until=time.time() + 600)

    def the_lease_runs_out(_world):
        if world.clock > 1005.0:
            record, version = guest.store.load()
            if record.task_id == 'theirs' and record.lease_until > time.time():
                guest.store.compare_and_swap(version, record._replace(lease_until=time.time() - 1))
    world.on_wait = the_lease_runs_out
    changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='stopped'), SPEC,
                                         driver.VmOptions(lock_timeout=30, shutdown_timeout=10), check_mode=False)
    assert result['waited_for']['task_id'] == 'theirs' and result['recovered']['recovered_task_id'] == 'theirs', result
    assert changed and [step['action'] for step in result['steps']] == ['stop'], result
    assert record_of(world, 'a').idle() and record_of(world, 'a').vm_state == s.STOPPED
    assert 1005.0 < world.clock < 1030.0


def test_lock_timeout_that_runs_out_names_the_wait():
    world = World()
    live_task(world)
    with pytest.raises(TaskConflict) as info:
        driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, driver.VmOptions(lock_timeout=3), check_mode=False)
    assert info.value.details['waited'] == 3 and world.clock >= 1003.0


def test_delete_preempts_a_live_task():
    world = World()
    live_task(world)
    _changed, result = driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='absent'), None, OPTIONS, check_mode=False)
    assert [step['action'] for step in result['steps']] == ['delete'] and 'a' not in world.guests


def test_a_failed_step_is_rolled_back_and_raised():
    world = World()
    guest_in(world, 'a', s.STOPPED)
    world.fail[('a', 'start')] = 'no memory left on the host'
    with pytest.raises(BackendError, match='no memory left'):
        driver.converge_vm(InMemoryVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    assert record_of(world, 'a') == TaskRecord(vm_state=s.STOPPED)


class _WordingVm(InMemoryVm):
    """A backend that words its step errors itself (as libvirt names a dead daemon, KubeVirt an absent virt-api)."""

    seen = None

    def step_failed(self, error, step, obs, abandoned):
        self.seen = (step.action, abandoned, obs.get('effective_vm_state'))
        return InvalidDeclaration('start', 'reworded: %s' % error)


def test_the_driver_raises_the_backends_wording_of_a_failed_step_after_the_rollback():
    world = World()
    guest_in(world, 'a', s.STOPPED)
    world.fail[('a', 'start')] = 'no memory left on the host'
    vm = _WordingVm(world, 'a')
    with pytest.raises(InvalidDeclaration, match='reworded: no memory left') as caught:
        driver.converge_vm(vm, VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    assert vm.seen == ('start', True, s.STOPPED), 'step_failed hears the step, that the record is gone, and the state before'
    assert isinstance(caught.value.__context__, BackendError), 'the backend error stays the context of the reworded one'
    assert record_of(world, 'a') == TaskRecord(vm_state=s.STOPPED)


class _BuggyVm(InMemoryVm):
    def act(self, step, spec, obs, options):
        raise KeyError('a bug in the backend')


def test_an_error_outside_step_errors_keeps_the_task_record_for_the_next_runs_recovery():
    world = World()
    guest_in(world, 'a', s.STOPPED)
    with pytest.raises(KeyError):
        driver.converge_vm(_BuggyVm(world, 'a'), VmDeclaration(state='running'), SPEC, OPTIONS, check_mode=False)
    record = record_of(world, 'a')
    assert (record.task_state, record.action, record.vm_state) == ('STARTING', 'start', s.STOPPED), record


def test_a_delete_leaves_no_record_to_finish_and_a_create_is_the_backends():
    world = World()
    vm = InMemoryVm(world, 'a')
    changed, _result = driver.converge_vm(vm, VmDeclaration(state='stopped'), SPEC, OPTIONS, check_mode=False)
    assert changed and ('a', 'create') in world.calls and record_of(world, 'a') == TaskRecord(vm_state=s.STOPPED)
    changed, result = driver.converge_vm(vm, VmDeclaration(state='absent'), SPEC, OPTIONS, check_mode=False)
    assert changed and 'a' not in world.guests and result['vm']['exists'] is False


# -------------------------------------------------------------------- fleets
class Exited(SystemExit):
    """What exit_json / fail_json raise (AnsibleModule exits)."""


class FleetModule:
    def __init__(self):
        self.outcome = None

    def exit_json(self, **kwargs):
        self.outcome = ('exit', kwargs)
        raise Exited(0)

    def fail_json(self, **kwargs):
        self.outcome = ('fail', kwargs)
        raise Exited(1)


def fleet(world, names, state='running'):
    items = [(VmDeclaration(state=state), SPEC, name) for name in names]
    return driver.run_fleet(items, lambda name: InMemoryVm(world, name), OPTIONS, False, parallel=2, snapshot=world.snapshot(),
                            redact=lambda text: text.replace('sekrit', '********'))


def test_a_fleet_converges_every_vm_and_one_failure_is_summed_up():
    world = World()
    for name in ('a', 'b', 'c'):
        guest_in(world, name, s.STOPPED)
    world.fail[('b', 'start')] = 'b refused to boot (password sekrit)'
    changed, results = fleet(world, ['a', 'b', 'c'])
    assert changed is True and world.snapshots_read == 1
    assert [(r['name'], r['changed'], r['failed']) for r in results] == [('a', True, False), ('b', False, True), ('c', True, False)]
    assert results[1]['msg'] == 'b refused to boot (password ********)'
    assert driver.fleet_failure(results) == '1 of 3 VMs failed: b'
    module = FleetModule()
    with pytest.raises(Exited):
        driver.finish_fleet(module, changed, results)
    assert module.outcome == ('fail', {'msg': '1 of 3 VMs failed: b', 'changed': True, 'results': results})
    assert record_of(world, 'b') == TaskRecord(vm_state=s.STOPPED)
    assert record_of(world, 'a') == record_of(world, 'c') == TaskRecord(vm_state=s.ACTIVE)


def test_a_fleet_without_failures_exits_with_its_results():
    world = World()
    for name in ('a', 'b'):
        guest_in(world, name, s.ACTIVE)
    changed, results = fleet(world, ['a', 'b'])
    assert changed is False and driver.fleet_failure(results) is None
    module = FleetModule()
    with pytest.raises(Exited):
        driver.finish_fleet(module, changed, results)
    assert module.outcome == ('exit', {'changed': False, 'results': results, 'steps': [], 'changes': []})


def test_a_fleet_item_in_conflict_does_not_stop_the_others():
    world = World()
    live_task(world)
    guest_in(world, 'b', s.STOPPED)
    changed, results = fleet(world, ['a', 'b'])
    assert changed is True
    assert results[0]['failed'] is True and results[0]['task_id'] == 'theirs' and 'is busy' in results[0]['msg']
    assert results[1]['failed'] is False and results[1]['vm']['vm_state'] == s.ACTIVE
    assert driver.fleet_failure(results, 'volumes') == '1 of 2 volumes failed: a'


def test_the_lease_covers_the_longest_wait_of_a_step():
    assert driver.VmOptions(wait_timeout=300, shutdown_timeout=60).lease_seconds == 390.0
    assert driver.VmOptions(wait_timeout=10, shutdown_timeout=10).lease_seconds == 120.0
    assert driver.VmOptions(lease_seconds=42).lease_seconds == 42
