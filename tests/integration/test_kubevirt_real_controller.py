"""Our KubeVirt state words checked against KubeVirt's own virt-controller (issue 15: the differential check).

One stack for the module: ``lab.up(controllers='real')`` (tools/kubelab): etcd, kube-apiserver,
kube-controller-manager, KubeVirt's virt-api AND virt-controller, kube-scheduler, kwok's simulated nodes and pods, and
tests/kubeapi/node_agent.py for what only virt-handler writes (VMI Scheduled -> Running once the launcher pod is
Ready, interfaces, the handler's side of a migration and of a hot-plug, pause/unpause through virt-api).  Every VMI,
launcher pod, ``printableStatus``, VM condition and migration phase is written by virt-controller itself.

The first test drives our modules (converge.virt.vm, migration, volume): create, start, pause, unpause, restart,
migrate, hot-plug, stop, delete, a start that cannot be scheduled, and two launcher start failures made by kwok's
fault stages (tools/kubelab/kwok-stages.conf: a launcher that crashes on start -> CrashLoopBackOff, one whose image
cannot be pulled -> ErrImagePull).  The second, on the same stack (started once for the file), runs every other
KubeVirt module and role in two playbooks: the lifecycle role (volume, three VMs, start, verify, later remove),
vm_info, volume_info, snapshot, snapshot_info and a restore (virt-controller's snapshot and restore controllers), the
evacuate role (virt-controller's migrations), migration_info, reconcile after virt-controller stopped a VM behind our
back, and the reconcile role fixing it.  While they run, a sampler reads every VM and
VMI of the namespace; each *settled* observation (the VM's and VMI's resourceVersions unchanged across two reads
>= 0.4 s apart, so virt-controller has had its turn) is one observed state, and for it the status word our phase logic
computes from the objects (``kubevirt_vm_view``: ``status``) is compared with virt-controller's ``printableStatus``,
and our ``phase`` with the VMI's phase.  The modules' own results are compared too: ``vm.status`` with the
printableStatus read right after, the migration's ``phase`` with the VirtualMachineInstanceMigration's, the volume's
``hotplug_phase`` with the VMI's volumeStatus.  The words
that never settle (Starting, Migrating, Terminating ...) are judged on every observation: they agree, or agree once
virt-controller has had its turn (it wrote our word later for the same VMI), or stay open (the VMI changed again
first: nothing to judge); they are printed, not asserted.  Every disagreement must be one of KNOWN_DISAGREEMENTS (documented in
docs/states-virt-controller.md with the upstream reason); the agreement counts are printed.  Run inside
``python -m tools.virtlab netns -- ...``.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import json
import os
import threading
import time
import urllib.request

import pytest
import yaml

from ansible_collections.converge.virt.plugins.module_utils._kubevirt.views import kubevirt_vm_view
from tests.integration.ansible_run import ROOT, run_module, run_playbook
from tests.kubeapi.real import FEATURE_GATES
from tools.kubelab import lab

NS = 'default'
API = '/apis/kubevirt.io/v1/namespaces/%s/' % NS
SNAPSHOTS = '/apis/snapshot.kubevirt.io/v1beta1/namespaces/%s/' % NS
# (vm, ours, virt-controller's) that differ for a documented reason: the deviation's key (_phase/deviations.py,
# docs/states-virt-controller.md). A stopped RerunOnFailure VM whose claim is unbound: v1.8.0 isSetToStart says set to
# start (WaitingForVolumeBinding); ours follows kubevirt/kubevirt PR #18787 (after v1.8.0): Stopped.
KNOWN_DISAGREEMENTS = {('rerun-lost', 'Stopped', 'WaitingForVolumeBinding'): 'rerun-set-to-start'}


@pytest.fixture(scope='module')
def reallab(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp('kubelab-real'))
    started = time.monotonic()
    info = lab.up(directory, feature_gates=list(FEATURE_GATES), controllers='real')
    info['up_seconds'] = time.monotonic() - started
    with open(os.path.join(directory, 'pki', 'admin.token'), encoding='utf-8') as handle:
        info['client'] = lab.Client(info['server'], info['ca_file'], handle.read().strip())
    info['dir'] = directory
    try:
        yield info
    finally:
        lab.down(directory)


class Sampler:
    """Reads the namespace's VMs and VMIs every ``interval`` seconds in a thread; keeps the settled observations."""

    def __init__(self, client, interval=0.1, settle=0.4):
        self.client = client
        self.interval = interval
        self.settle = settle
        self.seen = {}          # (vm name, vm rv, vmi rv) -> first seen
        self.settled = {}       # same key -> observation dict, once settled
        self.trail = []         # every observation, in order (for the transient words)
        self.migrations = {}    # VirtualMachineInstanceMigration name -> the last phase seen (read every 5th poll)
        self.polls = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.errors = []

    def _items(self, path):
        code, body = self.client.request('GET', path)
        return body.get('items', []) if code == 200 else []

    def _run(self):
        while not self.stop_event.is_set():
            try:
                self.poll()
            except Exception as exc:  # pylint: disable=broad-except
                self.errors.append(repr(exc))
            self.stop_event.wait(self.interval)

    def poll(self):
        now = time.monotonic()
        vms = {vm['metadata']['name']: vm for vm in self._items(API + 'virtualmachines')}
        vmis = {vmi['metadata']['name']: vmi for vmi in self._items(API + 'virtualmachineinstances')}
        pvcs = self._items('/api/v1/namespaces/%s/persistentvolumeclaims' % NS)
        self.polls += 1
        if self.polls % 5 == 0:
            for vmim in self._items(API + 'virtualmachineinstancemigrations'):
                self.migrations[vmim['metadata']['name']] = (vmim.get('status') or {}).get('phase')
        for name, vm in vms.items():
            vmi = vmis.get(name)
            key = (name, vm['metadata']['resourceVersion'], (vmi or {}).get('metadata', {}).get('resourceVersion'))
            first = self.seen.setdefault(key, now)
            view = kubevirt_vm_view(vm, vmi, [], pvcs)
            obs = {'vm': name, 'ours': view['status'], 'theirs': (vm.get('status') or {}).get('printableStatus'),
                   'our_phase': view['phase'], 'vmi_phase': (vmi or {}).get('status', {}).get('phase'), 'vmi_rv': key[2]}
            if not self.trail or self.trail[-1] != obs:
                self.trail.append(obs)
            if key not in self.settled and now - first >= self.settle:
                self.settled[key] = obs

    def transients(self):
        """{(vm, ours, theirs): verdict} of the observations that never settled: 'agree', 'lag' (virt-controller wrote our
        word later for the same VMI: it had not had its turn yet) or 'open' (the VMI changed again first)."""
        found = {}
        for index, obs in enumerate(self.trail):
            if obs['theirs'] is None:
                continue
            verdict = 'agree' if obs['ours'] == obs['theirs'] else 'open'
            if verdict == 'open':
                for later in self.trail[index + 1:]:
                    if later['vm'] != obs['vm']:
                        continue
                    if later['vmi_rv'] != obs['vmi_rv']:
                        break
                    if later['theirs'] == obs['ours']:
                        verdict = 'lag'
                        break
            key = (obs['vm'], obs['ours'], obs['theirs'])
            if found.get(key) not in ('agree', 'lag'):
                found[key] = verdict
        return found

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(5)
        self.poll()
        time.sleep(self.settle)
        self.poll()


