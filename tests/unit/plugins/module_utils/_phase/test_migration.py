# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration phase machine.

Source: KubeVirt pkg/virt-controller/watch/migration/migration.go sync / updateStatus / processMigrationPhase
(seed 001: the 32-step flow, failure conditions, abort by deletion). KubeVirt's own test cases are in
test_upstream_kubevirt.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._phase import migration as m
from ansible_collections.converge.virt.plugins.module_utils._phase.migration import MigrationObservation as Obs
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_phase

EXPECTED_EDGES = {
    '': ('Pending', 'Failed'), 'Pending': ('Scheduling', 'Failed'), 'Scheduling': ('Scheduled', 'Failed'),
    'Scheduled': ('PreparingTarget', 'Failed'), 'PreparingTarget': ('TargetReady', 'Failed'), 'TargetReady': ('Running', 'Failed'),
    'Running': ('Succeeded', 'Failed'), 'Succeeded': (), 'Failed': (),
}
LIVE = ['', 'Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running']
# the flag that opens the gate out of each phase
GATES = {'Pending': 'target_exists', 'Scheduling': 'target_ready', 'Scheduled': 'target_node_known',
         'PreparingTarget': 'target_address_known', 'TargetReady': 'transfer_started', 'Running': 'transfer_completed'}


def fresh(word):
    """The same text in a new string object (words read from the outside world are never the module's constants)."""
    return ''.join(list(word))


def test_transition_graph():
    assert m.TRANSITIONS == EXPECTED_EDGES


def test_phase_words_and_their_order():
    # the KubeVirt backend compares KubeVirt's phase with ours through ORDER
    assert m.PHASES == ('', 'Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Succeeded', 'Failed')
    assert m.ORDER == ('', 'Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Succeeded')
    assert m.FINAL == ('Succeeded', 'Failed')
    assert m.HANDED_OFF == ('PreparingTarget', 'TargetReady', 'Running')
    assert m.PENDING_TIMEOUT_PHASES == ('Pending', 'Scheduling')
    assert (m.UNSCHEDULABLE_TIMEOUT_SECONDS, m.PENDING_TIMEOUT_SECONDS) == (300.0, 900.0)
    for phase in m.ORDER[:-1]:
        assert m.ORDER[m.ORDER.index(phase) + 1] == m.TRANSITIONS[phase][0]


def test_reasons_as_reported():
    assert (m.VM_GONE, m.TARGET_FAILED, m.SUPERSEDED, m.SOURCE_FAILED, m.PENDING_TIMEOUT, m.UNSCHEDULABLE_TIMEOUT, m.ABORTED,
            m.DRAINING_TARGET, m.TRANSFER_TIMED_OUT) == (
        'the VM is gone or no longer running', 'the target died or vanished', 'another migration of this VM took over',
        'the source reported the migration failed', 'the target stayed pending too long', 'the target stayed unschedulable too long',
        'aborted', 'the target host is being drained', 'the transfer timed out')


def test_a_healthy_observation_by_default():
    assert Obs()._field_defaults == {
        'phase': '', 'vm_running': True, 'target_exists': False, 'target_ready': False, 'target_node_known': False,
        'target_address_known': False, 'target_failed': False, 'target_draining': False, 'transfer_started': False,
        'transfer_completed': False, 'source_failed': False, 'transfer_timed_out': False, 'superseded': False, 'abort_requested': False, 'pending_seconds': 0.0,
        'pending_timeout': 900.0, 'target_unschedulable': False, 'unschedulable_timeout': 300.0}


