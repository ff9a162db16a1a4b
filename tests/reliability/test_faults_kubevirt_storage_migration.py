"""KubeVirt faults for the volume and migration modules: 409 conflicts, 500/503 answers, requests slower than the
client timeout and dropped watch streams, injected by the Kubernetes API test server (tests/kubeapi/faults.py) into
a write in the middle of the operation.

volume (backend kubevirt): claim / DataVolume create, grow, hotplug attach and detach on a running VM (the
``addvolume`` / ``removevolume`` subresources, under the VM's task).  migration (backend kubevirt): the
VirtualMachineInstanceMigration create, the polls that follow it, the task record, and the cancel (its deletion).
volume_info and migration_info on a 500.

For every fault: the run ends with a clear result (converged, or failed with a message naming what failed: no
traceback, no "unexpected error"); the faults are cleared, the next run converges, and a third run is a no-op.
Afterwards: the volume still exists with the declared size and attachments (no lost volume, no disk plugged
twice), the VM carries no task record, a VM has at most one migration object and never two in flight (no
duplicate VMIM).  Both backends poll (no watch): the dropped-watch scenarios check that nothing comes to depend on
a watch stream.  urllib3 retries an idempotent request that timed out (three times): the "on every retry" scenarios
make every attempt slow, so that the client really gives up.  Each run has its own task owner (as separate ansible processes would).  The client timeout is
shortened to 2 s in-process so that a delayed request times out fast (RELIABILITY_LONG=1 keeps the real 30 s).
"""

# pylint: disable=redefined-outer-name,too-many-arguments,too-many-positional-arguments,too-many-locals

import itertools
import json
import os
import threading
import time

import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_options
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend
from ansible_collections.converge.virt.plugins.modules import migration as migration_module
from ansible_collections.converge.virt.plugins.modules import migration_info as migration_info_module
from ansible_collections.converge.virt.plugins.modules import vm as vm_module
from ansible_collections.converge.virt.plugins.modules import volume as volume_module
from ansible_collections.converge.virt.plugins.modules import volume_info as volume_info_module

from tests.reliability import figures
from tests.reliability.fuzzing import run_main

LONG = os.environ.get('RELIABILITY_LONG') == '1'
CLIENT_TIMEOUT = 30 if LONG else 2
NS = 'default'
GI = 1024 ** 3
END = r'(\?.*)?$'   # the client may add a query (dryRun, limit)
PVCS = '/api/v1/namespaces/%s/persistentvolumeclaims' % NS
DVS = '/apis/cdi.kubevirt.io/v1beta1/namespaces/%s/datavolumes' % NS
VMS = '/apis/kubevirt.io/v1/namespaces/%s/virtualmachines' % NS
VMIMS = '/apis/kubevirt.io/v1/namespaces/%s/virtualmachineinstancemigrations' % NS
SUB = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines' % NS
TASK_STATE = 'converge.virt/task-state'
OWNERS = itertools.count(1)
HOST_VM = 'fault-host'
RETRIED_SLOW = 4     # the first attempt and urllib3's three retries
# with the real 30 s client timeout, a call slow on every retry alone takes 4 x 31 s: the runs' wait_timeout grows by that
# much (it was 60 s for a migration, so the run gave up before the fault ended: RELIABILITY_LONG run of 2026-11-26)
SLOW_CALL_BUDGET = RETRIED_SLOW * (CLIENT_TIMEOUT + 1) if LONG else 0

