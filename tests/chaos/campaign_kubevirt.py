"""A randomized chaos campaign on the real KubeVirt API stack, checked by :mod:`tests.chaos.checker`.

The stack is tools/kubelab's (etcd, kube-apiserver with KubeVirt's and CDI's CRDs, KubeVirt's own virt-api with its
webhooks and subresources), with the KubeVirt controller emulation of tests/kubeapi (:class:`tests.kubeapi.real.
RealKubeServer`: VMIs, launcher pods, migrations, hotplug, snapshots and restores, on three simulated nodes) running
in this process. K workers (threads) each run real ``ansible-playbook`` processes one after the other with random
declarations against shared objects of namespace ``default``:

* VMs ``ka`` and ``kb`` (a containerdisk root): power states (running, stopped, paused), delete and re-create;
* ``kdata`` (a claim) hot-plugged into ``ka`` or ``kb`` or into neither (force); ``kscratch`` created, grown, deleted;
* the snapshot ``kbs1`` of ``kb``: created, deleted, restored (without a safety snapshot);
* ``km`` (running) migrated between the nodes.

A nemesis, at random moments, SIGKILLs a worker's whole ansible process tree, or restarts kube-apiserver, etcd or
virt-api (SIGKILL or SIGTERM, down up to a few seconds, started again on its data). Every module appends to one audit
journal. When the time is up the runs in flight are SIGKILLed, every component runs again, the world is read (the
values acknowledged declarations are checked against), then one final converge with a reconcile with fix, a reconcile
(it must find nothing) and a second converge (it must change nothing), and the world is read again for orphans
(VMs, VMIs without a VM, claims), migrations in flight and tasks left in the VMs' annotations. The history takes the
shape :mod:`tests.chaos.checker` reads (the namespace plays the libvirt campaign's host), and its rules apply as
they are.

    python -m tools.virtlab netns -- python -m tests.chaos.campaign_kubevirt --seed 1 --minutes 15 --out build/chaos-kubevirt
"""

import argparse
import json
import os
import random
import sys
import threading
import time

from ansible_collections.converge.virt.plugins.module_utils._kubevirt.views import kubevirt_vm_view
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.volume_spec import quantity_bytes
from tests.chaos import campaign as lcampaign
from tests.chaos import checker
from tests.reliability import reliability_lab as rl