# one case per forward edge: the observation that opens exactly that gate
@pytest.mark.parametrize('obs,expected', [
    (Obs(phase=''), 'Pending'),
    (Obs(phase='Pending', target_exists=True), 'Scheduling'),
    (Obs(phase='Scheduling', target_exists=True, target_ready=True), 'Scheduled'),
    (Obs(phase='Scheduled', target_node_known=True), 'PreparingTarget'),
    (Obs(phase='PreparingTarget', target_address_known=True), 'TargetReady'),
    (Obs(phase='TargetReady', transfer_started=True), 'Running'),
    (Obs(phase='Running', transfer_completed=True), 'Succeeded'),
    (Obs(phase='Pending'), 'Pending'),
    (Obs(phase='Running'), 'Running'),
])
def test_forward(obs, expected):
    assert m.next_phase(obs) == (expected, None)


@pytest.mark.parametrize('phase', LIVE[1:])
def test_each_gate_opens_only_its_own_edge(phase):
    closed = Obs(phase=fresh(phase))
    assert m.next_phase(closed) == (phase, None)
    for name, gate_phase in ((g, p) for p, g in GATES.items()):
        opened = m.next_phase(closed._replace(**{name: True}))
        assert opened == ((m.TRANSITIONS[phase][0] if gate_phase == phase else phase), None), (phase, name)


def test_one_observation_may_cross_every_gate():
    everything = dict((name, True) for name in GATES.values())
    assert m.next_phase(Obs(**everything)) == ('Succeeded', None)
    assert m.next_phase(Obs(phase='Scheduling', target_ready=True, target_node_known=True)) == ('PreparingTarget', None)


# every failure rule, at every phase where it applies
FAILURES = {
    'vm gone': (dict(vm_running=False), m.VM_GONE, LIVE),
    'target failed': (dict(target_failed=True), m.TARGET_FAILED, LIVE),
    'superseded': (dict(superseded=True), m.SUPERSEDED, LIVE),
    'source failed': (dict(source_failed=True), m.SOURCE_FAILED, LIVE),
    'source timed out': (dict(source_failed=True, transfer_timed_out=True), m.TRANSFER_TIMED_OUT, LIVE),
    # a time-out beside a request is the request's answer: the user asked, the word is theirs
    'abort and time-out': (dict(abort_requested=True, transfer_started=True, source_failed=True, transfer_timed_out=True), m.ABORTED, LIVE),
    'draining': (dict(target_draining=True), m.DRAINING_TARGET, LIVE[:-1]),
    'abort before the hand-off': (dict(abort_requested=True, transfer_started=True), m.ABORTED, ['', 'Pending', 'Scheduling', 'Scheduled']),
    'abort with no transfer': (dict(abort_requested=True), m.ABORTED, LIVE),
    'abort answered by the source': (dict(abort_requested=True, transfer_started=True, source_failed=True), m.ABORTED, LIVE),
    'pending too long': (dict(pending_seconds=900.0), m.PENDING_TIMEOUT, ['Pending', 'Scheduling']),
    'unschedulable too long': (dict(pending_seconds=300.0, target_unschedulable=True), m.UNSCHEDULABLE_TIMEOUT, ['Pending', 'Scheduling']),
}


@pytest.mark.parametrize('rule', sorted(FAILURES))
@pytest.mark.parametrize('phase', LIVE)
def test_failure_rules_at_each_phase(rule, phase):
    flags, reason, phases = FAILURES[rule]
    new, why = m.next_phase(Obs(phase=fresh(phase), **flags))
    if phase in phases:
        assert (new, why) == ('Failed', reason)
    else:
        assert new != 'Failed' and why is None


@pytest.mark.parametrize('phase', ['Succeeded', 'Failed'])
@pytest.mark.parametrize('rule', sorted(FAILURES))
def test_final_phases_never_change(phase, rule):
    flags, _reason, _phases = FAILURES[rule]
    assert m.next_phase(Obs(phase=fresh(phase), transfer_completed=True, **flags)) == (phase, None)


def test_the_vm_gone_after_a_completed_transfer_is_a_success():
    # the source shuts off once the guest runs on the target
    assert m.next_phase(Obs(phase='Running', vm_running=False, transfer_completed=True)) == ('Succeeded', None)
    assert m.next_phase(Obs(phase='TargetReady', vm_running=False, transfer_started=True, transfer_completed=True)) == ('Failed', m.VM_GONE)


