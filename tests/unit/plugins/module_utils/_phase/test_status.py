# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The printable status precedence and each of its rules.

Source: KubeVirt pkg/virt-controller/watch/vm/vm.go setPrintableStatus and the isVirtualMachineStatus* predicates,
isSetToStart, storagetypes.HasDataVolumeProvisioning / HasDataVolumeErrors / HasUnboundPVC (seed 000, first table).
KubeVirt's own test cases are in test_upstream_kubevirt.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._phase import status as st_
from ansible_collections.converge.virt.plugins.module_utils._phase.status import DataVolumeView, InstanceView, StatusInput

RUNNING_VMI = InstanceView(phase='Running')
STRATEGIES = ('Always', 'Halted', 'Manual', 'RerunOnFailure', 'Once', 'WaitAsReceiver')


def fresh(word):
    """The same text in a new string object: values read from the outside world are never the interned constants."""
    return ''.join(list(word))


# One case per precedence step; each case also satisfies lower-precedence
# rules where possible, so swapping two rows makes a case fail.
CASES = [
    ('Terminating', StatusInput(deletion_requested=True, instance=InstanceView('Running', marked_for_deletion=True))),
    ('Stopping', StatusInput(instance=InstanceView('Running', migrating=True), stop_expected=True)),
    ('Stopping', StatusInput(instance=InstanceView('Scheduled', marked_for_deletion=True))),
    ('Migrating', StatusInput(instance=InstanceView('Running', paused=True, migrating=True))),
    ('Paused', StatusInput(instance=InstanceView('Running', paused=True))),
    ('Running', StatusInput(instance=RUNNING_VMI, synchronized_false_reason='FailedPvcNotFound')),
    ('ErrorPvcNotFound', StatusInput(synchronized_false_reason='FailedPvcNotFound', start_expected=True,
                                     datavolumes=(DataVolumeView('Failed'),))),
    ('ErrorDataVolumeNotFound', StatusInput(synchronized_false_reason='FailedDataVolumeNotFound', start_expected=True,
                                            datavolumes=(DataVolumeView('Failed'),))),
    ('DataVolumeError', StatusInput(datavolumes=(DataVolumeView('Failed'),), pod_unschedulable=True, start_expected=True)),
    ('DataVolumeError', StatusInput(datavolumes=(DataVolumeView('ImportInProgress', running_error=True),), start_expected=True)),
    ('ErrorUnschedulable', StatusInput(pod_unschedulable=True, datavolumes=(DataVolumeView('ImportInProgress'),),
                                       instance=InstanceView('Pending'))),
    ('Provisioning', StatusInput(datavolumes=(DataVolumeView('ImportInProgress'),), unbound_claims=True, run_strategy='Always',
                                 start_expected=True)),
    ('WaitingForVolumeBinding', StatusInput(unbound_claims=True, run_strategy='Always', start_expected=True,
                                            synchronized_false_reason='ErrImagePull')),
    ('ErrImagePull', StatusInput(synchronized_false_reason='ErrImagePull', instance=InstanceView('Scheduling'))),
    ('ImagePullBackOff', StatusInput(synchronized_false_reason='ImagePullBackOff', instance=InstanceView('Scheduling'))),
    ('Starting', StatusInput(start_expected=True, start_failures=1, run_strategy='Always')),
    ('Starting', StatusInput(instance=InstanceView(''))),
    ('Starting', StatusInput(instance=InstanceView('Pending'))),
    ('Starting', StatusInput(instance=InstanceView('Scheduled'))),
    ('CrashLoopBackOff', StatusInput(instance=InstanceView('Failed'), start_failures=2, run_strategy='Always')),
    ('CrashLoopBackOff', StatusInput(start_failures=1, run_strategy='RerunOnFailure')),
    ('CrashLoopBackOff', StatusInput(start_failures=1, run_strategy='Once')),
    ('Stopped', StatusInput(instance=InstanceView('Failed'), start_failures=2, run_strategy='Manual')),
    ('Stopped', StatusInput(instance=InstanceView('Succeeded'))),
    ('Stopped', StatusInput(run_strategy='WaitAsReceiver')),
    ('WaitingForReceiver', StatusInput(instance=InstanceView('WaitingForSync'), run_strategy='WaitAsReceiver')),
    ('Unknown', StatusInput(instance=InstanceView('Unknown'))),
    ('Unknown', StatusInput(instance=InstanceView('Unknown'), run_strategy='WaitAsReceiver')),
]


@pytest.mark.parametrize('expected,inp', CASES)
def test_printable_status(expected, inp):
    assert st_.printable_status(inp) == expected


