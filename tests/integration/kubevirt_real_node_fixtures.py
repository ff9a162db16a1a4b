"""What the real-node test files share (tests/integration/test_kubevirt_real_node*.py, issue 34): the lab, the readers of
its objects, the VM declaration of the test guest, the guest's serial console and its QEMU processes.

Import the fixtures by name into a test module (``from tests.integration.kubevirt_real_node_fixtures import nodelab``):
pytest finds a fixture in the module's namespace. Each test module calls
``kubevirt_real_node_gate.require_real_node()`` itself, at module level, before anything heavy.

- :func:`nodelab`: ``up --controllers real --nodes real`` (KubeVirt's virt-api, virt-controller and virt-handler on the
  real node; kubelet + containerd), one per module; it yields what :func:`lab_up` yields: lab.up's answer plus
  ``client`` (admin), ``dir``, ``node`` (the node's description from the lab state) and ``up_seconds``.
- :func:`lab_up`: the same for any ``lab.up`` arguments, as a context manager (a lab of a test's own).
"""

# pylint: disable=redefined-outer-name

import contextlib
import glob
import os
import threading
import time

import pytest

from tests.integration.ansible_run import run_module
from tools.kubelab import lab, node
from tools.virtlab import guest

NS = 'default'
API = '/apis/kubevirt.io/v1/namespaces/%s/' % NS
VM = 'tcg1'
BOOT_TIMEOUT = 300      # a TCG boot of the test guest on 2 loaded cores (tens of seconds when idle)


@contextlib.contextmanager
def lab_up(tmp_path_factory, name, **up_args):
    """A lab in a new temporary directory ``name``: ``lab.up(directory, **up_args)``, taken down on exit."""
    directory = str(tmp_path_factory.mktemp(name))
    started = time.monotonic()
    info = lab.up(directory, **up_args)
    info['up_seconds'] = round(time.monotonic() - started, 1)
    state = lab._load_state(directory)  # pylint: disable=protected-access
    with open(os.path.join(directory, 'pki', 'admin.token'), encoding='utf-8') as handle:
        info['client'] = lab.Client(state['server'], state['ca_file'], handle.read().strip())
    info.update(dir=directory, node=state['node'])
    try:
        yield info
    finally:
        lab.down(directory)


@pytest.fixture(scope='module')
def nodelab(tmp_path_factory):
    with lab_up(tmp_path_factory, 'kubelab-node-vm', controllers='real', nodes='real') as info:
        yield info


def get(nodelab, path):
    """The object at ``path`` (None unless the API server answers 200)."""
    code, body = nodelab['client'].request('GET', path)
    return body if code == 200 else None


def wait_for(what, check, timeout=60, interval=0.5):
    """The first true value of ``check()``; AssertionError naming ``what`` (and the last value) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError('%s not within %d s (last: %r)' % (what, timeout, last))


def vm_of(nodelab, name=VM):
    return get(nodelab, API + 'virtualmachines/' + name)


def vmi_of(nodelab, name=VM):
    return get(nodelab, API + 'virtualmachineinstances/' + name)


def printable(nodelab, name=VM):
    """virt-controller's printableStatus of the VM (None when there is no VM or no status yet)."""
    return ((vm_of(nodelab, name) or {}).get('status') or {}).get('printableStatus')


def _template_spec(nodelab, kernel_args, grace):
    kernel_boot = {'kernelArgs': (guest.KERNEL_CMDLINE + ' ' + kernel_args).strip(),
                   'container': {'image': nodelab['node']['images']['guest'], 'imagePullPolicy': 'Never',
                                 'kernelPath': '/boot/vmlinuz', 'initrdPath': '/boot/initrd.img'}}
    return {'nodeSelector': {'kubernetes.io/hostname': node.NODE_NAME}, 'terminationGracePeriodSeconds': grace,
            'domain': {'devices': {'autoattachPodInterface': False}, 'firmware': {'kernelBoot': kernel_boot}}}


