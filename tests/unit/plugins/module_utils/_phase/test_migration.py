# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration phase machine.

Source: KubeVirt pkg/virt-controller/watch/migration.go sync / updateStatus
(seed 001: the 32-step flow, failure conditions, abort by deletion).
"""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._phase import migration as m
from ansible_collections.converge.virt.plugins.module_utils._phase.migration import MigrationObservation as Obs

EXPECTED_EDGES = {
    '': ('Pending', 'Failed'), 'Pending': ('Scheduling', 'Failed'), 'Scheduling': ('Scheduled', 'Failed'),
    'Scheduled': ('PreparingTarget', 'Failed'), 'PreparingTarget': ('TargetReady', 'Failed'), 'TargetReady': ('Running', 'Failed'),
    'Running': ('Succeeded', 'Failed'), 'Succeeded': (), 'Failed': (),
}


def test_transition_graph():
    assert m.TRANSITIONS == EXPECTED_EDGES


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


@pytest.mark.parametrize('obs,reason', [
    (Obs(phase='Pending', vm_running=False), m.VM_GONE),
    (Obs(phase='Scheduling', superseded=True), m.SUPERSEDED),
    (Obs(phase='Scheduled', target_draining=True), m.DRAINING_TARGET),
    (Obs(phase='TargetReady', target_failed=True), m.TARGET_FAILED),
    (Obs(phase='Running', target_failed=True), m.TARGET_FAILED),
    (Obs(phase='Running', source_failed=True), m.SOURCE_FAILED),
    (Obs(phase='Running', abort_requested=True), m.ABORTED),
    (Obs(phase='Scheduling', pending_seconds=301.0), m.PENDING_TIMEOUT),
    (Obs(phase='Running', vm_running=False), m.VM_GONE),
])
def test_failures(obs, reason):
    assert m.next_phase(obs) == ('Failed', reason)


def test_final_phases_never_change():
    assert m.next_phase(Obs(phase='Succeeded', target_failed=True)) == ('Succeeded', None)
    assert m.next_phase(Obs(phase='Failed', transfer_completed=True)) == ('Failed', None)


def test_pending_timeout_does_not_apply_once_running():
    assert m.next_phase(Obs(phase='Running', pending_seconds=1000.0)) == ('Running', None)


@pytest.mark.parametrize('phase,expected', [
    ('Pending', 'fail'), ('Scheduling', 'fail'), ('TargetReady', 'fail'), ('Running', 'ask source to abort'),
    ('Succeeded', 'nothing'), ('Failed', 'nothing'),
])
def test_abort_plan(phase, expected):
    assert m.abort_plan(phase) == expected


@pytest.mark.parametrize('vm_state,task,other,expected', [
    ('ACTIVE', None, None, True), ('PAUSED', None, 'Succeeded', True), ('ACTIVE', None, 'Running', False),
    ('STOPPED', None, None, False), ('ACTIVE', 'STOPPING', None, False),
])
def test_may_start(vm_state, task, other, expected):
    assert m.may_start(vm_state, task, other) is expected


def test_libvirt_mapping_full_run():
    obs = m.libvirt_observation('', dest_connected=True, dest_checked=True, dest_accepts=True, job_type=m.LIBVIRT_JOB_UNBOUNDED)
    assert m.run_to_phase(obs)[0] == 'Running'
    done = m.libvirt_observation('Running', dest_connected=True, dest_checked=True, dest_accepts=True,
                                 job_type=m.LIBVIRT_JOB_COMPLETED, on_destination=True, vm_running=False)
    assert m.next_phase(done) == ('Succeeded', None)


@pytest.mark.parametrize('job,reason', [(m.LIBVIRT_JOB_FAILED, m.SOURCE_FAILED), (m.LIBVIRT_JOB_CANCELLED, m.ABORTED)])
def test_libvirt_mapping_failures(job, reason):
    obs = m.libvirt_observation('Running', True, True, True, job_type=job)
    assert m.next_phase(obs) == ('Failed', reason)


BOOLS = st.booleans()


@given(st.sampled_from(m.PHASES), st.lists(BOOLS, min_size=12, max_size=12), st.floats(min_value=0, max_value=1000))
def test_next_phase_is_reachable(phase, flags, pending):
    names = ['vm_running', 'target_exists', 'target_ready', 'target_node_known', 'target_address_known', 'target_failed',
             'target_draining', 'transfer_started', 'transfer_completed', 'source_failed', 'superseded', 'abort_requested']
    obs = Obs(phase=phase, pending_seconds=pending, **dict(zip(names, flags)))
    new, reason = m.next_phase(obs)
    assert new in m.PHASES
    if new == 'Failed' and phase != 'Failed':
        assert reason
    if new != phase:
        # forward only, along the graph, never out of a final phase
        assert phase not in m.FINAL
        assert new == 'Failed' or m.ORDER.index(new) > m.ORDER.index(phase)


def test_walk_reports_every_phase_crossed():
    assert m.walk(m.PENDING, m.RUNNING) == [
        m.SCHEDULING, m.SCHEDULED, m.PREPARING_TARGET, m.TARGET_READY, m.RUNNING]
    assert m.walk(m.RUNNING, m.RUNNING) == []
