"""A wait ends when our word shows the declared state and KubeVirt's own word (printableStatus, written by
virt-controller a moment later) says the same, or after a short grace when KubeVirt's never does (CI, 2026-11-29:
a run returned status Running beside printable_status Starting).

A settled disagreement of _phase/deviations.py (issue 39: a stopped RerunOnFailure VM whose claim is unbound reads
WaitingForVolumeBinding on KubeVirt v1.8.0, Stopped in ours) is not waited for: KubeVirt's own rule gives its word for
the same facts, so it never catches up, and every waited run - no-ops included - paid the whole grace (10 s) for it.
Only that: the same words for other facts (another run strategy, a bound claim, a Start request) are still waited for.
"""

# pylint: disable=missing-function-docstring

import time
from types import SimpleNamespace

import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve, vm_backend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.views import kubevirt_status_input
from ansible_collections.converge.virt.plugins.module_utils._phase import deviations


class ScriptedVm(vm_backend.KubevirtVm):
    """A KubevirtVm whose observations are a script (the last one repeats)."""

    def __init__(self, script):
        super().__init__(client=None, namespace='ns', name='a')
        self.script = list(script)
        self.seen = 0

    def observe(self, spec=None, snapshot=None):
        self.seen += 1
        status, printable = self.script[min(self.seen, len(self.script)) - 1]
        return {'exists': True, 'status': status, 'printable_status': printable, 'vmi': {}, 'n': self.seen}


def test_the_wait_goes_on_until_kubevirt_says_the_same_word():
    vm = ScriptedVm([('Starting', 'Starting'), ('Running', 'Starting'), ('Running', 'Starting'), ('Running', 'Running')])
    obs = vm.wait_status(('Running',), 30, 'Running')
    assert (obs['status'], obs['printable_status'], obs['n']) == ('Running', 'Running', 4)


def test_no_word_of_kubevirt_is_no_reason_to_wait():
    vm = ScriptedVm([('Running', None)])
    assert vm.wait_status(('Running',), 30, 'Running')['n'] == 1


def test_a_word_that_never_catches_up_costs_the_grace_only(monkeypatch):
    monkeypatch.setattr(vm_backend, 'CONTROLLER_CATCH_UP', 0.5)
    vm = ScriptedVm([('Stopped', 'WaitingForVolumeBinding')])
    started = time.monotonic()
    obs = vm.wait_status(('Stopped',), 30, 'Stopped', fail_fast=False)
    assert obs['n'] == 1 and obs['status'] == 'Stopped', obs    # what the wait reached, reported as observed
    assert 0.5 <= time.monotonic() - started < 5 and vm.seen > 2


def test_the_grace_never_runs_past_the_wait_deadline():
    vm = ScriptedVm([('Running', 'Starting')])
    started = time.monotonic()
    assert vm.wait_status(('Running',), 0.3, 'Running')['n'] == 1
    assert time.monotonic() - started < 2


def test_a_settled_vm_found_as_declared_also_waits_for_kubevirt_to_agree():
    vm = ScriptedVm([('Paused', 'Paused')])
    obs = vm.controller_caught_up({'status': 'Paused', 'printable_status': 'Running', 'n': 0}, ('Paused',), 30)
    assert (obs['printable_status'], obs['n']) == ('Paused', 1)


# ------------------------------------------------------------ settled disagreements (issue 39)
def vm_object(strategy='RerunOnFailure', printable='WaitingForVolumeBinding', requests=None, claim='lost-claim'):
    """A stopped VirtualMachine (no instance) with one claim, as KubeVirt v1.8.0 shows it."""
    status = {'printableStatus': printable, 'runStrategy': strategy}
    if requests:
        status['stateChangeRequests'] = requests
    return {'metadata': {'name': 'a', 'namespace': 'ns', 'uid': 'u1', 'resourceVersion': '1', 'generation': 1},
            'spec': {'runStrategy': strategy, 'template': {'spec': {
                'domain': {'devices': {}}, 'volumes': [{'name': 'data', 'persistentVolumeClaim': {'claimName': claim}}]}}},
            'status': status}


def claim_object(phase='Lost', name='lost-claim'):
    return {'metadata': {'name': name, 'namespace': 'ns'}, 'status': {'phase': phase}}


class ObjectsVm(vm_backend.KubevirtVm):
    """A KubevirtVm observed from the same objects every time (the observation code is the real one), counting reads."""

    def __init__(self, vm, claims):
        super().__init__(client=None, namespace='ns', name='a')
        self.objects = (vm, claims)
        self.seen = 0

    def observe(self, spec=None, snapshot=None):
        self.seen += 1
        vm, claims = self.objects
        return kobserve.build('a', 'ns', vm, None, [], claims)


