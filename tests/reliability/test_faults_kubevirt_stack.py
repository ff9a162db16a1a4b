"""KubeVirt faults of the stack itself, on the real one (tools/kubelab): kube-apiserver killed and restarted, etcd
killed and restarted, KubeVirt's virt-api down, while the modules converge a VM or migrate it.

The HTTP faults of test_faults_kubevirt*.py answer one request wrongly; here a whole component of the cluster goes
away (SIGKILL, as a crash or an OOM kill would) in the middle of a run and comes back on its own data, as after a
restart of a control-plane node. For every scenario: the run that met the outage ends with a clear result
(converged, or failed with a message naming what failed: no traceback, no "unexpected error"); the next run
converges to the declared state with no task left behind; a third run is a no-op. With virt-api down, what needs it
(its admission webhooks, the subresources API) fails naming it and nothing is written; once it is back the same
declaration converges.

Each scenario records its figure for docs/reliability.md. These tests need the real stack: with
CONVERGE_VIRT_KUBE_API=emulated they are skipped (the emulator has no components to kill).
"""

# pylint: disable=redefined-outer-name

import contextlib
import json
import socket
import subprocess
import threading
import time

import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kclient
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend
from ansible_collections.converge.virt.plugins.modules import migration as migration_module
from ansible_collections.converge.virt.plugins.modules import vm as vm_module
from ansible_collections.converge.virt.plugins.modules import vm_info as vm_info_module

from tests.kubeapi.fixtures import MODE
from tests.reliability import figures
from tests.reliability.fuzzing import run_main

pytestmark = pytest.mark.skipif(MODE == 'emulated', reason='faults of the real stack: CONVERGE_VIRT_KUBE_API=emulated has no stack')

NS = 'default'
TASK_STATE = 'converge.virt/task-state'
STATUS = {'present': 'Stopped', 'stopped': 'Stopped', 'running': 'Running'}


@pytest.fixture
def srv(kube_server):
    """The test's view of the real stack; every component is running again when the test ends."""
    try:
        yield kube_server
    finally:
        lab, directory = kube_server.stack.lab, kube_server.stack.directory
        for role in ('etcd', 'kube-apiserver', 'virt-api'):
            lab.start_role(directory, role)


@contextlib.contextmanager
def own_process(monkeypatch):
    """Each run has an owner of its own that lives exactly as long as the run, as an ansible process would ("host:pid"
    of a process started for it and ended after it): a run that failed during the outage leaves its task to a process
    that is gone, which the next run on this host recovers at once (plugins/module_utils/_base/owner.py)."""
    proc = subprocess.Popen(['sleep', '3600'])  # pylint: disable=consider-using-with
    owner = '%s:%d' % (socket.gethostname(), proc.pid)
    monkeypatch.setattr(vm_backend, 'owner_id', lambda: owner)
    monkeypatch.setattr(migration_backend, 'owner_id', lambda: owner)
    try:
        yield owner
    finally:
        proc.kill()
        proc.wait()


def run_vm(srv, name, state, monkeypatch, **extra):
    args = {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': name, 'memory': '64Mi',
            'state': state, 'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], 'wait_timeout': 120,
            'shutdown_timeout': 10}
    args.update(extra)
    with own_process(monkeypatch):
        return run_main(vm_module, args)


def run_migration(srv, name, monkeypatch, **extra):
    with own_process(monkeypatch):
        return run_main(migration_module, dict({'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': name,
                                                'wait_timeout': 120}, **extra))


def assert_clear(result, scenario):
    text = json.dumps(result)
    assert 'Traceback' not in text and 'unexpected error' not in (result.get('msg') or ''), (scenario, result)
    if result.get('failed'):
        assert result.get('msg'), (scenario, result)


def peek(srv, group, plural, name):
    return srv.store.peek(srv.store.rtype(group, plural), NS, name)


def task_state(srv, name):
    return ((peek(srv, 'kubevirt.io', 'virtualmachines', name) or {}).get('metadata', {}).get('annotations') or {}).get(TASK_STATE)


def during(run, trigger, fault, timeout=60):
    """Run ``run()`` in a thread; as soon as ``trigger()`` is true do ``fault()``; return (the run's result, whether
    the run was still going when the fault began)."""
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not trigger():
        assert thread.is_alive() or 'result' not in outcome, ('the run ended before the fault could begin', outcome)
        assert time.monotonic() < deadline, 'the trigger of the fault never came'
        time.sleep(0.02)
    overlapped = thread.is_alive()
    fault()
    thread.join(300)
    assert not thread.is_alive(), 'the run never ended'
    return outcome['result'], overlapped


