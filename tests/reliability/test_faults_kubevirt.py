"""KubeVirt faults: 409 conflicts, 500/503 answers, requests slower than the client timeout and dropped
watch streams, injected by the Kubernetes API test server (tests/kubeapi/faults.py) while the vm module
converges a VM.

For every fault: the run ends with a clear result (converged, or failed with a message naming what
failed: no traceback, no "unexpected error"); the faults are then cleared and the next run converges
to the declared state with no task left behind; a third run is a no-op.  Each run has its own task
owner (as separate ansible processes would), so a lease a failed run left behind is not silently
reused.  The client timeout is shortened to 2 s in-process so that a delayed request times out fast
(RELIABILITY_LONG=1 keeps the real 30 s timeout and delays beyond it).
"""

# pylint: disable=redefined-outer-name

import itertools
import json
import os
import threading
import time

import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend
from ansible_collections.converge.virt.plugins.modules import vm as vm_module

from tests.reliability import figures
from tests.reliability.fuzzing import run_main

LONG = os.environ.get('RELIABILITY_LONG') == '1'
CLIENT_TIMEOUT = 30 if LONG else 2
# the most a scenario's slow calls delay one run (two slow reads while waiting) is added to its wait_timeout with the real timeout
SLOW_CALL_BUDGET = 2 * (CLIENT_TIMEOUT + 1) if LONG else 0
NS = 'default'
VMS = '/apis/kubevirt.io/v1/namespaces/%s/virtualmachines' % NS
SUB = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines' % NS
SUBI = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachineinstances' % NS
END = r'(\?.*)?$'   # the client may add an empty query
OWNERS = itertools.count(1)

# (id, state before the fault, declared state, [(path regex, status, method, count, delay)], drop watches during the run)
SCENARIOS = [
    ('409 on create', None, 'present', [(VMS + END, 409, 'POST', 1, 0)], False),
    ('409 twice on the writes of the VM', None, 'running', [(VMS + '/{vm}' + END, 409, 'PATCH', 2, 0)], False),
    ('409 on start', 'present', 'running', [(SUB + '/{vm}/start' + END, 409, 'PUT', 1, 0)], False),
    ('409 on stop', 'running', 'stopped', [(SUB + '/{vm}/stop' + END, 409, 'PUT', 1, 0)], False),
    ('409 on pause', 'running', 'paused', [(SUBI + '/{vm}/pause' + END, 409, 'PUT', 1, 0)], False),
    ('500 on create', None, 'running', [(VMS + END, 500, 'POST', 1, 0)], False),
    ('500 on read', 'present', 'running', [(VMS + '/{vm}' + END, 500, 'GET', 1, 0)], False),
    ('500 on start', 'present', 'running', [(SUB + '/{vm}/start' + END, 500, 'PUT', 1, 0)], False),
    ('503 three times on anything', 'running', 'stopped', [('/{vm}', 503, None, 3, 0)], False),
    ('500 on delete', 'present', 'absent', [(VMS + '/{vm}' + END, 500, 'DELETE', 1, 0)], False),
    ('create slower than the client timeout', None, 'present', [(VMS + END, None, 'POST', 1, CLIENT_TIMEOUT + 1)], False),
    ('start slower than the client timeout', 'present', 'running', [(SUB + '/{vm}/start' + END, None, 'PUT', 1, CLIENT_TIMEOUT + 1)], False),
    ('reads slower than the client timeout while waiting', 'present', 'running', [(VMS + '/{vm}' + END, None, 'GET', 2, CLIENT_TIMEOUT + 1)], False),
    ('watch streams dropped during a start', 'present', 'running', [], True),
    ('watch streams dropped during a stop', 'running', 'stopped', [], True),
]
STATUS = {'present': 'Stopped', 'stopped': 'Stopped', 'running': 'Running', 'paused': 'Paused'}


@pytest.fixture(scope='module')
def srv(kube_module_server):
    yield kube_module_server
    kube_module_server.faults.clear()


@pytest.fixture
def short_client_timeout(monkeypatch):
    """KubeClient's default request timeout shortened for the delay faults (in-process runs only)."""
    defaults = kubevirt_client.KubeClient.__init__.__defaults__
    assert defaults[-1] == 30, defaults     # the timeout a real run uses
    monkeypatch.setattr(kubevirt_client.KubeClient.__init__, '__defaults__', defaults[:-1] + (CLIENT_TIMEOUT,))


def converge(srv, name, state, monkeypatch):
    """One run of the vm module as its own task owner (like a separate ansible process)."""
    owner = 'faults-run-%d' % next(OWNERS)
    monkeypatch.setattr(vm_backend, 'owner_id', lambda: owner)
    args = {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': name, 'memory': '64Mi', 'state': state,
            'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], 'wait_timeout': 60 + SLOW_CALL_BUDGET, 'shutdown_timeout': 10}
    return run_main(vm_module, args)


def assert_clear(result, scenario):
    text = json.dumps(result)
    assert 'Traceback' not in text and 'unexpected error' not in (result.get('msg') or ''), (scenario, result)
    if result.get('failed'):
        assert result.get('msg'), (scenario, result)


@pytest.mark.parametrize('scenario,before,state,rules,drop', SCENARIOS, ids=[s[0].replace(' ', '-') for s in SCENARIOS])
def test_vm_survives_api_fault(srv, short_client_timeout, monkeypatch, scenario, before, state, rules, drop):  # pylint: disable=unused-argument
    name = 'fault-%d' % SCENARIOS.index(next(s for s in SCENARIOS if s[0] == scenario))
    survived, first = False, {}
    try:
        if before is not None:
            prepared = converge(srv, name, before, monkeypatch)
            assert not prepared.get('failed'), prepared
        hits = [srv.faults.add_http(path.format(vm=name), status=status, method=method, count=count, delay=delay,
                                    reason='Conflict' if status == 409 else None) for path, status, method, count, delay in rules]
        stop = threading.Event()
        dropper = None
        if drop:
            def keep_dropping():
                while not stop.wait(0.05):
                    srv.faults.drop_watches()
            dropper = threading.Thread(target=keep_dropping, daemon=True)
            dropper.start()
        try:
            first = converge(srv, name, state, monkeypatch)
        finally:
            stop.set()
            if dropper is not None:
                dropper.join()
        fired = [r['hits'] for r in srv.faults.to_dict()['http'] if r['id'] in hits]
        srv.faults.clear()
        assert_clear(first, scenario)
        assert all(fired), ('a fault never fired: the scenario tested nothing', scenario, fired)
        time.sleep(CLIENT_TIMEOUT + 1.5 if any(delay for *_x, delay in rules) else 0)   # a delayed request the client gave up on lands now
        second = converge(srv, name, state, monkeypatch)
        assert not second.get('failed'), (scenario, 'the next run did not converge', first.get('msg'), second)
        third = converge(srv, name, state, monkeypatch)
        assert not third.get('failed') and not third['changed'], (scenario, 'the third run was not a no-op', third)
        if state == 'absent':
            assert srv.store.peek(srv.store.rtype('kubevirt.io', 'virtualmachines'), NS, name) is None
        else:
            assert third['vm']['status'] == STATUS[state] and third['vm']['task_state'] is None, third['vm']
        survived = True
    finally:
        figures.record('fault', 'kubevirt vm: %s' % scenario, survived=survived, count=max(1, sum(r[3] for r in rules)),
                       detail=('first run failed cleanly: %s' % first.get('msg', '')[:100] if first.get('failed') else 'first run converged')
                       if survived else '')
        if state != 'absent':
            converge(srv, name, 'absent', monkeypatch)