def test_the_draining_exemption_once_the_transfer_runs():
    assert m.next_phase(Obs(phase='Running', target_draining=True)) == ('Running', None)
    assert m.next_phase(Obs(phase='Running', target_draining=True, transfer_completed=True)) == ('Succeeded', None)
    assert m.next_phase(Obs(phase='TargetReady', target_draining=True, transfer_started=True)) == ('Failed', m.DRAINING_TARGET)


@pytest.mark.parametrize('phase', ['Pending', 'Scheduling'])
def test_pending_timeout_boundaries(phase):
    # migration.go handlePendingPodTimeout: secondsSpentPending >= timeout
    assert m.next_phase(Obs(phase=phase, pending_seconds=899.9)) == (phase, None)
    assert m.next_phase(Obs(phase=phase, pending_seconds=900.0)) == ('Failed', m.PENDING_TIMEOUT)
    assert m.next_phase(Obs(phase=phase, pending_seconds=299.9, target_unschedulable=True)) == (phase, None)
    assert m.next_phase(Obs(phase=phase, pending_seconds=300.0, target_unschedulable=True)) == ('Failed', m.UNSCHEDULABLE_TIMEOUT)
    # an unschedulable target that outlived the catch-all timeout too is reported as unschedulable
    assert m.next_phase(Obs(phase=phase, pending_seconds=900.0, target_unschedulable=True)) == ('Failed', m.UNSCHEDULABLE_TIMEOUT)
    # the unschedulable timeout is only for an unschedulable target
    assert m.next_phase(Obs(phase=phase, pending_seconds=300.0)) == (phase, None)
    # custom timeouts (KubeVirt's annotations)
    assert m.next_phase(Obs(phase=phase, pending_seconds=10.0, pending_timeout=10.0)) == ('Failed', m.PENDING_TIMEOUT)
    assert m.next_phase(Obs(phase=phase, pending_seconds=10.0, unschedulable_timeout=11.0, target_unschedulable=True)) == (phase, None)


@pytest.mark.parametrize('flags, reason', [
    (dict(vm_running=False, abort_requested=True, target_failed=True), m.VM_GONE),
    (dict(abort_requested=True, target_draining=True, target_failed=True), m.ABORTED),
    (dict(target_draining=True, target_failed=True, superseded=True), m.DRAINING_TARGET),
    (dict(target_failed=True, superseded=True, source_failed=True), m.TARGET_FAILED),
    (dict(superseded=True, source_failed=True, pending_seconds=1e6), m.SUPERSEDED),
    (dict(source_failed=True, pending_seconds=1e6), m.SOURCE_FAILED),
])
def test_failure_rules_in_order(flags, reason):
    # migration.go updateStatus: the VM, an abort before the hand-off, the target, another migration, the source
    assert m.next_phase(Obs(phase='Pending', **flags)) == ('Failed', reason)


def test_an_abort_after_the_hand_off_waits_for_the_source():
    running = Obs(phase='Running', transfer_started=True, abort_requested=True)
    assert m.next_phase(running) == ('Running', None)
    assert m.next_phase(running._replace(source_failed=True)) == ('Failed', m.ABORTED)
    assert m.next_phase(running._replace(transfer_completed=True)) == ('Succeeded', None)
    assert m.next_phase(Obs(phase='PreparingTarget', transfer_started=True, abort_requested=True)) == ('PreparingTarget', None)
    assert m.next_phase(Obs(phase='TargetReady', transfer_started=True, abort_requested=True)) == ('Running', None)


@pytest.mark.parametrize('phase,expected', [
    ('', 'fail'), ('Pending', 'fail'), ('Scheduling', 'fail'), ('Scheduled', 'fail'), ('PreparingTarget', 'ask source to abort'),
    ('TargetReady', 'ask source to abort'), ('Running', 'ask source to abort'), ('Succeeded', 'nothing'), ('Failed', 'nothing'),
])
def test_abort_plan(phase, expected):
    assert m.abort_plan(fresh(phase)) == expected


