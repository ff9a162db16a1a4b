"""A wait ends when our word shows the declared state and KubeVirt's own word (printableStatus, written by
virt-controller a moment later) says the same, or after a short grace when KubeVirt's never does (CI, 2026-11-29:
a run returned status Running beside printable_status Starting)."""

# pylint: disable=missing-function-docstring

import time

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend


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
