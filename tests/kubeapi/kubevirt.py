"""KubeVirt / CDI / storage / scheduler emulation on top of ``store.Store``.

This module re-implements, in a deliberately small form, what these upstream
components do, so that a client can be tested against realistic objects:

* virt-controller ``pkg/virt-controller/watch/vm.go``: ``syncRunStrategy``
  (Always, RerunOnFailure, Manual, Halted, Once; legacy ``spec.running``),
  ``stateChangeRequests`` handling and trimming (``isTrimFirstChangeRequestNeeded``),
  start failure tracking (``syncStartFailureStatus``, backoff
  ``calculateStartBackoffTime``: 10*n^2 s + rand(0..half), cap 300 s),
  ``updateStatus`` (created, ready, runStrategy, conditions copied from the VMI,
  Ready from the VMI Ready condition) and ``setPrintableStatus`` with the same
  precedence list and predicates; VM and VMI finalizers; dataVolumeTemplates.
* virt-controller ``vmi.go`` + kube-scheduler + virt-handler: VMI phases
  ``Pending -> Scheduling -> Scheduled -> Running -> Succeeded/Failed`` with a
  virt-launcher Pod, node selection honouring ``spec.unschedulable``, taints /
  tolerations and nodeSelector, ``Synchronized`` condition reasons
  FailedPvcNotFound / FailedDataVolumeNotFound / ErrImagePull / ImagePullBackOff,
  ``PodScheduled=False/Unschedulable``, ``Ready``, ``LiveMigratable``,
  ``AgentConnected``, ``Paused``, interfaces, nodeName, hotplug volumeStatus
  phases (Pending -> Bound -> AttachedToNode -> MountedToPod -> Ready, removal
  Detaching -> gone).
* ``migration.go``: VirtualMachineInstanceMigration phases Pending, Scheduling,
  Scheduled, PreparingTarget, TargetReady, Running, Succeeded/Failed; VMI
  ``status.migrationState``; abort by deleting the migration (finalizer
  ``kubevirt.io/migrationJobFinalize``); one in-flight migration per VMI
  (admission); target pod failure.
* virt-api ``pkg/virt-api/rest/lifecycle.go`` / ``volumes.go``: start, stop,
  restart, migrate, pause, unpause, addvolume, removevolume with their 409
  rules and messages (see ``SubresourceAPI``).
* PVC binding (Immediate / WaitForFirstConsumer storage classes), PV creation,
  volume expansion; CDI DataVolume phases (Pending, ImportScheduled,
  ImportInProgress with progress, Succeeded, Failed; CloneScheduled, CloneInProgress
  for a pvc source, sized like its source when no size is given) creating a PVC.

It never imports the collection under test.

Time: every transition of an object (a VMI phase step, a migration phase step,
a volume step...) is allowed at most every ``step_delay`` seconds, so a
background thread moves things quickly but observably.  ``settle()`` runs
passes ignoring delays until nothing changes (deterministic for tests),
``tick()`` runs single passes, ``advance(seconds)`` moves the emulated clock
(used by start-failure backoff), ``pause()``/``resume()`` stop/restart the
background thread's progress.
"""

# pylint: disable=consider-using-f-string,too-many-lines,too-many-arguments,too-many-positional-arguments
# pylint: disable=too-many-locals,too-many-branches,too-many-statements,too-many-return-statements,too-few-public-methods

import copy
import datetime
import random
import threading
import time
import uuid

from .store import ApiError, ResourceType, now_iso

VM_FINALIZER = 'kubevirt.io/virtualMachineControllerFinalize'
# v1.VirtualMachineInstanceFinalizer since KubeVirt 1.0 (the real stack's virt-api shows it); the bare legacy name is still removed
VMI_FINALIZER = 'kubevirt.io/foregroundDeleteVirtualMachine'
VMI_FINALIZERS = (VMI_FINALIZER, 'foregroundDeleteVirtualMachine')
MIGRATION_FINALIZER = 'kubevirt.io/migrationJobFinalize'
MAX_BACKOFF = 300
FINAL = ('Succeeded', 'Failed')
RUN_STRATEGIES = ('Always', 'Halted', 'Manual', 'RerunOnFailure', 'Once')
MIGRATION_FINAL = ('Succeeded', 'Failed')
# migration.go: defaultUnschedulablePendingTimeoutSeconds / defaultCatchAllPendingTimeoutSeconds, and the
# annotations of a VirtualMachineInstanceMigration that override them
MIGRATION_UNSCHEDULABLE_TIMEOUT = 300.0
MIGRATION_PENDING_TIMEOUT = 900.0
UNSCHEDULABLE_TIMEOUT_ANNOTATION = 'kubevirt.io/migrationUnschedulablePodTimeoutSeconds'
PENDING_TIMEOUT_ANNOTATION = 'kubevirt.io/migrationPendingPodTimeoutSeconds'

KUBEVIRT_TYPES = [
    ResourceType('kubevirt.io', 'v1', 'virtualmachines', 'VirtualMachine', short_names=('vm', 'vms'), custom=True, categories=('all',)),
    ResourceType('kubevirt.io', 'v1', 'virtualmachineinstances', 'VirtualMachineInstance', short_names=('vmi', 'vmis'), custom=True,
                 categories=('all',)),
    ResourceType('kubevirt.io', 'v1', 'virtualmachineinstancemigrations', 'VirtualMachineInstanceMigration',
                 short_names=('vmim', 'vmims'), custom=True, categories=('all',)),
    ResourceType('cdi.kubevirt.io', 'v1beta1', 'datavolumes', 'DataVolume', short_names=('dv', 'dvs'), custom=True, categories=('all',)),
    ResourceType('cdi.kubevirt.io', 'v1beta1', 'datasources', 'DataSource', short_names=('das',), custom=True),
    ResourceType('snapshot.kubevirt.io', 'v1beta1', 'virtualmachinesnapshots', 'VirtualMachineSnapshot', short_names=('vmsnapshot',),
                 custom=True),
    ResourceType('snapshot.kubevirt.io', 'v1beta1', 'virtualmachinerestores', 'VirtualMachineRestore', short_names=('vmrestore',), custom=True),
]

# subresources.kubevirt.io/v1 discovery: (name, kind)
SUBRESOURCES = [
    ('virtualmachines/start', 'VirtualMachine'), ('virtualmachines/stop', 'VirtualMachine'), ('virtualmachines/restart', 'VirtualMachine'),
    ('virtualmachines/migrate', 'VirtualMachine'), ('virtualmachines/addvolume', 'VirtualMachine'),
    ('virtualmachines/removevolume', 'VirtualMachine'), ('virtualmachineinstances/pause', 'VirtualMachineInstance'),
    ('virtualmachineinstances/unpause', 'VirtualMachineInstance'), ('virtualmachineinstances/addvolume', 'VirtualMachineInstance'),
    ('virtualmachineinstances/removevolume', 'VirtualMachineInstance'),
]


def cond_get(obj, ctype):
    """Condition of a type or None."""
    for cond in (obj.get('status') or {}).get('conditions') or []:
        if cond.get('type') == ctype:
            return cond
    return None


def cond_is(obj, ctype, status='True', reason=None):
    """HasConditionWithStatus(AndReason)."""
    cond = cond_get(obj, ctype) if obj else None
    return cond is not None and cond.get('status') == status and (reason is None or cond.get('reason') == reason)


def cond_set(obj, ctype, status, reason='', message='', now=None):
    """UpdateCondition keeping lastTransitionTime when status does not change."""
    conds = obj.setdefault('status', {}).setdefault('conditions', [])
    for cond in conds:
        if cond['type'] == ctype:
            if cond.get('status') != status:
                cond['lastTransitionTime'] = now or now_iso()
            cond.update({'status': status, 'reason': reason, 'message': message})
            return
    conds.append({'type': ctype, 'status': status, 'reason': reason, 'message': message, 'lastProbeTime': None,
                  'lastTransitionTime': now or now_iso()})


def cond_del(obj, ctype):
    """RemoveCondition."""
    status = obj.get('status') or {}
    if 'conditions' in status:
        status['conditions'] = [c for c in status['conditions'] if c.get('type') != ctype]


def run_strategy(vm):
    """vm.RunStrategy(): spec.runStrategy, else legacy spec.running (true=Always, false/absent=Halted)."""
    spec = vm.get('spec') or {}
    if spec.get('runStrategy'):
        return spec['runStrategy']
    return 'Always' if spec.get('running') else 'Halted'


def is_final(vmi):
    """vmi.IsFinal()."""
    return (vmi.get('status') or {}).get('phase') in FINAL


def vmi_phase(vmi):
    """status.phase or ''."""
    return (vmi.get('status') or {}).get('phase') or ''


def is_migrating(vmi):
    """migrations.IsMigrating: startTimestamp set and no endTimestamp."""
    state = (vmi.get('status') or {}).get('migrationState') or {}
    return bool(state.get('startTimestamp')) and not state.get('endTimestamp')


def was_running(vmi):
    """wasVMIInRunningPhase."""
    return any(t.get('phase') == 'Running' for t in (vmi.get('status') or {}).get('phaseTransitionTimestamps') or [])


def volume_claim(volume):
    """PVCNameFromVirtVolume: claim name for PVC and DataVolume volumes."""
    if volume.get('persistentVolumeClaim'):
        return volume['persistentVolumeClaim'].get('claimName')
    if volume.get('dataVolume'):
        return volume['dataVolume'].get('name')
    return None


def is_hotplug(volume):
    """IsHotplugVolume."""
    return bool((volume.get('persistentVolumeClaim') or {}).get('hotpluggable') or (volume.get('dataVolume') or {}).get('hotpluggable'))


