"""Faults on the real node (issue 34, 3d): converge.virt.vm while the node's own components fail under it.

Run by make test's ``real-node-run`` and ``make test-real-node`` (CONVERGE_VIRT_REAL_NODE=1; skipped elsewhere);
needs ``make kube`` and ``make kube-node``; run inside ``python -m tools.virtlab netns -- ...``. One lab for the module:
``up --controllers real --nodes real`` (KubeVirt's virt-api, virt-controller and virt-handler; kubelet + containerd; the test guest under TCG).

Each fault, on a VM of its own:

- virt-handler killed (SIGKILL) during a start, once virt-controller has made the VMI and before it runs, and kept
  down until the run has ended;
- the kubelet restarted (SIGTERM, started again with the same command line) during a start, while the launcher pod
  is being started;
- the launcher pod deleted under a running VM (runStrategy Always), and a run started right after.

For each: the run during the fault ends with a clear result (ok, or failed with a message naming the VM), the next
run converges (ok, the VM Running with a VMI Running on the node) and the one after changes nothing (changed false).
The differential sampler of test_kubevirt_real_controller.py reads the VM and VMI meanwhile: every settled
observation's status word must equal virt-controller's printableStatus and our phase the VMI's phase.

Boots: four TCG boots for the file (one per fault; the pod deletion two: the first VMI and its replacement).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import time

from tests.integration.ansible_run import finish, run_module, start_module
from tests.integration.test_kubevirt_real_controller import Sampler, judge
from tests.integration.kubevirt_real_node_gate import require_real_node
# nodelab: the module's lab (a fixture: pytest finds it by its name here)
from tests.integration.kubevirt_real_node_fixtures import nodelab  # pylint: disable=unused-import
from tests.integration.kubevirt_real_node_fixtures import (API, BOOT_TIMEOUT, NS, Console, call, get, info_checks, ok, printable,
                                                           vm_args, vmi_of, wait_for)
from tools.kubelab import lab, node
from tools.virtlab import guest

require_real_node()

GRACE = 10


def args(nodelab, name, state='running', **extra):
    return vm_args(nodelab, state, name=name, grace=GRACE, **extra)


def clear_result(result, name):
    """A run during a fault: ok, or failed with a message naming the VM (not a traceback, not a hang). Returns 'ok' or
    the message."""
    if result['_rc'] == 0 and not result.get('failed'):
        return 'ok'
    message = result.get('msg') or ''
    assert '%s/%s' % (NS, name) in message and 'Traceback' not in message, result
    return message


def converges_then_no_op(nodelab, name, module_checks):
    """The run after the fault converges (ok, Running, the VMI Running on the node); the one after changes nothing."""
    second = ok(run_module('vm', args(nodelab, name)))
    module_checks.append(('vm running after the fault: status', second['vm']['status'], printable(nodelab, name)))
    assert second['vm']['status'] == 'Running', second['vm']
    vmi = vmi_of(nodelab, name)
    assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == node.NODE_NAME, vmi['status']
    third = ok(run_module('vm', args(nodelab, name)))
    module_checks.append(('vm running once more: status', third['vm']['status'], printable(nodelab, name)))
    assert third['changed'] is False, third
    module_checks.extend(info_checks(nodelab, 'after the fault', name))
    return second, third


def remove(nodelab, name):
    ok(run_module('vm', args(nodelab, name, 'absent')))
    wait_for('the VM gone', lambda: get(nodelab, API + 'virtualmachines/' + name) is None, timeout=120)
    wait_for('its VMI gone', lambda: vmi_of(nodelab, name) is None, timeout=120)


def launcher_pods(nodelab, name):
    pods = get(nodelab, '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%3Dvirt-launcher' % NS)['items']
    return [p for p in pods if p['metadata'].get('labels', {}).get('vm.kubevirt.io/name') == name
            or p['metadata'].get('annotations', {}).get('kubevirt.io/domain') == name]


def test_virt_handler_killed_during_a_start(nodelab):
    name = 'f-handler'
    module_checks = []
    started = time.monotonic()
    with Sampler(nodelab['client'], interval=0.2) as sampler, Console(nodelab, name) as console:
        run = start_module('vm', args(nodelab, name, wait_timeout=45))
        vmi = wait_for('the VMI made by virt-controller', lambda: vmi_of(nodelab, name), timeout=120, interval=0.1)
        killed_pid = node.stop_component(nodelab['dir'], 'node-virt-handler', kill=True)
        killed_at = time.monotonic()
        phase_at_kill = (vmi_of(nodelab, name) or vmi).get('status', {}).get('phase')
        assert killed_pid, 'virt-handler was not running'
        first = finish(run, timeout=300)
        outcome = clear_result(first, name)
        # nothing ran the domain while virt-handler was down
        assert (vmi_of(nodelab, name) or {}).get('status', {}).get('phase') != 'Running', vmi_of(nodelab, name)
        down_seconds = time.monotonic() - killed_at
        node.start_component(nodelab['dir'], 'node-virt-handler')
        second, _third = converges_then_no_op(nodelab, name, module_checks)
        same_vmi = vmi_of(nodelab, name)['metadata']['uid'] == vmi['metadata']['uid']
        wait_for('the boot marker', lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        remove(nodelab, name)
    elapsed = time.monotonic() - started
    print('\nreal node: virt-handler killed with the VMI %s; the run: %s; down %.1f s; next run changed=%s; the VMI that runs is %s' % (
        phase_at_kill, outcome, down_seconds, second['changed'], 'the one made before the kill' if same_vmi else 'a new one'))
    assert phase_at_kill != 'Running', phase_at_kill
    judge('real node: virt-handler killed during a start', nodelab, sampler, module_checks, elapsed, {'Running'})


def test_kubelet_restarted_during_a_run(nodelab):
    name = 'f-kubelet'
    module_checks = []
    started = time.monotonic()
    with Sampler(nodelab['client'], interval=0.2) as sampler, Console(nodelab, name) as console:
        run = start_module('vm', args(nodelab, name))
        wait_for('the launcher pod on the node', lambda: launcher_pods(nodelab, name), timeout=120, interval=0.1)
        phase_at_restart = (vmi_of(nodelab, name) or {}).get('status', {}).get('phase')
        old, new = node.restart_component(nodelab['dir'], 'kubelet', down_seconds=3)
        assert old and new and old != new, (old, new)
        first = finish(run, timeout=BOOT_TIMEOUT + 120)
        outcome = clear_result(first, name)
        second, _third = converges_then_no_op(nodelab, name, module_checks)
        wait_for('the boot marker', lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        remove(nodelab, name)
    elapsed = time.monotonic() - started
    print('\nreal node: kubelet restarted with the VMI %s; the run: %s; next run changed=%s' % (phase_at_restart, outcome, second['changed']))
    assert phase_at_restart != 'Running', phase_at_restart
    judge('real node: kubelet restarted during a run', nodelab, sampler, module_checks, elapsed, {'Running'})


def test_launcher_pod_deleted_under_a_running_vm(nodelab):
    name = 'f-pod'
    module_checks = []
    started = time.monotonic()
    with Sampler(nodelab['client'], interval=0.2) as sampler, Console(nodelab, name) as console:
        ok(run_module('vm', args(nodelab, name)))
        wait_for('the boot marker', lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        old = vmi_of(nodelab, name)
        pods = launcher_pods(nodelab, name)
        assert len(pods) == 1, [p['metadata']['name'] for p in pods]
        call(nodelab, 'DELETE', '/api/v1/namespaces/%s/pods/%s' % (NS, pods[0]['metadata']['name']), expect=(200, 202))
        first = run_module('vm', args(nodelab, name))
        outcome = clear_result(first, name)
        # the deleted pod's VMI ends (virt-launcher shuts the domain down when the kubelet stops it) and virt-controller
        # makes the next one (runStrategy Always); the next run is the one that must find it running

        def old_ended():
            vmi = vmi_of(nodelab, name) or {'metadata': {}, 'status': {}}
            return vmi['metadata'].get('uid') != old['metadata']['uid'] or vmi['status'].get('phase') in ('Succeeded', 'Failed')
        wait_for('the old VMI ended', old_ended, timeout=120)
        second, _third = converges_then_no_op(nodelab, name, module_checks)
        new = vmi_of(nodelab, name)
        assert new['metadata']['uid'] != old['metadata']['uid'], 'the VMI was not replaced'
        wait_for('the boot marker of the new VMI', lambda: console.read().count(guest.READY_MARKER) >= 2, timeout=BOOT_TIMEOUT)
        remove(nodelab, name)
    elapsed = time.monotonic() - started
    old_phases = sorted({o['vmi_phase'] for o in sampler.trail if o['vm'] == name and o['vmi_phase']})
    print('\nreal node: launcher pod deleted; the run right after: %s; next run changed=%s; VMI phases %s' % (
        outcome, second['changed'], old_phases))
    # the deleted pod's VMI ended (virt-launcher shut the domain down or virt-controller failed the VMI) before the new one ran
    assert {'Succeeded', 'Failed'} & set(old_phases), old_phases
    assert not [p for p in lab.status(nodelab['dir']) if not p['running']]
    judge('real node: the launcher pod deleted', nodelab, sampler, module_checks, elapsed, {'Running'})