# volume scenarios: (id, what exists before (volume declarations), the declaration, HTTP rules, drop watches)
# a rule: (path regex, status, method, count, delay); {vm} {vol} {dev} are filled in; status 'ready' names the
# special rule "500 on the VM's task record once the hotplugged disk is Ready" (the release of the task)
CLAIM = {'capacity': '1Gi'}
DV = {'capacity': '1Gi', 'data_volume': True}
ATTACHED = {'capacity': '1Gi', 'attachments': [{'vm': '{vm}', 'dev': '{dev}'}]}
DETACHED = {'attachments': []}
VOLUME_SCENARIOS = [
    ('409 on claim create', [], CLAIM, [(PVCS + END, 409, 'POST', 1, 0)], False),
    ('500 on DataVolume create', [], DV, [(DVS + END, 500, 'POST', 1, 0)], False),
    ('claim create slower than the client timeout', [], CLAIM, [(PVCS + END, None, 'POST', 1, CLIENT_TIMEOUT + 1)], False),
    ('DataVolume create slower than the client timeout', [], DV, [(DVS + END, None, 'POST', 1, CLIENT_TIMEOUT + 1)], False),
    ('500 on reads while waiting for the claim to bind', [], CLAIM, [(PVCS + '/{vol}' + END, 500, 'GET', 1, 0)], False),
    ('409 on grow', [CLAIM], {'capacity': '2Gi'}, [(PVCS + '/{vol}' + END, 409, 'PATCH', 1, 0)], False),
    ('500 on grow of a DataVolume claim', [DV], {'capacity': '2Gi', 'data_volume': True}, [(PVCS + '/{vol}' + END, 500, 'PATCH', 1, 0)], False),
    ('grow slower than the client timeout', [CLAIM], {'capacity': '2Gi'}, [(PVCS + '/{vol}' + END, None, 'PATCH', 1, CLIENT_TIMEOUT + 1)], False),
    ('409 on hotplug attach', [CLAIM], ATTACHED, [(SUB + '/{vm}/addvolume' + END, 409, 'PUT', 1, 0)], False),
    ('500 on hotplug attach', [CLAIM], ATTACHED, [(SUB + '/{vm}/addvolume' + END, 500, 'PUT', 1, 0)], False),
    # urllib3 retries an idempotent request (PUT, DELETE, GET) that timed out up to 3 times: RETRIED_SLOW makes every attempt slow
    ('hotplug attach slower than the client timeout', [CLAIM], ATTACHED, [(SUB + '/{vm}/addvolume' + END, None, 'PUT', 1, CLIENT_TIMEOUT + 1)],
     False),
    ('hotplug attach slower than the client timeout on every retry', [CLAIM], ATTACHED,
     [(SUB + '/{vm}/addvolume' + END, None, 'PUT', RETRIED_SLOW, CLIENT_TIMEOUT + 1)], False),
    ('500 on taking the VM task for a hotplug', [CLAIM], ATTACHED, [(VMS + '/{vm}' + END, 500, 'PATCH', 1, 0)], False),
    ('500 on releasing the VM task after a hotplug', [CLAIM], ATTACHED, [(VMS + '/{vm}' + END, 'ready', 'PATCH', 1, 0)], False),
    ('500 on reads while waiting for the hotplug', [CLAIM], ATTACHED, [(VMS.replace('virtualmachines', 'virtualmachineinstances') + '/{vm}' + END,
                                                                        500, 'GET', 1, 0)], False),
    ('watch streams dropped during a hotplug', [CLAIM], ATTACHED, [], True),
    ('409 on hotplug detach', [ATTACHED], DETACHED, [(SUB + '/{vm}/removevolume' + END, 409, 'PUT', 1, 0)], False),
    ('500 on hotplug detach', [ATTACHED], DETACHED, [(SUB + '/{vm}/removevolume' + END, 500, 'PUT', 1, 0)], False),
    ('hotplug detach slower than the client timeout', [ATTACHED], DETACHED,
     [(SUB + '/{vm}/removevolume' + END, None, 'PUT', 1, CLIENT_TIMEOUT + 1)], False),
]

