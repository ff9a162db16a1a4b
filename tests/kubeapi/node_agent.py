"""What only virt-handler writes, emulated as little as possible, beside KubeVirt's own virt-controller (issue 15).

Usage (tools/kubelab starts it with ``up --controllers real``, role ``virt-handler``)::

    python -m tests.kubeapi.node_agent --kubeconfig FILE --nodes node01,node02 --handler-port P --handler-cert C --handler-key K

virt-handler is a node agent that runs QEMU inside the launcher pods; kwok's simulated nodes have none.  Everything
virt-controller writes (VMIs from VMs, launcher and target pods, printableStatus, VM conditions, migration phases from
the controller side, stop and restart handling) is left to the real virt-controller.  This agent writes only:

- the node heartbeat (annotation ``kubevirt.io/heartbeat``) virt-controller's node controller watches;
- the image digests of a launcher pod's containers (what the kubelet reports; kwok leaves them empty);
- a VMI on one of its nodes in phase Scheduled whose launcher pod is Ready -> phase Running (the domain started), with
  the guest interfaces (pod IP) and the LiveMigratable condition;
- a VMI being deleted (virt-controller deletes it to stop a VM) -> phase Succeeded (the domain shut down);
- the handler's part of a live migration (target prepared, migration started, completed and the VMI moved);
- a hot-plugged volume virt-controller reports AttachedToNode (its attachment pod runs) -> Ready (mounted in the guest);
- virt-handler's REST endpoint for virt-api (pause/unpause: tests/kubeapi/handler.py ``HandlerEmulation``).

Besides, as no storage exists here, it plays a dynamic provisioner: a Pending claim gets a PersistentVolume of its
size and is bound to it (what a CSI provisioner and the PV binder would do) - except a claim whose StorageClass names a
CSIDriver installed in the cluster (tools/kubelab/csi.py, the real node's CSI stack): that driver's external-provisioner
binds it.

It imports nothing from plugins/.  SIGTERM/SIGINT stop it.
"""

import argparse
import hashlib
import logging
import signal
import sys
import threading
import time
import urllib.parse

from .handler import HandlerEmulation
from .kubevirt import cond_get
from .remote import RemoteStore, load_kubeconfig
from .store import ApiError, now_iso

LOG = logging.getLogger('kubeapi.node_agent')
HEARTBEAT = 'kubevirt.io/heartbeat'
FINAL = ('Succeeded', 'Failed')
UNBOUND_CLASS = 'kubelab-unbound'     # claims of this storage class are never bound (a missing provisioner)


def _pod_ready(pod):
    return bool(pod) and pod.get('status', {}).get('phase') == 'Running' and any(
        c.get('type') == 'Ready' and c.get('status') == 'True' for c in pod.get('status', {}).get('conditions') or [])