@pytest.mark.parametrize('vm_state,task,other,expected', [
    ('ACTIVE', None, None, True), ('PAUSED', None, None, True), ('PAUSED', None, 'Succeeded', True), ('ACTIVE', None, 'Failed', True),
    ('ACTIVE', None, 'Running', False), ('ACTIVE', None, '', False), ('ACTIVE', None, 'Pending', False),
    ('STOPPED', None, None, False), ('ERROR', None, None, False), ('SUSPENDED', None, None, False), ('AAA', None, None, False),
    ('ZZZ', None, None, False), ('ACTIVE', 'STOPPING', None, False), ('ACTIVE', '', None, False),
])
def test_may_start(vm_state, task, other, expected):
    assert m.may_start(fresh(vm_state), task, None if other is None else fresh(other)) is expected


def test_walk_reports_every_phase_crossed():
    assert m.walk(m.PENDING, m.RUNNING) == [m.SCHEDULING, m.SCHEDULED, m.PREPARING_TARGET, m.TARGET_READY, m.RUNNING]
    assert m.walk(m.RUNNING, m.RUNNING) == []
    assert m.walk(m.UNSET, m.PENDING) == [m.PENDING]
    assert m.walk(m.RUNNING, m.SUCCEEDED) == [m.SUCCEEDED]
    # a phase it cannot reach forward: it stops at the end of the graph
    assert m.walk(m.RUNNING, m.PENDING) == [m.SUCCEEDED]
    assert m.walk(m.SUCCEEDED, m.RUNNING) == [] and m.walk(m.FAILED, m.RUNNING) == []


# ------------------------------------------------------------------ libvirt mapping
def test_libvirt_observation_defaults():
    obs = migration_phase.libvirt_observation('Pending')
    assert obs == Obs(phase='Pending')


@pytest.mark.parametrize('kwargs, fields', [
    (dict(dest_connected=True), dict(target_exists=True)),
    (dict(dest_checked=True), dict(target_ready=True)),
    (dict(dest_accepts=True), dict(target_node_known=True, target_address_known=True)),
    (dict(dest_failed=True), dict(target_failed=True)),
    (dict(vm_running=False), dict(vm_running=False)),
    (dict(aborted=True), dict(abort_requested=True)),
    (dict(job_type=migration_phase.LIBVIRT_JOB_BOUNDED), dict(transfer_started=True)),
    (dict(job_type=migration_phase.LIBVIRT_JOB_UNBOUNDED), dict(transfer_started=True)),
    (dict(job_type=migration_phase.LIBVIRT_JOB_COMPLETED), dict()),          # completed, but not on the destination: nothing moved
    (dict(job_type=migration_phase.LIBVIRT_JOB_FAILED), dict(source_failed=True)),
    (dict(job_type=migration_phase.LIBVIRT_JOB_CANCELLED), dict(source_failed=True, abort_requested=True)),
    (dict(error='broken pipe'), dict(source_failed=True)),
    (dict(on_destination=True), dict(transfer_started=True, transfer_completed=True)),
    (dict(on_destination=True, job_type=migration_phase.LIBVIRT_JOB_COMPLETED), dict(transfer_started=True, transfer_completed=True)),
    (dict(on_destination=True, vm_running=False), dict(transfer_started=True, transfer_completed=True)),
    (dict(on_destination=True, job_type=migration_phase.LIBVIRT_JOB_FAILED), dict()),
    (dict(on_destination=True, error='late error'), dict(transfer_started=True, transfer_completed=True)),
])
def test_libvirt_observation_maps_each_flag(kwargs, fields):
    assert migration_phase.libvirt_observation('Running', **kwargs) == Obs(phase='Running', **fields)