STOPPED = SimpleNamespace(state='stopped')
WAIT = SimpleNamespace(wait=True, wait_timeout=300)


@pytest.fixture(name='grace')
def short_grace(monkeypatch):
    """The catch-up grace cut to 0.4 s: a test sees whether it is paid without paying 10 s."""
    monkeypatch.setattr(vm_backend, 'CONTROLLER_CATCH_UP', 0.4)
    return 0.4


def test_a_stopped_rerun_on_failure_vm_with_an_unbound_claim_is_the_settled_disagreement():
    obs = kobserve.build('a', 'ns', vm_object(), None, [], [claim_object()])
    assert (obs['status'], obs['printable_status']) == ('Stopped', 'WaitingForVolumeBinding')
    assert vm_backend.settled_disagreement(obs) == 'rerun-set-to-start'
    assert deviations.by_key(vm_backend.settled_disagreement(obs)).area == 'printable status'


def test_its_no_op_is_not_held_back_by_the_grace(monkeypatch):
    """The waited no-op of such a VM (settle: our word already Stopped) returns its first observation at once."""
    monkeypatch.setattr(vm_backend, 'CONTROLLER_CATCH_UP', 5.0)
    vm = ObjectsVm(vm_object(), [claim_object()])
    first = vm.observe()
    started = time.monotonic()
    obs = vm.settle(STOPPED, first, WAIT)
    assert time.monotonic() - started < 1.0 and vm.seen == 1, vm.seen     # not one more read, no grace
    assert (obs['status'], obs['printable_status']) == ('Stopped', 'WaitingForVolumeBinding')    # reported as observed
    # the same once a stop was waited for (wait_status, then the catch-up)
    started = time.monotonic()
    assert vm.wait_status(('Stopped',), 30, 'Stopped', fail_fast=False)['status'] == 'Stopped'
    assert time.monotonic() - started < 1.0 and vm.seen == 2, vm.seen


@pytest.mark.parametrize('case', ['manual', 'bound claim', 'start requested', 'other words', 'no claim read'])
def test_the_same_words_for_other_facts_are_still_waited_for(grace, case):
    """Not a settled disagreement: KubeVirt's rule gives another word for these facts, so its word may be a lag."""
    vm, claims, words = vm_object(), [claim_object()], ('Stopped', 'WaitingForVolumeBinding')
    if case == 'manual':            # Manual: v1.8.0 sets it to start only on a request, like ours
        vm = vm_object(strategy='Manual')
    elif case == 'bound claim':     # a bound claim: v1.8.0 reads Stopped too
        claims = [claim_object('Bound')]
    elif case == 'start requested':  # a pending Start request: ours reads WaitingForVolumeBinding, KubeVirt's Stopped lags
        vm, words = vm_object(printable='Stopped', requests=[{'action': 'Start'}]), ('WaitingForVolumeBinding', 'Stopped')
    elif case == 'other words':     # the settled facts, but KubeVirt says a word its rule does not give for them
        vm, words = vm_object(printable='Starting'), ('Stopped', 'Starting')
    else:                           # the claim was not read: nothing says it is unbound
        claims = []
    probe = ObjectsVm(vm, claims)
    first = probe.observe()
    assert (first['status'], first['printable_status']) == words
    assert vm_backend.settled_disagreement(first) is None
    started = time.monotonic()
    obs = probe.controller_caught_up(first, (first['status'],), 30)
    assert time.monotonic() - started >= grace and probe.seen > 2, probe.seen    # the grace was paid: looked again and again
    assert obs is first


def test_the_upstream_rule_is_what_explains_the_pair():
    """deviations.settled_disagreement: ours must be what our rules give, and KubeVirt's what its rule gives, for the facts."""
    obs = kobserve.build('a', 'ns', vm_object(), None, [], [claim_object()])
    inp = kubevirt_status_input(obs['vm'], None, [], [claim_object()])
    assert deviations.settled_disagreement('Stopped', 'WaitingForVolumeBinding', inp) == 'rerun-set-to-start'
    assert deviations.settled_disagreement('Stopped', 'Stopped', inp) is None
    assert deviations.settled_disagreement('Stopped', None, inp) is None
    assert deviations.settled_disagreement('Running', 'WaitingForVolumeBinding', inp) is None      # not our word for it
    assert deviations.settled_disagreement('Stopped', 'ErrorPvcNotFound', inp) is None