class NodeAgent:
    """One pass writes what the virt-handlers of ``nodes`` would; see the module docstring."""

    def __init__(self, store, nodes):
        self.store = store
        self.nodes = set(nodes)
        self.t_vmi = store.rtype('kubevirt.io', 'virtualmachineinstances')
        self.t_pod = store.rtype('', 'pods')
        self.t_node = store.rtype('', 'nodes')
        self.t_pvc = store.rtype('', 'persistentvolumeclaims')
        self.t_pv = store.rtype('', 'persistentvolumes')
        self.last_heartbeat = 0.0

    def heartbeat(self, every=10.0):
        """Refresh the heartbeat annotation of every node (virt-controller marks a node's VMIs failed without one)."""
        if time.monotonic() - self.last_heartbeat < every:
            return
        self.last_heartbeat = time.monotonic()
        stamp = now_iso()

        def beat(node):
            node['metadata'].setdefault('annotations', {})[HEARTBEAT] = stamp
            node['metadata'].setdefault('labels', {})['kubevirt.io/schedulable'] = 'true'
        for name in sorted(self.nodes):
            self.store.mutate(self.t_node, '', name, beat)

    def run_pass(self):
        """One look at every VMI; returns the number of VMIs written."""
        self.heartbeat()
        self.provision()
        pods = {}
        for pod in self.store.items(self.t_pod):
            if (pod['spec'].get('nodeName') in self.nodes and pod['metadata'].get('labels', {}).get('kubevirt.io') == 'virt-launcher'
                    and any(not c.get('imageID') for c in pod.get('status', {}).get('containerStatuses') or [])):
                pod = self.store.mutate(self.t_pod, pod['metadata']['namespace'], pod['metadata']['name'], _image_digests) or pod
            pods[(pod['metadata'].get('namespace'), pod['metadata']['name'])] = pod
            pods[pod['metadata']['uid']] = pod         # status.activePods is keyed by pod UID
        written = 0
        for vmi in self.store.items(self.t_vmi):
            status = vmi.get('status') or {}
            if status.get('nodeName') not in self.nodes:
                continue
            change = self._change(vmi, pods)
            if change is not None:
                meta = vmi['metadata']
                try:
                    self.store.mutate(self.t_vmi, meta['namespace'], meta['name'], change)
                    written += 1
                except ApiError as exc:
                    LOG.warning('vmi %s/%s: %s %s', meta['namespace'], meta['name'], exc.code, exc.message)
        return written

    def provision(self):
        """Bind every Pending claim to a new PersistentVolume of its size (no storage here: nothing else would)."""
        for claim in self.store.items(self.t_pvc):
            meta, spec = claim['metadata'], claim.get('spec') or {}
            if (claim.get('status') or {}).get('phase') not in (None, 'Pending') or meta.get('deletionTimestamp'):
                continue
            if spec.get('storageClassName') == UNBOUND_CLASS:
                continue    # a class no provisioner serves: the claim stays Pending, as on a cluster
            if self._csi_class(spec.get('storageClassName')):
                continue    # a real CSI driver's class: its external-provisioner binds the claim
            name = 'pv-%s' % meta['uid']
            if self.store.peek(self.t_pv, '', name) is None:
                self.store.create(self.t_pv, '', {
                    'metadata': {'name': name},
                    'spec': {'capacity': {'storage': spec['resources']['requests']['storage']}, 'accessModes': spec.get('accessModes') or ['ReadWriteOnce'],
                             'persistentVolumeReclaimPolicy': 'Delete', 'storageClassName': spec.get('storageClassName') or '',
                             'volumeMode': spec.get('volumeMode') or 'Filesystem', 'hostPath': {'path': '/var/lib/kubelab/' + name},
                             'claimRef': {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'namespace': meta['namespace'],
                                          'name': meta['name'], 'uid': meta['uid']}},
                    'status': {'phase': 'Bound'}})

            def bind(pvc, volume=name):
                pvc['spec']['volumeName'] = volume
                pvc['metadata'].setdefault('annotations', {})['pv.kubernetes.io/bind-completed'] = 'yes'
                pvc['status'] = {'phase': 'Bound', 'accessModes': pvc['spec'].get('accessModes') or ['ReadWriteOnce'],
                                 'capacity': {'storage': pvc['spec']['resources']['requests']['storage']}}
            self.store.mutate(self.t_pvc, meta['namespace'], meta['name'], bind)

    def _csi_class(self, name):
        """Whether the StorageClass ``name`` names a CSIDriver installed in the cluster as its provisioner."""
        if not name:
            return False
        try:
            klass = self.store.request('GET', '/apis/storage.k8s.io/v1/storageclasses/' + urllib.parse.quote(name, safe=''))
            self.store.request('GET', '/apis/storage.k8s.io/v1/csidrivers/' + urllib.parse.quote(klass.get('provisioner') or '-', safe=''))
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def _change(self, vmi, pods):
        """A function that moves ``vmi`` on, or None when virt-handler would write nothing now."""
        status = vmi['status']
        phase = status.get('phase')
        ns = vmi['metadata']['namespace']
        if vmi['metadata'].get('deletionTimestamp') and phase not in FINAL:
            return _shut_down
        migration = status.get('migrationState') or {}
        if phase == 'Running' and migration and not migration.get('completed') and not migration.get('failed'):
            target_pod = migration.get('targetPod') or (migration.get('targetState') or {}).get('pod')
            return _migration_step(migration, pods.get((ns, target_pod)))
        if phase == 'Running' and any(v.get('hotplugVolume') and v.get('phase') in ('AttachedToNode', 'MountedToPod')
                                      for v in status.get('volumeStatus') or []):
            return _mount_hotplugged
        if phase != 'Scheduled':
            return None
        launchers = [pods.get(uid) for uid in (status.get('activePods') or {})]
        ready = [pod for pod in launchers if _pod_ready(pod) and pod['spec'].get('nodeName') == status.get('nodeName')]
        if not ready:
            return None
        return lambda obj: _start_domain(obj, ready[0])