def test_libvirt_job_types_are_libvirts():
    # virDomainJobType: NONE 0, BOUNDED 1, UNBOUNDED 2, COMPLETED 3, FAILED 4, CANCELLED 5
    assert (migration_phase.LIBVIRT_JOB_NONE, migration_phase.LIBVIRT_JOB_BOUNDED, migration_phase.LIBVIRT_JOB_UNBOUNDED,
            migration_phase.LIBVIRT_JOB_COMPLETED, migration_phase.LIBVIRT_JOB_FAILED, migration_phase.LIBVIRT_JOB_CANCELLED) == (0, 1, 2, 3, 4, 5)


def test_libvirt_mapping_full_run():
    obs = migration_phase.libvirt_observation('', dest_connected=True, dest_checked=True, dest_accepts=True, job_type=migration_phase.LIBVIRT_JOB_UNBOUNDED)
    assert m.run_to_phase(obs) == ('Running', None, ['', 'Running'])
    done = migration_phase.libvirt_observation('Running', dest_connected=True, dest_checked=True, dest_accepts=True,
                                               job_type=migration_phase.LIBVIRT_JOB_COMPLETED, on_destination=True, vm_running=False)
    assert m.next_phase(done) == ('Succeeded', None)


@pytest.mark.parametrize('job,reason', [(migration_phase.LIBVIRT_JOB_FAILED, m.SOURCE_FAILED), (migration_phase.LIBVIRT_JOB_CANCELLED, m.ABORTED)])
def test_libvirt_mapping_failures(job, reason):
    obs = migration_phase.libvirt_observation('Running', True, True, True, job_type=job)
    assert m.next_phase(obs) == ('Failed', reason)


def test_libvirt_cancel_after_abort_job():
    # the backend asked the source to abort (virDomainAbortJob) and no job runs any more: aborted
    asked = migration_phase.libvirt_observation('Running', True, True, True)._replace(abort_requested=True)
    assert m.next_phase(asked) == ('Failed', m.ABORTED)
    still = migration_phase.libvirt_observation('Running', True, True, True, job_type=migration_phase.LIBVIRT_JOB_UNBOUNDED)._replace(abort_requested=True)
    assert m.next_phase(still) == ('Running', None)


# ------------------------------------------------------------------ run_to_phase
def test_run_to_phase_path_and_reason():
    assert m.run_to_phase(Obs(phase='Pending', target_exists=True, target_ready=True)) == ('Scheduled', None, ['Pending', 'Scheduled'])
    assert m.run_to_phase(Obs(phase='Pending')) == ('Pending', None, ['Pending'])
    assert m.run_to_phase(Obs(phase='Scheduled', target_failed=True)) == ('Failed', m.TARGET_FAILED, ['Scheduled', 'Failed'])
    assert m.run_to_phase(Obs(phase='Failed')) == ('Failed', None, ['Failed'])


def test_run_to_phase_goes_on_until_a_failure_rule_applies():
    # from Unset the pending timeout cannot apply; it does once Pending is reached
    obs = Obs(phase='', pending_seconds=1.0, pending_timeout=0.0)
    assert m.next_phase(obs) == ('Pending', None)
    assert m.run_to_phase(obs) == ('Failed', m.PENDING_TIMEOUT, ['', 'Pending', 'Failed'])
    # without it, the path stops where the gates do
    assert m.run_to_phase(obs._replace(pending_seconds=0.0, pending_timeout=1.0)) == ('Pending', None, ['', 'Pending'])


def test_run_to_phase_step_limit():
    obs = Obs(phase='', pending_seconds=1.0, pending_timeout=0.0)
    assert m.run_to_phase(obs, max_steps=1) == ('Pending', None, ['', 'Pending'])
    assert m.run_to_phase(obs, max_steps=0) == ('', None, [''])
    assert m.run_to_phase(obs, max_steps=2) == ('Failed', m.PENDING_TIMEOUT, ['', 'Pending', 'Failed'])


