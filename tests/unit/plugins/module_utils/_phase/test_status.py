# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The printable status precedence.

Source: KubeVirt pkg/virt-controller/watch/vm.go setPrintableStatus and the
isVirtualMachineStatus* predicates (seed 000, first table).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._phase import status as st_
from ansible_collections.converge.virt.plugins.module_utils._phase.status import DataVolumeView, InstanceView, StatusInput

RUNNING_VMI = InstanceView(phase='Running')

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
    ('ErrorDataVolumeNotFound', StatusInput(synchronized_false_reason='FailedDataVolumeNotFound', start_expected=True)),
    ('DataVolumeError', StatusInput(datavolumes=(DataVolumeView('Failed'),), pod_unschedulable=True, start_expected=True)),
    ('DataVolumeError', StatusInput(datavolumes=(DataVolumeView('ImportInProgress', running_error=True),), start_expected=True)),
    ('ErrorUnschedulable', StatusInput(pod_unschedulable=True, datavolumes=(DataVolumeView('ImportInProgress'),),
                                       instance=InstanceView('Pending'))),
    ('Provisioning', StatusInput(datavolumes=(DataVolumeView('ImportInProgress'),), unbound_claims=True, start_expected=True)),
    ('WaitingForVolumeBinding', StatusInput(unbound_claims=True, start_expected=True, synchronized_false_reason='ErrImagePull')),
    ('ErrImagePull', StatusInput(synchronized_false_reason='ErrImagePull', instance=InstanceView('Scheduling'))),
    ('ImagePullBackOff', StatusInput(synchronized_false_reason='ImagePullBackOff', instance=InstanceView('Scheduling'))),
    ('Starting', StatusInput(start_expected=True)),
    ('Starting', StatusInput(instance=InstanceView(''))),
    ('Starting', StatusInput(instance=InstanceView('Pending'))),
    ('Starting', StatusInput(instance=InstanceView('Scheduled'))),
    ('CrashLoopBackOff', StatusInput(instance=InstanceView('Failed'), start_failures=2, run_strategy='Always')),
    ('CrashLoopBackOff', StatusInput(start_failures=1, run_strategy='RerunOnFailure')),
    ('CrashLoopBackOff', StatusInput(start_failures=1, run_strategy='Once')),
    ('Stopped', StatusInput(instance=InstanceView('Failed'), start_failures=2, run_strategy='Manual')),
    ('Stopped', StatusInput(instance=InstanceView('Succeeded'))),
    ('Stopped', StatusInput(run_strategy='WaitAsReceiver')),
    ('WaitingForReceiver', StatusInput(instance=InstanceView('Unknown'), run_strategy='WaitAsReceiver')),
    ('Unknown', StatusInput(instance=InstanceView('Unknown'))),
]


@pytest.mark.parametrize('expected,inp', CASES)
def test_printable_status(expected, inp):
    assert st_.printable_status(inp) == expected


def test_every_status_word_has_a_case():
    assert {word for word, _inp in CASES} == set(st_.STATUSES)


def test_precedence_order_is_upstream():
    assert [word for word, _rule in st_.STATUS_RULES] == [
        'Terminating', 'Stopping', 'Migrating', 'Paused', 'Running', 'ErrorPvcNotFound', 'ErrorDataVolumeNotFound',
        'DataVolumeError', 'ErrorUnschedulable', 'Provisioning', 'WaitingForVolumeBinding', 'ErrImagePull',
        'ImagePullBackOff', 'Starting', 'CrashLoopBackOff', 'Stopped', 'WaitingForReceiver']


class _Fixed:
    def __init__(self, value):
        self.value = value

    def random(self):
        return self.value


@pytest.mark.parametrize('n,jitter,expected', [
    (0, 0.9, 0.0), (1, 0.0, 10.0), (1, 1.0, 15.0), (2, 0.0, 40.0), (3, 0.5, 112.5), (5, 0.0, 250.0), (5, 1.0, 300.0), (6, 0.0, 300.0),
])
def test_start_backoff(n, jitter, expected):
    assert st_.start_backoff(n, _Fixed(jitter)) == expected


@given(st.integers(min_value=1, max_value=50))
def test_start_backoff_bounds(n):
    value = st_.start_backoff(n, random.Random(n))
    base = 10 * n * n
    assert min(base, 300) <= value <= min(300, base * 1.5)


@pytest.mark.parametrize('failures,reached,final,expected', [
    (2, True, True, 0), (2, False, True, 3), (0, False, True, 1), (2, False, False, 2),
])
def test_count_start_failure(failures, reached, final, expected):
    assert st_.count_start_failure(failures, reached, final) == expected


PHASES = st.sampled_from(['', 'Pending', 'Scheduling', 'Scheduled', 'Running', 'Succeeded', 'Failed', 'Unknown', 'bogus'])
instances = st.one_of(st.none(), st.builds(InstanceView, PHASES, st.booleans(), st.booleans(), st.booleans()))
dvs = st.lists(st.builds(DataVolumeView, st.sampled_from(['', 'Pending', 'ImportInProgress', 'Succeeded', 'Failed', 'WaitForFirstConsumer']),
                         st.booleans()), max_size=3).map(tuple)
inputs = st.builds(
    StatusInput, st.booleans(), instances, st.booleans(), st.booleans(),
    st.one_of(st.none(), st.sampled_from(['FailedPvcNotFound', 'FailedDataVolumeNotFound', 'ErrImagePull', 'ImagePullBackOff', 'Other'])),
    st.booleans(), dvs, st.booleans(), st.integers(min_value=-3, max_value=10), st.sampled_from(list(st_.RUN_STRATEGIES) + ['Weird']))


@given(inputs)
def test_status_is_total(inp):
    assert st_.printable_status(inp) in st_.STATUSES