def _image_digests(pod):
    """The image digests a kubelet reports for a launcher pod's containers (kwok leaves imageID empty; virt-controller
    refuses to migrate a VM whose container disks have no reproducible digest)."""
    for entry in pod.get('status', {}).get('containerStatuses') or []:
        if not entry.get('imageID'):
            image = entry.get('image') or ''
            entry['imageID'] = '%s@sha256:%s' % (image.rsplit(':', 1)[0] if '/' in image.rsplit(':', 1)[-1] or ':' in image else image,
                                                 hashlib.sha256(image.encode()).hexdigest())


def _set_phase(vmi, phase):
    """A new phase, recorded in phaseTransitionTimestamps as virt-handler does (virt-controller counts a VMI that went
    final without a Running entry there as a start failure: CrashLoopBackOff)."""
    vmi['status']['phase'] = phase
    vmi['status'].setdefault('phaseTransitionTimestamps', []).append({'phase': phase, 'phaseTransitionTimestamp': now_iso()})


def _shut_down(vmi):
    if vmi['status'].get('phase') not in FINAL:
        _set_phase(vmi, 'Succeeded')


def _start_domain(vmi, pod):
    """The domain runs: phase Running, the guest interfaces, LiveMigratable."""
    status = vmi['status']
    if status.get('phase') != 'Scheduled':
        return
    _set_phase(vmi, 'Running')
    address = pod['status'].get('podIP')
    interfaces = []
    known = {entry.get('name'): entry for entry in status.get('interfaces') or []}     # virt-controller's podInterfaceName
    for index, iface in enumerate(vmi['spec'].get('domain', {}).get('devices', {}).get('interfaces') or []):
        entry = dict(known.get(iface['name']) or {}, name=iface['name'], interfaceName='eth%d' % index, infoSource='domain, guest-agent',
                     mac=iface.get('macAddress') or '52:54:00:00:%02x:%02x' % (index, len(vmi['metadata']['uid']) % 256),
                     queueCount=1, linkState='up')
        if address and index == 0:
            entry.update(ipAddress=address, ipAddresses=[address])
        interfaces.append(entry)
    status['interfaces'] = interfaces
    status.setdefault('machine', {'type': 'q35'})
    status['migrationMethod'] = 'LiveMigration'
    # virt-handler reports every volume of the domain with its target (virt-controller's hot-plug patches test the list)
    if not status.get('volumeStatus'):
        disks = [d['name'] for d in vmi['spec'].get('domain', {}).get('devices', {}).get('disks') or []]
        status['volumeStatus'] = [{'name': v['name'], 'target': 'vd' + chr(ord('a') + disks.index(v['name'])) if v['name'] in disks else ''}
                                  for v in vmi['spec'].get('volumes') or []]
    status['selinuxContext'] = 'none'       # no SELinux on the node (virt-controller needs it set to migrate)
    if cond_get(vmi, 'LiveMigratable') is None:
        # no empty reason/message: Go omits them, and virt-controller's JSON-patch "test" of the conditions would fail
        status.setdefault('conditions', []).append({'type': 'LiveMigratable', 'status': 'True', 'lastProbeTime': None,
                                                    'lastTransitionTime': now_iso()})