def test_every_status_word_has_a_case():
    assert {word for word, _inp in CASES} == set(st_.STATUSES)
    assert st_.STATUSES[-1] == 'Unknown' and len(st_.STATUSES) == len(set(st_.STATUSES)) == len(st_.STATUS_RULES) + 1


def test_precedence_order_is_upstream():
    assert [word for word, _rule in st_.STATUS_RULES] == [
        'Terminating', 'Stopping', 'Migrating', 'Paused', 'Running', 'ErrorPvcNotFound', 'ErrorDataVolumeNotFound',
        'DataVolumeError', 'ErrorUnschedulable', 'Provisioning', 'WaitingForVolumeBinding', 'ErrImagePull',
        'ImagePullBackOff', 'Starting', 'CrashLoopBackOff', 'Stopped', 'WaitingForReceiver']


def test_every_field_defaults_to_off():
    assert StatusInput()._field_defaults == {
        'deletion_requested': False, 'instance': None, 'start_expected': False, 'stop_expected': False,
        'synchronized_false_reason': None, 'pod_unschedulable': False, 'datavolumes': (), 'unbound_claims': False,
        'start_failures': 0, 'run_strategy': 'Manual', 'start_requested': False, 'stop_requested': False}
    assert InstanceView()._field_defaults == {'phase': '', 'marked_for_deletion': False, 'paused': False, 'migrating': False}
    assert DataVolumeView()._field_defaults == {'phase': '', 'running_error': False, 'bound': False}
    assert st_.printable_status(StatusInput()) == 'Stopped'


# ------------------------------------------------------------------ each rule on its own
def test_stopping_needs_a_live_instance():
    assert not st_.is_stopping(StatusInput(stop_expected=True))
    assert not st_.is_stopping(StatusInput(instance=InstanceView('Succeeded', marked_for_deletion=True), stop_expected=True))
    assert not st_.is_stopping(StatusInput(instance=RUNNING_VMI))
    assert st_.is_stopping(StatusInput(instance=RUNNING_VMI, stop_expected=True))
    assert st_.is_stopping(StatusInput(instance=InstanceView('Pending', marked_for_deletion=True)))


def test_migrating_and_paused_and_running_need_an_instance():
    for rule in (st_.is_migrating, st_.is_paused, st_.is_running):
        assert not rule(StatusInput()), rule.__name__
    assert st_.is_migrating(StatusInput(instance=InstanceView('Scheduled', migrating=True)))
    assert not st_.is_migrating(StatusInput(instance=RUNNING_VMI))


@pytest.mark.parametrize('phase', ['', 'Pending', 'Scheduling', 'Scheduled', 'Succeeded', 'Failed', 'Unknown', 'WaitingForSync'])
def test_paused_and_running_need_the_running_phase(phase):
    inp = StatusInput(instance=InstanceView(phase, paused=True))
    assert not st_.is_paused(inp) and not st_.is_running(inp)
    assert st_.printable_status(inp) != 'Paused'


def test_paused_and_running_read_outside_words():
    inp = StatusInput(instance=InstanceView(fresh('Running'), paused=True))
    assert st_.is_paused(inp) and st_.is_running(inp) and st_.printable_status(inp) == 'Paused'


@pytest.mark.parametrize('reason, word', [
    ('FailedPvcNotFound', 'ErrorPvcNotFound'), ('FailedDataVolumeNotFound', 'ErrorDataVolumeNotFound'),
    ('ErrImagePull', 'ErrImagePull'), ('ImagePullBackOff', 'ImagePullBackOff'),
])
def test_synchronized_false_reasons(reason, word):
    assert st_.printable_status(StatusInput(synchronized_false_reason=fresh(reason))) == word
    # every other reason word, before and after it in sort order, is no such status
    for other in ('AAA', 'Failed', 'Other', 'zzz', None):
        assert st_.printable_status(StatusInput(synchronized_false_reason=other)) == 'Stopped'


def test_datavolume_errors():
    assert st_.is_data_volume_error(StatusInput(datavolumes=(DataVolumeView('Succeeded'), DataVolumeView(fresh('Failed')))))
    assert st_.is_data_volume_error(StatusInput(datavolumes=(DataVolumeView('Succeeded', running_error=True),)))
    for phase in ('', 'Pending', 'ImportInProgress', 'Succeeded', 'WaitForFirstConsumer', 'Zzz'):
        assert not st_.is_data_volume_error(StatusInput(datavolumes=(DataVolumeView(phase),))), phase
    assert not st_.is_data_volume_error(StatusInput())


