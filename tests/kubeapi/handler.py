"""virt-handler's REST endpoint, emulated, for KubeVirt's own virt-api on the real stack (tools/kubelab).

virt-api forwards some subresources to the virt-handler of the VMI's node instead of writing objects itself
(pause, unpause, soft reboot, freeze, unfreeze, reset: ``PUT https://<handler pod IP>:<port>/v1/namespaces/NS/
virtualmachineinstances/NAME/ACTION``, client-go kubecli/handler.go).  It finds that handler as the pod labelled
``kubevirt.io=virt-handler`` in namespace ``kubevirt`` on the node, and verifies its serving certificate against
the ``kubevirt-ca`` ConfigMap with the common name ``kubevirt.io:system:node:virt-handler`` (tools/kubelab sets
both up and tells virt-api the port: ``lab.handler_endpoint``).

``HandlerEmulation`` plays that part: one HTTPS listener on 127.0.0.1 for every simulated node, one Running
"virt-handler" pod per node whose IP is 127.0.0.1, and for each action what virt-handler then does to the VMI
(pause: the domain pauses and the VMI gets the condition Paused=True reason PausedByUser; unpause removes it;
the others change nothing visible here).  It imports nothing from plugins/.
"""

# pylint: disable=consider-using-f-string

import json
import logging
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .kubevirt import cond_del, cond_get, cond_set
from .store import ApiError, now_iso

LOG = logging.getLogger('kubeapi.handler')
NAMESPACE = 'kubevirt'
ROUTE = re.compile(r'^/v1/namespaces/([^/]+)/virtualmachineinstances/([^/]+)/([a-z-]+)$')
IMAGE = 'quay.io/kubevirt/virt-handler:v1.8.0'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        LOG.debug(format, *args)

    def _answer(self, code, text=''):
        data = text.encode()
        self.send_response(code)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):  # noqa: N802
        """One action on a VMI."""
        length = int(self.headers.get('Content-Length') or 0)
        if length:
            self.rfile.read(length)
        match = ROUTE.match(self.path.split('?')[0])
        if not match:
            self._answer(404, 'not found')
            return
        ns, name, action = match.groups()
        emulation = self.server.emulation
        emulation.calls.append((action, ns, name))
        try:
            code, text = emulation.act(action, ns, name)
        except ApiError as exc:
            code, text = exc.code, exc.message
        self._answer(code, text)

    def do_GET(self):  # noqa: N802
        """Guest information endpoints: no guest agent answers here."""
        self._answer(404, 'guest agent not connected')


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class HandlerEmulation:
    """The virt-handler endpoint and pods; see the module docstring.  ``store``: a ``remote.RemoteStore`` (admin)."""

    def __init__(self, store, port, cert_file, key_file, ca_file, nodes, host_network=False):  # pylint: disable=too-many-arguments
        self.store = store
        self.host_network = host_network    # kwok's nodes (node IP 127.0.0.1) give a host-network pod that IP
        self.nodes = list(nodes)
        self.calls = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        context.load_verify_locations(ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL     # virt-api presents its client certificate
        self.httpd = _Server(('127.0.0.1', port), _Handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.httpd.emulation = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.1}, name='virt-handler-emulation',
                                       daemon=True)

    def start(self):
        """Create the handler pods and listen; returns self."""
        t_pod = self.store.rtype('', 'pods')
        for node in self.nodes:
            name = 'virt-handler-%s' % node
            if self.store.peek(t_pod, NAMESPACE, name) is None:
                pod = {'metadata': {'name': name, 'labels': {'kubevirt.io': 'virt-handler'}},
                       'spec': {'nodeName': node, 'containers': [{'name': 'virt-handler', 'image': IMAGE}]},
                       'status': {'phase': 'Running', 'podIP': '127.0.0.1', 'podIPs': [{'ip': '127.0.0.1'}], 'hostIP': '127.0.0.1',
                                  'conditions': [{'type': 'Ready', 'status': 'True'}]}}
                if self.host_network:       # kwok writes the status of a pod on its nodes
                    pod['spec']['hostNetwork'] = True
                    del pod['status']
                self.store.create(t_pod, NAMESPACE, pod)
        self.thread.start()
        return self

    def stop(self):
        """Stop listening."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def act(self, action, ns, name):
        """(HTTP code, text) of one action, after doing to the VMI what virt-handler would."""
        t_vmi = self.store.rtype('kubevirt.io', 'virtualmachineinstances')
        if action == 'pause':
            def pause(vmi):
                if cond_get(vmi, 'Paused') is None:
                    cond_set(vmi, 'Paused', 'True', 'PausedByUser', 'VMI was paused by user', now_iso())
            found = self.store.mutate(t_vmi, ns, name, pause)
        elif action == 'unpause':
            found = self.store.mutate(t_vmi, ns, name, lambda vmi: cond_del(vmi, 'Paused'))
        elif action in ('softreboot', 'freeze', 'unfreeze', 'reset'):
            found = self.store.peek(t_vmi, ns, name)
        else:
            return 404, 'unknown action %s' % action
        if found is None:
            return 404, json.dumps({'message': 'virtualmachineinstance %s/%s not found' % (ns, name)})
        return 200, ''