def vm_args(nodelab, state, name=VM, kernel_args='', grace=60, **args):
    """converge.virt.vm's arguments for the project's test guest (tools/virtlab/guest.py) as a kernel-boot container on
    the real node: ``kernel_args`` are added to the guest's own command line, ``grace`` is the VMI's
    terminationGracePeriodSeconds; ``args`` override the module's arguments."""
    template = {'template': {'spec': _template_spec(nodelab, kernel_args, grace)}}
    base = dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=name, state=state,  # pylint: disable=use-dict-literal
                vcpus=1, memory='256Mi', disks=[], spec=template, wait_timeout=BOOT_TIMEOUT)
    base.update(args)
    return base


def vm_manifest(nodelab, name, run_strategy, kernel_args='', grace=60, annotations=None):
    """A VirtualMachine of the test guest as a KubeVirt user writes it (any run strategy: the ``vm`` module declares
    power with ``state`` and refuses ``runStrategy``), to POST to API + 'virtualmachines'."""
    spec = _template_spec(nodelab, kernel_args, grace)
    spec['domain'].update(cpu={'cores': 1}, resources={'requests': {'memory': '256Mi'}})
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'runStrategy': run_strategy,
                     'template': {'metadata': {'annotations': dict(annotations or {})}, 'spec': spec}}}


def call(nodelab, method, path, body=None, expect=(200, 201)):
    """The answer of one request that must answer one of ``expect``."""
    code, answer = nodelab['client'].request(method, path, body)
    assert code in expect, (method, path, code, answer)
    return answer


def edit(nodelab, path, change):
    """GET, ``change(obj)``, PUT (again on a conflict: virt-controller writes the same objects)."""
    for _attempt in range(10):
        obj = get(nodelab, path)
        change(obj)
        code, answer = nodelab['client'].request('PUT', path, obj)
        if code != 409:
            assert code == 200, (path, code, answer)
            return answer
    raise AssertionError('%s: conflict after 10 tries' % path)


def ok(result):
    """``result`` of a run_module call that succeeded (AssertionError with its message otherwise)."""
    assert result['_rc'] == 0 and not result.get('failed'), result.get('msg') or result
    return result


def vm_info(nodelab, name=VM):
    """vm_info's item for the VM (a successful run)."""
    found = ok(run_module('vm_info', dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=name)))  # pylint: disable=use-dict-literal
    return found['vms'][0] if 'vms' in found else found['vm']


def _versions(nodelab, name):
    vm, vmi = vm_of(nodelab, name), vmi_of(nodelab, name)
    return vm, vmi, [((o or {}).get('metadata') or {}).get('resourceVersion') for o in (vm, vmi)]


def info_checks(nodelab, what, name=VM):
    """vm_info's status and phase beside virt-controller's printableStatus and the VMI's phase:
    [(what, ours, theirs)] for judge()'s module checks. Judged only when the VM and VMI did not change while vm_info
    ran (a settled observation); asked again otherwise (5 times at most)."""
    for _attempt in range(5):
        _vm, _vmi, before = _versions(nodelab, name)
        item = vm_info(nodelab, name)
        vm, vmi, after = _versions(nodelab, name)
        if after == before:
            break
    else:
        raise AssertionError('%s changed during each of 5 vm_info runs' % name)
    checks = [('vm_info %s: status' % what, item['status'], ((vm or {}).get('status') or {}).get('printableStatus'))]
    if vmi is not None:
        checks.append(('vm_info %s: phase' % what, item['phase'], (vmi.get('status') or {}).get('phase')))
    return checks


def read_handler_log(nodelab):
    """The real virt-handler's log so far."""
    with open(os.path.join(nodelab['dir'], 'logs', 'node-virt-handler.log'), encoding='utf-8', errors='replace') as handle:
        return handle.read()


class Console:
    """The guest's serial console as the launcher pod's guest-console-log container logged it (the kubelet's log files
    of that container), read every 0.2 s in a thread and kept: the kubelet removes a pod's logs with the pod, so what
    the guest printed while it powered off is gone once the VMI is."""

    def __init__(self, nodelab, name=VM):
        self.pattern = os.path.join(nodelab['dir'], 'node', 'pod-logs', '%s_virt-launcher-%s-*' % (NS, name), 'guest-console-log', '*.log')
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


def qemu_pids(name=VM):
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