def get(reallab, path):
    code, body = reallab['client'].request('GET', path)
    return body if code == 200 else None


def wait_for(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError('%s not within %d s' % (what, timeout))


def kv(reallab, name, **args):
    base = dict(backend='kubevirt', kubeconfig=reallab['kubeconfig'], namespace=NS, wait_timeout=60, name=name)  # pylint: disable=use-dict-literal
    base.update(args)
    return base


def vm_args(reallab, name, **args):
    return kv(reallab, name, vcpus=1, memory=args.pop('memory', '64Mi'), disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}],
              **args)


def ok(result):
    assert result['_rc'] == 0 and not result.get('failed'), result.get('msg') or result
    return result


def test_our_words_agree_with_virt_controller(reallab):  # pylint: disable=too-many-locals,too-many-statements
    client = reallab['client']
    module_checks = []      # (what, ours, virt-controller's)

    def printable(name):
        return ((get(reallab, API + 'virtualmachines/' + name) or {}).get('status') or {}).get('printableStatus')

    def vm_step(name, state, **args):
        result = ok(run_module('vm', vm_args(reallab, name, state=state, **args)))
        if state != 'absent':
            module_checks.append(('vm %s %s: status' % (name, state), result['vm']['status'], printable(name)))
        return result

    started = time.monotonic()
    with Sampler(client) as sampler:
        vm_step('life', 'stopped')
        vm_step('life', 'running')
        vmi = get(reallab, API + 'virtualmachineinstances/life')
        assert vmi['status']['phase'] == 'Running' and vmi['metadata']['ownerReferences'][0]['name'] == 'life'
        assert vmi['metadata']['annotations'].get('kubevirt.io/latest-observed-api-version')     # written by virt-controller
        vm_step('life', 'paused')
        vm_step('life', 'running')
        first_uid = get(reallab, API + 'virtualmachineinstances/life')['metadata']['uid']
        vm_step('life', 'restarted')
        assert get(reallab, API + 'virtualmachineinstances/life')['metadata']['uid'] != first_uid

        # migrate to another node (virt-controller: target pod, phases; node_agent: the handlers' part)
        source = get(reallab, API + 'virtualmachineinstances/life')['status']['nodeName']
        target = next(n for n in lab.NODES if n != source)
        moved = ok(run_module('migration', kv(reallab, 'life', target_node=target)))
        vmims = [m for m in get(reallab, API + 'virtualmachineinstancemigrations')['items'] if m['spec']['vmiName'] == 'life']
        module_checks.append(('migration: phase', moved['phase'], vmims[-1]['status']['phase']))
        module_checks.append(('migration: kubevirt_phase', moved['kubevirt_phase'], vmims[-1]['status']['phase']))
        assert get(reallab, API + 'virtualmachineinstances/life')['status']['nodeName'] == target

        # hot-plug a claim into the running VM (virt-controller: attachment pod, AttachedToNode; node_agent: Ready)
        attach = [{'vm': 'life', 'dev': 'data', 'serial': 'd1'}]
        plugged = ok(run_module('volume', kv(reallab, 'hp1', capacity='1Gi', attachments=attach)))
        entry = [v for v in get(reallab, API + 'virtualmachineinstances/life')['status'].get('volumeStatus') or [] if v['name'] == 'data']
        assert entry and entry[0]['hotplugVolume']['attachPodName'], entry      # virt-controller's attachment pod
        module_checks.append(('volume: hotplug_phase', plugged['volume']['attachments'][0]['hotplug_phase'], entry[0].get('phase')))
        vm_step('life', 'running')      # a running VM with a hot-plugged volume: still Running for both

        vm_step('life', 'stopped')
        assert get(reallab, API + 'virtualmachineinstances/life') is None

        # a start that cannot be scheduled: more memory than any node has
        failed = run_module('vm', vm_args(reallab, 'huge', state='running', memory='1000Gi', wait_timeout=8))
        assert failed.get('failed'), failed
        wait_for('ErrorUnschedulable from virt-controller', lambda: printable('huge') == 'ErrorUnschedulable', timeout=20)
        vm_step('huge', 'absent')
        vm_step('life', 'absent')

        # start failures of the launcher pod (kwok's fault stages, tools/kubelab/kwok-stages.conf): one that crashes
        # on start (virt-controller fails the VMI, counts a start failure and backs off) and one whose image cannot be pulled
        for name, fault, word in (('crashy', 'crash', 'CrashLoopBackOff'), ('pully', 'errimagepull', 'ErrImagePull')):
            template = {'template': {'metadata': {'labels': {lab.LAUNCHER_FAULT_LABEL: fault}}}}
            failed = run_module('vm', vm_args(reallab, name, state='running', spec=template, wait_timeout=20))
            assert failed.get('failed') and word in failed['msg'], failed.get('msg')
            module_checks.append(('vm %s running (launcher fault %s): status' % (name, fault), failed['vm']['status'], printable(name)))
            wait_for(word + ' from virt-controller', lambda name=name, word=word: printable(name) == word, timeout=30)
        crashed = get(reallab, API + 'virtualmachines/crashy')['status']['startFailure']
        assert crashed['consecutiveFailCount'] >= 1, crashed          # virt-controller counted the failed start
        vm_step('crashy', 'absent')
        vm_step('pully', 'absent')
        wait_for('VMs gone', lambda: not get(reallab, API + 'virtualmachines')['items'], timeout=30)
    elapsed = time.monotonic() - started

    judge('vm, migration, volume, start failures', reallab, sampler, module_checks, elapsed,
          {'Stopped', 'Running', 'Paused', 'ErrorUnschedulable', 'CrashLoopBackOff', 'ErrImagePull'})