# ------------------------------------------------------------------ properties
BOOLS = st.booleans()
FLAGS = ['vm_running', 'target_exists', 'target_ready', 'target_node_known', 'target_address_known', 'target_failed',
         'target_draining', 'transfer_started', 'transfer_completed', 'source_failed', 'superseded', 'abort_requested',
         'target_unschedulable', 'transfer_timed_out']
observations = st.builds(lambda phase, flags, pending: Obs(phase=phase, pending_seconds=pending, **dict(zip(FLAGS, flags))),
                         st.sampled_from(m.PHASES), st.lists(BOOLS, min_size=len(FLAGS), max_size=len(FLAGS)),
                         st.sampled_from([0.0, 299.0, 300.0, 899.0, 900.0, 1e6]))


@settings(settings.get_profile('converge-phase'))
@given(observations)
def test_next_phase_moves_forward_along_open_gates(obs):
    new, reason = m.next_phase(obs)
    assert new in m.PHASES
    if obs.phase in m.FINAL:
        assert (new, reason) == (obs.phase, None)
        return
    if new == 'Failed':
        # a failure always has a reason, and some flag, a timeout or an abort caused it
        assert reason in (m.VM_GONE, m.TARGET_FAILED, m.SUPERSEDED, m.SOURCE_FAILED, m.PENDING_TIMEOUT, m.UNSCHEDULABLE_TIMEOUT,
                          m.ABORTED, m.DRAINING_TARGET, m.TRANSFER_TIMED_OUT)
        # a time-out is the source's own failure: never read without it
        assert reason != m.TRANSFER_TIMED_OUT or (obs.source_failed and obs.transfer_timed_out)
        assert (not obs.vm_running or obs.target_failed or obs.superseded or obs.source_failed or obs.abort_requested
                or obs.target_draining or obs.pending_seconds >= 300.0)
        return
    assert reason is None
    # forward only, through open gates: every phase crossed had its gate open
    assert m.ORDER.index(new) >= m.ORDER.index(obs.phase)
    crossed = [obs.phase] + m.walk(obs.phase, new)[:-1] if new != obs.phase else []
    for phase in crossed:
        assert phase == '' or getattr(obs, GATES[phase])
    # and it went as far as the gates allow
    if new in GATES:
        assert not getattr(obs, GATES[new])
    # no failure rule held
    assert obs.vm_running or (obs.phase == 'Running' and obs.transfer_completed)
    assert not (obs.target_failed or obs.superseded or obs.source_failed)


@settings(settings.get_profile('converge-phase'))
@given(observations)
def test_run_to_phase_reaches_a_fixed_point(obs):
    phase, reason, path = m.run_to_phase(obs)
    assert path[0] == obs.phase and path[-1] == phase
    assert all(b == 'Failed' or m.ORDER.index(b) > m.ORDER.index(a) for a, b in zip(path, path[1:]))
    assert (reason is not None) == (phase == 'Failed' and obs.phase != 'Failed')
    assert m.next_phase(obs._replace(phase=phase)) == (phase, None)


def test_outside_words_and_lexical_neighbours():
    # phases as a backend reads them (new string objects), and phases that sort before 'Running'
    assert m.next_phase(Obs(phase=fresh('Running'), vm_running=False, transfer_completed=True)) == ('Succeeded', None)
    assert m.next_phase(Obs(phase='Pending', vm_running=False, transfer_completed=True)) == ('Failed', m.VM_GONE)
    assert m.next_phase(Obs(phase='PreparingTarget', vm_running=False, transfer_completed=True)) == ('Failed', m.VM_GONE)
    assert m.walk(m.PENDING, fresh('Running')) == [m.SCHEDULING, m.SCHEDULED, m.PREPARING_TARGET, m.TARGET_READY, m.RUNNING]
    assert m.walk(fresh('Running'), fresh('Running')) == []
    # a job type newer than this table is neither an abort nor a failure
    assert migration_phase.libvirt_observation('Running', job_type=6) == Obs(phase='Running')
