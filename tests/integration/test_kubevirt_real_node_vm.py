"""A guest boots on the real node: converge.virt.vm on KubeVirt's own virt-handler and virt-launcher (issue 34, 3a/3b):
boot, pause, graceful stop; a guest that ignores ACPI (Failed after the grace period); a crash under Always; a crash
and a crash loop under RerunOnFailure (CrashLoopBackOff).

Run by make test's ``real-node-run`` and by ``make test-real-node`` (CONVERGE_VIRT_REAL_NODE=1; skipped elsewhere).
Needs ``make kube`` and ``make kube-node`` (the file is skipped, naming ``make kube-node``, when the node's parts or
images are not built); run inside ``python -m tools.virtlab netns -- ...``. One lab for the module:
``up --controllers real --nodes real`` (KubeVirt's virt-api, virt-controller and virt-handler; kubelet + containerd).

The VM is the project's test guest (tools/virtlab/guest.py: kernel + initramfs) as a kernel-boot container
(``spec.domain.firmware.kernelBoot.container``), run under TCG (the KubeVirt CR's useEmulation: KVM does not boot an
OS kernel on this machine). Every phase of the VMI below is written by KubeVirt's
virt-handler from the domain libvirt runs in the launcher pod; the boot marker is the guest's own line on its serial
console, read from the launcher pod's ``guest-console-log`` container (virt-tail of the serial console log) through
the kubelet's log file of that container (DIR/node/pod-logs/...).

While the collection runs, the differential sampler of test_kubevirt_real_controller.py reads the VM and VMI: every
settled observation's status word (ours, from the objects) must equal virt-controller's printableStatus and our phase
the VMI's phase; the modules' own results are compared too (vm.status, vm_info status/phase).

Boots: seven for the file (the first test one; the crash test two: the first boot and virt-controller's restart; the
ACPI-ignoring guest one; RerunOnFailure three: the first boot, the rerun after the crash, the run after the crash loop,
whose guest is not waited for).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import os
import time

from tests.integration.ansible_run import run_module
from tests.integration.test_kubevirt_real_controller import Sampler, judge
from tests.integration.kubevirt_real_node_gate import require_real_node
# nodelab: the module's lab (a fixture: pytest finds it by its name here)
from tests.integration.kubevirt_real_node_fixtures import nodelab  # pylint: disable=unused-import
from tests.integration.kubevirt_real_node_fixtures import (API, BOOT_TIMEOUT, NS, VM, Console, call, edit, get, info_checks, ok,
                                                           printable, qemu_pids, read_handler_log, vm_args, vm_manifest, vmi_of,
                                                           wait_for)
from tools.kubelab import node
from tools.virtlab import guest

require_real_node()


def test_a_guest_boots_and_pauses_and_powers_off_under_virt_handler(nodelab):  # pylint: disable=too-many-locals,too-many-statements
    client = nodelab['client']
    module_checks = []

    def step(state, **args):
        result = ok(run_module('vm', vm_args(nodelab, state, **args)))
        if state != 'absent':
            module_checks.append(('vm %s: status' % state, result['vm']['status'], printable(nodelab)))
        return result

    def info_check(what):
        module_checks.extend(info_checks(nodelab, what))

    started = time.monotonic()
    with Sampler(client, interval=0.2) as sampler, Console(nodelab) as console:
        step('running')
        vmi = get(nodelab, API + 'virtualmachineinstances/' + VM)
        assert vmi['status']['phase'] == 'Running', vmi['status']
        assert vmi['status']['nodeName'] == node.NODE_NAME
        # the launcher pod ran on the real node under containerd (not kwok, not the emulated node agent)
        pods = get(nodelab, '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%3Dvirt-launcher' % NS)['items']
        pod = [p for p in pods if p['metadata'].get('labels', {}).get('vm.kubevirt.io/name') == VM
               or p['metadata'].get('annotations', {}).get('kubevirt.io/domain') == VM][-1]
        assert pod['spec']['nodeName'] == node.NODE_NAME
        compute = [s for s in pod['status']['containerStatuses'] if s['name'] == 'compute'][0]
        assert compute['containerID'].startswith('containerd://') and 'running' in compute['state'], compute
        # virt-handler defined the domain and reported it running: the guest-booting VMI's own conditions
        conditions = {c['type']: c['status'] for c in vmi['status'].get('conditions', [])}
        assert conditions.get('Ready') == 'True', vmi['status'].get('conditions')
        boot_started = time.monotonic()
        wait_for('the guest boot marker %r on the serial console' % guest.READY_MARKER,
                 lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        boot_seconds = time.monotonic() - boot_started
        info_check('running')

        # pause and unpause: virt-api's subresources, done by virt-handler on the domain
        step('paused')
        vmi = get(nodelab, API + 'virtualmachineinstances/' + VM)
        assert {c['type']: c['status'] for c in vmi['status']['conditions']}.get('Paused') == 'True', vmi['status']['conditions']
        info_check('paused')
        step('running')
        vmi = get(nodelab, API + 'virtualmachineinstances/' + VM)
        assert 'Paused' not in {c['type'] for c in vmi['status']['conditions'] if c['status'] == 'True'}

        # stop with a grace period: virt-handler shuts the domain down by ACPI, the guest's own power-button handler
        # powers it off (its marker on the console), the VMI goes, the VM is Stopped
        uid = vmi['metadata']['uid']
        step('stopped')
        assert guest.POWEROFF_MARKER in console.read(), console.read()[-2000:]
        # virt-handler saw the domain shut down (not destroyed after the grace period)
        handler_log = read_handler_log(nodelab)
        assert 'Domain is in state Shutoff reason Shutdown' in handler_log or 'reason: Shutdown' in handler_log, handler_log[-3000:]
        assert get(nodelab, API + 'virtualmachineinstances/' + VM) is None or \
            get(nodelab, API + 'virtualmachineinstances/' + VM)['metadata']['uid'] != uid
        info_check('stopped')
        step('absent')
        wait_for('the VM gone', lambda: get(nodelab, API + 'virtualmachines/' + VM) is None, timeout=60)
    elapsed = time.monotonic() - started
    print('\nreal node: one TCG boot, marker %.1f s after the VMI was Running; scenario %.1f s' % (boot_seconds, elapsed))
    judge('real node: vm running/paused/stopped', nodelab, sampler, module_checks, elapsed, {'Running', 'Paused', 'Stopped'})


def test_a_crashed_guest_fails_and_virt_controller_starts_it_again(nodelab):
    """Kill the guest's QEMU (SIGKILL): virt-handler reads the domain crashed and fails the VMI, virt-controller (runStrategy
    Always) creates a new one, which boots again. Two TCG boots."""
    client = nodelab['client']
    module_checks = []

    started = time.monotonic()
    with Sampler(client, interval=0.2) as sampler, Console(nodelab) as console:
        result = ok(run_module('vm', vm_args(nodelab, 'running')))
        module_checks.append(('vm running: status', result['vm']['status'], printable(nodelab)))
        first = get(nodelab, API + 'virtualmachineinstances/' + VM)
        wait_for('the boot marker', lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        pids = wait_for('the guest QEMU process', lambda: qemu_pids(VM), timeout=30)
        assert len(pids) == 1, pids
        os.kill(pids[0], 9)

        def failed():
            vmi = get(nodelab, API + 'virtualmachineinstances/' + VM)
            seen = [o for o in sampler.trail if o['vmi_phase'] == 'Failed']
            return seen or (vmi and vmi['metadata']['uid'] != first['metadata']['uid'] and vmi)
        wait_for('the VMI Failed (or already replaced)', failed, timeout=120)

        def restarted():
            vmi = get(nodelab, API + 'virtualmachineinstances/' + VM)
            return vmi if vmi and vmi['metadata']['uid'] != first['metadata']['uid'] and vmi['status'].get('phase') == 'Running' else None
        second = wait_for('a new VMI Running (virt-controller restarts an Always VM)', restarted, timeout=BOOT_TIMEOUT)
        assert second['status']['nodeName'] == node.NODE_NAME
        wait_for('the boot marker of the second boot', lambda: console.read().count(guest.READY_MARKER) >= 2, timeout=BOOT_TIMEOUT)
        handler_log = read_handler_log(nodelab)
        # virt-handler read the domain crashed (libvirt's reason for a QEMU that died), not shut down or destroyed
        assert 'Domain is in state Shutoff reason Crashed' in handler_log or 'reason: Crashed' in handler_log, handler_log[-3000:]
        module_checks.extend(info_checks(nodelab, 'after the restart'))
        ok(run_module('vm', vm_args(nodelab, 'absent')))
        wait_for('the VM gone', lambda: get(nodelab, API + 'virtualmachines/' + VM) is None, timeout=120)
    elapsed = time.monotonic() - started
    print('\nreal node: a crash (SIGKILL to QEMU) and a restart: %s' % sorted({o['vmi_phase'] for o in sampler.trail if o['vmi_phase']}))
    assert any(o['vmi_phase'] == 'Failed' for o in sampler.trail), sampler.trail
    judge('real node: a crashed guest restarted', nodelab, sampler, module_checks, elapsed, {'Running'})


def test_a_guest_ignoring_acpi_fails_after_the_grace_period(nodelab):
    """Stop a guest that ignores the power button (``acpi=off`` on its kernel command line: the kernel never sees the
    ACPI power-button event, so the init's acpid handler never runs): virt-handler signals a graceful shutdown, and
    once the VMI's terminationGracePeriodSeconds (10) have passed it kills the domain; KubeVirt reads a domain destroyed
    after an ACPI shutdown attempt as a failure (pkg/virt-handler/vm.go: Shutoff reason Destroyed with ACPI enabled ->
    Failed). The module's own shutdown_timeout (120 s) is longer than the grace period, so the kill is KubeVirt's. One
    TCG boot."""
    name, grace = 'noacpi', 10
    module_checks = []
    started = time.monotonic()
    with Sampler(nodelab['client'], interval=0.2) as sampler, Console(nodelab, name) as console:
        result = ok(run_module('vm', vm_args(nodelab, 'running', name=name, kernel_args='acpi=off', grace=grace)))
        module_checks.append(('vm running: status', result['vm']['status'], printable(nodelab, name)))
        wait_for('the boot marker', lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        module_checks.extend(info_checks(nodelab, 'running', name))
        stop_started = time.monotonic()
        result = ok(run_module('vm', vm_args(nodelab, 'stopped', name=name, kernel_args='acpi=off', grace=grace, shutdown_timeout=120)))
        stop_seconds = time.monotonic() - stop_started
        module_checks.append(('vm stopped: status', result['vm']['status'], printable(nodelab, name)))
        module_checks.extend(info_checks(nodelab, 'stopped', name))
        log = read_handler_log(nodelab)
        ok(run_module('vm', vm_args(nodelab, 'absent', name=name)))
        wait_for('the VM gone', lambda: get(nodelab, API + 'virtualmachines/' + name) is None, timeout=120)
    elapsed = time.monotonic() - started
    phases = [o['vmi_phase'] for o in sampler.trail if o['vm'] == name]
    print('\nreal node: a guest ignoring ACPI stopped in %.1f s (grace period %d s); VMI phases %s' % (stop_seconds, grace, phases))
    # the guest never ran its power-button handler; virt-handler asked for a graceful shutdown, then killed the domain
    assert guest.POWEROFF_MARKER not in console.read(), console.read()[-2000:]
    assert 'Signaled graceful shutdown for %s' % name in log, log[-3000:]
    assert 'Grace period expired, killing deleted VirtualMachineInstance %s' % name in log, log[-3000:]
    assert 'Failed' in phases and 'Succeeded' not in phases, phases
    assert stop_seconds >= grace, stop_seconds
    judge('real node: a guest ignoring ACPI stopped', nodelab, sampler, module_checks, elapsed, {'Running', 'Stopped'})


def test_rerun_on_failure_restarts_a_crash_and_backs_off_a_launcher_that_fails_to_start(nodelab):  # pylint: disable=too-many-locals,too-many-statements
    """runStrategy RerunOnFailure, written as a KubeVirt user writes it; our words read by vm_info and the sampler.

    1. The guest's QEMU killed (SIGKILL) after it booted: the VMI Failed, virt-controller creates a new one (a failed
       VMI is rerun), which runs. No start failure is counted: KubeVirt v1.8.0 counts only a VMI that failed before it
       was ever Running (pkg/virt-controller/watch/vm/vm.go vmiFailedEarly; syncStartFailureStatus clears the count
       once a VMI of the VM reached Running), so a guest that crashes after starting is restarted at once, forever.
    2. The launcher fails before the domain runs (KubeVirt's own annotation kubevirt.io/func-test-virt-launcher-fail-fast
       on the template: virt-controller starts virt-launcher with --simulate-crash, which panics at once; KubeVirt's
       conformance test of the crash loop uses it), then QEMU killed again so the template's next VMI is made: each
       such VMI Failed counts (status.startFailure.consecutiveFailCount 1, 2), virt-controller waits
       (retryAfterTimestamp, 10-15 s after the first, 40-60 s after the second) and printableStatus is
       CrashLoopBackOff meanwhile.
    3. The annotation removed: after the backoff the next VMI runs and the count is cleared.
    Three TCG boots (the third is not waited for: its VMI Running is enough)."""
    name = 'rerun'
    path = API + 'virtualmachines/' + name
    fail_fast = 'kubevirt.io/func-test-virt-launcher-fail-fast'
    module_checks = []
    failures = []       # (consecutiveFailCount, seconds from the failure's VMI to retryAfterTimestamp) as seen

    def start_failure():
        return ((get(nodelab, path) or {}).get('status') or {}).get('startFailure')

    def running_vmi(other_than):
        vmi = vmi_of(nodelab, name)
        return vmi if vmi and vmi['metadata']['uid'] not in other_than and (vmi.get('status') or {}).get('phase') == 'Running' else None

    started = time.monotonic()
    with Sampler(nodelab['client'], interval=0.2) as sampler, Console(nodelab, name) as console:
        call(nodelab, 'POST', API + 'virtualmachines', vm_manifest(nodelab, name, 'RerunOnFailure', grace=10))
        first = wait_for('the first VMI Running', lambda: running_vmi(()), timeout=BOOT_TIMEOUT)
        wait_for('the boot marker', lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        module_checks.extend(info_checks(nodelab, 'running', name))

        # 1. a crash after the guest ran: rerun at once, not counted
        os.kill(wait_for('the guest QEMU process', lambda: qemu_pids(name), timeout=30)[0], 9)
        second = wait_for('a new VMI Running (RerunOnFailure reruns a failed VMI)',
                          lambda: running_vmi((first['metadata']['uid'],)), timeout=BOOT_TIMEOUT)
        assert start_failure() is None, start_failure()
        assert any(o['vm'] == name and o['vmi_phase'] == 'Failed' for o in sampler.trail), sampler.trail
        wait_for('the boot marker of the second boot', lambda: console.read().count(guest.READY_MARKER) >= 2, timeout=BOOT_TIMEOUT)
        module_checks.extend(info_checks(nodelab, 'rerun after a crash', name))

        # 2. a launcher that fails before the domain runs: counted, backed off, CrashLoopBackOff
        edit(nodelab, path, lambda vm: vm['spec']['template'].setdefault('metadata', {}).setdefault('annotations', {}).update({fail_fast: ''}))
        os.kill(wait_for('the guest QEMU process', lambda: qemu_pids(name), timeout=30)[0], 9)

        def counted(at_least):
            found = start_failure()
            if found and (not failures or failures[-1][0] != found['consecutiveFailCount']):
                failures.append((found['consecutiveFailCount'], found.get('retryAfterTimestamp')))
            return found if found and found['consecutiveFailCount'] >= at_least else None
        wait_for('one start failure counted', lambda: counted(1), timeout=120)
        wait_for('CrashLoopBackOff after the first failure', lambda: printable(nodelab, name) == 'CrashLoopBackOff', timeout=60)
        module_checks.extend(info_checks(nodelab, 'backoff after 1 failure', name))
        wait_for('a second start failure counted', lambda: counted(2), timeout=180)
        wait_for('CrashLoopBackOff after the second failure', lambda: printable(nodelab, name) == 'CrashLoopBackOff', timeout=60)
        module_checks.extend(info_checks(nodelab, 'backoff after 2 failures', name))
        vm = get(nodelab, path)
        assert vm['spec']['runStrategy'] == 'RerunOnFailure' and vmi_of(nodelab, name) is None, (vm['status'], vmi_of(nodelab, name))

        # 3. the launcher fixed: the next VMI (after the backoff) runs and the count is cleared
        edit(nodelab, path, lambda vm: vm['spec']['template']['metadata']['annotations'].pop(fail_fast))
        third = wait_for('a VMI Running again after the backoff', lambda: running_vmi((first['metadata']['uid'], second['metadata']['uid'])),
                         timeout=BOOT_TIMEOUT)
        wait_for('the start failure cleared', lambda: start_failure() is None, timeout=60)
        module_checks.extend(info_checks(nodelab, 'running after the backoff', name))
        assert third['status']['nodeName'] == node.NODE_NAME
        ok(run_module('vm', vm_args(nodelab, 'absent', name=name)))
        wait_for('the VM gone', lambda: get(nodelab, path) is None, timeout=120)
    elapsed = time.monotonic() - started
    print('\nreal node: RerunOnFailure: start failures seen (count, retryAfterTimestamp): %s; VMI phases %s' % (
        failures, sorted({o['vmi_phase'] for o in sampler.trail if o['vm'] == name and o['vmi_phase']})))
    assert [count for count, _retry in failures][:2] == [1, 2], failures
    judge('real node: RerunOnFailure crash and crash loop', nodelab, sampler, module_checks, elapsed, {'Running', 'CrashLoopBackOff'})