def judge(label, reallab, sampler, module_checks, elapsed, required_words):  # pylint: disable=too-many-arguments,too-many-locals
    """Print the agreement counts of one scenario run and fail on any unexplained disagreement; returns the counts."""
    stopped = [p['role'] for p in lab.status(reallab['dir']) if not p['running']]
    assert not stopped, 'the stack lost %s while the scenarios ran (see its log in %s/logs)' % (', '.join(stopped), reallab['dir'])
    assert not sampler.errors, sampler.errors
    observed = [o for o in sampler.settled.values() if o['theirs'] is not None]
    states = {}
    for obs in observed:
        states.setdefault((obs['vm'], obs['ours'], obs['theirs'], obs['our_phase'], obs['vmi_phase']), obs)
    agree = [k for k in states if k[1] == k[2]]
    differ = [k for k in states if k[1] != k[2]]
    phase_agree = [k for k in states if k[3] == k[4]]
    print('\nreal virt-controller, %s: stack up %.1f s, scenarios %.1f s; %d settled observations, %d distinct states' % (
        label, reallab['up_seconds'], elapsed, len(observed), len(states)))
    for key in sorted(states, key=str):
        print('  %-5s vm=%s ours=%s virt-controller=%s our_phase=%s vmi_phase=%s' % ('ok' if key[1] == key[2] else 'DIFF', *key))
    transients = sampler.transients()
    for key in sorted(transients, key=str):
        print('  %-5s (every observation) vm=%s ours=%s virt-controller=%s' % (transients[key], *key))
    words_agreed = sorted({k[1] for k, verdict in transients.items() if verdict in ('agree', 'lag')})
    module_agree = [c for c in module_checks if c[1] == c[2]]
    for what, ours, theirs, *_known in module_checks:
        print('  %-5s %s: ours=%s virt-controller=%s' % ('ok' if ours == theirs else 'DIFF', what, ours, theirs))
    counts = dict(states=len(states), status_agree=len(agree), phase_agree=len(phase_agree), modules=len(module_checks),
                  modules_agree=len(module_agree), agree=sum(1 for v in transients.values() if v == 'agree'),
                  lag=sum(1 for v in transients.values() if v == 'lag'), open=sum(1 for v in transients.values() if v == 'open'))
    print('agreement (%s): status %d/%d settled states, phase %d/%d settled states, module results %d/%d; every observation: '
          '%d (vm, ours, virt-controller) pairs agree, %d agree once virt-controller had its turn, %d open; words agreed: %s' % (
              label, counts['status_agree'], counts['states'], counts['phase_agree'], counts['states'], counts['modules_agree'],
              counts['modules'], counts['agree'], counts['lag'], counts['open'], ', '.join(words_agreed)))
    words = {k[2] for k in states}
    # the scenarios must have shown virt-controller's words for them, or the check checked nothing
    assert required_words <= words, (required_words, words)
    unexplained = [k for k in differ if (k[0], k[1], k[2]) not in KNOWN_DISAGREEMENTS]
    counts['status_known'] = len(differ) - len(unexplained)
    print('settled disagreements: %d, each a documented deviation: %s' % (
        counts['status_known'], sorted('%s %s/%s: %s' % (k[0], k[1], k[2], KNOWN_DISAGREEMENTS[k[:3]]) for k in differ if k[:3] in KNOWN_DISAGREEMENTS)))
    assert not unexplained, unexplained
    assert len(phase_agree) == len(states), [k for k in states if k[3] != k[4]]
    assert not [c for c in module_checks if c[1] != c[2] and tuple(c[3:]) not in KNOWN_DISAGREEMENTS], module_checks
    return counts