# migration scenarios: (id, HTTP rules, drop watches); {vm} is filled in; the VM runs and is moved to another node
FOLLOW = VMIMS + '/{vm}-converge-[a-z0-9]+' + END
MIGRATION_SCENARIOS = [
    ('409 on migration create', [(VMIMS + END, 409, 'POST', 1, 0)], False),
    ('500 on migration create', [(VMIMS + END, 500, 'POST', 1, 0)], False),
    ('migration create slower than the client timeout', [(VMIMS + END, None, 'POST', 1, CLIENT_TIMEOUT + 1)], False),
    ('500 three times on the polls of the migration', [(FOLLOW, 500, 'GET', 3, 0)], False),
    ('a poll of the migration slower than the client timeout', [(FOLLOW, None, 'GET', 1, CLIENT_TIMEOUT + 1)], False),
    ('a poll of the migration slower than the client timeout on every retry', [(FOLLOW, None, 'GET', RETRIED_SLOW, CLIENT_TIMEOUT + 1)], False),
    ('409 on the task record write', [(VMS + '/{vm}' + END, 409, 'PATCH', 1, 0)], False),
    ('500 on the task record write', [(VMS + '/{vm}' + END, 500, 'PATCH', 1, 0)], False),
    ('503 three times on anything of the VM', [('/{vm}', 503, None, 3, 0)], False),
    ('watch streams dropped during a migration', [], True),
]
CANCEL_SCENARIOS = [
    ('409 on cancel', [(VMIMS + '/{vm}-converge-[a-z0-9]+' + END, 409, 'DELETE', 1, 0)]),
    ('500 on cancel', [(VMIMS + '/{vm}-converge-[a-z0-9]+' + END, 500, 'DELETE', 1, 0)]),
    ('cancel slower than the client timeout', [(VMIMS + '/{vm}-converge-[a-z0-9]+' + END, None, 'DELETE', 1, CLIENT_TIMEOUT + 1)]),
    ('cancel slower than the client timeout on every retry', [(VMIMS + '/{vm}-converge-[a-z0-9]+' + END, None, 'DELETE', RETRIED_SLOW,
                                                               CLIENT_TIMEOUT + 1)]),
]


# faults on a request that is safe to repeat (a poll, the release of a task, a compare-and-swap that lost to a 409):
# the first run itself must succeed
MUST_CONVERGE = ('500 on releasing the VM task after a hotplug', 'watch streams dropped during a hotplug',
                 '500 three times on the polls of the migration', 'a poll of the migration slower than the client timeout',
                 'a poll of the migration slower than the client timeout on every retry', '409 on the task record write',
                 'watch streams dropped during a migration')


def ids(scenarios):
    """Test ids from the scenario names."""
    return [s[0].replace(' ', '-') for s in scenarios]


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


def new_owner(monkeypatch):
    """A task owner of its own for the next run (like a separate ansible process)."""
    owner = 'faults-run-%d' % next(OWNERS)
    monkeypatch.setattr(vm_backend, 'owner_id', lambda: owner)
    monkeypatch.setattr(migration_backend, 'owner_id', lambda: owner)
    return owner


def kv(srv, **args):
    """Module arguments of backend kubevirt against the test server."""
    return dict(args, backend='kubevirt', kubeconfig=srv.kubeconfig_path, namespace=NS)


def run_vm(srv, name, state, monkeypatch):
    new_owner(monkeypatch)
    return run_main(vm_module, kv(srv, name=name, memory='64Mi', state=state, wait_timeout=60, shutdown_timeout=10,
                                  disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}]))


def run_volume(srv, name, decl, monkeypatch):
    new_owner(monkeypatch)
    return run_main(volume_module, kv(srv, name=name, wait_timeout=30 + SLOW_CALL_BUDGET, force=True, **decl))


def run_migration(srv, name, monkeypatch, **args):
    new_owner(monkeypatch)
    return run_main(migration_module, kv(srv, name=name, wait_timeout=60 + SLOW_CALL_BUDGET, **args))


def peek(srv, group, plural, name):
    return srv.store.peek(srv.store.rtype(group, plural), NS, name)


def vmims(srv, vm):
    return [m for m in srv.store.items(srv.store.rtype('kubevirt.io', 'virtualmachineinstancemigrations'), NS) if m['spec']['vmiName'] == vm]


def task_state(srv, vm):
    return (peek(srv, 'kubevirt.io', 'virtualmachines', vm)['metadata'].get('annotations') or {}).get(TASK_STATE)


def fill(value, **names):
    """``value`` with {vm}, {vol}, {dev} filled into every string."""
    if isinstance(value, str):
        return value.replace('{vm}', names.get('vm', '{vm}')).replace('{vol}', names.get('vol', '{vol}')).replace('{dev}', names.get('dev', '{dev}'))
    if isinstance(value, list):
        return [fill(v, **names) for v in value]
    if isinstance(value, dict):
        return dict((k, fill(v, **names)) for k, v in value.items())
    return value


def assert_clear(result, scenario):
    """A clear result: no traceback, no "unexpected error", a failure carries a message."""
    text = json.dumps(result)
    assert 'Traceback' not in text and 'unexpected error' not in (result.get('msg') or ''), (scenario, result)
    if result.get('failed'):
        assert result.get('msg'), (scenario, result)


