# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""virt-api's 409 on the run-state subresources (start, stop, restart): one mapping, ``KubevirtVm._change``.

A 409 means KubeVirt does not accept the change in the VM's state: the task fails with a refusal naming the converge action
and the state, never "unchanged". The one 409 that changes nothing is a stop of a VM without an instance under run
strategy Manual (it is stopped already): that stop succeeds.
"""

# pylint: disable=missing-function-docstring,protected-access

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend as vb
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.api_errors import Conflict


def _vm(calls):
    vm = vb.KubevirtVm(client=None, namespace='demo', name='web')

    def put(plural, action, options, body=None, done=None):
        del options, done
        calls.append((plural, action, body))
        raise Conflict('Operation cannot be fulfilled: VM is not in the right state', code=409)
    vm._put = put
    return vm


def _obs(strategy, vmi=None):
    return {'vm': {'spec': {'runStrategy': strategy}}, 'vmi': vmi, 'effective_vm_state': 'STOPPED', 'task_state': None,
            'status': 'Stopped', 'run_strategy': strategy}


OPTIONS = vb.KubevirtOptions(wait=False)


def test_a_refused_start_names_the_start_and_the_state():
    calls = []
    with pytest.raises(TransitionRefused) as info:
        _vm(calls)._do_start(None, _obs('Manual'), OPTIONS)
    assert info.value.action == 'start' and info.value.vm_state == 'STOPPED'
    assert 'KubeVirt refused it' in str(info.value) and calls == [('virtualmachines', 'start', None)]


def test_a_refused_stop_of_a_running_instance_is_a_refusal():
    calls = []
    vmi = {'metadata': {'uid': 'u1'}, 'status': {'phase': 'Running'}}
    with pytest.raises(TransitionRefused) as info:
        _vm(calls)._do_stop(None, _obs('Manual', vmi), OPTIONS)
    assert info.value.action == 'stop' and calls == [('virtualmachines', 'stop', None)]


def test_a_refused_stop_without_an_instance_under_manual_is_already_stopped():
    calls = []
    assert _vm(calls)._do_stop(None, _obs('Manual'), OPTIONS) is None
    assert calls == [('virtualmachines', 'stop', None)]


def test_a_refused_stop_without_an_instance_under_another_strategy_is_a_refusal():
    calls = []
    with pytest.raises(TransitionRefused):
        _vm(calls)._do_stop(None, _obs('RerunOnFailure'), OPTIONS)


@pytest.mark.parametrize('hard, action, body', [(True, 'reboot_hard', {'gracePeriodSeconds': 0}), (False, 'reboot_soft', {})])
def test_a_refused_restart_names_the_reboot(hard, action, body):
    calls = []
    vmi = {'metadata': {'uid': 'u1'}, 'status': {'phase': 'Running'}}
    with pytest.raises(TransitionRefused) as info:
        _vm(calls)._restart(_obs('Always', vmi), OPTIONS, hard)
    assert info.value.action == action and calls == [('virtualmachines', 'restart', body)]