def play_results(out):
    """{task name (role prefix dropped): result on localhost} of every play of a run_playbook output (the last run of a name)."""
    found = {}
    for play in out['plays']:
        for task in play['tasks']:
            result = task['hosts'].get('localhost')
            if result is not None:
                found[task['task']['name'].split(' : ')[-1]] = result
    return found


def write_play(tmp_path, name, tasks):
    path = tmp_path / name
    path.write_text(yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]))
    return str(path)


def role(name, **variables):
    return {'name': 'Role %s' % name, 'ansible.builtin.include_role': {'name': 'converge.virt.' + name}, 'vars': variables}


def test_every_module_and_role_against_virt_controller(reallab, tmp_path):  # pylint: disable=too-many-locals,too-many-statements
    """vm_info, volume_info, snapshot, snapshot_info, migration_info, reconcile and the lifecycle, evacuate and reconcile
    roles, in two playbooks, on the same stack: their results against what virt-controller wrote, and the sampler's
    settled states as above."""
    client = reallab['client']
    conn = {'backend': 'kubevirt', 'kubeconfig': reallab['kubeconfig'], 'namespace': NS}
    root = {'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}
    fleet = [{'name': 'fl-a', 'vcpus': 1, 'memory': '64Mi', 'disks': [root, {'name': 'data', 'claim': 'fl-data'}]},
             {'name': 'fl-b', 'vcpus': 1, 'memory': '64Mi', 'disks': [root], 'state': 'stopped'},
             {'name': 'fl-c', 'vcpus': 1, 'memory': '64Mi', 'disks': [root]}]
    lifecycle = {'lifecycle_backend': 'kubevirt', 'lifecycle_namespace': NS, 'lifecycle_kubeconfig': reallab['kubeconfig'],
                 'lifecycle_wait_timeout': 90, 'lifecycle_parallel': 3}
    env = {'ANSIBLE_ROLES_PATH': os.path.join(ROOT, 'roles')}
    module_checks = []

    def obj(kind, name):
        return get(reallab, API + kind + '/' + name)

    def printable(name):
        return ((obj('virtualmachines', name) or {}).get('status') or {}).get('printableStatus')

    started = time.monotonic()
    with Sampler(client) as sampler:
        # 1: lifecycle (volumes, define, start, verify), the info modules, a snapshot, its listing and a restore
        one = write_play(tmp_path, 'one.yml', [
            role('lifecycle', lifecycle_volumes=[{'name': 'fl-data', 'capacity': '1Gi'}], lifecycle_vms=fleet, **lifecycle),
            {'name': 'vm_info', 'converge.virt.vm_info': conn},
            {'name': 'volume_info', 'converge.virt.volume_info': dict(conn, name='fl-data')},
            {'name': 'snapshot', 'converge.virt.snapshot': dict(conn, vm='fl-b', name='fl-b-s1', wait_timeout=60)},
            {'name': 'snapshot_info', 'converge.virt.snapshot_info': dict(conn, vm='fl-b')},
            {'name': 'restore', 'converge.virt.snapshot': dict(conn, vm='fl-b', name='fl-b-s1', state='restored', wait_timeout=60)},
        ])
        rc, out = run_playbook(one, env=env)
        found = play_results(out)
        with open(os.path.join(reallab['dir'], 'one.json'), 'w', encoding='utf-8') as handle:
            json.dump(found, handle, indent=1, default=str)
        assert rc == 0, [(k, v.get('msg')) for k, v in found.items() if v.get('failed')]
        for entry in found['vm_info']['vms']:
            vmi = obj('virtualmachineinstances', entry['name'])
            module_checks.append(('vm_info %s: status' % entry['name'], entry['status'], printable(entry['name'])))
            module_checks.append(('vm_info %s: phase' % entry['name'], entry.get('phase'), ((vmi or {}).get('status') or {}).get('phase')))
        assert found['volume_info']['volumes'][0]['exists'] and found['volume_info']['volumes'][0]['phase'] == 'Bound'
        # virt-controller's snapshot and restore controllers wrote these objects
        snap = get(reallab, SNAPSHOTS + 'virtualmachinesnapshots/fl-b-s1')
        module_checks.append(('snapshot fl-b-s1: kubevirt_phase', found['snapshot']['snapshot']['kubevirt_phase'], snap['status']['phase']))
        module_checks.append(('snapshot fl-b-s1: ready_to_use', found['snapshot']['snapshot']['ready_to_use'], snap['status']['readyToUse']))
        listed = dict((s['name'], s) for s in found['snapshot_info']['snapshots'])
        assert set(listed) == {'fl-b-s1'}, listed
        module_checks.append(('snapshot_info fl-b-s1: kubevirt_phase', listed['fl-b-s1']['kubevirt_phase'], snap['status']['phase']))
        restore_name = [o['restore'] for o in found['restore']['operations'] if o['op'] == 'restore_snapshot'][0]
        restored = get(reallab, SNAPSHOTS + 'virtualmachinerestores/' + restore_name)
        module_checks.append(('restore fl-b-s1: phase Restored = restore complete', found['restore']['snapshot']['phase'] == 'Restored',
                              (restored.get('status') or {}).get('complete')))
        safety = get(reallab, SNAPSHOTS + 'virtualmachinesnapshots/' + found['restore']['safety_snapshot'])
        module_checks.append(('restore: safety snapshot ready', True, (safety.get('status') or {}).get('readyToUse')))

        # behind our back: fl-c's run strategy set to Halted (virt-controller stops it); the reconcile module reports it
        for _attempt in range(5):
            vm = obj('virtualmachines', 'fl-c')
            vm['spec']['runStrategy'] = 'Halted'
            code, answer = client.request('PUT', API + 'virtualmachines/fl-c', vm)
            if code != 409:
                break
        assert code == 200, answer
        wait_for('virt-controller to stop fl-c', lambda: printable('fl-c') == 'Stopped' and obj('virtualmachineinstances', 'fl-c') is None)
        node = obj('virtualmachineinstances', 'fl-a')['status']['nodeName']

        # 2: evacuate fl-a's node (virt-controller's migrations), migration_info, reconcile (report, then the role fixes), remove all
        two = write_play(tmp_path, 'two.yml', [
            role('evacuate', evacuate_backend='kubevirt', evacuate_node=node, evacuate_kubeconfig=reallab['kubeconfig'],
                 evacuate_namespace=NS, evacuate_wait_timeout=90, evacuate_reason='kubelab'),
            {'name': 'migration_info', 'converge.virt.migration_info': dict(conn, name='fl-a')},
            {'name': 'reconcile', 'converge.virt.reconcile': conn},
            role('reconcile', reconcile_backend='kubevirt', reconcile_namespace=NS, reconcile_kubeconfig=reallab['kubeconfig'],
                 reconcile_fix=True, reconcile_restart_stopped_guests=True),
            {'name': 'vm_info after', 'converge.virt.vm_info': conn},
            role('lifecycle', lifecycle_state='absent', lifecycle_vms=fleet, **lifecycle),
        ])
        rc, out = run_playbook(two, env=env)
        found2 = play_results(out)
        with open(os.path.join(reallab['dir'], 'two.json'), 'w', encoding='utf-8') as handle:
            json.dump(found2, handle, indent=1, default=str)
        assert rc == 0, [(k, v.get('msg')) for k, v in found2.items() if v.get('failed')]
        evacuated = [r for r in found2['Report per VM what happened']['ansible_facts']['evacuate_report'] if not r.get('failed')]
        assert 'fl-a' in [r['name'] for r in evacuated], evacuated
        last = found2['migration_info']['migrations'][0]['last']
        # the lifecycle role deleted fl-a and with it its migrations: the phase virt-controller wrote, as the sampler last saw it
        module_checks.append(('migration_info fl-a: last phase', last['phase'], sampler.migrations.get(last['id'])))
        module_checks.append(('migration_info fl-a: source node', last['source'], node))
        # reconcile saw what virt-controller did behind our back (fl-c stopped by its run strategy), and only that
        told = [(d['name'], d['power_state'], d['decision']) for d in found2['reconcile']['disagreements']]
        assert told == [('fl-c', 'SHUTDOWN', 'record STOPPED')], told
        fixed = found2['Compare vm_state with power_state and look for stale tasks']['disagreements']
        assert [(d['name'], [step['action'] for step in d['steps']], d['done']) for d in fixed] == [('fl-c', ['record', 'start'], True)], fixed
        after = dict((v['name'], v['status']) for v in found2['vm_info after']['vms'])
        assert after == {'fl-a': 'Running', 'fl-b': 'Stopped', 'fl-c': 'Running'}, after
        wait_for('VMs gone', lambda: not get(reallab, API + 'virtualmachines')['items'], timeout=30)
    elapsed = time.monotonic() - started
    judge('modules and roles', reallab, sampler, module_checks, elapsed, {'Stopped', 'Running'})


# ------------------------------------------------------------------ issue 34: start failures, refusals, finalizers, storage
SUBRESOURCES = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines/' % NS
CORE = '/api/v1/namespaces/%s/' % NS
REFUSE_LABEL = 'kubelab.converge.virt/refuse'
POLICY = '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies'
BINDING = '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings'
QUOTA = {'count/virtualmachineinstances.kubevirt.io': '0'}


def vm_manifest(name, strategy, labels=None, claim=None):
    """A VirtualMachine as a KubeVirt user writes it (any run strategy; the vm module declares power with state)."""
    disks = [{'name': 'root', 'disk': {'bus': 'virtio'}}]
    volumes = [{'name': 'root', 'containerDisk': {'image': 'quay.io/containerdisks/fedora:40'}}]
    if claim:
        disks.append({'name': 'data', 'disk': {'bus': 'virtio'}})
        volumes.append({'name': 'data', 'persistentVolumeClaim': {'claimName': claim}})
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'runStrategy': strategy, 'template': {
                'metadata': {'labels': labels or {}},
                'spec': {'domain': {'devices': {'disks': disks}, 'resources': {'requests': {'memory': '64Mi'}}}, 'volumes': volumes}}}}