NS = 'default'
GI = 1024 ** 3
ROOT = {'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}
VMS = ('ka', 'kb')
MOVER = 'km'
DATA = 'kdata'
SCRATCH = 'kscratch'
SNAPSHOT = 'kbs1'
SNAP_VM = 'kb'
NODES = ('node01', 'node02', 'node03')
ROLES = ('kube-apiserver', 'etcd', 'virt-api')
POWER = {'Running': 'running', 'Stopped': 'stopped', 'Paused': 'paused'}
KV_API = '/apis/kubevirt.io/v1/namespaces/%s/' % NS
SNAP_API = '/apis/snapshot.kubevirt.io/v1beta1/namespaces/%s/' % NS
CORE_API = '/api/v1/namespaces/%s/' % NS
TASK_ID = 'converge.virt/task-id'


class KubeWorld:
    """The arguments of the campaign's declarations on one stack (``kubeconfig``: where the modules connect)."""

    def __init__(self, kubeconfig):
        self.kubeconfig = kubeconfig
        self.mover_at = None
        self.lock = threading.Lock()

    def conn(self, **args):
        return dict({'backend': 'kubevirt', 'kubeconfig': self.kubeconfig, 'namespace': NS}, **args)

    def vm_args(self, name, state):
        return self.conn(name=name, state=state, vcpus=1, memory='64Mi', disks=[ROOT], wait_timeout=60, shutdown_timeout=5)

    def fleet_args(self, states):
        """One vm task for several VMs (``states``: [(name, state)]): one module process instead of one each."""
        return self.conn(vms=[{'name': name, 'state': state} for name, state in states], vcpus=1, memory='64Mi', disks=[ROOT],
                         wait_timeout=60, shutdown_timeout=5)

    def data_args(self, vm):
        attachments = [] if vm is None else [{'vm': vm, 'dev': 'data'}]
        return self.conn(name=DATA, capacity='1Gi', attachments=attachments, force=True, wait_timeout=60)

    def snapshot_args(self, state):
        args = self.conn(vm=SNAP_VM, name=SNAPSHOT, state=state, wait_timeout=60)
        if state == 'restored':
            args['safety_snapshot'] = False
        return args

    def track(self, node, outcome):
        with self.lock:
            if outcome == 'ok':
                self.mover_at = node


def random_declaration(rng, world):
    """One random declaration: (object, fields, touches, ansible task)."""
    kind = rng.choices(['power', 'delete', 'attach', 'scratch', 'snapshot', 'migrate'], weights=[5, 1, 2, 2, 2, 2])[0]
    if kind == 'power':
        name = rng.choice(VMS)
        state = rng.choice(['running', 'stopped', 'paused'])
        return name, {'power': state}, [], {'converge.virt.vm': world.vm_args(name, state)}
    if kind == 'delete':
        name = rng.choice(VMS)
        return name, {'power': 'absent'}, [DATA], {'converge.virt.vm': world.vm_args(name, 'absent')}
    if kind == 'attach':
        vm = rng.choice(list(VMS) + [None])
        return DATA, {'attached': vm or 'none'}, [], {'converge.virt.volume': world.data_args(vm)}
    if kind == 'scratch':
        if rng.random() < 0.3:
            return SCRATCH, {'exists': 'absent'}, [], {'converge.virt.volume': world.conn(name=SCRATCH, state='absent')}
        size = rng.choice([1, 2, 3])
        return (SCRATCH, {'exists': 'present', 'capacity': size * GI}, [],
                {'converge.virt.volume': world.conn(name=SCRATCH, capacity='%dGi' % size)})
    if kind == 'snapshot':
        state = rng.choice(['present', 'present', 'absent', 'restored'])
        if state == 'restored':
            # a restore writes the VM of the snapshot's time back: its power and its hot-plugged volumes
            return SNAPSHOT, {}, [SNAP_VM, DATA], {'converge.virt.snapshot': world.snapshot_args(state)}
        return SNAPSHOT, {'exists': state}, [], {'converge.virt.snapshot': world.snapshot_args(state)}
    with world.lock:
        source = world.mover_at
    target = rng.choice([n for n in NODES if n != source])
    return MOVER, {'node': target}, [], {'converge.virt.migration': world.conn(name=MOVER, target_node=target, wait_timeout=60)}


class KubeCampaign(lcampaign.Campaign):  # pylint: disable=too-many-instance-attributes
    """Workers, nemesis and final checks on the KubeVirt stack (the workers' loop is the libvirt campaign's)."""

    def __init__(self, server, seed, seconds, directory, workers=3, nemesis_every=(4.0, 10.0)):  # pylint: disable=too-many-arguments,super-init-not-called
        self.server = server
        self.stack = server.stack
        self.seed, self.seconds, self.directory = seed, seconds, directory
        self.world = KubeWorld(server.kubeconfig_path)
        self.workers = workers
        self.nemesis_every = nemesis_every
        self.journal = os.path.join(directory, 'journal.jsonl')
        self.history = {'seed': seed, 'declarations': [], 'kills': [], 'writes': [], 'faults': [], 'final': {}, 'backend': 'kubevirt'}
        self.lock = threading.Lock()
        self.current = {}
        self.stop = threading.Event()
        self.stopped_daemons = set()
        self.counter = 0

    def _declare(self, rng):
        return random_declaration(rng, self.world)

    # --------------------------------------------------------------- set-up
    def setup(self):
        tasks = [{'name': 'make the VMs', 'converge.virt.vm': self.world.fleet_args([(name, 'running') for name in VMS + (MOVER,)])},
                 {'name': 'data', 'converge.virt.volume': self.world.data_args(VMS[0])}]
        rc, data = lcampaign.Run(self.directory, 'setup', tasks, os.path.join(self.directory, 'setup-journal.jsonl')).wait()
        if rc != 0:
            raise AssertionError('chaos set-up failed: %s' % (rl.failures(data) if data else 'no output'))
        self.world.mover_at = self.node_of(MOVER)

    # --------------------------------------------------------------- workers
    def worker(self, index):
        rng = random.Random('%s-kubevirt-worker-%d' % (self.seed, index))
        while not self.stop.is_set():
            obj, fields, touches, task = self._declare(rng)
            with self.lock:
                self.counter += 1
                ident = 'd%04d-w%d' % (self.counter, index)
            start = time.monotonic()
            run = lcampaign.Run(self.directory, ident, [dict(task, name=ident)], self.journal)
            with self.lock:
                self.current[index] = run
            rc, data = run.wait()
            finish = time.monotonic()
            with self.lock:
                self.current.pop(index, None)
            outcome = 'killed' if run.killed else ('ok' if rc == 0 else 'failed')
            entry = {'id': ident, 'worker': index, 'object': obj, 'fields': fields, 'touches': touches, 'start': start, 'end': finish,
                     'outcome': outcome, 'leaked': run.leaked_payloads() if run.killed else []}
            if outcome == 'failed':
                fails = rl.failures(data) if data else [('no output', rc)]
                entry['error'] = str(fails)[:300]
            if outcome == 'ok':  # a declaration already held changes nothing and takes no task (nothing to journal)
                entry['changed'] = any(res.get('changed') for _name, res in rl.task_results(data)) if data else None
            if 'node' in fields:
                self.world.track(fields['node'], outcome)
            with self.lock:
                self.history['declarations'].append(entry)

    # --------------------------------------------------------------- nemesis
    def nemesis(self):
        rng = random.Random('%s-kubevirt-nemesis' % self.seed)
        started = time.monotonic()
        while not self.stop.wait(rng.uniform(*self.nemesis_every)):
            fault = rng.choices(['kill', 'restart'], weights=[5, 3])[0]
            record = {'fault': fault, 'offset': round(time.monotonic() - started, 2)}
            if fault == 'kill':
                with self.lock:
                    runs = sorted(self.current.items())
                if not runs:
                    continue
                index, run = rng.choice(runs)
                pids = run.kill()
                self.history['kills'].append({'time': time.monotonic(), 'pids': pids})
                record.update(worker=index, processes=len(pids))
            else:
                role = rng.choice(ROLES)
                kill = rng.random() < 0.6
                down = round(rng.uniform(0.0, 3.0), 1)
                record.update(fault='%s %s' % ('sigkill' if kill else 'restart', role), role=role, down_seconds=down)
                self.stack.lab.restart_role(self.stack.directory, role, kill=kill, down_seconds=down)
            self.history['faults'].append(record)

    def _restore_stack(self):
        for role in ROLES:
            self.stack.lab.start_role(self.stack.directory, role)

    # --------------------------------------------------------------- the run
    def run(self):
        """Set up, run workers and nemesis for the time given, then the final phase; return the history."""
        phases = self.history['phases'] = {}
        mark = time.monotonic()
        self.setup()
        phases['setup'] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()
        threads = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(self.workers)]
        nemesis = threading.Thread(target=self.nemesis, daemon=True)
        for thread in threads + [nemesis]:
            thread.start()
        self.stop.wait(self.seconds)
        self.stop.set()
        nemesis.join(120)
        with self.lock:
            runs = sorted(self.current.items())
        for index, run in runs:
            pids = run.kill()
            self.history['kills'].append({'time': time.monotonic(), 'pids': pids})
            self.history['faults'].append({'fault': 'kill', 'worker': index, 'processes': len(pids), 'at_end': True})
        for thread in threads:
            thread.join(lcampaign.PLAYBOOK_TIMEOUT + 30)
        self._restore_stack()
        phases['chaos'] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()
        self.final()
        phases['final'] = round(time.monotonic() - mark, 1)
        self.history['journal'] = lcampaign.read_journal(self.journal)
        return self.history

    # --------------------------------------------------------------- reading the world
    def _items(self, path):
        code, body = self.stack.client.request('GET', path)
        if code != 200:
            raise AssertionError('reading %s: HTTP %s: %s' % (path, code, body))
        return dict((item['metadata']['name'], item) for item in body.get('items', []))

    def node_of(self, name):
        vmi = self._items(KV_API + 'virtualmachineinstances').get(name)
        return ((vmi or {}).get('status') or {}).get('nodeName')

    def snapshot(self):
        """Every object the checks read, at once."""
        return {'vms': self._items(KV_API + 'virtualmachines'), 'vmis': self._items(KV_API + 'virtualmachineinstances'),
                'pvcs': self._items(CORE_API + 'persistentvolumeclaims'), 'vmims': self._items(KV_API + 'virtualmachineinstancemigrations'),
                'snapshots': self._items(SNAP_API + 'virtualmachinesnapshots')}

    @staticmethod
    def power(objs, name):
        vm = objs['vms'].get(name)
        if vm is None:
            return 'absent'
        status = kubevirt_vm_view(vm, objs['vmis'].get(name), [], list(objs['pvcs'].values()))['status']
        return POWER.get(status, status)

    @staticmethod
    def claims_of(vm):
        volumes = (((vm.get('spec') or {}).get('template') or {}).get('spec') or {}).get('volumes') or []
        return [(v.get('persistentVolumeClaim') or {}).get('claimName') or (v.get('dataVolume') or {}).get('name') for v in volumes]

    def read_values(self, conns):
        """The value of every declared field, as the world holds it (``conns``: the objects :meth:`snapshot` read)."""
        objs = conns
        values = [{'object': name, 'field': 'power', 'value': self.power(objs, name)} for name in VMS]
        users = sorted(name for name in VMS if name in objs['vms'] and DATA in self.claims_of(objs['vms'][name]))
        values.append({'object': DATA, 'field': 'attached', 'value': ','.join(users) or 'none'})
        pvc = objs['pvcs'].get(SCRATCH)
        values.append({'object': SCRATCH, 'field': 'exists', 'value': 'present' if pvc else 'absent'})
        size = ((((pvc or {}).get('spec') or {}).get('resources') or {}).get('requests') or {}).get('storage')
        values.append({'object': SCRATCH, 'field': 'capacity', 'value': quantity_bytes(size) if size else None})
        values.append({'object': SNAPSHOT, 'field': 'exists', 'value': 'present' if SNAPSHOT in objs['snapshots'] else 'absent'})
        vmi = objs['vmis'].get(MOVER)
        values.append({'object': MOVER, 'field': 'node', 'value': ((vmi or {}).get('status') or {}).get('nodeName') or 'absent'})
        return values

    def final_tasks(self):
        # one task per module (each ansible module process costs seconds under load): the VMs as a fleet, the volumes as a list
        data = self.world.data_args(VMS[0])
        volumes = self.world.conn(volumes=[{'name': DATA, 'capacity': data['capacity'], 'attachments': data['attachments']},
                                           {'name': SCRATCH, 'state': 'absent'}], force=True, wait_timeout=60)
        return [{'name': 'vms', 'converge.virt.vm': self.world.fleet_args([(VMS[0], 'running'), (VMS[1], 'stopped'), (MOVER, 'running')])},
                {'name': 'volumes', 'converge.virt.volume': volumes},
                {'name': 'snapshot absent', 'converge.virt.snapshot': self.world.snapshot_args('absent')}]

    def final(self):
        """Read the world, converge it once, reconcile with fix, reconcile, converge again; read the world again."""
        final = self.history['final']
        final['values'] = self.read_values(self.snapshot())
        tasks = self.final_tasks()
        fix = [{'name': 'reconcile fix', 'converge.virt.reconcile': self.world.conn(fix=True)}]
        rc, data = lcampaign.Run(self.directory, 'final-converge', tasks + fix, self.journal).wait()
        final['final_converge'] = {'rc': rc, 'failures': str(rl.failures(data))[:2000] if data else 'no output'}
        look = [{'name': 'reconcile', 'converge.virt.reconcile': self.world.conn()}]
        again = [dict(task, name='again: ' + task['name']) for task in tasks]
        rc, data = lcampaign.Run(self.directory, 'final-check', look + again, self.journal).wait()
        findings, changed = [], []
        for name, res in rl.task_results(data or {}):
            if name == 'reconcile':
                findings.extend(res.get('disagreements') or [])
            elif res.get('changed'):
                changed.append(name)
        final['reconcile_after_fix'] = findings
        final['second_converge_changed'] = changed + (['failed: %s' % str(rl.failures(data) if data else 'no output')[:500]] if rc != 0 else [])
        self.read_world(self.snapshot())

    def read_world(self, conns):
        """Orphans (VMs, VMIs without their VM, claims), migrations in flight and tasks left, as the checker reads them
        (the namespace in the place of a libvirt host; ``conns``: the objects :meth:`snapshot` read)."""
        objs = conns
        final = self.history['final']
        names = sorted(set(objs['vms']) | set(objs['vmis']))
        final['domains'] = {NS: names}
        final['expected_domains'] = dict((name, [NS]) for name in VMS + (MOVER,))
        final['volumes'] = {NS: sorted(objs['pvcs'])}
        final['expected_volumes'] = {NS: [DATA]}
        final['jobs'] = [{'name': name, 'phase': (vmim.get('status') or {}).get('phase')} for name, vmim in sorted(objs['vmims'].items())
                         if (vmim.get('status') or {}).get('phase') not in ('Succeeded', 'Failed')]
        final['tasks'] = [{'name': name, 'task_state': ((vm['metadata'].get('annotations') or {}).get('converge.virt/task-state'))}
                          for name, vm in sorted(objs['vms'].items()) if TASK_ID in (vm['metadata'].get('annotations') or {})]
        final['vmis_without_vm'] = sorted(set(objs['vmis']) - set(objs['vms']))
        final['snapshots'] = sorted(objs['snapshots'])
        final['checksums'] = {}