def clear_http(srv):
    """Remove the HTTP rules only (the cluster faults a scenario injected stay)."""
    with srv.faults.lock:
        srv.faults.http_rules = []


def listen(srv, group, plural, callback):
    """Call ``callback(object)`` for every change of ``group/plural`` objects in NS from now on; returns the function
    that stops it (the emulator's store listeners, or a real watch on the real stack)."""
    if getattr(srv, 'real', False):
        return srv.watch(group, plural, NS, lambda kind, obj: callback(obj))
    key = srv.store.rtype(group, plural).key

    def listener(ev):
        if ev.key == key:
            callback(ev.obj)
    srv.store.listeners.append(listener)
    return lambda: srv.store.listeners.remove(listener)


class Faulting:
    """Installs a scenario's HTTP rules (and the watch dropper) for one run; reports whether every rule fired."""

    def __init__(self, srv, rules, drop, **names):
        self.srv, self.rules, self.drop, self.names = srv, rules, drop, names
        self.ids, self.stop, self.dropper, self.unlisten = [], threading.Event(), None, None

    def __enter__(self):
        srv = self.srv
        for path, status, method, count, delay in self.rules:
            path = fill(path, **self.names)
            if status == 'ready':
                self._when_ready(path, method, count)
                continue
            self.ids.append(srv.faults.add_http(path, status=status, method=method, count=count, delay=delay,
                                                reason='Conflict' if status == 409 else None))
        if self.drop:
            def keep_dropping():
                while not self.stop.wait(0.05):
                    srv.faults.drop_watches()
            self.dropper = threading.Thread(target=keep_dropping, daemon=True)
            self.dropper.start()
        return self

    def _when_ready(self, path, method, count):
        """Add the rule the moment the hotplugged disk reports Ready (the next write of the VM is the task release)."""
        def seen(obj):
            if obj['metadata']['name'] != self.names['vm'] or self.ids:
                return
            if any(s.get('name') == self.names['dev'] and s.get('phase') == 'Ready' for s in obj.get('status', {}).get('volumeStatus') or []):
                self.ids.append(self.srv.faults.add_http(path, status=500, method=method, count=count))
        self.unlisten = listen(self.srv, 'kubevirt.io', 'virtualmachineinstances', seen)

    def __exit__(self, *exc):
        self.stop.set()
        if self.dropper is not None:
            self.dropper.join()
        if self.unlisten is not None:
            self.unlisten()

    def fired(self):
        """Hits per rule; every rule of the scenario was installed and hit at least once."""
        hits = [r['hits'] for r in self.srv.faults.to_dict()['http'] if r['id'] in self.ids]
        return len(hits) == len(self.rules) and all(hits), hits


class MigrationLog:
    """Every migration object of one VM the server ever held, and the most in flight at once (a store listener)."""

    def __init__(self, srv, vm):
        self.srv, self.vm, self.names, self.most_in_flight, self.unlisten = srv, vm, set(), 0, None

    def __call__(self, obj):
        if obj['spec'].get('vmiName') != self.vm:
            return
        self.names.add(obj['metadata']['name'])
        flying = [m for m in vmims(self.srv, self.vm) if (m.get('status') or {}).get('phase') not in ('Succeeded', 'Failed')]
        self.most_in_flight = max(self.most_in_flight, len(flying))

    def __enter__(self):
        self.unlisten = listen(self.srv, 'kubevirt.io', 'virtualmachineinstancemigrations', self)
        return self

    def __exit__(self, *exc):
        self.unlisten()


def delayed(rules):
    return any(rule[4] for rule in rules)


# ------------------------------------------------------------------------------------------------ volume
@pytest.fixture(scope='module')
def host_vm(srv):
    """One running VM the hotplug scenarios plug their volumes into (each with its own disk name)."""
    mp = pytest.MonkeyPatch()
    try:
        result = run_vm(srv, HOST_VM, 'running', mp)
        assert not result.get('failed') and result['vm']['status'] == 'Running', result
        yield HOST_VM
        run_vm(srv, HOST_VM, 'absent', mp)
    finally:
        mp.undo()