def claim_manifest(name, storage_class=None):
    spec = {'accessModes': ['ReadWriteOnce'], 'resources': {'requests': {'storage': '1Gi'}}}
    if storage_class:
        spec['storageClassName'] = storage_class
    return {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': name, 'namespace': NS}, 'spec': spec}


def call(reallab, method, path, body=None, expect=(200, 201)):
    code, answer = reallab['client'].request(method, path, body)
    assert code in expect, (method, path, code, answer)
    return answer


def subresource(reallab, name, action):
    """PUT virt-api's start/stop subresource of a VM (virt-api answers 406 to Accept: application/json alone)."""
    client = reallab['client']
    req = urllib.request.Request(client.server + SUBRESOURCES + name + '/' + action, data=b'{}', method='PUT')
    for header, value in (('Authorization', 'Bearer ' + client.token), ('Accept', '*/*'), ('Content-Type', 'application/json')):
        req.add_header(header, value)
    with urllib.request.urlopen(req, context=client.context, timeout=10) as resp:
        assert resp.status in (200, 202), resp.status


def edit(reallab, path, change, suffix=''):
    """GET, change, PUT (again on a conflict: virt-controller writes the same objects)."""
    for _attempt in range(10):
        obj = get(reallab, path)
        change(obj)
        code, answer = reallab['client'].request('PUT', path + suffix, obj)
        if code != 409:
            assert code == 200, (path, code, answer)
            return answer
    raise AssertionError('%s: conflict after 10 tries' % path)


def test_start_failures_refusals_finalizers_and_storage_against_virt_controller(reallab):  # pylint: disable=too-many-locals,too-many-statements
    """The situations issue 34 found our words wrong in, and those around them, driven on virt-controller v1.8.0:
    a launcher that crashes under every run strategy that starts one (Always, RerunOnFailure, Once, Manual), a VMI create
    refused by a ResourceQuota and by an admission policy, a VM deleted while a finalizer holds it, a claim that does not
    exist, one that is never bound, and a stopped RerunOnFailure VM whose claim is lost (the one documented deviation)."""
    module_checks = []

    def printable(name):
        return ((get(reallab, API + 'virtualmachines/' + name) or {}).get('status') or {}).get('printableStatus')

    def status_of(name):
        return (get(reallab, API + 'virtualmachines/' + name) or {}).get('status') or {}

    def vmi_of(name):
        return get(reallab, API + 'virtualmachineinstances/' + name)

    def failure(name):
        found = [c for c in status_of(name).get('conditions') or [] if c.get('type') == 'Failure' and c.get('status') == 'True']
        return found[0] if found else None

    def versions(names):
        return [((get(reallab, API + 'virtualmachines/' + n) or {}).get('metadata', {}).get('resourceVersion'),
                 (vmi_of(n) or {}).get('metadata', {}).get('resourceVersion')) for n in names]

    def vm_info(*names):
        """vm_info's answer for ``names``: its status beside its printable_status, read in one answer (the issue's symptom);
        judged only when the VMs and VMIs did not change while it ran (a settled observation), asked again otherwise."""
        for _attempt in range(5):
            before = versions(names)
            result = ok(run_module('vm_info', {'backend': 'kubevirt', 'kubeconfig': reallab['kubeconfig'], 'namespace': NS}))
            if versions(names) == before:
                break
        else:
            raise AssertionError('%s changed during each of 5 vm_info runs' % (names,))
        entries = dict((v['name'], v) for v in result['vms'])
        for name in names:
            entry = entries[name]
            module_checks.append(('vm_info %s: status beside its printable_status' % name, entry['status'], entry['printable_status'],
                                  name, entry['status'], entry['printable_status']))
        return entries

    def create(manifest):
        call(reallab, 'POST', API + 'virtualmachines', manifest)

    def delete_all():
        for vm in get(reallab, API + 'virtualmachines')['items']:
            call(reallab, 'DELETE', API + 'virtualmachines/' + vm['metadata']['name'], expect=(200, 202, 404))
        wait_for('VMs gone', lambda: not get(reallab, API + 'virtualmachines')['items'], timeout=60)
        wait_for('VMIs gone', lambda: not get(reallab, API + 'virtualmachineinstances')['items'], timeout=60)

    # the admission policy first: kube-apiserver takes a moment to enforce a new one
    call(reallab, 'POST', POLICY, {
        'apiVersion': 'admissionregistration.k8s.io/v1', 'kind': 'ValidatingAdmissionPolicy', 'metadata': {'name': 'kubelab-refuse-vmi'},
        'spec': {'failurePolicy': 'Fail', 'matchConstraints': {'resourceRules': [{
            'apiGroups': ['kubevirt.io'], 'apiVersions': ['v1'], 'operations': ['CREATE'], 'resources': ['virtualmachineinstances']}]},
            'validations': [{'expression': "!has(object.metadata.labels) || !('%s' in object.metadata.labels)" % REFUSE_LABEL,
                             'message': 'kubelab refuses this instance'}]}})
    call(reallab, 'POST', BINDING, {
        'apiVersion': 'admissionregistration.k8s.io/v1', 'kind': 'ValidatingAdmissionPolicyBinding', 'metadata': {'name': 'kubelab-refuse-vmi'},
        'spec': {'policyName': 'kubelab-refuse-vmi', 'validationActions': ['Deny']}})
    started = time.monotonic()
    with Sampler(reallab['client']) as sampler:
        # 1: a launcher that crashes on start (kwok's crash stage), under each run strategy that starts an instance
        crash = {lab.LAUNCHER_FAULT_LABEL: 'crash'}
        for name, strategy in (('crash-always', 'Always'), ('crash-rerun', 'RerunOnFailure'), ('crash-once', 'Once'),
                               ('crash-manual', 'Manual')):
            create(vm_manifest(name, strategy, crash))
        subresource(reallab, 'crash-manual', 'start')

        def rerun_in_backoff():
            st = status_of('crash-rerun')
            requests = st.get('stateChangeRequests') or []
            return ((st.get('startFailure') or {}).get('consecutiveFailCount', 0) >= 1 and requests and requests[0].get('action') == 'Start'
                    and vmi_of('crash-rerun') is None and st.get('printableStatus') == 'CrashLoopBackOff')
        wait_for('crash-rerun in backoff with the Start request virt-controller added, no VMI', rerun_in_backoff, timeout=90)
        vm_info('crash-rerun')      # the answer: printable_status CrashLoopBackOff, status Starting
        wait_for('crash-always CrashLoopBackOff', lambda: printable('crash-always') == 'CrashLoopBackOff', timeout=90)
        wait_for('crash-once CrashLoopBackOff (its Failed VMI stays)', lambda: printable('crash-once') == 'CrashLoopBackOff', timeout=90)
        wait_for('crash-manual Stopped (its Failed VMI stays)',
                 lambda: printable('crash-manual') == 'Stopped' and (vmi_of('crash-manual') or {}).get('status', {}).get('phase') == 'Failed',
                 timeout=90)
        time.sleep(1)
        vm_info('crash-always', 'crash-once', 'crash-manual')
        delete_all()

        # 2: a VMI create refused by the API server: a ResourceQuota that allows no VirtualMachineInstance, and an admission
        # policy. The lab runs no quota controller: the quota's status is written here, as kube-controller-manager would
        call(reallab, 'POST', CORE + 'resourcequotas', {'apiVersion': 'v1', 'kind': 'ResourceQuota', 'metadata': {'name': 'no-vmi', 'namespace': NS},
                                                        'spec': {'hard': QUOTA}})
        edit(reallab, CORE + 'resourcequotas/no-vmi', lambda q: q.update(status={'hard': QUOTA, 'used': {k: '0' for k in QUOTA}}), '/status')
        create(vm_manifest('refused-quota', 'Always'))
        wait_for('refused-quota Stopped with Failure FailedCreate (exceeded quota)',
                 lambda: printable('refused-quota') == 'Stopped' and (failure('refused-quota') or {}).get('reason') == 'FailedCreate'
                 and 'quota' in failure('refused-quota').get('message', ''), timeout=60)
        call(reallab, 'DELETE', CORE + 'resourcequotas/no-vmi')
        create(vm_manifest('refused-admission', 'Always', {REFUSE_LABEL: 'yes'}))
        wait_for('refused-admission Stopped with Failure FailedCreate (the policy)',
                 lambda: printable('refused-admission') == 'Stopped' and (failure('refused-admission') or {}).get('reason') == 'FailedCreate'
                 and 'kubelab refuses this instance' in failure('refused-admission').get('message', ''), timeout=60)
        time.sleep(1)
        vm_info('refused-admission')
        delete_all()

        # 3: deletion held by a finalizer: Terminating while it holds, virt-controller stops the VMI meanwhile
        create(vm_manifest('held', 'Always'))
        wait_for('held Running', lambda: printable('held') == 'Running', timeout=90)
        edit(reallab, API + 'virtualmachines/held', lambda vm: vm['metadata'].setdefault('finalizers', []).append('kubelab.converge.virt/hold'))
        call(reallab, 'DELETE', API + 'virtualmachines/held')
        wait_for('held Terminating without its VMI', lambda: printable('held') == 'Terminating' and vmi_of('held') is None, timeout=90)
        time.sleep(1)
        vm_info('held')
        edit(reallab, API + 'virtualmachines/held', lambda vm: vm['metadata'].update(
            finalizers=[f for f in vm['metadata']['finalizers'] if f != 'kubelab.converge.virt/hold']))

        # 4: storage: a claim that does not exist, one no provisioner binds, and a stopped RerunOnFailure VM whose claim is lost
        call(reallab, 'POST', CORE + 'persistentvolumeclaims', claim_manifest('unbound-claim', 'kubelab-unbound'))
        call(reallab, 'POST', CORE + 'persistentvolumeclaims', claim_manifest('lost-claim'))
        create(vm_manifest('pvc-missing', 'Always', claim='no-such-claim'))
        create(vm_manifest('pvc-unbound', 'Always', claim='unbound-claim'))
        create(vm_manifest('rerun-lost', 'RerunOnFailure', claim='lost-claim'))
        wait_for('pvc-missing ErrorPvcNotFound', lambda: printable('pvc-missing') == 'ErrorPvcNotFound', timeout=90)
        # its launcher pod is created (a claim that is not CDI's counts as ready) and kube-scheduler refuses it (unbound
        # immediate claim): ErrorUnschedulable comes before WaitingForVolumeBinding in setPrintableStatus
        wait_for('pvc-unbound ErrorUnschedulable or WaitingForVolumeBinding',
                 lambda: printable('pvc-unbound') in ('ErrorUnschedulable', 'WaitingForVolumeBinding'), timeout=90)
        wait_for('rerun-lost Running', lambda: printable('rerun-lost') == 'Running', timeout=90)
        subresource(reallab, 'rerun-lost', 'stop')
        wait_for('rerun-lost Stopped', lambda: printable('rerun-lost') == 'Stopped' and vmi_of('rerun-lost') is None, timeout=90)
        edit(reallab, CORE + 'persistentvolumeclaims/lost-claim', lambda c: c['status'].update(phase='Lost'), '/status')
        # v1.8.0's isSetToStart would read WaitingForVolumeBinding here, but its VM controller watches only the creation of
        # claims (pvcInformer: AddFunc), so a claim turning Lost does not make it write the VM again: it stays Stopped
        time.sleep(3)
        time.sleep(1)
        entries = vm_info('pvc-missing', 'pvc-unbound', 'rerun-lost')
        assert entries['rerun-lost']['status'] == 'Stopped', entries['rerun-lost']    # ours: deviation rerun-set-to-start
        # issue 39: once virt-controller syncs the VM again (a label on it), v1.8.0 writes its word for the lost claim,
        # WaitingForVolumeBinding: the settled disagreement. A waited no-op of that VM does not wait for KubeVirt to agree
        # (before: the whole catch-up grace, CONTROLLER_CATCH_UP = 10 s, on every run: 12.65 s against 1.00 s, 2026-11-29, load 8-10)
        edit(reallab, API + 'virtualmachines/rerun-lost', lambda vm: vm['metadata'].setdefault('labels', {}).update({'kubelab-touched': 'yes'}))
        wait_for('rerun-lost WaitingForVolumeBinding (v1.8.0 isSetToStart)', lambda: printable('rerun-lost') == 'WaitingForVolumeBinding', timeout=60)
        took = time.monotonic()
        noop = ok(run_module('vm', kv(reallab, 'rerun-lost', state='stopped')))
        took = time.monotonic() - took
        module_checks.append(('vm no-op rerun-lost: status beside its printable_status', noop['vm']['status'], noop['vm']['printable_status'],
                              'rerun-lost', noop['vm']['status'], noop['vm']['printable_status']))
        print('no-op of the stopped RerunOnFailure VM with a lost claim (settled disagreement): %.2f s' % took)
        assert noop['changed'] is False and (noop['vm']['status'], noop['vm']['printable_status']) == ('Stopped', 'WaitingForVolumeBinding'), noop
        # the skip itself is pinned by tests/unit/plugins/module_utils/_kubevirt/test_kubevirt_catch_up.py (no timed assertion
        # here: under load a module run alone can take longer than the grace; the printed time is the measurement)
        delete_all()
        for claim in ('unbound-claim', 'lost-claim'):
            call(reallab, 'DELETE', CORE + 'persistentvolumeclaims/' + claim, expect=(200, 202, 404))
    elapsed = time.monotonic() - started
    for path in (BINDING, POLICY):
        call(reallab, 'DELETE', path + '/kubelab-refuse-vmi', expect=(200, 202, 404))
    counts = judge('start failures, refusals, finalizers, storage', reallab, sampler, module_checks, elapsed,
                   {'CrashLoopBackOff', 'Stopped', 'Running', 'Terminating', 'ErrorPvcNotFound'})
    print('counts: %s' % counts)