@pytest.mark.parametrize('dv, provisioning', [
    (DataVolumeView(''), True), (DataVolumeView('Pending'), True), (DataVolumeView('ImportScheduled'), True),
    (DataVolumeView('ImportInProgress'), True), (DataVolumeView('CloneInProgress'), True), (DataVolumeView('Failed'), True),
    (DataVolumeView('Succeeded'), False), (DataVolumeView('PendingPopulation'), False), (DataVolumeView('PendingPopulation', bound=True), False),
    (DataVolumeView('WaitForFirstConsumer'), False), (DataVolumeView('WaitForFirstConsumer', bound=True), True),
    (DataVolumeView(fresh('WaitForFirstConsumer')), False), (DataVolumeView(fresh('Succeeded')), False),
    (DataVolumeView('Unknown'), True), (DataVolumeView('ZzzNewerPhase'), True),       # phases CDI may add are provisioning
])
def test_provisioning_as_has_datavolume_provisioning(dv, provisioning):
    # storagetypes.HasDataVolumeProvisioning: Succeeded and PendingPopulation are done; WaitForFirstConsumer waits
    # unless its claim is bound; every other phase (Failed too: DataVolumeError comes first) is provisioning
    assert st_.is_provisioning(StatusInput(datavolumes=(dv,))) is provisioning
    assert st_.is_provisioning(StatusInput(datavolumes=(DataVolumeView('Succeeded'), dv))) is provisioning


def test_unschedulable():
    assert st_.printable_status(StatusInput(pod_unschedulable=True)) == 'ErrorUnschedulable'


# isSetToStart: (run strategy, instance phase or None, start requested, stop requested) -> set to start
SET_TO_START = [
    ('Always', None, False, False, True), ('Always', 'Succeeded', False, True, True),
    ('Halted', None, True, False, False), ('Halted', 'Running', True, False, False),
    ('Manual', None, False, False, False), ('Manual', None, True, False, True),
    ('Manual', 'Running', False, False, True), ('Manual', 'Running', True, True, False), ('Manual', 'Succeeded', False, False, True),
    ('RerunOnFailure', None, False, False, False), ('RerunOnFailure', None, True, False, True),
    ('RerunOnFailure', 'Running', False, False, True), ('RerunOnFailure', 'Failed', False, False, True),
    ('RerunOnFailure', 'Succeeded', True, False, False),
    ('Once', None, False, False, True), ('Once', 'Running', True, False, False),
    ('RerunOnFailure', 'Unknown', False, False, True), ('RerunOnFailure', 'WaitingForSync', False, False, True),
    ('WaitAsReceiver', None, True, False, False), ('Bogus', None, True, False, False), ('', None, True, False, False),
    ('AAA', 'Running', True, False, False),
]


@pytest.mark.parametrize('strategy, phase, start, stop, expected', SET_TO_START)
def test_set_to_start_as_is_set_to_start(strategy, phase, start, stop, expected):
    inp = StatusInput(instance=None if phase is None else InstanceView(fresh(phase)), run_strategy=fresh(strategy),
                      start_requested=start, stop_requested=stop, unbound_claims=True)
    assert st_.is_waiting_for_volume_binding(inp) is expected
    assert not st_.is_waiting_for_volume_binding(inp._replace(unbound_claims=False))


@pytest.mark.parametrize('phase, starting', [
    ('', True), ('Pending', True), ('Scheduling', True), ('Scheduled', True),
    ('Running', False), ('Succeeded', False), ('Failed', False), ('Unknown', False), ('WaitingForSync', False),
])
def test_starting_phases(phase, starting):
    assert st_.is_starting(StatusInput(instance=InstanceView(fresh(phase)))) is starting
    # an instance decides, whatever is expected
    assert st_.is_starting(StatusInput(instance=InstanceView(phase), start_expected=not starting)) is starting


def test_starting_without_an_instance_is_a_start_expected():
    assert st_.is_starting(StatusInput(start_expected=True)) and not st_.is_starting(StatusInput())


@pytest.mark.parametrize('strategy, failures, instance, start_expected, loops', [
    ('Always', 1, None, False, True), ('RerunOnFailure', 3, None, False, True), ('Once', 1, None, False, True),
    ('Always', 1, 'Failed', False, True), ('Always', 1, 'Succeeded', False, True),
    ('Always', 0, None, False, False),                    # crash loop with zero failures: none
    ('Always', -1, None, False, False),
    ('Always', 1, None, True, False),                     # a start is expected
    ('Always', 1, 'Running', False, False),               # a live instance
    ('Always', 1, 'Scheduling', False, False),
    ('Manual', 1, None, False, False), ('Halted', 5, None, False, False), ('WaitAsReceiver', 1, None, False, False),
    ('Bogus', 1, None, False, False),
])
def test_crash_loop_back_off(strategy, failures, instance, start_expected, loops):
    inp = StatusInput(run_strategy=fresh(strategy), start_failures=failures, start_expected=start_expected,
                      instance=None if instance is None else InstanceView(instance))
    assert st_.is_crash_loop_back_off(inp) is loops