def outage(srv, role, seconds):
    """SIGKILL ``role`` of the stack, leave it down ``seconds``, start it again on its data (waits until ready)."""
    def fault():
        srv.stack.lab.restart_role(srv.stack.directory, role, kill=True, down_seconds=seconds)
    return fault


def record_outcome(scenario, survived, first):
    """The scenario's figure for docs/reliability.md, saying how the run that met the fault ended."""
    detail = ('first run failed cleanly: %s' % (first.get('msg') or '')[:100] if first.get('failed') else 'first run converged') if survived else ''
    figures.record('fault', 'kubevirt stack: %s' % scenario, survived=survived, detail=detail)


def settled(srv, name, scenario, monkeypatch, state):
    """The next run converges, the third is a no-op, and no task is left on the VM."""
    second = run_vm(srv, name, state, monkeypatch)
    assert not second.get('failed'), (scenario, 'the next run did not converge', second)
    third = run_vm(srv, name, state, monkeypatch)
    assert not third.get('failed') and not third['changed'], (scenario, 'the third run was not a no-op', third)
    assert third['vm']['status'] == STATUS[state] and third['vm']['task_state'] is None, (scenario, third['vm'])
    assert task_state(srv, name) is None, (scenario, 'a task was left on the VM')


STARTS = [
    ('kube-apiserver killed during a start', 'kube-apiserver', 3),
    ('etcd killed during a start', 'etcd', 3),
    ('virt-api killed during a start', 'virt-api', 3),
]


@pytest.mark.parametrize('scenario,role,seconds', STARTS, ids=[s[0].replace(' ', '-') for s in STARTS])
def test_vm_start_survives_a_component_crash(srv, monkeypatch, scenario, role, seconds):
    name = 'stack-%d' % [s[0] for s in STARTS].index(scenario)
    survived, first, overlapped = False, {}, False
    try:
        prepared = run_vm(srv, name, 'present', monkeypatch)
        assert not prepared.get('failed'), prepared
        # the crash begins the moment the start request reached the server (the VM asks for a run): the module is
        # then waiting for KubeVirt to carry it out
        first, overlapped = during(lambda: run_vm(srv, name, 'running', monkeypatch),
                                   lambda: (peek(srv, 'kubevirt.io', 'virtualmachines', name) or {}).get('spec', {}).get('runStrategy') != 'Halted'
                                   or task_state(srv, name) is not None,
                                   outage(srv, role, seconds))
        assert overlapped, (scenario, 'the run was over before the crash: the scenario tested nothing', first)
        assert_clear(first, scenario)
        settled(srv, name, scenario, monkeypatch, 'running')
        survived = True
    finally:
        record_outcome(scenario, survived, first)
        run_vm(srv, name, 'absent', monkeypatch)


def test_migration_survives_an_apiserver_crash(srv, monkeypatch):
    scenario = 'kube-apiserver killed during a migration'
    name = 'stack-mig'
    survived, first = False, {}
    try:
        started = run_vm(srv, name, 'running', monkeypatch)
        assert not started.get('failed') and started['vm']['status'] == 'Running', started
        source = started['vm']['node']
        target = sorted(set(srv.controller.node_names) - {source})[0]
        migrations = srv.store.rtype('kubevirt.io', 'virtualmachineinstancemigrations')
        first, overlapped = during(lambda: run_migration(srv, name, monkeypatch, target_node=target),
                                   lambda: any(m['spec'].get('vmiName') == name for m in srv.store.items(migrations, NS)),
                                   outage(srv, 'kube-apiserver', 3))
        assert overlapped, (scenario, 'the run was over before the crash', first)
        assert_clear(first, scenario)
        second = run_migration(srv, name, monkeypatch, target_node=target)
        assert not second.get('failed'), (scenario, 'the next run did not converge', first.get('msg'), second)
        third = run_migration(srv, name, monkeypatch, target_node=target)
        assert not third.get('failed') and not third['changed'] and third['on_target'], (scenario, 'the third run was not a no-op', third)
        made = [m for m in srv.store.items(migrations, NS) if m['spec'].get('vmiName') == name]
        assert len(made) == 1 and made[0]['status']['phase'] == 'Succeeded', ('duplicate or unfinished migration', made)
        vmi = peek(srv, 'kubevirt.io', 'virtualmachineinstances', name)
        assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == target, vmi['status']
        assert task_state(srv, name) is None, (scenario, 'a task was left on the VM')
        survived = True
    finally:
        record_outcome(scenario, survived, first)
        run_vm(srv, name, 'absent', monkeypatch)


def wait_until(check, timeout, what):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, 'timed out waiting for %s' % what
        time.sleep(0.5)