def check(history):
    """The checker's rules, and the KubeVirt ones: no VMI outlives its VM, no snapshot is left that no declaration made."""
    violations = checker.check(history)
    final = history.get('final', {})
    for name in final.get('vmis_without_vm', ()):
        violations.append(checker.Violation('orphan-domain', name, 'VirtualMachineInstance %s has no VirtualMachine' % name))
    for name in final.get('snapshots', ()):
        violations.append(checker.Violation('orphan-snapshot', name, 'snapshot %s is left after the final converge declared it absent' % name))
    return violations


def run_campaign(state_dir, seed, seconds, workers=3, nemesis_every=(4.0, 10.0)):
    """Start the stack, run a campaign, stop the stack; (history, violations, figures). Files stay in ``state_dir``."""
    from tests.kubeapi.real import RealKubeServer, RealStack  # pylint: disable=import-outside-toplevel
    mark = time.monotonic()
    stack = RealStack(os.path.join(state_dir, 'kubelab'))
    server = None
    try:
        server = RealKubeServer(stack, kubeconfig_path=os.path.join(state_dir, 'kubeconfig')).start()
        lab_start = round(time.monotonic() - mark, 1)
        directory = os.path.join(state_dir, 'runs')
        os.makedirs(directory, exist_ok=True)
        started = time.monotonic()
        history = KubeCampaign(server, seed, seconds, directory, workers=workers, nemesis_every=nemesis_every).run()
    finally:
        if server is not None:
            server.close()
        stack.close()
    violations = check(history)
    numbers = lcampaign.figures(history, violations, time.monotonic() - started)
    numbers['phases'] = dict(history.get('phases', {}), lab_start=lab_start)
    numbers['backend'] = 'kubevirt'
    with open(os.path.join(state_dir, 'history.json'), 'w', encoding='utf-8') as handle:
        json.dump(dict(history, violations=violations, figures=numbers), handle, indent=1, sort_keys=True)
    return history, violations, numbers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seed', type=int, default=int(time.time()))
    parser.add_argument('--minutes', type=float, default=5.0)
    parser.add_argument('--workers', type=int, default=3)
    parser.add_argument('--out', default=os.path.join('build', 'chaos-kubevirt'))
    parser.add_argument('--record', action='store_true', help='append the figures to tests/chaos/campaigns.json (docs/reliability.md)')
    args = parser.parse_args(argv)
    state_dir = os.path.abspath(os.path.join(args.out, 'seed-%d' % args.seed))
    os.makedirs(state_dir, exist_ok=True)
    print('kubevirt chaos campaign seed %d (%.1f min, %d workers) in %s' % (args.seed, args.minutes, args.workers, state_dir), flush=True)
    history, violations, numbers = run_campaign(state_dir, args.seed, args.minutes * 60, args.workers)
    print(json.dumps(numbers, sort_keys=True))
    if args.record:
        lcampaign.record(numbers, 1, args.workers, 1, note='KubeVirt (tests/chaos/campaign_kubevirt.py; hosts = 1 stack)')
    if violations:
        print(checker.report(history, violations))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