def test_stopped():
    assert st_.is_stopped(StatusInput(instance=InstanceView('Succeeded')))
    assert st_.is_stopped(StatusInput(instance=InstanceView(fresh('Failed'))))
    assert not st_.is_stopped(StatusInput(instance=RUNNING_VMI))
    assert not st_.is_stopped(StatusInput(instance=InstanceView('Unknown')))
    assert st_.is_stopped(StatusInput()) and not st_.is_stopped(StatusInput(start_expected=True))


def test_waiting_for_receiver():
    assert st_.is_waiting_for_receiver(StatusInput(run_strategy=fresh('WaitAsReceiver')))
    assert st_.is_waiting_for_receiver(StatusInput(run_strategy='WaitAsReceiver', instance=InstanceView(fresh('WaitingForSync'))))
    for phase in ('Running', 'Unknown', 'Pending', 'Zzz'):
        assert not st_.is_waiting_for_receiver(StatusInput(run_strategy='WaitAsReceiver', instance=InstanceView(phase))), phase
    for strategy in ('Always', 'Manual', 'Zzz'):
        assert not st_.is_waiting_for_receiver(StatusInput(run_strategy=strategy)), strategy


# ---------------------------------------------------------------- properties
PHASES = st.sampled_from(['', 'Pending', 'Scheduling', 'Scheduled', 'Running', 'Succeeded', 'Failed', 'Unknown', 'WaitingForSync', 'bogus'])
instances = st.one_of(st.none(), st.builds(InstanceView, PHASES, st.booleans(), st.booleans(), st.booleans()))
dvs = st.lists(st.builds(DataVolumeView, st.sampled_from(['', 'Pending', 'ImportInProgress', 'Succeeded', 'Failed', 'WaitForFirstConsumer',
                                                         'PendingPopulation']),
                         st.booleans(), st.booleans()), max_size=3).map(tuple)
inputs = st.builds(
    StatusInput, st.booleans(), instances, st.booleans(), st.booleans(),
    st.one_of(st.none(), st.sampled_from(['FailedPvcNotFound', 'FailedDataVolumeNotFound', 'ErrImagePull', 'ImagePullBackOff', 'Other'])),
    st.booleans(), dvs, st.booleans(), st.integers(min_value=-3, max_value=10), st.sampled_from(list(STRATEGIES) + ['Weird']),
    st.booleans(), st.booleans())


@settings(settings.get_profile('converge-phase'))
@given(inputs)
def test_status_is_the_first_rule_that_holds(inp):
    word = st_.printable_status(inp)
    rules = dict(st_.STATUS_RULES)
    earlier = [w for w, _rule in st_.STATUS_RULES][:[w for w, _rule in st_.STATUS_RULES].index(word)] if word in rules else \
        [w for w, _rule in st_.STATUS_RULES]
    assert all(not rules[w](inp) for w in earlier)
    assert word == 'Unknown' or rules[word](inp)


@settings(settings.get_profile('converge-phase'))
@given(inputs)
def test_status_facts(inp):
    word = st_.printable_status(inp)
    live = inp.instance is not None and inp.instance.phase not in ('Succeeded', 'Failed')
    if inp.deletion_requested:
        assert word == 'Terminating'
        return
    if live and (inp.instance.marked_for_deletion or inp.stop_expected):
        assert word == 'Stopping'
        return
    if inp.instance is not None and inp.instance.migrating:
        assert word == 'Migrating'
        return
    if inp.instance is not None and inp.instance.phase == 'Running':
        assert word == ('Paused' if inp.instance.paused else 'Running')
        return
    # no live instance at work: nothing reads as running
    assert word not in ('Terminating', 'Stopping', 'Migrating', 'Paused', 'Running')
    if word == 'CrashLoopBackOff':
        assert inp.start_failures > 0 and inp.run_strategy in ('Always', 'RerunOnFailure', 'Once') and not live and not inp.start_expected
    if word == 'Starting':
        assert inp.start_expected if inp.instance is None else inp.instance.phase in ('', 'Pending', 'Scheduling', 'Scheduled')
    if word == 'Stopped':
        assert (inp.instance is not None and not live) or (inp.instance is None and not inp.start_expected)
    if word == 'WaitingForReceiver':
        assert inp.run_strategy == 'WaitAsReceiver'