def volume_world(srv, vol, vm):
    """What a volume run must leave: the claim (and DataVolume), and the disk entries of ``vol`` in the VM."""
    pvc, dv = peek(srv, '', 'persistentvolumeclaims', vol), peek(srv, 'cdi.kubevirt.io', 'datavolumes', vol)
    vmobj, vmi = peek(srv, 'kubevirt.io', 'virtualmachines', vm), peek(srv, 'kubevirt.io', 'virtualmachineinstances', vm)

    def claims(spec):
        return [v['name'] for v in (spec or {}).get('volumes') or []
                if (v.get('persistentVolumeClaim') or {}).get('claimName') == vol or (v.get('dataVolume') or {}).get('name') == vol]
    return {'pvc': pvc, 'dv': dv, 'template': claims(vmobj['spec']['template']['spec']), 'live': claims((vmi or {}).get('spec'))}


@pytest.mark.parametrize('scenario,before,decl,rules,drop', VOLUME_SCENARIOS, ids=ids(VOLUME_SCENARIOS))
def test_volume_survives_api_fault(srv, host_vm, short_client_timeout, monkeypatch, scenario, before, decl, rules, drop):  # pylint: disable=unused-argument
    index = [s[0] for s in VOLUME_SCENARIOS].index(scenario)
    names = {'vm': host_vm, 'vol': 'fvol-%d' % index, 'dev': 'fdisk%d' % index}
    vol = names['vol']
    decl = fill(decl, **names)
    survived, first = False, {}
    try:
        for prior in before:
            prepared = run_volume(srv, vol, fill(prior, **names), monkeypatch)
            assert not prepared.get('failed'), prepared
        with Faulting(srv, rules, drop, **names) as faulting:
            first = run_volume(srv, vol, decl, monkeypatch)
        fired, hits = faulting.fired()
        clear_http(srv)
        assert_clear(first, scenario)
        assert fired, ('a fault never fired: the scenario tested nothing', scenario, hits)
        assert scenario not in MUST_CONVERGE or not first.get('failed'), (scenario, 'a safe retry was not made', first)
        time.sleep(CLIENT_TIMEOUT + 1.5 if delayed(rules) else 0)   # a delayed request the client gave up on lands now
        second = run_volume(srv, vol, decl, monkeypatch)
        assert not second.get('failed'), (scenario, 'the next run did not converge', first.get('msg'), second)
        third = run_volume(srv, vol, decl, monkeypatch)
        assert not third.get('failed') and not third['changed'] and third['operations'] == [], (scenario, 'the third run was not a no-op', third)
        world = volume_world(srv, vol, host_vm)
        kind = 'DataVolume' if decl.get('data_volume') or any(p.get('data_volume') for p in before) else 'PersistentVolumeClaim'
        assert world['pvc'] is not None and (world['dv'] is not None) == (kind == 'DataVolume'), ('the volume was lost', scenario, world)
        assert third['volume']['kind'] == kind and third['volume']['phase'] == 'Bound', third['volume']
        want = GI * int((decl.get('capacity') or (before[-1] if before else {}).get('capacity') or '1Gi')[:-2])
        assert third['volume']['capacity'] == want and third['volume']['bound_capacity'] >= want, third['volume']
        plugged = [names['dev']] if decl.get('attachments') else []
        if decl.get('attachments') is not None or any(p.get('attachments') for p in before):
            assert world['template'] == plugged and world['live'] == plugged, ('disk plugged twice or not as declared', scenario, world)
            assert [a['hotplug_phase'] for a in third['volume']['attachments']] == ['Ready'] * len(plugged), third['volume']
        assert task_state(srv, host_vm) is None, (scenario, 'a task was left on the VM', task_state(srv, host_vm))
        survived = True
    finally:
        figures.record('fault', 'kubevirt volume: %s' % scenario, survived=survived, count=max(1, sum(r[3] for r in rules)),
                       detail=('first run failed cleanly: %s' % first.get('msg', '')[:100] if first.get('failed') else 'first run converged')
                       if survived else '')
        clear_http(srv)
        run_volume(srv, vol, {'state': 'absent', 'attachments': []}, monkeypatch)


