"""The KubeVirt controller emulation (``kubevirt.Controller``) as a process against a real API server.

Usage (tools/kubelab starts it with ``up --controllers emulated``)::

    python -m tests.kubeapi.controller --kubeconfig FILE [--interval 0.1] [--step-delay 0.1] [--nodes node01,node02,node03]

It seeds its simulated Nodes (Ready, KubeVirt-schedulable) and StorageClasses when missing, then polls the server
and writes what virt-controller, virt-handler, kube-scheduler, the kubelet, the PV controller and CDI would write
(VMIs from VMs per runStrategy, VMI phases and conditions, virt-launcher pods bound to nodes, VM status,
migration phases, DataVolume phases with PVC/PV binding, hot-plug volumeStatus), through ``remote.RemoteStore``.
Admission stays with the real server (KubeVirt's virt-api webhooks).  The kubeconfig's identity must be allowed to
write all of that; to change a VMI's spec (hot-plug) it must be KubeVirt's own service account
``system:serviceaccount:kubevirt:kubevirt-controller`` (virt-api refuses VMI spec updates from anyone else).

Test hooks: an annotation ``kubelab.converge.virt/pause: "true"`` on the Namespace ``kubevirt`` freezes progress
(checked once per pass).  SIGTERM/SIGINT stop it.  It imports nothing from plugins/.
"""

import argparse
import logging
import signal
import sys
import threading

from .faults import Faults
from .handler import HandlerEmulation
from .kubevirt import Controller
from .remote import RemoteStore, load_kubeconfig

PAUSE_ANNOTATION = 'kubelab.converge.virt/pause'
LOG = logging.getLogger('kubeapi.controller')


def _paused(store):
    ns = store.peek(store.rtype('', 'namespaces'), '', 'kubevirt')
    return ((ns or {}).get('metadata', {}).get('annotations') or {}).get(PAUSE_ANNOTATION) == 'true'


def _untaint(node):
    taints = [t for t in node.get('spec', {}).get('taints') or [] if not t.get('key', '').startswith('node.kubernetes.io/')]
    if taints:
        node['spec']['taints'] = taints
    else:
        node.get('spec', {}).pop('taints', None)


def run(kubeconfig, interval=0.1, idle_interval=0.4, step_delay=0.1, nodes=None, stop=None, handler=None):  # pylint: disable=too-many-arguments
    """Seed, then reconcile until ``stop`` (a threading.Event) is set.  ``handler``: (kubeconfig, port, cert, key) of
    the virt-handler endpoint to serve for virt-api (tests/kubeapi/handler.py), or None."""
    stop = stop or threading.Event()
    server, ca_file, token = load_kubeconfig(kubeconfig)
    store = RemoteStore(server, ca_file, token)
    controller = Controller(store, Faults(), step_delay=step_delay, auto=False, nodes=nodes)
    controller.seed()
    # the TaintNodesByCondition admission plugin taints a new Node not-ready; the node lifecycle controller
    # (not run by the lab) lifts it once the Node reports Ready: do that for the simulated nodes
    for name in controller.node_names:
        store.mutate(store.rtype('', 'nodes'), '', name, _untaint)
    endpoint = None
    if handler:
        h_server, h_ca, h_token = load_kubeconfig(handler[0])
        endpoint = HandlerEmulation(RemoteStore(h_server, h_ca, h_token), handler[1], handler[2], handler[3], h_ca,
                                    controller.node_names).start()
    LOG.info('seeded nodes %s; reconciling %s every %.2f s (idle %.2f s)', ', '.join(controller.node_names), server, interval, idle_interval)
    while not stop.is_set():
        changes = 0
        try:
            if not _paused(store):
                changes = controller.run_pass(force=False)
        except Exception as exc:  # pylint: disable=broad-except
            LOG.warning('pass %d failed: %r', controller.passes, exc)
            changes = 1
        busy = changes or any(due > controller.now() for due in controller.due.values())
        if len(controller.due) > 10000:
            controller.due.clear()
        stop.wait(interval if busy else idle_interval)
    if endpoint is not None:
        endpoint.stop()
    LOG.info('stopped after %d passes, %d requests, %d conflicts', controller.passes, store.requests, store.conflicts)


def main(argv=None):
    """Entry point."""
    parser = argparse.ArgumentParser(prog='python -m tests.kubeapi.controller', description=__doc__.split('\n', 1)[0])
    parser.add_argument('--kubeconfig', required=True)
    parser.add_argument('--interval', type=float, default=0.1, help='seconds between passes while something moves')
    parser.add_argument('--idle-interval', type=float, default=0.4, help='seconds between passes when nothing moved')
    parser.add_argument('--step-delay', type=float, default=0.1, help='emulated seconds between two steps of one object')
    parser.add_argument('--nodes', default='node01,node02,node03', help='simulated nodes (comma separated)')
    parser.add_argument('--handler-kubeconfig', help="serve virt-handler's REST endpoint for virt-api, as this identity")
    parser.add_argument('--handler-port', type=int)
    parser.add_argument('--handler-cert')
    parser.add_argument('--handler-key')
    args = parser.parse_args(argv)
    handler = (args.handler_kubeconfig, args.handler_port, args.handler_cert, args.handler_key) if args.handler_kubeconfig else None
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s %(levelname)s %(message)s', stream=sys.stderr)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    run(args.kubeconfig, args.interval, args.idle_interval, args.step_delay, [n for n in args.nodes.split(',') if n], stop, handler)
    return 0


if __name__ == '__main__':
    sys.exit(main())
