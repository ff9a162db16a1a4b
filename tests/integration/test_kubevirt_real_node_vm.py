"""A guest boots on the real node: converge.virt.vm on KubeVirt's own virt-handler and virt-launcher (issue 34, 3a/3b).

Run by ``make test-real-node`` (CONVERGE_VIRT_REAL_NODE=1; skipped in make test).
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

Boots: three for the file (the first test one; the crash test two: the first boot and virt-controller's restart).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import glob
import os
import threading
import time

import pytest

from tests.integration.ansible_run import run_module
from tests.integration.test_kubevirt_real_controller import Sampler, judge
from tests.integration.kubevirt_real_node_gate import require_real_node
from tools.kubelab import lab, node
from tools.virtlab import guest

require_real_node()

NS = 'default'
API = '/apis/kubevirt.io/v1/namespaces/%s/' % NS
VM = 'tcg1'
BOOT_TIMEOUT = 300      # a TCG boot of the test guest on 2 loaded cores (tens of seconds when idle)


@pytest.fixture(scope='module')
def nodelab(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp('kubelab-node-vm'))
    started = time.monotonic()
    info = lab.up(directory, controllers='real', nodes='real')
    info['up_seconds'] = time.monotonic() - started
    state = lab._load_state(directory)  # pylint: disable=protected-access
    with open(os.path.join(directory, 'pki', 'admin.token'), encoding='utf-8') as handle:
        info['client'] = lab.Client(state['server'], state['ca_file'], handle.read().strip())
    info.update(dir=directory, node=state['node'])
    try:
        yield info
    finally:
        lab.down(directory)


def get(nodelab, path):
    code, body = nodelab['client'].request('GET', path)
    return body if code == 200 else None


def wait_for(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError('%s not within %d s (last: %r)' % (what, timeout, last))


def vm_args(nodelab, state, **args):
    kernel_boot = {'kernelArgs': guest.KERNEL_CMDLINE,
                   'container': {'image': nodelab['node']['images']['guest'], 'imagePullPolicy': 'Never',
                                 'kernelPath': '/boot/vmlinuz', 'initrdPath': '/boot/initrd.img'}}
    template = {'template': {'spec': {
        'nodeSelector': {'kubernetes.io/hostname': node.NODE_NAME}, 'terminationGracePeriodSeconds': 60,
        'domain': {'devices': {'autoattachPodInterface': False}, 'firmware': {'kernelBoot': kernel_boot}}}}}
    base = dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=VM, state=state,  # pylint: disable=use-dict-literal
                vcpus=1, memory='256Mi', disks=[], spec=template, wait_timeout=BOOT_TIMEOUT)
    base.update(args)
    return base


def ok(result):
    assert result['_rc'] == 0 and not result.get('failed'), result.get('msg') or result
    return result


class Console:
    """The guest's serial console as the launcher pod's guest-console-log container logged it (the kubelet's log files
    of that container), read every 0.2 s in a thread and kept: the kubelet removes a pod's logs with the pod, so what
    the guest printed while it powered off is gone once the VMI is."""

    def __init__(self, nodelab):
        self.pattern = os.path.join(nodelab['dir'], 'node', 'pod-logs', '%s_virt-launcher-%s-*' % (NS, VM), 'guest-console-log', '*.log')
        self.seen = {}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def read(self):
        for path in sorted(glob.glob(self.pattern)):
            try:
                with open(path, encoding='utf-8', errors='replace') as handle:
                    text = handle.read()
            except OSError:
                continue
            if len(text) > len(self.seen.get(path, '')):
                self.seen[path] = text
        return ''.join(self.seen[path] for path in sorted(self.seen))

    def _run(self):
        while not self.stop_event.is_set():
            self.read()
            self.stop_event.wait(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(5)


def test_a_guest_boots_and_pauses_and_powers_off_under_virt_handler(nodelab):  # pylint: disable=too-many-locals,too-many-statements
    client = nodelab['client']
    module_checks = []

    def printable():
        return ((get(nodelab, API + 'virtualmachines/' + VM) or {}).get('status') or {}).get('printableStatus')

    def step(state, **args):
        result = ok(run_module('vm', vm_args(nodelab, state, **args)))
        if state != 'absent':
            module_checks.append(('vm %s: status' % state, result['vm']['status'], printable()))
        return result

    def info_check(what):
        found = ok(run_module('vm_info', dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=VM)))  # pylint: disable=use-dict-literal
        vm = get(nodelab, API + 'virtualmachines/' + VM)
        vmi = get(nodelab, API + 'virtualmachineinstances/' + VM)
        item = found['vms'][0] if 'vms' in found else found['vm']
        module_checks.append(('vm_info %s: status' % what, item['status'], (vm.get('status') or {}).get('printableStatus')))
        if vmi is not None:
            module_checks.append(('vm_info %s: phase' % what, item['phase'], vmi['status'].get('phase')))

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
        with open(os.path.join(nodelab['dir'], 'logs', 'node-virt-handler.log'), encoding='utf-8', errors='replace') as handle:
            handler_log = handle.read()
        assert 'Domain is in state Shutoff reason Shutdown' in handler_log or 'reason: Shutdown' in handler_log, handler_log[-3000:]
        assert get(nodelab, API + 'virtualmachineinstances/' + VM) is None or \
            get(nodelab, API + 'virtualmachineinstances/' + VM)['metadata']['uid'] != uid
        info_check('stopped')
        step('absent')
        wait_for('the VM gone', lambda: get(nodelab, API + 'virtualmachines/' + VM) is None, timeout=60)
    elapsed = time.monotonic() - started
    print('\nreal node: one TCG boot, marker %.1f s after the VMI was Running; scenario %.1f s' % (boot_seconds, elapsed))
    judge('real node: vm running/paused/stopped', nodelab, sampler, module_checks, elapsed, {'Running', 'Paused', 'Stopped'})


def _qemu_pids(name):
    """PIDs (as seen from here: the node's PID namespace is a child of ours) of the QEMU running domain NS_name."""
    found = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as handle:
                argv = handle.read().split(b'\0')
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).startswith(b'qemu-system') and ('guest=%s_%s' % (NS, name)).encode() in b' '.join(argv):
            found.append(int(entry))
    return found