def test_volume_info_on_a_500_fails_clearly(srv, monkeypatch):
    vol = 'finfo'
    survived = False
    try:
        assert not run_volume(srv, vol, CLAIM, monkeypatch).get('failed')
        with Faulting(srv, [(PVCS + END, 500, 'GET', 1, 0)], False) as faulting:
            first = run_main(volume_info_module, kv(srv, name=[vol]))
        fired, hits = faulting.fired()
        clear_http(srv)
        assert fired, hits
        assert_clear(first, 'volume_info on a 500')
        assert first.get('failed') and 'list persistentvolumeclaims in %s' % NS in first['msg'] and '500' in first['msg'], first
        again = run_main(volume_info_module, kv(srv, name=[vol]))
        assert not again.get('failed') and again['volumes'][0]['exists'] and again['volumes'][0]['capacity'] == GI, again
        survived = True
    finally:
        figures.record('fault', 'kubevirt volume_info: 500 on the list', survived=survived)
        clear_http(srv)
        run_volume(srv, vol, {'state': 'absent'}, monkeypatch)


# --------------------------------------------------------------------------------------------- migration
def other_node(srv, node):
    return sorted(set(srv.controller.node_names) - {node})[0]


def start_vm(srv, name, monkeypatch):
    started = run_vm(srv, name, 'running', monkeypatch)
    assert not started.get('failed') and started['vm']['status'] == 'Running', started
    return started['vm']['node']


@pytest.mark.parametrize('scenario,rules,drop', MIGRATION_SCENARIOS, ids=ids(MIGRATION_SCENARIOS))
def test_migration_survives_api_fault(srv, short_client_timeout, monkeypatch, scenario, rules, drop):  # pylint: disable=unused-argument
    name = 'fmig-%d' % [s[0] for s in MIGRATION_SCENARIOS].index(scenario)
    survived, first = False, {}
    try:
        source = start_vm(srv, name, monkeypatch)
        target = other_node(srv, source)
        with MigrationLog(srv, name) as log:
            with Faulting(srv, rules, drop, vm=name) as faulting:
                first = run_migration(srv, name, monkeypatch, target_node=target)
            fired, hits = faulting.fired()
            clear_http(srv)
            assert_clear(first, scenario)
            assert fired, ('a fault never fired: the scenario tested nothing', scenario, hits)
            assert scenario not in MUST_CONVERGE or not first.get('failed'), (scenario, 'a safe retry was not made', first)
            time.sleep(CLIENT_TIMEOUT + 1.5 if delayed(rules) else 0)   # a delayed request the client gave up on lands now
            second = run_migration(srv, name, monkeypatch, target_node=target)
            assert not second.get('failed'), (scenario, 'the next run did not converge', first.get('msg'), second)
            third = run_migration(srv, name, monkeypatch, target_node=target)
        assert not third.get('failed') and not third['changed'] and third['on_target'], (scenario, 'the third run was not a no-op', third)
        made = vmims(srv, name)
        assert len(log.names) == 1 and len(made) == 1, ('duplicate or missing migration', scenario, log.names, made)
        assert made[0]['status']['phase'] == 'Succeeded', made[0]['status']
        assert log.most_in_flight <= 1, ('two migrations of one VM in flight', scenario, log.most_in_flight)
        vmi = peek(srv, 'kubevirt.io', 'virtualmachineinstances', name)
        assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == target, vmi['status']
        assert task_state(srv, name) is None and third['vm']['vm_state'] == 'ACTIVE', (scenario, third['vm'])
        survived = True
    finally:
        figures.record('fault', 'kubevirt migration: %s' % scenario, survived=survived, count=max(1, sum(r[3] for r in rules)),
                       detail=('first run failed cleanly: %s' % first.get('msg', '')[:100] if first.get('failed') else 'first run converged')
                       if survived else '')
        clear_http(srv)
        run_vm(srv, name, 'absent', monkeypatch)