def _mount_hotplugged(vmi):
    """virt-handler mounts an attached hot-plugged volume into the launcher and the guest sees the disk."""
    used = {v.get('target') for v in vmi['status'].get('volumeStatus') or []}
    for entry in vmi['status'].get('volumeStatus') or []:
        if entry.get('hotplugVolume') and entry.get('phase') in ('AttachedToNode', 'MountedToPod'):
            entry.update(phase='Ready', reason='VolumeReady', message='Successfully attach hotplugged volume %s to VM' % entry['name'])
            if not entry.get('target'):
                entry['target'] = next('sd' + chr(ord('a') + n) for n in range(26) if 'sd' + chr(ord('a') + n) not in used)
                used.add(entry['target'])


def _migration_step(migration, target_pod):
    """The next step of the handlers' side of a live migration, or None while the controller has a step to take."""
    target_node = migration.get('targetNode') or (migration.get('targetState') or {}).get('node')
    if not target_node or not _pod_ready(target_pod):
        return None

    def step(vmi):
        state = vmi['status'].get('migrationState') or {}
        now = now_iso()
        if not state.get('targetNodeAddress'):           # the target handler prepared the target domain
            address = target_pod['status'].get('hostIP') or '127.0.0.1'
            state['targetNodeAddress'] = address
            state['targetDirectMigrationNodePorts'] = {'49152': 0}
            state.setdefault('targetState', {}).update(nodeAddress=address, directMigrationNodePorts={'49152': 0})
        elif not state.get('startTimestamp'):            # the source handler started the migration
            state['startTimestamp'] = now
        elif not state.get('targetNodeDomainDetected'):  # the domain runs on the target
            state['targetNodeDomainDetected'] = True
            state['targetNodeDomainReadyTimestamp'] = now
            state['endTimestamp'] = now
            state['completed'] = True
            vmi['status']['nodeName'] = target_node
            vmi['metadata'].setdefault('labels', {})['kubevirt.io/nodeName'] = target_node
        vmi['status']['migrationState'] = state
    return step


def run(kubeconfig, nodes, stop=None, handler=None, interval=0.2):
    """Pass until ``stop`` is set; ``handler``: (port, cert, key) of virt-handler's REST endpoint for virt-api, or None."""
    stop = stop or threading.Event()
    server, ca_file, token = load_kubeconfig(kubeconfig)
    store = RemoteStore(server, ca_file, token)
    agent = NodeAgent(store, nodes)
    endpoint = None
    if handler:
        endpoint = HandlerEmulation(store, handler[0], handler[1], handler[2], ca_file, nodes, host_network=True).start()
    LOG.info('virt-handler emulation for %s against %s', ', '.join(nodes), server)
    while not stop.is_set():
        try:
            busy = agent.run_pass()
        except Exception as exc:  # pylint: disable=broad-except
            LOG.warning('pass failed: %r', exc)
            busy = 1
        stop.wait(interval / 2 if busy else interval)
    if endpoint is not None:
        endpoint.stop()


def main(argv=None):
    """Entry point."""
    parser = argparse.ArgumentParser(prog='python -m tests.kubeapi.node_agent', description=__doc__.split('\n', 1)[0])
    parser.add_argument('--kubeconfig', required=True)
    parser.add_argument('--nodes', required=True, help='the nodes whose virt-handler this plays (comma separated)')
    parser.add_argument('--handler-port', type=int)
    parser.add_argument('--handler-cert')
    parser.add_argument('--handler-key')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(levelname)s %(message)s', stream=sys.stderr)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    handler = (args.handler_port, args.handler_cert, args.handler_key) if args.handler_port else None
    run(args.kubeconfig, [n for n in args.nodes.split(',') if n], stop, handler)
    return 0


if __name__ == '__main__':
    sys.exit(main())