def test_a_crashed_guest_fails_and_virt_controller_starts_it_again(nodelab):
    """Kill the guest's QEMU (SIGKILL): virt-handler reads the domain crashed and fails the VMI, virt-controller (runStrategy
    Always) creates a new one, which boots again. Two TCG boots."""
    client = nodelab['client']
    module_checks = []

    def printable():
        return ((get(nodelab, API + 'virtualmachines/' + VM) or {}).get('status') or {}).get('printableStatus')

    started = time.monotonic()
    with Sampler(client, interval=0.2) as sampler, Console(nodelab) as console:
        result = ok(run_module('vm', vm_args(nodelab, 'running')))
        module_checks.append(('vm running: status', result['vm']['status'], printable()))
        first = get(nodelab, API + 'virtualmachineinstances/' + VM)
        wait_for('the boot marker', lambda: guest.READY_MARKER in console.read(), timeout=BOOT_TIMEOUT)
        pids = wait_for('the guest QEMU process', lambda: _qemu_pids(VM), timeout=30)
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
        with open(os.path.join(nodelab['dir'], 'logs', 'node-virt-handler.log'), encoding='utf-8', errors='replace') as handle:
            handler_log = handle.read()
        # virt-handler read the domain crashed (libvirt's reason for a QEMU that died), not shut down or destroyed
        assert 'Domain is in state Shutoff reason Crashed' in handler_log or 'reason: Crashed' in handler_log, handler_log[-3000:]
        found = ok(run_module('vm_info', dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=VM)))  # pylint: disable=use-dict-literal
        module_checks.append(('vm_info after the restart: status', found['vms'][0]['status'], printable()))
        ok(run_module('vm', vm_args(nodelab, 'absent')))
        wait_for('the VM gone', lambda: get(nodelab, API + 'virtualmachines/' + VM) is None, timeout=120)
    elapsed = time.monotonic() - started
    print('\nreal node: a crash (SIGKILL to QEMU) and a restart: %s' % sorted({o['vmi_phase'] for o in sampler.trail if o['vmi_phase']}))
    assert any(o['vmi_phase'] == 'Failed' for o in sampler.trail), sampler.trail
    judge('real node: a crashed guest restarted', nodelab, sampler, module_checks, elapsed, {'Running'})