@pytest.mark.parametrize('scenario,rules', CANCEL_SCENARIOS, ids=ids(CANCEL_SCENARIOS))
def test_migration_cancel_survives_api_fault(srv, short_client_timeout, monkeypatch, scenario, rules):  # pylint: disable=unused-argument
    """A migration that never converges is in flight (followed by another run); its cancel meets the fault."""
    name = 'fcancel-%d' % [s[0] for s in CANCEL_SCENARIOS].index(scenario)
    survived, first, follower, log = False, {}, None, None
    try:
        source = start_vm(srv, name, monkeypatch)
        srv.faults.inject('migration_no_converge', NS, name)
        log = MigrationLog(srv, name).__enter__()
        new_owner(monkeypatch)
        client = kubevirt_client.KubeClient(kubeconfig=srv.kubeconfig_path, timeout=30)
        opts = migration_options.KubevirtMigrationOptions(target_node=other_node(srv, source), wait_timeout=120)
        outcome = {}
        follower = threading.Thread(target=lambda: outcome.update(migration_backend.KubevirtMigration(client, NS, name, opts).converge()),
                                    daemon=True)
        follower.start()
        deadline = time.monotonic() + 30
        while not any((m.get('status') or {}).get('phase') == 'Running' for m in vmims(srv, name)):
            assert time.monotonic() < deadline and follower.is_alive(), ('the migration never ran', outcome)
            time.sleep(0.05)
        with Faulting(srv, rules, False, vm=name) as faulting:
            first = run_migration(srv, name, monkeypatch, state='cancelled')
        fired, hits = faulting.fired()
        clear_http(srv)
        assert_clear(first, scenario)
        assert fired, ('a fault never fired: the scenario tested nothing', scenario, hits)
        assert scenario not in MUST_CONVERGE or not first.get('failed'), (scenario, 'a safe retry was not made', first)
        time.sleep(CLIENT_TIMEOUT + 1.5 if delayed(rules) else 0)   # a delayed request the client gave up on lands now
        second = run_migration(srv, name, monkeypatch, state='cancelled')
        assert not second.get('failed'), (scenario, 'the next run did not converge', first.get('msg'), second)
        follower.join(60)
        assert not follower.is_alive(), 'the run following the migration never ended'
        assert outcome.get('failed') and outcome.get('reason') == 'aborted', ('the followed migration did not end aborted', outcome)
        third = run_migration(srv, name, monkeypatch, state='cancelled')
        assert not third.get('failed') and not third['changed'] and 'no migration' in third['msg'], (scenario, 'the third run was not a no-op', third)
        made = vmims(srv, name)
        assert len(log.names) == 1 and log.most_in_flight == 1, ('duplicate migration', scenario, log.names)
        assert all(m['status'].get('phase') == 'Failed' for m in made), ('the cancelled migration is still in flight', scenario, made)
        vmi = peek(srv, 'kubevirt.io', 'virtualmachineinstances', name)
        assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == source, ('the guest did not survive on the source', vmi['status'])
        assert task_state(srv, name) is None, (scenario, 'a task was left on the VM')
        survived = True
    finally:
        figures.record('fault', 'kubevirt migration: %s' % scenario, survived=survived, count=max(1, sum(r[3] for r in rules)),
                       detail=('first run failed cleanly: %s' % first.get('msg', '')[:100] if first.get('failed') else 'first run converged')
                       if survived else '')
        clear_http(srv)
        srv.faults.clear(kind='migration_no_converge')
        if log is not None:
            log.__exit__()
        if follower is not None:
            follower.join(60)
        run_vm(srv, name, 'absent', monkeypatch)


def test_migration_info_on_a_500_fails_clearly(srv, monkeypatch):
    name = 'fminfo'
    survived = False
    try:
        source = start_vm(srv, name, monkeypatch)
        assert not run_migration(srv, name, monkeypatch, target_node=other_node(srv, source)).get('failed')
        with Faulting(srv, [(VMIMS + END, 500, 'GET', 1, 0)], False) as faulting:
            first = run_main(migration_info_module, kv(srv, name=[name]))
        fired, hits = faulting.fired()
        clear_http(srv)
        assert fired, hits
        assert_clear(first, 'migration_info on a 500')
        assert first.get('failed') and 'list virtualmachineinstancemigrations in %s' % NS in first['msg'] and '500' in first['msg'], first
        again = run_main(migration_info_module, kv(srv, name=[name]))
        assert not again.get('failed'), again
        assert json.dumps(again).count('"outcome": "succeeded"') >= 1, again
        survived = True
    finally:
        figures.record('fault', 'kubevirt migration_info: 500 on the list', survived=survived)
        clear_http(srv)
        run_vm(srv, name, 'absent', monkeypatch)