def backoff_seconds(fail_count, max_delay=MAX_BACKOFF):
    """calculateStartBackoffTime from vm.go."""
    fail_count = max(fail_count, 1)
    interval = max(max_delay // 30, 10)
    delay = interval * fail_count ** 2
    delay += random.randint(0, delay // 2)
    return min(delay, max_delay)


def parse_ts(value):
    """Parse an RFC 3339 timestamp to epoch seconds."""
    return datetime.datetime.strptime(value, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.timezone.utc).timestamp()


def quantity_bytes(value):
    """Parse a Kubernetes quantity (Gi, Mi, G, ...) to bytes (enough for storage sizes)."""
    if value is None:
        return 0
    text = str(value)
    suffixes = {'Ki': 1 << 10, 'Mi': 1 << 20, 'Gi': 1 << 30, 'Ti': 1 << 40, 'Pi': 1 << 50, 'k': 10 ** 3, 'M': 10 ** 6, 'G': 10 ** 9,
                'T': 10 ** 12, 'P': 10 ** 15}
    for suf in ('Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'k', 'M', 'G', 'T', 'P'):
        if text.endswith(suf):
            return int(float(text[:-len(suf)]) * suffixes[suf])
    return int(float(text))


def _rand(n=5):
    return ''.join(random.choice('bcdfghjklmnpqrstvwxz2456789') for _unused0 in range(n))


class Controller:  # pylint: disable=too-many-instance-attributes,too-many-public-methods
    """All emulated controllers; see module docstring."""

    def __init__(self, store, faults, step_delay=0.05, auto=True, nodes=None):
        self.store = store
        self.faults = faults
        self.step_delay = step_delay
        self.offset = 0.0
        self.lock = threading.RLock()
        self.due = {}
        self.paused = not auto
        self.wake = threading.Event()
        self.stop_event = threading.Event()
        self.thread = None
        self.node_names = list(nodes or ['node01', 'node02', 'node03'])
        self.ip_counter = 10
        self.vm_hotplugged = set()
        self.passes = 0
        self.errors = []
        # pending timeouts of migration target pods (emulated clock seconds); tests may shorten them
        self.migration_unschedulable_timeout = MIGRATION_UNSCHEDULABLE_TIMEOUT
        self.migration_pending_timeout = MIGRATION_PENDING_TIMEOUT
        s = store
        self.t_vm = s.rtype('kubevirt.io', 'virtualmachines')
        self.t_vmi = s.rtype('kubevirt.io', 'virtualmachineinstances')
        self.t_mig = s.rtype('kubevirt.io', 'virtualmachineinstancemigrations')
        self.t_dv = s.rtype('cdi.kubevirt.io', 'datavolumes')
        self.t_ds = s.rtype('cdi.kubevirt.io', 'datasources')
        self.t_pvc = s.rtype('', 'persistentvolumeclaims')
        self.t_pv = s.rtype('', 'persistentvolumes')
        self.t_pod = s.rtype('', 'pods')
        self.t_node = s.rtype('', 'nodes')
        self.t_ns = s.rtype('', 'namespaces')
        self.t_sc = s.rtype('storage.k8s.io', 'storageclasses')
        self.t_event = s.rtype('', 'events')
        store.admission.append(self.admit)
        store.listeners.append(lambda ev: self.wake.set())

    # clock & scheduling of steps ----------------------------------------------------------------
    def now(self):
        """Emulated wall clock (real time + advance() offset)."""
        return time.time() + self.offset

    def ts(self):
        """Emulated RFC 3339 timestamp."""
        return now_iso(self.offset)

    def advance(self, seconds):
        """Move the emulated clock forward (e.g. past a start-failure backoff)."""
        with self.lock:
            self.offset += seconds
        self.wake.set()

    def _ready(self, obj, force):
        uid = obj['metadata']['uid']
        return force or self.now() >= self.due.get(uid, 0)

    def _stepped(self, obj):
        self.due[obj['metadata']['uid']] = self.now() + self.step_delay

    # background loop -----------------------------------------------------------------------------
    def start(self):
        """Seed cluster objects and start the background thread."""
        self.seed()
        self.thread = threading.Thread(target=self._loop, name='kubevirt-emulation', daemon=True)
        self.thread.start()

    def stop(self):
        """Stop the background thread."""
        self.stop_event.set()
        self.wake.set()
        if self.thread:
            self.thread.join(5)

    def pause(self):
        """Freeze background progress (tick()/settle() still work)."""
        with self.lock:
            self.paused = True

    def resume(self):
        """Resume background progress."""
        with self.lock:
            self.paused = False
        self.wake.set()

    def _loop(self):
        while not self.stop_event.is_set():
            self.wake.wait(max(self.step_delay / 2, 0.01))
            self.wake.clear()
            if self.stop_event.is_set():
                break
            with self.lock:
                if self.paused:
                    continue
                try:
                    self.run_pass(force=False)
                except Exception as exc:  # pylint: disable=broad-except
                    self.errors.append(repr(exc))

    def tick(self, passes=1):
        """Run ``passes`` reconcile passes ignoring step delays; returns the number of changes."""
        total = 0
        with self.lock:
            for _unused0 in range(passes):
                total += self.run_pass(force=True)
        return total

    def settle(self, max_passes=200):
        """Run passes ignoring delays until nothing changes; returns the number of passes."""
        with self.lock:
            for i in range(max_passes):
                if not self.run_pass(force=True):
                    return i
        raise RuntimeError('controller emulation did not settle in %d passes' % max_passes)

    def wait_for(self, predicate, timeout=10.0, interval=0.05):
        """Poll ``predicate()`` until true (background thread keeps running)."""
        end = time.time() + timeout
        while time.time() < end:
            result = predicate()
            if result:
                return result
            time.sleep(interval)
        raise TimeoutError('condition not met within %.1fs' % timeout)

    def run_pass(self, force=False):
        """One reconcile pass over every controller."""
        self.passes += 1
        changes = 0
        for pvc in self.store.items(self.t_pvc):
            changes += self._sync_pvc(pvc, force)
        for dv in self.store.items(self.t_dv):
            changes += self._sync_dv(dv, force)
        for mig in self.store.items(self.t_mig):
            changes += self._sync_migration(mig, force)
        for vmi in self.store.items(self.t_vmi):
            changes += self._sync_vmi(vmi, force)
        for vm in self.store.items(self.t_vm):
            changes += self._sync_vm(vm, force)
        changes += self._sync_snapshots(force)
        return changes

    # helpers ----------------------------------------------------------------------------------------
    def _mutate(self, rtype, obj, func):
        before = self.store.peek(rtype, obj['metadata'].get('namespace', ''), obj['metadata']['name'])
        after = self.store.mutate(rtype, obj['metadata'].get('namespace', ''), obj['metadata']['name'], func)
        return 0 if after == before else 1

    def event(self, obj, reason, message, etype='Normal'):
        """Record a core/v1 Event for ``obj``."""
        ns = obj['metadata'].get('namespace') or 'default'
        if self.store.peek(self.t_ns, '', ns) is None:
            return
        ev = {'metadata': {'generateName': obj['metadata']['name'] + '.', 'namespace': ns},
              'involvedObject': {'kind': obj.get('kind'), 'apiVersion': obj.get('apiVersion'), 'name': obj['metadata']['name'],
                                 'namespace': ns, 'uid': obj['metadata'].get('uid')},
              'reason': reason, 'message': message, 'type': etype, 'count': 1, 'source': {'component': 'virt-controller'},
              'firstTimestamp': self.ts(), 'lastTimestamp': self.ts()}
        try:
            self.store.create(self.t_event, ns, ev)
        except ApiError:
            pass

    def _set_phase(self, obj, phase):
        status = obj.setdefault('status', {})
        status['phase'] = phase
        status.setdefault('phaseTransitionTimestamps', []).append({'phase': phase, 'phaseTransitionTimestamp': self.ts()})

    # seeding ------------------------------------------------------------------------------------------
    def seed(self):
        """Nodes and storage classes."""
        for name in self.node_names:
            self.add_node(name)
        for name, mode, default in (('standard', 'Immediate', True), ('local-wffc', 'WaitForFirstConsumer', False)):
            if self.store.peek(self.t_sc, '', name) is None:
                self.store.create(self.t_sc, '', {
                    'metadata': {'name': name, 'annotations': {'storageclass.kubernetes.io/is-default-class': 'true' if default else 'false'}},
                    'provisioner': 'kubevirt.io/hostpath-provisioner', 'volumeBindingMode': mode, 'allowVolumeExpansion': True,
                    'reclaimPolicy': 'Delete'})

    def add_node(self, name, schedulable=True, taints=None, labels=None):
        """Create a node (Ready, kubevirt schedulable)."""
        lab = {'kubernetes.io/hostname': name, 'kubevirt.io/schedulable': 'true', 'kubernetes.io/os': 'linux'}
        lab.update(labels or {})
        spec = {'unschedulable': not schedulable} if not schedulable else {}
        if taints:
            spec['taints'] = taints
        if self.store.peek(self.t_node, '', name) is None:
            self.store.create(self.t_node, '', {'metadata': {'name': name, 'labels': lab}, 'spec': spec})
        idx = self.node_names.index(name) if name in self.node_names else len(self.node_names)
        if name not in self.node_names:
            self.node_names.append(name)

        def fill(node):
            node['status'] = {
                'conditions': [{'type': 'Ready', 'status': 'True', 'reason': 'KubeletReady', 'message': 'kubelet is posting ready status',
                                'lastHeartbeatTime': self.ts(), 'lastTransitionTime': self.ts()}],
                'addresses': [{'type': 'InternalIP', 'address': '192.168.66.%d' % (101 + idx)}, {'type': 'Hostname', 'address': name}],
                'capacity': {'cpu': '8', 'memory': '16Gi', 'pods': '110', 'devices.kubevirt.io/kvm': '1k'},
                'allocatable': {'cpu': '8', 'memory': '15Gi', 'pods': '110', 'devices.kubevirt.io/kvm': '1k'},
                'nodeInfo': {'kubeletVersion': 'v1.30.0', 'kubeProxyVersion': 'v1.30.0', 'osImage': 'Emulated Linux', 'architecture': 'amd64',
                             'operatingSystem': 'linux', 'kernelVersion': '6.8.5', 'containerRuntimeVersion': 'cri-o://1.30.0',
                             'machineID': uuid.uuid5(uuid.NAMESPACE_DNS, name).hex, 'systemUUID': str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
                             'bootID': str(uuid.uuid5(uuid.NAMESPACE_OID, name))}}
        self.store.mutate(self.t_node, '', name, fill)

    def set_node(self, name, schedulable=None, taints=None, ready=None):
        """Cordon/uncordon (``schedulable``), set ``taints`` (list) or Ready condition of a node."""
        def edit(node):
            if schedulable is not None:
                node.setdefault('spec', {})['unschedulable'] = not schedulable
                if schedulable:
                    node['spec'].pop('unschedulable')
            if taints is not None:
                node.setdefault('spec', {})['taints'] = taints
            if ready is not None:
                cond_set(node, 'Ready', 'True' if ready else 'False', 'KubeletReady' if ready else 'KubeletNotReady', '', self.ts())
        self.store.mutate(self.t_node, '', name, edit)
        self.wake.set()

    # guest actions --------------------------------------------------------------------------------------
    def _finish_vmi(self, ns, name, phase, reason):
        with self.lock:
            vmi = self.store.get(self.t_vmi, ns, name)
            if is_final(vmi):
                return vmi

            def edit(o):
                self._set_phase(o, phase)
                o['status']['reason'] = reason
                cond_set(o, 'Ready', 'False', 'GuestNotRunning', 'Guest VM is not reported as running', self.ts())
                cond_del(o, 'Paused')
            self._delete_pods(vmi)
            result = self.store.mutate(self.t_vmi, ns, name, edit)
        self.wake.set()
        return result

    def crash(self, namespace, name):
        """The guest of a VMI crashes (VMI phase Failed)."""
        return self._finish_vmi(namespace, name, 'Failed', 'GuestCrashed')

    def shutdown(self, namespace, name):
        """The guest shuts itself down (VMI phase Succeeded)."""
        return self._finish_vmi(namespace, name, 'Succeeded', 'GuestShutdown')

    def backoff_left(self, vm):
        """Seconds until the start-failure backoff of ``vm`` (dict) expires on the emulated clock."""
        return self._backoff_left(vm)

    # scheduling ---------------------------------------------------------------------------------------
    def _eligible_nodes(self, pod_spec, exclude=None):
        tolerations = pod_spec.get('tolerations') or []
        selector = pod_spec.get('nodeSelector') or {}
        result = []
        for node in self.store.items(self.t_node):
            name = node['metadata']['name']
            if name == exclude or (node.get('spec') or {}).get('unschedulable'):
                continue
            if not cond_is(node, 'Ready'):
                continue
            labels = node['metadata'].get('labels') or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            blocked = False
            for taint in (node.get('spec') or {}).get('taints') or []:
                if taint.get('effect') not in ('NoSchedule', 'NoExecute'):
                    continue
                if not any(self._tolerates(t, taint) for t in tolerations):
                    blocked = True
            if not blocked:
                result.append(name)
        return result

    @staticmethod
    def _tolerates(tol, taint):
        if tol.get('effect') and tol['effect'] != taint.get('effect'):
            return False
        if tol.get('operator') == 'Exists':
            return not tol.get('key') or tol['key'] == taint.get('key')
        return tol.get('key') == taint.get('key') and tol.get('value') == taint.get('value')

    def _pick_node(self, pod_spec, exclude=None):
        nodes = self._eligible_nodes(pod_spec, exclude)
        if not nodes:
            return None
        load = {n: 0 for n in nodes}
        for vmi in self.store.items(self.t_vmi):
            node = (vmi.get('status') or {}).get('nodeName')
            if node in load and not is_final(vmi):
                load[node] += 1
        return sorted(nodes, key=lambda n: (load[n], n))[0]

    def _unschedulable_message(self, pod_spec, exclude=None):
        nodes = self.store.items(self.t_node)
        total = len(nodes)
        if pod_spec.get('nodeSelector'):
            exclude = exclude or None
        cordoned = sum(1 for n in nodes if (n.get('spec') or {}).get('unschedulable'))
        parts = []
        if cordoned:
            parts.append('%d node(s) were unschedulable' % cordoned)
        tainted = sum(1 for n in nodes if (n.get('spec') or {}).get('taints') and not (n.get('spec') or {}).get('unschedulable'))
        if tainted:
            parts.append("%d node(s) had untolerated taint(s)" % tainted)
        if exclude:
            parts.append('1 node(s) is the migration source')
        rest = total - cordoned - tainted - (1 if exclude else 0)
        if rest > 0:
            parts.append("%d node(s) didn't match Pod's node affinity/selector" % rest)
        return '0/%d nodes are available: %s. preemption: 0/%d nodes are available: %d Preemption is not helpful for scheduling.' % (
            total, ', '.join(parts) or 'no nodes', total, total)

    # ============================================================================================
    # PVC / PV (kube-controller-manager persistentvolume controller + external provisioner/resizer)
    # ============================================================================================
    def _sync_pvc(self, pvc, force):
        meta = pvc['metadata']
        ns, name = meta['namespace'], meta['name']
        status = pvc.get('status') or {}
        if meta.get('deletionTimestamp'):
            return self._mutate(self.t_pvc, pvc, lambda o: o['metadata'].update(
                finalizers=[f for f in o['metadata'].get('finalizers') or [] if f != 'kubernetes.io/pvc-protection']))
        if not status.get('phase'):
            def init(o):
                o['status'] = {'phase': 'Pending'}
                fins = o['metadata'].setdefault('finalizers', [])
                if 'kubernetes.io/pvc-protection' not in fins:
                    fins.append('kubernetes.io/pvc-protection')
            self._stepped(pvc)
            return self._mutate(self.t_pvc, pvc, init)
        if not self._ready(pvc, force):
            return 0
        sc = self.store.peek(self.t_sc, '', (pvc.get('spec') or {}).get('storageClassName') or '')
        if status.get('phase') == 'Pending':
            if self.faults.active('pvc_bind_stuck', ns, name):
                return 0
            if sc and sc.get('volumeBindingMode') == 'WaitForFirstConsumer' and \
                    not (meta.get('annotations') or {}).get('volume.kubernetes.io/selected-node'):
                return 0
            return self._bind_pvc(pvc, sc)
        if status.get('phase') == 'Bound':
            want = quantity_bytes(((pvc.get('spec') or {}).get('resources') or {}).get('requests', {}).get('storage'))
            have = quantity_bytes((status.get('capacity') or {}).get('storage'))
            if want > have:
                request = pvc['spec']['resources']['requests']['storage']
                if not cond_get(pvc, 'Resizing'):
                    self._stepped(pvc)
                    return self._mutate(self.t_pvc, pvc, lambda o: (cond_set(o, 'Resizing', 'True', '', 'External resizer is resizing volume',
                                                                             self.ts()),
                                                                    o['status'].update(allocatedResources={'storage': request},
                                                                                       allocatedResourceStatuses={
                                                                                           'storage': 'ControllerResizeInProgress'})))

                def done(o):
                    o['status']['capacity'] = {'storage': request}
                    o['status'].pop('allocatedResourceStatuses', None)
                    cond_del(o, 'Resizing')
                    if not o['status'].get('conditions'):
                        o['status'].pop('conditions', None)
                self._stepped(pvc)
                changed = self._mutate(self.t_pvc, pvc, done)
                pv_name = (pvc.get('spec') or {}).get('volumeName')
                if pv_name:
                    self.store.mutate(self.t_pv, '', pv_name, lambda p: p['spec'].update(capacity={'storage': request}))
                return changed
        return 0

    def _bind_pvc(self, pvc, sc):
        meta = pvc['metadata']
        size = ((pvc.get('spec') or {}).get('resources') or {}).get('requests', {}).get('storage', '1Gi')
        pv_name = 'pvc-%s' % meta['uid']
        access = (pvc.get('spec') or {}).get('accessModes') or ['ReadWriteOnce']
        if self.store.peek(self.t_pv, '', pv_name) is None:
            self.store.create(self.t_pv, '', {
                'metadata': {'name': pv_name, 'annotations': {'pv.kubernetes.io/provisioned-by': (sc or {}).get('provisioner', 'manual')}},
                'spec': {'capacity': {'storage': size}, 'accessModes': access, 'persistentVolumeReclaimPolicy': 'Delete',
                         'storageClassName': (pvc.get('spec') or {}).get('storageClassName'),
                         'volumeMode': (pvc.get('spec') or {}).get('volumeMode', 'Filesystem'),
                         'claimRef': {'kind': 'PersistentVolumeClaim', 'namespace': meta['namespace'], 'name': meta['name'], 'uid': meta['uid']},
                         'hostPath': {'path': '/var/hpvolumes/%s' % pv_name}}})
            self.store.mutate(self.t_pv, '', pv_name, lambda p: p.update(status={'phase': 'Bound'}))

        def bind(o):
            o['spec']['volumeName'] = pv_name
            o['metadata'].setdefault('annotations', {})['pv.kubernetes.io/bind-completed'] = 'yes'
            o['status'] = {'phase': 'Bound', 'accessModes': access, 'capacity': {'storage': size}}
        self._stepped(pvc)
        return self._mutate(self.t_pvc, pvc, bind)

    # ============================================================================================
    # CDI DataVolume
    # ============================================================================================
    def _sync_dv(self, dv, force):  # pylint: disable=too-many-return-statements
        meta = dv['metadata']
        ns, name = meta['namespace'], meta['name']
        status = dv.get('status') or {}
        phase = status.get('phase')
        if meta.get('deletionTimestamp') or not self._ready(dv, force):
            return 0
        if phase in ('Succeeded', 'Failed'):
            return 0
        pvc = self.store.peek(self.t_pvc, ns, name)
        spec = dv.get('spec') or {}
        source = spec.get('source') or {}
        ref = spec.get('sourceRef') or {}
        if not source and ref.get('kind') == 'DataSource':
            # CDI resolves a DataSource to its claim and clones it; it waits (no phase) while the DataSource or its claim is missing
            ds = self.store.peek(self.t_ds, ref.get('namespace') or ns, ref.get('name') or '')
            claim = (((ds or {}).get('spec') or {}).get('source') or {}).get('pvc')
            if not claim:
                return 0
            source = {'pvc': {'name': claim.get('name') or '', 'namespace': claim.get('namespace') or ref.get('namespace') or ns}}
            if self.store.peek(self.t_pvc, source['pvc']['namespace'], source['pvc']['name']) is None:
                return 0
        if not phase:
            if pvc is None:
                storage = spec.get('storage') or spec.get('pvc') or {}
                size = ((storage.get('resources') or {}).get('requests') or {}).get('storage')
                if size is None and 'pvc' in source:
                    # a clone without a size takes the size of its source claim (CDI storage API)
                    src = self.store.peek(self.t_pvc, source['pvc'].get('namespace') or ns, source['pvc'].get('name') or '')
                    size = ((((src or {}).get('spec') or {}).get('resources') or {}).get('requests') or {}).get('storage')
                pvc_spec = {'accessModes': storage.get('accessModes') or ['ReadWriteOnce'],
                            'resources': {'requests': {'storage': size or '1Gi'}},
                            'volumeMode': storage.get('volumeMode', 'Filesystem')}
                if storage.get('storageClassName'):
                    pvc_spec['storageClassName'] = storage['storageClassName']
                owner = {'apiVersion': dv['apiVersion'], 'kind': 'DataVolume', 'name': name, 'uid': meta['uid'], 'controller': True,
                         'blockOwnerDeletion': True}
                try:
                    self.store.create(self.t_pvc, ns, {'metadata': {'name': name, 'ownerReferences': [owner],
                                                                    'labels': {'app': 'containerized-data-importer'},
                                                                    'annotations': {'cdi.kubevirt.io/storage.contentType': 'kubevirt'}},
                                                       'spec': pvc_spec})
                except ApiError:
                    pass

            def pending(o):
                o['status'] = {'phase': 'Pending', 'progress': 'N/A', 'claimName': name}
                cond_set(o, 'Bound', 'False', 'Pending', 'PVC %s Pending' % name, self.ts())
                cond_set(o, 'Ready', 'False', 'Pending', '', self.ts())
                cond_set(o, 'Running', 'False', '', '', self.ts())
            self._stepped(dv)
            return self._mutate(self.t_dv, dv, pending)
        pvc_phase = ((pvc or {}).get('status') or {}).get('phase')
        if phase in ('Pending', 'WaitForFirstConsumer'):
            if pvc_phase != 'Bound':
                sc = self.store.peek(self.t_sc, '', ((pvc or {}).get('spec') or {}).get('storageClassName') or '')
                if sc and sc.get('volumeBindingMode') == 'WaitForFirstConsumer' and phase != 'WaitForFirstConsumer':
                    self._stepped(dv)
                    return self._mutate(self.t_dv, dv, lambda o: o['status'].update(phase='WaitForFirstConsumer'))
                return 0

            def scheduled(o):
                # host-assisted clone: CloneScheduled -> CloneInProgress (CDI datavolume phases), import otherwise
                o['status']['phase'] = 'Succeeded' if 'blank' in source else 'CloneScheduled' if 'pvc' in source else 'ImportScheduled'
                o['status']['progress'] = 'N/A' if 'blank' not in source else '100.0%'
                cond_set(o, 'Bound', 'True', 'Bound', 'PVC %s Bound' % name, self.ts())
                if 'blank' in source:
                    cond_set(o, 'Ready', 'True', '', '', self.ts())
            self._stepped(dv)
            return self._mutate(self.t_dv, dv, scheduled)
        if phase in ('ImportScheduled', 'CloneScheduled'):
            def inprog(o):
                o['status'].update(phase=phase.replace('Scheduled', 'InProgress'), progress='0.00%')
                cond_set(o, 'Running', 'True', 'Pod is running', '', self.ts())
            self._stepped(dv)
            return self._mutate(self.t_dv, dv, inprog)
        if phase in ('ImportInProgress', 'CloneInProgress'):
            progress = float(str(status.get('progress', '0')).rstrip('%') or 0)
            if self.faults.consume('dv_fail', ns, name):
                def fail(o):
                    o['status']['phase'] = 'Failed'
                    o['status']['restartCount'] = o['status'].get('restartCount', 0) + 1
                    cond_set(o, 'Running', 'False', 'Error', 'Unable to connect to http data source: expected status code 200, got 404. '
                             'Status: 404 Not Found', self.ts())
                    cond_set(o, 'Ready', 'False', '', '', self.ts())
                self._stepped(dv)
                self.event(dv, 'Error', 'Unable to connect to http data source', 'Warning')
                return self._mutate(self.t_dv, dv, fail)
            progress += 50.0
            if progress >= 100:
                def done(o):
                    o['status'].update(phase='Succeeded', progress='100.0%')
                    cond_set(o, 'Running', 'False', 'Completed', 'Import Complete', self.ts())
                    cond_set(o, 'Ready', 'True', '', '', self.ts())
                self._stepped(dv)
                return self._mutate(self.t_dv, dv, done)
            self._stepped(dv)
            return self._mutate(self.t_dv, dv, lambda o: o['status'].update(progress='%.2f%%' % progress))
        return 0

    # ============================================================================================
    # VirtualMachine controller (vm.go)
    # ============================================================================================
    def _owned_vmi(self, vm):
        vmi = self.store.peek(self.t_vmi, vm['metadata']['namespace'], vm['metadata']['name'])
        if vmi is None:
            return None
        refs = vmi['metadata'].get('ownerReferences') or []
        if refs and not any(r.get('uid') == vm['metadata']['uid'] for r in refs):
            return None
        return vmi

    def _handle_dvs(self, vm):
        """Create DataVolumes from dataVolumeTemplates; True when all are ready (Succeeded/WFFC/PendingPopulation)."""
        ns = vm['metadata']['namespace']
        ready = True
        for tpl in (vm.get('spec') or {}).get('dataVolumeTemplates') or []:
            name = tpl['metadata']['name']
            dv = self.store.peek(self.t_dv, ns, name)
            if dv is None:
                body = copy.deepcopy(tpl)
                body['metadata']['namespace'] = ns
                body['metadata']['ownerReferences'] = [{'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'name': vm['metadata']['name'],
                                                        'uid': vm['metadata']['uid'], 'controller': True, 'blockOwnerDeletion': True}]
                try:
                    self.store.create(self.t_dv, ns, body)
                except ApiError:
                    pass
                ready = False
                continue
            if ((dv.get('status') or {}).get('phase')) not in ('Succeeded', 'WaitForFirstConsumer', 'PendingPopulation'):
                ready = False
        return ready

    def _start_vmi(self, vm):
        meta = vm['metadata']
        tpl = copy.deepcopy((vm.get('spec') or {}).get('template') or {})
        tmeta = tpl.get('metadata') or {}
        spec = tpl.get('spec') or {}
        spec.setdefault('domain', {}).setdefault('devices', {})
        spec['domain'].setdefault('firmware', {}).setdefault('uuid', str(uuid.uuid5(uuid.NAMESPACE_DNS, meta['name'])))
        reqs = (vm.get('status') or {}).get('stateChangeRequests') or []
        if reqs and reqs[0].get('action') == 'Start' and (reqs[0].get('data') or {}).get('paused') == 'true':
            spec['startStrategy'] = 'Paused'
        annotations = dict(tmeta.get('annotations') or {})
        annotations['kubevirt.io/vm-generation'] = str(meta.get('generation', 1))
        vmi = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstance',
               'metadata': {'name': meta['name'], 'namespace': meta['namespace'], 'labels': dict(tmeta.get('labels') or {}),
                            'annotations': annotations, 'finalizers': [VM_FINALIZER],
                            'ownerReferences': [{'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'name': meta['name'],
                                                 'uid': meta['uid'], 'controller': True, 'blockOwnerDeletion': True}]},
               'spec': spec}
        try:
            created = self.store.create(self.t_vmi, meta['namespace'], vmi)
        except ApiError:
            return 0
        # hotpluggable volumes of the template came from the VM: removing them from the VM unplugs them (declarative hotplug)
        self.vm_hotplugged.update((created['metadata']['uid'], v['name']) for v in spec.get('volumes') or [] if is_hotplug(v))
        self._stepped(created)
        self.event(vm, 'SuccessfulCreate', 'Started the virtual machine by creating the new virtual machine instance %s' % meta['name'])
        return 1

    def _stop_vmi(self, vm, vmi):
        if vmi is None or vmi['metadata'].get('deletionTimestamp'):
            return 0
        try:
            self.store.delete(self.t_vmi, vmi['metadata']['namespace'], vmi['metadata']['name'])
        except ApiError:
            return 0
        self.event(vm, 'SuccessfulDelete', 'Stopped the virtual machine by deleting the virtual machine instance %s' % vmi['metadata']['uid'])
        return 1

    def _add_start_request(self, vm):
        def add(o):
            o.setdefault('status', {}).setdefault('stateChangeRequests', []).append({'action': 'Start'})
        return self._mutate(self.t_vm, vm, add)

    @staticmethod
    def _stop_request_for(vm, vmi):
        reqs = (vm.get('status') or {}).get('stateChangeRequests') or []
        return bool(reqs) and vmi is not None and reqs[0].get('action') == 'Stop' and reqs[0].get('uid') == vmi['metadata']['uid']

    @staticmethod
    def _start_request(vm):
        reqs = (vm.get('status') or {}).get('stateChangeRequests') or []
        return bool(reqs) and reqs[0].get('action') == 'Start'

    def _backoff_left(self, vm):
        failure = (vm.get('status') or {}).get('startFailure')
        if not failure or not failure.get('retryAfterTimestamp'):
            return 0
        return max(0.0, parse_ts(failure['retryAfterTimestamp']) - self.now())

    def _sync_run_strategy(self, vm, vmi, strategy):  # pylint: disable=too-many-return-statements,too-many-branches
        if strategy == 'Always':
            if vmi is not None:
                if self._stop_request_for(vm, vmi) or is_final(vmi):
                    return self._stop_vmi(vm, vmi)
                return 0
            if self._backoff_left(vm) > 0:
                return 0
            return self._start_vmi(vm)
        if strategy == 'RerunOnFailure':
            if vmi is not None:
                force_stop = self._stop_request_for(vm, vmi)
                failed = vmi_phase(vmi) == 'Failed'
                if not vmi['metadata'].get('deletionTimestamp') and (force_stop or failed or vmi_phase(vmi) == 'Succeeded'):
                    changed = self._stop_vmi(vm, vmi)
                    if failed:
                        changed += self._add_start_request(vm)
                    return changed
                return 0
            if not self._start_request(vm) and (vm.get('status') or {}).get('runStrategy') == strategy:
                return 0
            if self._backoff_left(vm) > 0:
                return 0
            return self._start_vmi(vm)
        if strategy == 'Manual':
            if vmi is not None:
                if self._stop_request_for(vm, vmi):
                    return self._stop_vmi(vm, vmi)
            elif self._start_request(vm):
                return self._start_vmi(vm)
            return 0
        if strategy == 'Halted':
            if vmi is None:
                if self._start_request(vm):
                    def to_always(o):
                        if o['spec'].get('runStrategy'):
                            o['spec']['runStrategy'] = 'Always'
                        else:
                            o['spec']['running'] = True
                    return self._mutate(self.t_vm, vm, to_always)
                return 0
            return self._stop_vmi(vm, vmi)
        if strategy == 'Once':
            if vmi is None:
                return self._start_vmi(vm)
            return 0
        return 0

    def _sync_hotplug_to_vmi(self, vm, vmi):
        """Declarative hotplug: hotpluggable volumes of the VM template are mirrored into a running VMI."""
        if vmi is None or vmi_phase(vmi) != 'Running' or vmi['metadata'].get('deletionTimestamp'):
            return 0
        tspec = ((vm.get('spec') or {}).get('template') or {}).get('spec') or {}
        want = {v['name']: v for v in tspec.get('volumes') or [] if is_hotplug(v)}
        disks = {d['name']: d for d in ((tspec.get('domain') or {}).get('devices') or {}).get('disks') or []}
        have = {v['name'] for v in (vmi.get('spec') or {}).get('volumes') or [] if is_hotplug(v)}
        uid = vmi['metadata']['uid']
        # only volumes that came from the VM are removed again (VMI-only hotplugs stay, like virtctl --persist=false)
        drop = {n for n in have if n not in want and (uid, n) in self.vm_hotplugged}
        add = set(want) - have
        if not add and not drop:
            return 0
        self.vm_hotplugged.update((uid, n) for n in add)

        def edit(o):
            vols = [v for v in o['spec'].get('volumes') or [] if v['name'] not in drop]
            names = {v['name'] for v in vols}
            vols += [copy.deepcopy(v) for n, v in want.items() if n not in names]
            o['spec']['volumes'] = vols
            devices = o['spec'].setdefault('domain', {}).setdefault('devices', {})
            keep = {v['name'] for v in vols}
            dlist = [d for d in devices.get('disks') or [] if d['name'] in keep]
            dnames = {d['name'] for d in dlist}
            dlist += [copy.deepcopy(disks.get(n, {'name': n, 'disk': {'bus': 'scsi'}})) for n in want if n not in dnames]
            devices['disks'] = dlist
        return self._mutate(self.t_vmi, vmi, edit)

    def _sync_vm(self, vm, force):  # pylint: disable=unused-argument
        ns, name = vm['metadata']['namespace'], vm['metadata']['name']
        vmi = self._owned_vmi(vm)
        changes = 0
        if vm['metadata'].get('deletionTimestamp'):
            fins = vm['metadata'].get('finalizers') or []
            if vmi is None or 'orphan' in fins:
                if VM_FINALIZER in fins:
                    changes += self._mutate(self.t_vm, vm, lambda o: o['metadata'].update(
                        finalizers=[f for f in o['metadata']['finalizers'] if f != VM_FINALIZER]))
                    vm = self.store.peek(self.t_vm, ns, name)
                    if vm is None:
                        return changes
            else:
                changes += self._stop_vmi(vm, vmi)
            return changes + self._update_vm_status(self.store.peek(self.t_vm, ns, name), self._owned_vmi(vm))
        if VM_FINALIZER not in (vm['metadata'].get('finalizers') or []):
            changes += self._mutate(self.t_vm, vm, lambda o: o['metadata'].setdefault('finalizers', []).append(VM_FINALIZER))
            vm = self.store.peek(self.t_vm, ns, name)
        strategy = run_strategy(vm)
        dv_ready = self._handle_dvs(vm)
        if dv_ready or strategy == 'Halted':
            changes += self._sync_run_strategy(vm, vmi, strategy)
        vm = self.store.peek(self.t_vm, ns, name)
        if vm is None:
            return changes
        vmi = self._owned_vmi(vm)
        changes += self._sync_hotplug_to_vmi(vm, vmi)
        return changes + self._update_vm_status(vm, self._owned_vmi(vm))

    def _trim_first_request(self, vm, vmi):
        reqs = (vm.get('status') or {}).get('stateChangeRequests') or []
        if not reqs:
            return False
        first = reqs[0]
        if first.get('action') == 'Stop':
            return vmi is None or not first.get('uid') or first['uid'] != vmi['metadata']['uid']
        if first.get('action') == 'Start':
            return vmi is not None and not vmi['metadata'].get('deletionTimestamp') and not is_final(vmi)
        return False

    def _sync_start_failure(self, vm, status, vmi):
        strategy = run_strategy(vm)
        if (vmi is not None and was_running(vmi)) or strategy not in ('Always', 'RerunOnFailure', 'Once'):
            status.pop('startFailure', None)
        elif vmi is not None and is_final(vmi) and not was_running(vmi):
            failure = status.get('startFailure')
            if failure and failure.get('lastFailedVMIUID') == vmi['metadata']['uid']:
                return
            count = (failure or {}).get('consecutiveFailCount', 0) + 1
            delay = backoff_seconds(count)
            status['startFailure'] = {'lastFailedVMIUID': vmi['metadata']['uid'], 'consecutiveFailCount': count,
                                      'retryAfterTimestamp': now_iso(self.offset + delay)}

    def _sync_conditions(self, status, vmi):
        vm_like = {'status': status}
        if vmi is None:
            cond_set(vm_like, 'Ready', 'False', 'VMINotExists', 'VMI does not exist', self.ts())
        else:
            ready = cond_get(vmi, 'Ready')
            if ready is None:
                cond_set(vm_like, 'Ready', 'False', 'VMIConditionMissing', 'VMI is missing the Ready condition', self.ts())
            else:
                cond_set(vm_like, 'Ready', ready['status'], ready.get('reason', ''), ready.get('message', ''), ready.get('lastTransitionTime'))
        cond_del(vm_like, 'Failure')
        if vmi is None:
            return
        ignore = ('Ready', 'Failure', 'RestartRequired')
        seen = set()
        for cond in (vmi.get('status') or {}).get('conditions') or []:
            if cond['type'] in ignore:
                continue
            seen.add(cond['type'])
            cond_set(vm_like, cond['type'], cond['status'], cond.get('reason', ''), cond.get('message', ''), cond.get('lastTransitionTime'))
        for cond in list(status.get('conditions') or []):
            if cond['type'] not in ignore and cond['type'] not in seen:
                cond_del(vm_like, cond['type'])

    def printable_status(self, vm, vmi):  # pylint: disable=too-many-return-statements
        """setPrintableStatus: first matching predicate wins (same order as vm.go)."""
        ns = vm['metadata']['namespace']
        volumes = (((vm.get('spec') or {}).get('template') or {}).get('spec') or {}).get('volumes') or []
        strategy = run_strategy(vm)
        paused = vmi is not None and cond_is(vmi, 'Paused')
        if vm['metadata'].get('deletionTimestamp'):
            return 'Terminating'
        if vmi is not None and not is_final(vmi) and vmi['metadata'].get('deletionTimestamp'):
            return 'Stopping'
        if vmi is not None and is_migrating(vmi):
            return 'Migrating'
        if vmi is not None and vmi_phase(vmi) == 'Running' and paused:
            return 'Paused'
        if vmi is not None and vmi_phase(vmi) == 'Running':
            return 'Running'
        # KubeVirt's printable words are ErrorPvcNotFound / ErrorDataVolumeNotFound
        # (VirtualMachineStatusPvcNotFound, ...DataVolumeNotFound); the condition reasons are Failed*
        if vmi is not None and cond_is(vmi, 'Synchronized', 'False', 'FailedPvcNotFound'):
            return 'ErrorPvcNotFound'
        if vmi is not None and cond_is(vmi, 'Synchronized', 'False', 'FailedDataVolumeNotFound'):
            return 'ErrorDataVolumeNotFound'
        for vol in volumes:
            if vol.get('dataVolume'):
                dv = self.store.peek(self.t_dv, ns, vol['dataVolume'].get('name'))
                if dv and ((dv.get('status') or {}).get('phase') == 'Failed' or cond_is(dv, 'Running', 'False', 'Error')
                           or cond_is(dv, 'Running', 'False', 'ImagePullFailed')):
                    return 'DataVolumeError'
        if vmi is not None and cond_is(vmi, 'PodScheduled', 'False', 'Unschedulable'):
            return 'ErrorUnschedulable'
        for vol in volumes:
            if vol.get('dataVolume'):
                dv = self.store.peek(self.t_dv, ns, vol['dataVolume'].get('name'))
                if dv and (dv.get('status') or {}).get('phase') not in ('Succeeded', 'WaitForFirstConsumer', 'PendingPopulation'):
                    return 'Provisioning'
        if self._set_to_start(vm, vmi, strategy):
            for vol in volumes:
                claim = volume_claim(vol)
                pvc = self.store.peek(self.t_pvc, ns, claim) if claim else None
                if pvc is not None and (pvc.get('status') or {}).get('phase') != 'Bound':
                    return 'WaitingForVolumeBinding'
        if vmi is not None and cond_is(vmi, 'Synchronized', 'False', 'ErrImagePull'):
            return 'ErrImagePull'
        if vmi is not None and cond_is(vmi, 'Synchronized', 'False', 'ImagePullBackOff'):
            return 'ImagePullBackOff'
        if vmi is not None and vmi_phase(vmi) in ('', 'Pending', 'Scheduling', 'Scheduled'):
            return 'Starting'
        if vmi is None or is_final(vmi):
            failure = (vm.get('status') or {}).get('startFailure') or {}
            if failure.get('consecutiveFailCount', 0) > 0 and strategy in ('Always', 'RerunOnFailure', 'Once'):
                return 'CrashLoopBackOff'
        if vmi is not None:
            if is_final(vmi):
                return 'Stopped'
        else:
            return 'Stopped'
        return 'Unknown'

    def _set_to_start(self, vm, vmi, strategy):
        if strategy == 'Always':
            return True
        if strategy == 'Manual':
            return not self._stop_request_for(vm, vmi) if vmi is not None else self._start_request(vm)
        if strategy == 'RerunOnFailure':
            return vmi_phase(vmi) != 'Succeeded' if vmi is not None else True
        if strategy == 'Once':
            return vmi is None
        return False

    def _update_vm_status(self, vm, vmi):
        if vm is None:
            return 0
        status = copy.deepcopy(vm.get('status') or {})
        status['created'] = vmi is not None
        status['ready'] = vmi is not None and cond_is(vmi, 'Ready')
        strategy = run_strategy(vm)
        if status.get('runStrategy') or status['created']:
            status['runStrategy'] = strategy
        if vmi is not None:
            gen = (vmi['metadata'].get('annotations') or {}).get('kubevirt.io/vm-generation')
            if gen:
                status['observedGeneration'] = int(gen)
            status['desiredGeneration'] = vm['metadata'].get('generation', 1)
        if self._trim_first_request(vm, vmi):
            status['stateChangeRequests'] = status['stateChangeRequests'][1:]
        if 'stateChangeRequests' in status and not status['stateChangeRequests']:
            status.pop('stateChangeRequests')
        self._sync_start_failure(vm, status, vmi)
        self._sync_conditions(status, vmi)
        status['printableStatus'] = self.printable_status(dict(vm, status=status), vmi)
        status['volumeSnapshotStatuses'] = [{'name': v['name'], 'enabled': False, 'reason': 'Snapshot is not supported for this volumeSource type'}
                                            for v in (((vm.get('spec') or {}).get('template') or {}).get('spec') or {}).get('volumes') or []]
        changes = 0
        if status != (vm.get('status') or {}):
            changes += self._mutate(self.t_vm, vm, lambda o: o.__setitem__('status', status))
        if vmi is not None and is_final(vmi) and VM_FINALIZER in (vmi['metadata'].get('finalizers') or []):
            changes += self._mutate(self.t_vmi, vmi, lambda o: o['metadata'].update(
                finalizers=[f for f in o['metadata']['finalizers'] if f != VM_FINALIZER]))
        return changes

    # ============================================================================================
    # VirtualMachineInstance (virt-controller vmi.go + scheduler + virt-handler)
    # ============================================================================================
    def _launcher_pod(self, vmi, node=None, target=False, added_selector=None):
        meta = vmi['metadata']
        spec = vmi.get('spec') or {}
        # a migration's spec.addedNodeSelector only adds constraints: the VMI's own nodeSelector wins on a shared key
        selector = dict(added_selector or {}, **(spec.get('nodeSelector') or {}))
        name = 'virt-launcher-%s-%s' % (meta['name'], _rand())
        pod = {'metadata': {'name': name, 'namespace': meta['namespace'],
                            'labels': {'kubevirt.io': 'virt-launcher', 'kubevirt.io/created-by': meta['uid'], 'vm.kubevirt.io/name': meta['name']},
                            'annotations': {'kubevirt.io/domain': meta['name'], 'kubevirt.io/migrationJobUID' if target else 'kubevirt.io/owned-by':
                                            'virt-controller'},
                            'ownerReferences': [{'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstance', 'name': meta['name'],
                                                 'uid': meta['uid'], 'controller': True, 'blockOwnerDeletion': True}]},
               'spec': {'containers': [{'name': 'compute', 'image': 'quay.io/kubevirt/virt-launcher:v1.5.0'}],
                        'nodeSelector': selector, 'tolerations': list(spec.get('tolerations') or [])}}
        if node:
            pod['spec']['nodeName'] = node
        created = self.store.create(self.t_pod, meta['namespace'], pod)
        self.store.mutate(self.t_pod, meta['namespace'], created['metadata']['name'], lambda p: p.update(status={'phase': 'Pending'}))
        return created

    def _pods_of(self, vmi):
        return [p for p in self.store.items(self.t_pod, vmi['metadata']['namespace'])
                if (p['metadata'].get('labels') or {}).get('kubevirt.io/created-by') == vmi['metadata']['uid']]

    def _delete_pods(self, vmi, keep=None):
        for pod in self._pods_of(vmi):
            if pod['metadata']['name'] != keep:
                try:
                    self.store.delete(self.t_pod, pod['metadata']['namespace'], pod['metadata']['name'])
                except ApiError:
                    pass

    def _volume_problem(self, vmi):
        """(reason, message) for a missing PVC/DataVolume, ('wait', msg) for DVs not ready, or None."""
        ns = vmi['metadata']['namespace']
        for vol in (vmi.get('spec') or {}).get('volumes') or []:
            if is_hotplug(vol):
                continue
            if vol.get('persistentVolumeClaim'):
                claim = vol['persistentVolumeClaim'].get('claimName')
                if self.store.peek(self.t_pvc, ns, claim) is None:
                    return 'FailedPvcNotFound', 'PVC %s/%s does not exist, waiting for it to appear' % (ns, claim)
            if vol.get('dataVolume'):
                name = vol['dataVolume'].get('name')
                dv = self.store.peek(self.t_dv, ns, name)
                if dv is None:
                    return 'FailedDataVolumeNotFound', 'DataVolume %s/%s does not exist, waiting for it to appear' % (ns, name)
                if (dv.get('status') or {}).get('phase') not in ('Succeeded', 'WaitForFirstConsumer', 'PendingPopulation'):
                    return 'wait', 'DataVolume %s not ready' % name
        return None

    def _sync_vmi(self, vmi, force):  # pylint: disable=too-many-return-statements,too-many-branches,too-many-statements
        meta = vmi['metadata']
        ns, name = meta['namespace'], meta['name']
        phase = vmi_phase(vmi)
        if meta.get('deletionTimestamp'):
            if not is_final(vmi):
                if not self._ready(vmi, force):
                    return 0

                def shutdown(o):
                    self._set_phase(o, 'Succeeded' if vmi_phase(o) in ('Running', 'Scheduled') else 'Failed')
                    cond_set(o, 'Ready', 'False', 'PodTerminating', 'virt-launcher pod is terminating', self.ts())
                    cond_del(o, 'Paused')
                self._stepped(vmi)
                self._delete_pods(vmi)
                return self._mutate(self.t_vmi, vmi, shutdown)
            if set(VMI_FINALIZERS) & set(meta.get('finalizers') or []):
                self._delete_pods(vmi)
                owner = [r for r in meta.get('ownerReferences') or [] if r.get('kind') == 'VirtualMachine']
                vm_gone = not owner or self.store.peek(self.t_vm, ns, name) is None

                def unfin(o):
                    o['metadata']['finalizers'] = [f for f in o['metadata']['finalizers'] if f not in VMI_FINALIZERS and (f != VM_FINALIZER or not vm_gone)]
                return self._mutate(self.t_vmi, vmi, unfin)
            if VM_FINALIZER in (meta.get('finalizers') or []) and self.store.peek(self.t_vm, ns, name) is None:
                return self._mutate(self.t_vmi, vmi, lambda o: o['metadata'].update(finalizers=[]))
            return 0
        if is_final(vmi):
            if self._pods_of(vmi):
                self._delete_pods(vmi)
                return 1
            return 0
        if not self._ready(vmi, force):
            return 0
        spec = vmi.get('spec') or {}
        if phase == '':
            def pending(o):
                o['metadata'].setdefault('finalizers', [])
                if not set(VMI_FINALIZERS) & set(o['metadata']['finalizers']):
                    o['metadata']['finalizers'].append(VMI_FINALIZER)
                o['metadata'].setdefault('labels', {})
                self._set_phase(o, 'Pending')
                o['status'].update(guestOSInfo={}, qosClass='Burstable', activePods={}, currentCPUTopology={'cores': 1, 'sockets': 1, 'threads': 1})
            self._stepped(vmi)
            return self._mutate(self.t_vmi, vmi, pending)
        if phase == 'Pending':
            problem = self._volume_problem(vmi)
            if problem and problem[0] != 'wait':
                if cond_is(vmi, 'Synchronized', 'False', problem[0]):
                    return 0
                self.event(vmi, problem[0], problem[1], 'Warning')
                return self._mutate(self.t_vmi, vmi, lambda o: cond_set(o, 'Synchronized', 'False', problem[0], problem[1], self.ts()))
            if problem:
                return 0
            pod = self._launcher_pod(vmi)

            def scheduling(o):
                cond_del(o, 'Synchronized')
                self._set_phase(o, 'Scheduling')
                cond_set(o, 'Ready', 'False', 'GuestNotRunning', 'Guest VM is not reported as running', self.ts())
                o['status']['activePods'] = {pod['metadata']['uid']: ''}
            self._stepped(vmi)
            self.event(vmi, 'SuccessfulCreate', 'Created virtual machine pod %s' % pod['metadata']['name'])
            return self._mutate(self.t_vmi, vmi, scheduling)
        if phase == 'Scheduling':
            pods = self._pods_of(vmi)
            pod = pods[0] if pods else self._launcher_pod(vmi)
            node = None if self.faults.active('unschedulable', ns, name) else self._pick_node(pod['spec'])
            if node is None:
                msg = self._unschedulable_message(pod['spec'])
                self._stepped(vmi)
                return self._mutate(self.t_vmi, vmi, lambda o: cond_set(o, 'PodScheduled', 'False', 'Unschedulable', msg, self.ts()))
            if self.faults.active('image_pull', ns, name):
                cur = cond_get(vmi, 'Synchronized') or {}
                reason = 'ImagePullBackOff' if cur.get('reason') == 'ErrImagePull' else 'ErrImagePull'
                self.faults.consume('image_pull', ns, name)
                image = pod['spec']['containers'][0]['image']
                msg = ('Back-off pulling image "%s"' % image) if reason == 'ImagePullBackOff' else \
                    ('rpc error: code = NotFound desc = failed to pull and unpack image "%s": not found' % image)

                def pull(o):
                    cond_del(o, 'PodScheduled')
                    cond_set(o, 'Synchronized', 'False', reason, msg, self.ts())
                self._stepped(vmi)
                return self._mutate(self.t_vmi, vmi, pull)
            self._bind_wffc(vmi, node)

            def schedule(p):
                p['spec']['nodeName'] = node
                p['status'] = {'phase': 'Running', 'hostIP': '192.168.66.101', 'podIP': '10.244.0.%d' % self.ip_counter,
                               'conditions': [{'type': 'PodScheduled', 'status': 'True'}, {'type': 'Ready', 'status': 'True'}]}
            self.store.mutate(self.t_pod, ns, pod['metadata']['name'], schedule)

            def scheduled(o):
                cond_del(o, 'PodScheduled')
                cond_del(o, 'Synchronized')
                self._set_phase(o, 'Scheduled')
                o['status']['nodeName'] = node
                o['status']['activePods'] = {pod['metadata']['uid']: node}
                o['metadata'].setdefault('labels', {})['kubevirt.io/nodeName'] = node
            self._stepped(vmi)
            return self._mutate(self.t_vmi, vmi, scheduled)
        if phase == 'Scheduled':
            if self.faults.consume('guest_crash', ns, name):
                def crash(o):
                    self._set_phase(o, 'Failed')
                    o['status']['reason'] = 'GuestCrashed'
                    cond_set(o, 'Ready', 'False', 'GuestNotRunning', 'Guest VM is not reported as running', self.ts())
                self._stepped(vmi)
                self.event(vmi, 'Failed', 'The VirtualMachineInstance crashed.', 'Warning')
                return self._mutate(self.t_vmi, vmi, crash)
            self.ip_counter += 1
            ip = '10.244.%d.%d' % (self.ip_counter // 250, 10 + self.ip_counter % 240)
            live, live_reason, live_msg = self._live_migratable(vmi)

            def running(o):
                self._set_phase(o, 'Running')
                cond_set(o, 'Ready', 'True', '', '', self.ts())
                cond_set(o, 'LiveMigratable', 'True' if live else 'False', live_reason, live_msg, self.ts())
                cond_set(o, 'AgentConnected', 'True', '', '', self.ts())
                if spec.get('startStrategy') == 'Paused':
                    cond_set(o, 'Paused', 'True', 'PausedByUser', 'VMI was paused by user', self.ts())
                nets = spec.get('networks') or [{'name': 'default', 'pod': {}}]
                o['status']['interfaces'] = [{'name': n['name'], 'ipAddress': ip if i == 0 else '10.245.0.%d' % i,
                                              'ipAddresses': [ip if i == 0 else '10.245.0.%d' % i], 'interfaceName': 'eth%d' % i,
                                              'mac': '02:00:00:%02x:%02x:%02x' % (self.ip_counter % 256, i, random.randint(0, 255)),
                                              'infoSource': 'domain, guest-agent', 'queueCount': 1} for i, n in enumerate(nets)]
                o['status']['guestOSInfo'] = {'id': 'fedora', 'name': 'Fedora Linux', 'version': '40', 'kernelRelease': '6.8.5'}
                o['status']['migrationMethod'] = 'BlockMigration' if not live else 'LiveMigration'
                o['status']['migrationTransport'] = 'Unix'
                o['status']['launcherContainerImageVersion'] = 'quay.io/kubevirt/virt-launcher:v1.5.0'
                o['status']['volumeStatus'] = [self._static_volume_status(v, i) for i, v in enumerate(spec.get('volumes') or [])
                                               if not is_hotplug(v)]
            self._stepped(vmi)
            self.event(vmi, 'Started', 'VirtualMachineInstance started.')
            return self._mutate(self.t_vmi, vmi, running)
        if phase == 'Running':
            return self._sync_hotplug_status(vmi, force)
        return 0

    def _static_volume_status(self, vol, idx):
        entry = {'name': vol['name'], 'target': 'vd%s' % chr(ord('a') + idx)}
        claim = volume_claim(vol)
        if claim:
            entry['persistentVolumeClaimInfo'] = {'claimName': claim, 'accessModes': ['ReadWriteOnce'], 'volumeMode': 'Filesystem',
                                                  'capacity': {'storage': '1Gi'}, 'filesystemOverhead': '0.055'}
        return entry

    def _live_migratable(self, vmi):
        ns = vmi['metadata']['namespace']
        for vol in (vmi.get('spec') or {}).get('volumes') or []:
            claim = volume_claim(vol)
            if not claim:
                continue
            pvc = self.store.peek(self.t_pvc, ns, claim)
            modes = ((pvc or {}).get('spec') or {}).get('accessModes') or []
            if pvc is not None and 'ReadWriteMany' not in modes:
                return False, 'DisksNotLiveMigratable', ('cannot migrate VMI: PVC %s is not shared, live migration requires that all PVCs '
                                                         'must be shared (using ReadWriteMany access mode)' % claim)
        return True, '', ''

    def _bind_wffc(self, vmi, node):
        ns = vmi['metadata']['namespace']
        for vol in (vmi.get('spec') or {}).get('volumes') or []:
            claim = volume_claim(vol)
            pvc = self.store.peek(self.t_pvc, ns, claim) if claim else None
            if pvc is not None and (pvc.get('status') or {}).get('phase') == 'Pending':
                self.store.mutate(self.t_pvc, ns, claim, lambda p: p['metadata'].setdefault('annotations', {}).__setitem__(
                    'volume.kubernetes.io/selected-node', node))

    def _sync_hotplug_status(self, vmi, force):  # pylint: disable=too-many-branches
        ns = vmi['metadata']['namespace']
        statuses = copy.deepcopy((vmi.get('status') or {}).get('volumeStatus') or [])
        by_name = {s['name']: s for s in statuses}
        want = [v for v in (vmi.get('spec') or {}).get('volumes') or [] if is_hotplug(v)]
        want_names = {v['name'] for v in want}
        changed = False
        for vol in want:
            entry = by_name.get(vol['name'])
            claim = volume_claim(vol)
            if entry is None:
                statuses.append({'name': vol['name'], 'target': '', 'phase': 'Pending', 'reason': 'VolumePending',
                                 'message': 'PVC is in phase Pending', 'hotplugVolume': {},
                                 'persistentVolumeClaimInfo': {'claimName': claim}})
                changed = True
                break
            phase = entry.get('phase')
            if phase == 'Pending':
                pvc = self.store.peek(self.t_pvc, ns, claim)
                if pvc is None or (pvc.get('status') or {}).get('phase') != 'Bound':
                    continue
                entry.update(phase='Bound', reason='PVCBound', message='PVC is bound')
                entry['persistentVolumeClaimInfo'] = {'claimName': claim, 'accessModes': pvc['spec'].get('accessModes'),
                                                      'volumeMode': pvc['spec'].get('volumeMode', 'Filesystem'),
                                                      'capacity': (pvc.get('status') or {}).get('capacity', {})}
            elif phase == 'Bound':
                attach = 'hp-volume-%s' % _rand()
                entry.update(phase='AttachedToNode', reason='SuccessfulCreate', message='Created hotplug attachment pod %s, for volume %s'
                             % (attach, vol['name']))
                entry['hotplugVolume'] = {'attachPodName': attach, 'attachPodUID': str(uuid.uuid4())}
            elif phase == 'AttachedToNode':
                entry.update(phase='MountedToPod', reason='VolumeMountedToPod', message='Volume %s has been mounted in virt-launcher pod'
                             % vol['name'])
            elif phase == 'MountedToPod':
                used = {s.get('target') for s in statuses}
                target = next('sd%s' % chr(c) for c in range(ord('a'), ord('z')) if 'sd%s' % chr(c) not in used)
                entry.update(phase='Ready', reason='VolumeReady', message='Successfully attach hotplugged volume %s to VM' % vol['name'],
                             target=target)
            else:
                continue
            changed = True
            break
        if not changed:
            for entry in statuses:
                if entry.get('hotplugVolume') is None or entry['name'] in want_names:
                    continue
                if entry.get('phase') != 'Detaching':
                    entry.update(phase='Detaching', reason='VolumeDetaching', message='Deleted hotplug attachment pod %s, for volume %s'
                                 % (entry['hotplugVolume'].get('attachPodName', ''), entry['name']))
                else:
                    statuses.remove(entry)
                changed = True
                break
        if not changed or not self._ready(vmi, force):
            return 0
        self._stepped(vmi)
        return self._mutate(self.t_vmi, vmi, lambda o: o['status'].__setitem__('volumeStatus', statuses))

    # ============================================================================================
    # Migration controller (migration.go) + virt-handler migration
    # ============================================================================================
    def _sync_migration(self, mig, force):  # pylint: disable=too-many-return-statements,too-many-branches,too-many-statements
        meta = mig['metadata']
        ns = meta['namespace']
        phase = (mig.get('status') or {}).get('phase') or ''
        vmi_name = (mig.get('spec') or {}).get('vmiName')
        vmi = self.store.peek(self.t_vmi, ns, vmi_name)
        mig_uid = meta['uid']
        state = ((vmi or {}).get('status') or {}).get('migrationState') or {}
        ours = state.get('migrationUid') == mig_uid
        if phase in MIGRATION_FINAL:
            if meta.get('deletionTimestamp'):
                return self._mutate(self.t_mig, mig, lambda o: o['metadata'].update(
                    finalizers=[f for f in o['metadata'].get('finalizers') or [] if f != MIGRATION_FINALIZER]))
            return 0
        if not self._ready(mig, force):
            return 0
        if meta.get('deletionTimestamp') or vmi is None or is_final(vmi) or (vmi['metadata'].get('deletionTimestamp') and phase):
            aborted = bool(meta.get('deletionTimestamp'))
            return self._fail_migration(mig, vmi if ours else None, 'Migration aborted by user' if aborted else 'VMI is gone', aborted)
        if phase == '':
            def pending(o):
                o['metadata'].setdefault('labels', {})['kubevirt.io/vmi-name'] = vmi_name
                fins = o['metadata'].setdefault('finalizers', [])
                if MIGRATION_FINALIZER not in fins:
                    fins.append(MIGRATION_FINALIZER)
                self._set_phase(o, 'Pending')
            self._stepped(mig)
            return self._mutate(self.t_mig, mig, pending)
        source = (vmi.get('status') or {}).get('nodeName')
        if phase == 'Pending':
            # the target pod is made with the migration's addedNodeSelector (a real API server refuses a later change of a
            # pod's nodeSelector)
            pod = self._launcher_pod(vmi, target=True, added_selector=(mig.get('spec') or {}).get('addedNodeSelector'))

            def scheduling(o):
                self._set_phase(o, 'Scheduling')
                o['status']['migrationState'] = {'targetPod': pod['metadata']['name'], 'sourceNode': source,
                                                 'sourcePod': next((p['metadata']['name'] for p in self._pods_of(vmi)
                                                                    if p['metadata']['name'] != pod['metadata']['name']), '')}
            self._stepped(mig)
            self.event(mig, 'SuccessfulCreate', 'Created migration target pod %s' % pod['metadata']['name'])
            return self._mutate(self.t_mig, mig, scheduling)
        mstate = (mig.get('status') or {}).get('migrationState') or {}
        target_pod = mstate.get('targetPod')
        if phase == 'Scheduling':
            pod = self.store.peek(self.t_pod, ns, target_pod)
            node = self._pick_node((pod or {}).get('spec') or {}, exclude=source) if pod else None
            if node is None:
                msg = self._unschedulable_message((pod or {}).get('spec') or {}, exclude=source)
                if cond_is(mig, 'PodScheduled', 'False', 'Unschedulable'):
                    # handlePendingPodTimeout acts on a target pod already seen unschedulable: the condition is always
                    # set on an earlier pass, however late this pass runs (timestamps have second precision)
                    if self._pending_timed_out(mig):
                        # the target pod is deleted, then the migration fails (pod removed)
                        self.event(mig, 'SuccessfulDelete', 'unschedulable pod timeout period exceeded')
                        return self._fail_migration(mig, None, 'Migration target pod was removed during active migration.', False)
                    return 0
                self.event(mig, 'MigrationTargetPodUnschedulable', 'Migration target pod for VMI [%s/%s] is currently unschedulable.'
                           % (ns, vmi_name), 'Warning')
                return self._mutate(self.t_mig, mig, lambda o: cond_set(o, 'PodScheduled', 'False', 'Unschedulable', msg, self.ts()))
            self.store.mutate(self.t_pod, ns, target_pod, lambda p: (p['spec'].update(nodeName=node), p.update(status={'phase': 'Running'})))

            def scheduled(o):
                cond_del(o, 'PodScheduled')
                self._set_phase(o, 'Scheduled')
                o['status']['migrationState']['targetNode'] = node
            self._stepped(mig)
            changes = self._mutate(self.t_mig, mig, scheduled)

            def vmi_state(o):
                o['status']['migrationState'] = {'migrationUid': mig_uid, 'sourceNode': source, 'targetNode': node, 'targetPod': target_pod,
                                                 'sourcePod': mstate.get('sourcePod', ''), 'mode': 'PreCopy', 'completed': False, 'failed': False}
                o['status'].setdefault('activePods', {})[pod['metadata']['uid']] = node
                o['metadata'].setdefault('labels', {})['kubevirt.io/migrationTargetNodeName'] = node
            self._mutate(self.t_vmi, vmi, vmi_state)
            return changes
        target_node = mstate.get('targetNode')
        if phase in ('Scheduled', 'PreparingTarget') and self.faults.consume('migration_target_fail', ns, vmi_name):
            self.store.mutate(self.t_pod, ns, target_pod, lambda p: p.update(status={'phase': 'Failed', 'reason': 'Error'}))
            return self._fail_migration(mig, vmi, 'target pod %s failed' % target_pod, False)
        nxt = {'Scheduled': 'PreparingTarget', 'PreparingTarget': 'TargetReady', 'TargetReady': 'Running', 'Running': 'Succeeded'}.get(phase)
        if nxt is None:
            return 0
        if phase == 'Running' and self.faults.active('migration_no_converge', ns, vmi_name):
            return 0    # the guest dirties its memory faster than it is copied: the migration runs until aborted
        self._stepped(mig)
        if nxt == 'Running':
            self._mutate(self.t_vmi, vmi, lambda o: o['status']['migrationState'].update(
                startTimestamp=self.ts(), targetNodeAddress='10.244.1.1', targetNodeDomainDetected=True))
        elif nxt == 'Succeeded':
            def done(o):
                st = o['status']
                st['migrationState'].update(endTimestamp=self.ts(), completed=True, failed=False, targetNodeDomainReadyTimestamp=self.ts())
                st['nodeName'] = target_node
                pod = self.store.peek(self.t_pod, ns, target_pod)
                st['activePods'] = {pod['metadata']['uid']: target_node} if pod else {}
                o['metadata'].setdefault('labels', {})['kubevirt.io/nodeName'] = target_node
                o['metadata']['labels'].pop('kubevirt.io/migrationTargetNodeName', None)
            self._mutate(self.t_vmi, vmi, done)
            self._delete_pods(vmi, keep=target_pod)
            self.event(vmi, 'Migrated', 'The VirtualMachineInstance migrated to node %s.' % target_node)

        def advance(o):
            self._set_phase(o, nxt)
            latest = self.store.peek(self.t_vmi, ns, vmi_name)
            vmi_state = (latest.get('status') or {}).get('migrationState') or {}
            if vmi_state.get('migrationUid') == mig_uid:
                # the migration object mirrors the VMI's migrationState (timestamps, nodes, mode, outcome)
                o['status']['migrationState'] = copy.deepcopy(vmi_state)
        return self._mutate(self.t_mig, mig, advance)

    def _pending_timed_out(self, mig):
        """The target pod stayed unschedulable past the unschedulable (or catch-all) pending timeout (emulated clock)."""
        annotations = mig['metadata'].get('annotations') or {}
        timeouts = []
        for key, default in ((UNSCHEDULABLE_TIMEOUT_ANNOTATION, self.migration_unschedulable_timeout),
                             (PENDING_TIMEOUT_ANNOTATION, self.migration_pending_timeout)):
            try:
                timeouts.append(float(int(annotations[key])) if key in annotations else float(default))
            except ValueError:
                timeouts.append(float(default))     # upstream logs the parse error and keeps the default
        since = [t for t in (mig.get('status') or {}).get('phaseTransitionTimestamps') or [] if t.get('phase') == 'Scheduling']
        if not since:
            return False
        return self.now() - parse_ts(since[-1]['phaseTransitionTimestamp']) >= min(timeouts)

    def _fail_migration(self, mig, vmi, message, aborted):
        ns = mig['metadata']['namespace']
        target_pod = ((mig.get('status') or {}).get('migrationState') or {}).get('targetPod')
        if target_pod:
            try:
                self.store.delete(self.t_pod, ns, target_pod)
            except ApiError:
                pass
        if vmi is not None and (vmi.get('status') or {}).get('migrationState'):
            def vfail(o):
                st = o['status']['migrationState']
                st.update(endTimestamp=self.ts(), completed=True, failed=True)
                if aborted:
                    st.update(abortRequested=True, abortStatus='Succeeded')
                o['metadata'].get('labels', {}).pop('kubevirt.io/migrationTargetNodeName', None)
                pods = {p['metadata']['uid']: p['spec'].get('nodeName') for p in self._pods_of(vmi) if p['metadata']['name'] != target_pod}
                o['status']['activePods'] = pods
            self._mutate(self.t_vmi, vmi, vfail)

        def fail(o):
            self._set_phase(o, 'Failed')
            cond_set(o, 'MigrationAbortRequested' if aborted else 'Failed', 'True', 'MigrationAborted' if aborted else 'MigrationFailed',
                     message, self.ts())
            if o['status'].get('migrationState') is not None:
                o['status']['migrationState'].update(completed=True, failed=True, endTimestamp=self.ts())
                if aborted:
                    o['status']['migrationState'].update(abortRequested=True, abortStatus='Succeeded')
        self._stepped(mig)
        self.event(mig, 'FailedMigration', message, 'Warning')
        return self._mutate(self.t_mig, mig, fail)

    # ============================================================================================
    # admission webhooks
    # ============================================================================================
    def admit(self, op, rtype, new, old):  # pylint: disable=too-many-branches
        """Validating/mutating admission (virt-api webhooks, PVC admission, storage class defaulting)."""
        if rtype is self.t_vm and op in ('CREATE', 'UPDATE'):
            spec = new.get('spec') or {}
            if 'running' in spec and spec.get('runStrategy') is not None and spec.get('running') is not None:
                raise deny('virtualmachine-validator.kubevirt.io', rtype, new, 'spec.running',
                           'Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead')
            if spec.get('runStrategy') is not None and spec['runStrategy'] not in RUN_STRATEGIES:
                raise deny('virtualmachine-validator.kubevirt.io', rtype, new, 'spec.runStrategy', 'Invalid RunStrategy (%s)' % spec['runStrategy'])
            if op == 'CREATE' and 'running' not in spec and 'runStrategy' not in spec:
                spec['runStrategy'] = 'Halted'
                new['spec'] = spec
            if not isinstance(spec.get('template'), dict):
                raise deny('virtualmachine-validator.kubevirt.io', rtype, new, 'spec.template', 'missing virtual machine template.')
        elif rtype is self.t_mig and op == 'CREATE':
            self._admit_migration(rtype, new)
        elif rtype is self.t_mig and op == 'UPDATE':
            if (new.get('spec') or {}) != (old.get('spec') or {}):
                raise deny('migration-update-validator.kubevirt.io', rtype, new, 'spec', 'update of VMIM object\'s spec is restricted')
        elif rtype is self.t_pvc and op == 'CREATE':
            spec = new.setdefault('spec', {})
            if not spec.get('storageClassName'):
                for sc in self.store.items(self.t_sc):
                    if (sc['metadata'].get('annotations') or {}).get('storageclass.kubernetes.io/is-default-class') == 'true':
                        spec['storageClassName'] = sc['metadata']['name']
            spec.setdefault('volumeMode', 'Filesystem')
        elif rtype is self.t_pvc and op == 'UPDATE':
            self._admit_pvc_update(rtype, new, old)

    def _admit_migration(self, rtype, new):
        ns = new['metadata']['namespace']
        vmi_name = (new.get('spec') or {}).get('vmiName')
        if not vmi_name:
            raise deny('migration-create-validator.kubevirt.io', rtype, new, 'spec.vmiName', 'vmiName is required')
        vmi = self.store.peek(self.t_vmi, ns, vmi_name)
        if vmi is None:
            raise deny('migration-create-validator.kubevirt.io', rtype, new, 'spec.vmiName',
                       'the VMI "%s/%s" does not exist' % (ns, vmi_name))
        if vmi_phase(vmi) != 'Running' or vmi['metadata'].get('deletionTimestamp'):
            raise deny('migration-create-validator.kubevirt.io', rtype, new, 'spec.vmiName',
                       'Cannot migrate VMI in phase %s' % (vmi_phase(vmi) or 'Pending'))
        cond = cond_get(vmi, 'LiveMigratable')
        if cond is None or cond.get('status') != 'True':
            raise deny('migration-create-validator.kubevirt.io', rtype, new, 'spec.vmiName',
                       'Cannot migrate VMI, Reason: %s, Message: %s' % ((cond or {}).get('reason', 'NotMigratable'), (cond or {}).get('message', '')))
        for other in self.store.items(self.t_mig, ns):
            if (other.get('spec') or {}).get('vmiName') == vmi_name and ((other.get('status') or {}).get('phase') or '') not in MIGRATION_FINAL:
                raise deny('migration-create-validator.kubevirt.io', rtype, new, 'spec.vmiName',
                           'in-flight migration detected. Active migration job (%s) is currently already in progress for VMI %s.'
                           % (other['metadata']['uid'], vmi_name))

    def _admit_pvc_update(self, rtype, new, old):
        ospec, nspec = old.get('spec') or {}, new.get('spec') or {}
        strip = ('resources', 'volumeName', 'volumeAttributesClassName')
        if {k: v for k, v in ospec.items() if k not in strip} != {k: v for k, v in nspec.items() if k not in strip}:
            raise rtype.invalid(new['metadata']['name'], 'spec', 'Forbidden: spec is immutable after creation except resources.requests '
                                'and volumeAttributesClassName for bound claims')
        want = quantity_bytes(((nspec.get('resources') or {}).get('requests') or {}).get('storage'))
        had = quantity_bytes(((ospec.get('resources') or {}).get('requests') or {}).get('storage'))
        if want == had:
            return
        if want < had:
            raise rtype.invalid(new['metadata']['name'], 'spec.resources.requests.storage', 'Forbidden: field can not be less than status.capacity')
        if (old.get('status') or {}).get('phase') != 'Bound':
            raise rtype.invalid(new['metadata']['name'], 'spec', 'Forbidden: spec is immutable after creation except resources.requests '
                                'and volumeAttributesClassName for bound claims')
        sc = self.store.peek(self.t_sc, '', ospec.get('storageClassName') or '')
        if not sc or not sc.get('allowVolumeExpansion'):
            raise ApiError(403, 'Forbidden', 'persistentvolumeclaims "%s" is forbidden: only dynamically provisioned pvc can be resized and '
                           'the storageclass that provisions the pvc must support resize' % new['metadata']['name'])

    # ============================================================================================
    # VirtualMachineSnapshot / VirtualMachineRestore (storage/snapshot: snapshot.go, source.go, restore.go), small
    # ============================================================================================
    def _snapshot_type(self, plural, kind):
        group = 'snapshot.kubevirt.io'
        try:
            return self.store.rtype(group, plural)
        except KeyError:
            pass
        # the emulator: VirtualMachineSnapshotContent is not among its types (a RemoteStore discovers them: remote.WANTED)
        return self.store.register(ResourceType(group, 'v1beta1', plural, kind, custom=True))

    def snapshot_types(self):
        """(VirtualMachineSnapshot, VirtualMachineSnapshotContent, VirtualMachineRestore) types of this store."""
        return (self._snapshot_type('virtualmachinesnapshots', 'VirtualMachineSnapshot'),
                self._snapshot_type('virtualmachinesnapshotcontents', 'VirtualMachineSnapshotContent'),
                self._snapshot_type('virtualmachinerestores', 'VirtualMachineRestore'))

    def _sync_snapshots(self, force):
        """One pass of the snapshot and restore controllers."""
        t_snap, t_content, t_restore = self.snapshot_types()
        changes = 0
        for snap in self.store.items(t_snap):
            changes += self._sync_snapshot(snap, t_snap, t_content, force)
        for restore in self.store.items(t_restore):
            changes += self._sync_restore(restore, t_restore, t_content, force)
        return changes

    def _set_vm_status_field(self, ns, name, field, value, only_if=None):
        """vm.status.snapshotInProgress / restoreInProgress (None removes it; ``only_if``: only while it holds that value)."""
        vm = self.store.peek(self.t_vm, ns, name)
        if vm is None or (only_if is not None and (vm.get('status') or {}).get(field) != only_if):
            return 0

        def edit(o):
            if value is None:
                o.setdefault('status', {}).pop(field, None)
            else:
                o.setdefault('status', {})[field] = value
        return self._mutate(self.t_vm, vm, edit)

    def _snapshot_indications(self, ns, name):
        """status.indications of a snapshot of VM ``name`` now (updateSnapshotSourceIndications): none offline."""
        vmi = self.store.peek(self.t_vmi, ns, name)
        if vmi is None or is_final(vmi):
            return None
        if cond_is(vmi, 'Paused'):
            return ['Online', 'Paused']
        return ['GuestAgent', 'Online'] if cond_is(vmi, 'AgentConnected') else ['NoGuestAgent', 'Online']

    def _sync_snapshot(self, snap, t_snap, t_content, force):  # pylint: disable=too-many-return-statements
        meta = snap['metadata']
        ns, name = meta.get('namespace'), meta['name']
        status = snap.get('status') or {}
        source = ((snap.get('spec') or {}).get('source') or {}).get('name')
        finalizer = 'snapshot.kubevirt.io/vmsnapshot-protection'
        if meta.get('deletionTimestamp'):
            content = status.get('virtualMachineSnapshotContentName')
            if content and ((snap.get('spec') or {}).get('deletionPolicy') or 'delete') == 'delete' and self.store.peek(t_content, ns, content):
                self.store.delete(t_content, ns, content)
                return 1
            self._set_vm_status_field(ns, source, 'snapshotInProgress', None, only_if=name)
            if finalizer in (meta.get('finalizers') or []):
                return self._mutate(t_snap, snap, lambda o: o['metadata'].update(
                    finalizers=[f for f in o['metadata']['finalizers'] if f != finalizer]))
            return 0
        if status.get('phase') in ('Succeeded', 'Failed') or not self._ready(snap, force):
            return 0
        vm = self.store.peek(self.t_vm, ns, source)
        if not status.get('phase'):
            def start(o):
                o['metadata']['finalizers'] = sorted(set((o['metadata'].get('finalizers') or []) + [finalizer]))
                st = o.setdefault('status', {})
                st['phase'] = 'InProgress'
                if vm is not None:
                    st['sourceUID'] = vm['metadata']['uid']
                    indications = self._snapshot_indications(ns, source)
                    if indications:
                        st['indications'] = indications
                st['readyToUse'] = False
                cond_set(o, 'Progressing', 'True' if vm is not None else 'False',
                         'Source locked and operation in progress' if vm is not None else 'Source does not exist', now=self.ts())
                cond_set(o, 'Ready', 'False', 'Not ready', now=self.ts())
            self._stepped(snap)
            changes = self._mutate(t_snap, snap, start)
            if vm is not None:
                changes += self._set_vm_status_field(ns, source, 'snapshotInProgress', name)
            return changes
        if vm is None:
            return 0
        content_name = 'vmsnapshot-content-%s' % meta['uid']
        if self.store.peek(t_content, ns, content_name) is None:
            backups = []
            for volume in ((vm['spec'].get('template') or {}).get('spec') or {}).get('volumes') or []:
                claim = volume_claim(volume)
                if not claim:
                    continue
                pvc = self.store.peek(self.t_pvc, ns, claim) or {}
                backups.append({'volumeName': volume['name'], 'volumeSnapshotName': 'vmsnapshot-%s-volume-%s' % (meta['uid'], volume['name']),
                                'persistentVolumeClaim': {'metadata': {'name': claim}, 'spec': copy.deepcopy(pvc.get('spec') or {})}})
            retain = ((snap.get('spec') or {}).get('deletionPolicy') or 'delete') == 'retain'
            owners = [] if retain else [{'apiVersion': snap.get('apiVersion') or 'snapshot.kubevirt.io/v1beta1', 'kind': 'VirtualMachineSnapshot',
                                         'name': name, 'uid': meta['uid'], 'controller': True, 'blockOwnerDeletion': True}]
            content = {'metadata': {'name': content_name, 'namespace': ns, 'finalizers': [], 'ownerReferences': owners},
                       'spec': {'virtualMachineSnapshotName': name, 'volumeBackups': backups,
                                'source': {'virtualMachine': {'metadata': {'name': source, 'namespace': ns,
                                                                           'labels': copy.deepcopy(vm['metadata'].get('labels') or {}),
                                                                           'annotations': copy.deepcopy(vm['metadata'].get('annotations') or {})},
                                                              'spec': copy.deepcopy(vm['spec'])}}},
                       'status': {'creationTime': self.ts(), 'readyToUse': True,
                                  'volumeSnapshotStatus': [{'volumeSnapshotName': b['volumeSnapshotName'], 'readyToUse': True,
                                                            'creationTime': self.ts()} for b in backups]}}
            self.store.create(t_content, ns, content)
            self._stepped(snap)
            return 1
        content = self.store.peek(t_content, ns, content_name)

        def done(o):
            st = o.setdefault('status', {})
            st.update({'phase': 'Succeeded', 'readyToUse': True, 'virtualMachineSnapshotContentName': content_name,
                       'creationTime': (content.get('status') or {}).get('creationTime') or self.ts()})
            cond_set(o, 'Progressing', 'False', 'Operation complete', now=self.ts())
            cond_set(o, 'Ready', 'True', 'Ready', now=self.ts())
        changes = self._mutate(t_snap, snap, done)
        return changes + self._set_vm_status_field(ns, source, 'snapshotInProgress', None, only_if=name)

    def _sync_restore(self, restore, t_restore, t_content, force):  # pylint: disable=too-many-return-statements
        meta = restore['metadata']
        ns, name = meta.get('namespace'), meta['name']
        status = restore.get('status') or {}
        if meta.get('deletionTimestamp') or status.get('complete') or not self._ready(restore, force):
            return 0
        spec = restore.get('spec') or {}
        target = (spec.get('target') or {}).get('name')
        snap = self.store.peek(self.snapshot_types()[0], ns, spec.get('virtualMachineSnapshotName') or '')
        vm = self.store.peek(self.t_vm, ns, target)
        if not status.get('conditions'):
            def init(o):
                o.setdefault('status', {})['complete'] = False
                cond_set(o, 'Progressing', 'True', 'Initializing VirtualMachineRestore', now=self.ts())
                cond_set(o, 'Ready', 'False', 'Initializing VirtualMachineRestore', now=self.ts())
            self._stepped(restore)
            return self._mutate(t_restore, restore, init)
        snap_status = (snap or {}).get('status') or {}
        if snap_status.get('phase') != 'Succeeded' or not snap_status.get('readyToUse'):
            return 0  # KubeVirt waits for a ready snapshot
        if vm is None:
            # restore.go (target Ready when it does not exist): a new VM from the snapshot's, halted, with the restore's mark
            content = self.store.peek(t_content, ns, snap_status.get('virtualMachineSnapshotContentName') or '')
            return 0 if content is None else self._restore_new_vm(restore, content, target)
        vmi = self.store.peek(self.t_vmi, ns, target)
        if vmi is not None and not is_final(vmi):
            return 0  # restore.go waits for the target VM to stop
        content = self.store.peek(t_content, ns, snap_status.get('virtualMachineSnapshotContentName') or '')
        if content is None:
            return 0
        made = ((vm['metadata'].get('annotations') or {}).get('restore.kubevirt.io/lastRestoreUID') == '%s-%s' % (name, meta['uid']))
        if not made and (vm.get('status') or {}).get('restoreInProgress') != name:
            self._stepped(restore)
            return self._set_vm_status_field(ns, target, 'restoreInProgress', name)
        recorded = copy.deepcopy(content['spec']['source']['virtualMachine']['spec'])

        def restored(o):
            keep = run_strategy(o)
            o['spec'] = recorded
            o['spec'].pop('running', None)
            o['spec']['runStrategy'] = keep
            o['metadata'].setdefault('annotations', {})['restore.kubevirt.io/lastRestoreUID'] = '%s-%s' % (name, meta['uid'])
        changes = 0 if made else self._mutate(self.t_vm, vm, restored)  # Reconcile: a target with this restore's mark is done
        changes += self._set_vm_status_field(ns, target, 'restoreInProgress', None, only_if=name)

        def complete(o):
            st = o.setdefault('status', {})
            st.update({'complete': True, 'restoreTime': self.ts()})
            cond_set(o, 'Progressing', 'False', 'Operation complete', now=self.ts())
            cond_set(o, 'Ready', 'True', 'Operation complete', now=self.ts())
        return changes + self._mutate(t_restore, restore, complete)

    def _restore_new_vm(self, restore, content, target):
        """generateRestoredVMSpec for a target that does not exist: the snapshot's VM (labels, annotations, spec) under the
        new name, runStrategy Halted, each claim a new PVC ``restore-<restore uid>-<volume>`` (RandomizeNames)."""
        meta = restore['metadata']
        ns, uid = meta.get('namespace'), meta['uid']
        source = content['spec']['source']['virtualMachine']
        spec = copy.deepcopy(source['spec'])
        if 'running' in spec:
            spec['running'] = False
        else:
            spec['runStrategy'] = 'Halted'
        backups = dict((b['volumeName'], b) for b in content['spec'].get('volumeBackups') or [])
        for volume in (spec.get('template') or {}).get('spec', {}).get('volumes') or []:
            backup = backups.get(volume['name'])
            if backup is None or 'persistentVolumeClaim' not in volume:
                continue
            claim = 'restore-%s-%s' % (uid, volume['name'])
            pvc_spec = dict((k, v) for k, v in (backup['persistentVolumeClaim'].get('spec') or {}).items() if k != 'volumeName')
            pvc_spec['dataSource'] = {'apiGroup': 'snapshot.storage.k8s.io', 'kind': 'VolumeSnapshot', 'name': backup['volumeSnapshotName']}
            if self.store.peek(self.t_pvc, ns, claim) is None:
                self.store.create(self.t_pvc, ns, {'metadata': {'name': claim, 'namespace': ns}, 'spec': pvc_spec})
            volume['persistentVolumeClaim'] = {'claimName': claim}
        annotations = copy.deepcopy(source['metadata'].get('annotations') or {})
        annotations['restore.kubevirt.io/lastRestoreUID'] = '%s-%s' % (meta['name'], uid)
        self.store.create(self.t_vm, ns, {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {
            'name': target, 'namespace': ns, 'labels': copy.deepcopy(source['metadata'].get('labels') or {}), 'annotations': annotations},
            'spec': spec})
        self._stepped(restore)
        return 1


def deny(webhook, rtype, obj, field, message):
    """A validating webhook denial (HTTP 422 Invalid, like virt-api's admitters)."""
    name = (obj.get('metadata') or {}).get('name') or ''
    return ApiError(422, 'Invalid', 'admission webhook "%s" denied the request: %s' % (webhook, message),
                    {'name': name, 'group': rtype.group, 'kind': rtype.kind,
                     'causes': [{'reason': 'FieldValueInvalid', 'message': message, 'field': field}]})


class SubresourceAPI:
    """virt-api subresources (lifecycle.go, volumes.go): PUT /apis/subresources.kubevirt.io/v1/.../{name}/{action}."""

    def __init__(self, controller):
        self.c = controller
        self.store = controller.store

    def handle(self, resource, ns, name, action, body):
        """Dispatch; returns (http code, body) or raises ApiError."""
        fn = getattr(self, '_%s_%s' % ('vm' if resource == 'virtualmachines' else 'vmi', action), None)
        if fn is None:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        with self.c.lock:
            result = fn(ns, name, body or {})
        self.c.wake.set()
        return result

    def _vm(self, ns, name):
        return self.store.get(self.c.t_vm, ns, name)

    def _vmi_or_none(self, ns, name):
        return self.store.peek(self.c.t_vmi, ns, name)

    @staticmethod
    def _conflict(kind, name, msg):
        return ApiError(409, 'Conflict', 'Operation cannot be fulfilled on %s.kubevirt.io "%s": %s' % (kind, name, msg),
                        {'name': name, 'group': 'kubevirt.io', 'kind': kind})

    def _change_requests(self, ns, name, vm, changes, dry_run):
        """getChangeRequestJson + PatchStatus."""
        status = vm.get('status') or {}
        existing = status.get('stateChangeRequests') or []
        if existing and not (len(changes) == 1 and changes[0]['action'] == 'Stop'):
            raise ApiError(500, 'InternalError', 'Internal error occurred: unable to complete request: stop/start already underway')

        def edit(o):
            st = o.setdefault('status', {})
            st['stateChangeRequests'] = changes
            st.pop('startFailure', None)
        if not dry_run:
            self.store.mutate(self.c.t_vm, ns, name, edit)

    def _running_patch(self, ns, name, vm, running, dry_run):
        """getRunningPatch: flip runStrategy Always/Halted, or legacy spec.running."""
        def edit(o):
            if o['spec'].get('runStrategy') is not None:
                o['spec']['runStrategy'] = 'Always' if running else 'Halted'
            else:
                o['spec']['running'] = running
        if not dry_run:
            self.store.mutate(self.c.t_vm, ns, name, edit)
        del vm

    def _vm_start(self, ns, name, body):
        vm = self._vm(ns, name)
        vmi = self._vmi_or_none(ns, name)
        dry = bool(body.get('dryRun'))
        if vmi is not None and not is_final(vmi) and vmi_phase(vmi) not in ('Unknown', ''):
            raise self._conflict('virtualmachine', name, 'VM is already running')
        strategy = run_strategy(vm)
        paused = bool(body.get('paused'))
        data = {'paused': 'true'} if paused else None
        start = {'action': 'Start'}
        if data:
            start['data'] = data
        if strategy == 'Halted':
            if paused:
                self._change_requests(ns, name, vm, [start], dry)
            else:
                self._running_patch(ns, name, vm, True, dry)
        elif strategy in ('RerunOnFailure', 'Manual'):
            restart = (strategy == 'RerunOnFailure' and vmi is not None and vmi_phase(vmi) == 'Succeeded') or \
                (strategy == 'Manual' and vmi is not None and is_final(vmi))
            if not restart and strategy == 'RerunOnFailure' and vmi is not None and vmi_phase(vmi) == 'Failed':
                raise self._conflict('virtualmachine', name, 'RerunOnFailure does not support starting VM from failed state')
            changes = [{'action': 'Stop', 'uid': vmi['metadata']['uid']}, start] if restart else [start]
            self._change_requests(ns, name, vm, changes, dry)
        else:
            raise self._conflict('virtualmachine', name, '%s does not support manual start requests' % strategy)
        return 202, None

    def _vm_stop(self, ns, name, body):
        vm = self._vm(ns, name)
        vmi = self._vmi_or_none(ns, name)
        dry = bool(body.get('dryRun'))
        strategy = run_strategy(vm)
        has_vmi = vmi is not None
        grace = body.get('gracePeriod')
        if has_vmi and not is_final(vmi) and grace is not None and not dry:
            self.store.mutate(self.c.t_vmi, ns, name, lambda o: o['spec'].__setitem__('terminationGracePeriodSeconds', grace))
        if strategy == 'Halted':
            if not has_vmi or is_final(vmi):
                raise self._conflict('virtualmachine', name, 'VM is not running')
            old = (vmi.get('spec') or {}).get('terminationGracePeriodSeconds')
            if grace is None or (old is not None and grace >= old):
                raise self._conflict('virtualmachine', name, 'Halted only supports manual stop requests with a shorter graceperiod')
            self._change_requests(ns, name, vm, [{'action': 'Stop', 'uid': vmi['metadata']['uid']}], dry)
        elif strategy in ('RerunOnFailure', 'Manual'):
            if not has_vmi or is_final(vmi):
                raise self._conflict('virtualmachine', name, 'VM is not running')
            self._change_requests(ns, name, vm, [{'action': 'Stop', 'uid': vmi['metadata']['uid']}], dry)
        else:
            self._running_patch(ns, name, vm, False, dry)
        return 202, None

    def _vm_restart(self, ns, name, body):
        grace = body.get('gracePeriodSeconds')
        if grace is not None and grace > 0:
            raise ApiError(400, 'BadRequest', 'For force restart, only gracePeriod=0 is supported for now')
        if grace is not None and grace < 0:
            raise ApiError(400, 'BadRequest', 'gracePeriod has to be greater or equal to 0')
        vm = self._vm(ns, name)
        strategy = run_strategy(vm)
        if strategy in ('Halted', 'Once'):
            raise self._conflict('virtualmachine', name, 'RunStategy %s does not support manual restart requests' % strategy)
        vmi = self._vmi_or_none(ns, name)
        if vmi is None:
            raise self._conflict('virtualmachine', name, 'VM is not running: Halted')
        self._change_requests(ns, name, vm, [{'action': 'Stop', 'uid': vmi['metadata']['uid']}, {'action': 'Start'}], bool(body.get('dryRun')))
        return 202, None

    def _vm_migrate(self, ns, name, body):
        self._vm(ns, name)
        vmi = self.store.get(self.c.t_vmi, ns, name)
        if vmi_phase(vmi) != 'Running':
            raise self._conflict('virtualmachine', name, 'VM is not running')
        mig = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstanceMigration',
               'metadata': {'generateName': 'kubevirt-migrate-vm-'}, 'spec': {'vmiName': name}}
        if body.get('addedNodeSelector'):
            mig['spec']['addedNodeSelector'] = body['addedNodeSelector']
        try:
            self.store.create(self.c.t_mig, ns, mig, dry_run=bool(body.get('dryRun')))
        except ApiError as exc:
            raise ApiError(500, 'InternalError', 'Internal error occurred: %s' % exc.message) from exc
        return 202, None

    def _vmi_pause(self, ns, name, body):
        vmi = self.store.get(self.c.t_vmi, ns, name)
        if vmi_phase(vmi) != 'Running':
            raise self._conflict('virtualmachineinstance', name, 'VM is not running')
        if (vmi.get('spec') or {}).get('livenessProbe'):
            raise ApiError(403, 'Forbidden', 'virtualmachineinstance.kubevirt.io "%s" is forbidden: Pausing VMIs with LivenessProbe is '
                           'currently not supported' % name)
        if cond_get(vmi, 'Paused') is not None:
            raise self._conflict('virtualmachineinstance', name, 'VMI is already paused')
        state = (vmi.get('status') or {}).get('migrationState')
        if state and not state.get('completed'):
            raise self._conflict('virtualmachineinstance', name, "Cannot pause VM '%s' because it is currently being migrated" % name)
        if not body.get('dryRun'):
            self.store.mutate(self.c.t_vmi, ns, name, lambda o: cond_set(o, 'Paused', 'True', 'PausedByUser', 'VMI was paused by user', self.c.ts()))
        return 200, None

    def _vmi_unpause(self, ns, name, body):
        vm = self.store.peek(self.c.t_vm, ns, name)
        if vm is not None and (vm.get('status') or {}).get('snapshotInProgress'):
            raise self._conflict('virtualmachine', name, 'Cannot modify VM while a snapshot is in progress')
        vmi = self.store.get(self.c.t_vmi, ns, name)
        if vmi_phase(vmi) != 'Running':
            raise self._conflict('virtualmachineinstance', name, 'VMI is not running')
        if cond_get(vmi, 'Paused') is None:
            raise self._conflict('virtualmachineinstance', name, 'VMI is not paused')
        if not body.get('dryRun'):
            self.store.mutate(self.c.t_vmi, ns, name, lambda o: cond_del(o, 'Paused'))
        return 200, None

    # volumes ---------------------------------------------------------------------------------------
    @staticmethod
    def _verify(volumes, add, remove):
        """verifyVolumeOption."""
        found = False
        for vol in volumes:
            if add is not None:
                src = add['volumeSource']
                src_name = ((src.get('dataVolume') or {}).get('name') or (src.get('persistentVolumeClaim') or {}).get('claimName') or '')
                if vol.get('name') == add['name']:
                    return 'Unable to add volume [%s] because volume with that name already exists' % add['name']
                if volume_claim(vol) == src_name:
                    return 'Unable to add volume source [%s] because it already exists' % src_name
            elif remove is not None and (vol.get('name') == remove['name'] or volume_claim(vol) == remove['name']):
                if not is_hotplug(vol):
                    return 'Unable to remove volume [%s] because it is not hotpluggable' % vol['name']
                found = True
                break
        if remove is not None and not found:
            return 'Unable to remove volume [%s] because it does not exist' % remove['name']
        return None

    @staticmethod
    def _parse_volume_body(body, adding):
        what = 'AddVolumeOptions' if adding else 'RemoveVolumeOptions'
        if not body:
            raise ApiError(400, 'BadRequest', 'Request with no body, a new name is expected as the request body')
        if not body.get('name'):
            raise ApiError(400, 'BadRequest', '%s requires name to be set' % what)
        if adding:
            if body.get('disk') is None:
                raise ApiError(400, 'BadRequest', 'AddVolumeOptions requires disk to not be nil')
            if body.get('volumeSource') is None:
                raise ApiError(400, 'BadRequest', 'AddVolumeOptions requires VolumeSource to not be nil')
            body = copy.deepcopy(body)
            body['disk']['name'] = body['name']
            for key in ('dataVolume', 'persistentVolumeClaim'):
                if body['volumeSource'].get(key) is not None:
                    body['volumeSource'][key]['hotpluggable'] = True
        return body

    @staticmethod
    def _apply_request(spec, add, remove):
        """ApplyVolumeRequestOnVMISpec."""
        devices = spec.setdefault('domain', {}).setdefault('devices', {})
        if add is not None:
            vol = {'name': add['name']}
            vol.update(copy.deepcopy(add['volumeSource']))
            spec.setdefault('volumes', []).append(vol)
            devices.setdefault('disks', []).append(copy.deepcopy(add['disk']))
        else:
            victim = [v['name'] for v in spec.get('volumes') or [] if v['name'] == remove['name'] or volume_claim(v) == remove['name']]
            spec['volumes'] = [v for v in spec.get('volumes') or [] if v['name'] not in victim]
            devices['disks'] = [d for d in devices.get('disks') or [] if d['name'] not in victim]

    def _volume(self, ns, name, body, adding, on_vm):
        body = self._parse_volume_body(body, adding)
        add, remove = (body, None) if adding else (None, body)
        dry = bool(body.get('dryRun'))
        if on_vm:
            vm = self._vm(ns, name)
            tspec = vm['spec']['template'].setdefault('spec', {})
            err = self._verify(tspec.get('volumes') or [], add, remove)
            if err:
                raise self._conflict('virtualmachine', name, err)
            if not dry:
                self.store.mutate(self.c.t_vm, ns, name, lambda o: self._apply_request(o['spec']['template'].setdefault('spec', {}), add, remove))
        else:
            vmi = self.store.get(self.c.t_vmi, ns, name)
            # virt-api's vmiVolumePatch: without the HotplugVolumes gate (DeclarativeHotplugVolumes only, as emulated
            # here; a test sets controller.hotplug_volumes_gate for the older gate) an instance a VM owns takes no ephemeral
            # hot-plug; its VM's spec is carried over instead
            owned = any(ref.get('kind') == 'VirtualMachine' and ref.get('controller') for ref in vmi['metadata'].get('ownerReferences') or [])
            if owned and not getattr(self.c, 'hotplug_volumes_gate', False):
                raise ApiError(400, 'BadRequest', 'VMI %s/%s is owned by a VM' % (ns, name))
            if vmi_phase(vmi) != 'Running':
                raise self._conflict('virtualmachineinstance', name, 'VMI is not running')
            err = self._verify((vmi.get('spec') or {}).get('volumes') or [], add, remove)
            if err:
                raise self._conflict('virtualmachineinstance', name, err)
            if not dry:
                self.store.mutate(self.c.t_vmi, ns, name, lambda o: self._apply_request(o['spec'], add, remove))
        return 202, None

    def _vm_addvolume(self, ns, name, body):
        return self._volume(ns, name, body, True, True)

    def _vm_removevolume(self, ns, name, body):
        return self._volume(ns, name, body, False, True)

    def _vmi_addvolume(self, ns, name, body):
        return self._volume(ns, name, body, True, False)

    def _vmi_removevolume(self, ns, name, body):
        return self._volume(ns, name, body, False, False)