@contextlib.contextmanager
def counting_503s(monkeypatch):
    """The 503s of subresources.kubevirt.io the runs meet (each is retried by the client until the task's deadline)."""
    met = []
    real = kclient.KubeClient.request

    def request(self, method, path, *args, **kwargs):
        try:
            return real(self, method, path, *args, **kwargs)
        except kclient.ApiUnavailable as exc:
            if exc.code == 503:
                met.append((method, path))
            raise
    monkeypatch.setattr(kclient.KubeClient, 'request', request)
    try:
        yield met
    finally:
        monkeypatch.setattr(kclient.KubeClient, 'request', real)


def test_with_virt_api_down_what_needs_it_fails_naming_it_and_writes_nothing(srv, monkeypatch):
    scenario = 'virt-api down: create, start and read'
    survived, detail = False, ''
    lab, directory = srv.stack.lab, srv.stack.directory
    try:
        prepared = run_vm(srv, 'stack-noapi-1', 'present', monkeypatch)
        assert not prepared.get('failed'), prepared
        lab.stop_role(directory, 'virt-api', kill=True)
        # a create goes through KubeVirt's admission webhooks (failurePolicy Fail): refused, naming the webhook, no VM
        created = run_vm(srv, 'stack-noapi-2', 'running', monkeypatch)
        assert_clear(created, scenario)
        assert created.get('failed') and "KubeVirt's admission webhook" in created['msg'] and 'is virt-api running?' in created['msg'], created
        assert peek(srv, 'kubevirt.io', 'virtualmachines', 'stack-noapi-2') is None
        # a start writes its task record on the VM first: virt-api's VM webhook refuses it, named; the VM is still
        # stopped, no task left
        before = peek(srv, 'kubevirt.io', 'virtualmachines', 'stack-noapi-1')
        start = run_vm(srv, 'stack-noapi-1', 'running', monkeypatch, wait_timeout=20)
        assert_clear(start, scenario)
        assert start.get('failed') and 'is virt-api running?' in start['msg'], start
        after = peek(srv, 'kubevirt.io', 'virtualmachines', 'stack-noapi-1')
        assert after['spec'].get('runStrategy') == before['spec'].get('runStrategy') == 'Halted', after['spec']
        assert task_state(srv, 'stack-noapi-1') is None, 'a task was left on the VM'
        # reads need only kube-apiserver
        info = run_main(vm_info_module, {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': ['stack-noapi-1']})
        assert not info.get('failed') and info['vms'][0]['status'] == 'Stopped', info
        # virt-api comes back: the first run starts the moment virt-api itself answers, before kube-apiserver's
        # aggregator has seen it again (it keeps the APIService v1.subresources.kubevirt.io unavailable, and the start
        # subresource answers 503, until its availability controller probes virt-api): the run retries the start
        # within its wait_timeout and converges (RELIABILITY_LONG run of 2026-11-26: it failed with "got 503")
        wait_until(lambda: not lab.subresources_available(directory), 90, 'the aggregator to see virt-api down')
        lab.start_role(directory, 'virt-api', until='healthy')
        in_window = not lab.subresources_available(directory)
        with counting_503s(monkeypatch) as met:
            settled(srv, 'stack-noapi-1', scenario, monkeypatch, 'running')
        assert not in_window or lab.subresources_available(directory), 'the APIService never became Available again'
        detail = 'run right after the restart met %d subresource 503s (APIService %s when it began)' % (
            len(met), 'unavailable' if in_window else 'already available')
        print(detail)
        lab.start_role(directory, 'virt-api')
        settled(srv, 'stack-noapi-2', scenario, monkeypatch, 'running')
        survived = True
    finally:
        figures.record('fault', 'kubevirt stack: %s' % scenario, survived=survived, count=3, detail=detail)
        lab.start_role(directory, 'virt-api')
        for vm in ('stack-noapi-1', 'stack-noapi-2'):
            run_vm(srv, vm, 'absent', monkeypatch)


def test_vm_info_with_the_apiserver_down_fails_naming_the_server(srv, monkeypatch):
    lab, directory = srv.stack.lab, srv.stack.directory
    survived = False
    try:
        assert not run_vm(srv, 'stack-down', 'present', monkeypatch).get('failed')
        lab.stop_role(directory, 'kube-apiserver', kill=True)
        info = run_main(vm_info_module, {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS})
        assert_clear(info, 'kube-apiserver down')
        assert info.get('failed') and srv.url.split('//')[1] in info['msg'], info
        lab.start_role(directory, 'kube-apiserver')
        again = run_main(vm_info_module, {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': ['stack-down']})
        assert not again.get('failed') and again['vms'][0]['exists'], again
        survived = True
    finally:
        figures.record('fault', 'kubevirt stack: kube-apiserver down during vm_info', survived=survived)
        lab.start_role(directory, 'kube-apiserver')
        run_vm(srv, 'stack-down', 'absent', monkeypatch)
