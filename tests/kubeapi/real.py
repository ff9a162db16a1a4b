"""The KubeVirt tests' server object on the REAL stack: kube-apiserver + etcd + KubeVirt's own virt-api (tools/kubelab).

``RealKubeServer`` offers what the KubeVirt tests use of ``KubeTestServer`` (tests/kubeapi/__init__.py), so the same
test runs against a real API server:

* ``kubeconfig_path`` / ``url`` / ``ca_pem`` / ``api_client()`` / ``write_kubeconfig()``: the admin identity, reached
  through ``FaultProxy``, a small TLS proxy in front of the real API server (a test's HTTP faults live there:
  ``faults.add_http`` answers an error Status or delays a matching request before it reaches the server,
  ``faults.drop_watches()`` cuts every open streaming answer); ``stop()`` closes the proxy, so the API is unreachable.
* ``store``: ``remote.RemoteStore`` on the server itself (no faults), as KubeVirt's controller service account (virt-api
  keeps VMI status changes from anyone else): ``rtype``, ``peek``, ``get``, ``items``,
  ``create``, ``mutate``, ``delete`` as on the emulator's store.
* ``controller``: tests/kubeapi's controller emulation (``kubevirt.Controller``: what virt-controller, virt-handler,
  kube-scheduler, the kubelet, the PV controller and CDI would write), run in the test process as KubeVirt's own
  controller service account, polling the server; ``settle()``, ``set_node()``, ``crash()``, ``pause()`` work as on
  the emulator and cluster faults (``faults.inject``) reach it.
* ``limited_token``: a ServiceAccount allowed everything in namespace ``demo`` only; ``add_token(token, namespaces)``
  RETURNS the token to use (a real ServiceAccount token: the server, not the test, mints it).

Admission (KubeVirt's webhooks), pruning, defaults, validation, RBAC, subresources (start, stop, restart, migrate,
addvolume, removevolume) are the real ones.  Not available here, so tests needing them use the emulator
(``kube_emulator`` fixture) and say why: pause/unpause and other calls virt-api forwards to virt-handler (no
virt-handler on this machine), the emulator's store internals (``listeners``, ``rv``, ``events_since``, ``compact``)
and its admin endpoint.

One stack per test session (per xdist worker): ``RealStack``; each test gets a fresh ``RealKubeServer`` and the
stack is reset between tests (``RealStack.reset``: the test's objects are deleted, nodes restored).
"""

# pylint: disable=consider-using-f-string

import base64
import http.client
import json
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler

import yaml

from . import generate_certs
from .faults import Faults
from .handler import HandlerEmulation
from .kubevirt import Controller
from .remote import RemoteStore, load_kubeconfig
from .server import TLSSniffingServer
from .store import ApiError

LOG = logging.getLogger('kubeapi.real')

NODES = ('node01', 'node02', 'node03')
DRAIN_ANNOTATION = 'converge.virt/drain'     # the collection's drain mark (_kubevirt/node_drain.py)
NAMESPACES = ('default', 'demo')
SYSTEM_NAMESPACES = ('kube-system', 'kube-public', 'kube-node-lease', 'kubevirt')
KEEP_NAMESPACES = NAMESPACES + SYSTEM_NAMESPACES
# namespaced types whose objects a test leaves behind (deleted between tests, finalizers stripped)
CLEAN = (('kubevirt.io', 'v1', 'virtualmachineinstancemigrations'), ('kubevirt.io', 'v1', 'virtualmachines'),
         ('kubevirt.io', 'v1', 'virtualmachineinstances'), ('kubevirt.io', 'v1', 'virtualmachineinstancereplicasets'),
         ('snapshot.kubevirt.io', 'v1beta1', 'virtualmachinesnapshots'), ('snapshot.kubevirt.io', 'v1beta1', 'virtualmachinerestores'),
         ('snapshot.kubevirt.io', 'v1beta1', 'virtualmachinesnapshotcontents'), ('cdi.kubevirt.io', 'v1beta1', 'datavolumes'),
         ('', 'v1', 'pods'), ('', 'v1', 'persistentvolumeclaims'))
FEATURE_GATES = ('DeclarativeHotplugVolumes', 'Snapshot')
ALL_RULES = [{'apiGroups': ['*'], 'resources': ['*'], 'verbs': ['*']}]
HOP_BY_HOP = ('host', 'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
              'content-length', 'accept-encoding')


def _status(code, reason, message):
    return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure', 'message': message, 'reason': reason,
            'code': code}


class ProxyFaults(Faults):
    """``Faults`` whose ``drop_watches`` also cuts the proxy's open streams."""

    def __init__(self):
        super().__init__()
        self.proxy = None

    def drop_watches(self):
        super().drop_watches()
        if self.proxy is not None:
            self.proxy.cut_streams()


class _ProxyHandler(BaseHTTPRequestHandler):
    """Forward one client connection's requests to the API server (one upstream connection per client connection)."""

    protocol_version = 'HTTP/1.1'
    upstream = None

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        LOG.debug('%s %s', self.address_string(), format % args)

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fault(self, method):
        rule = self.server.app.faults.match_http(method, self.path)
        if not rule:
            return False
        if rule['delay']:
            time.sleep(rule['delay'])
        if not rule['status']:
            return False
        code = rule['status']
        reason = rule['reason'] or {409: 'Conflict', 429: 'TooManyRequests', 503: 'ServiceUnavailable', 504: 'Timeout',
                                    500: 'InternalError'}.get(code, 'InternalError')
        message = rule['message'] or ('Operation cannot be fulfilled: the object has been modified; please apply your changes '
                                      'to the latest version and try again' if code == 409 else 'Internal error occurred: injected fault')
        self._reply(code, _status(code, reason, message))
        return True

    def _forward(self):  # pylint: disable=too-many-branches
        method = self.command
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length) if length else None
        proxy = self.server.app
        proxy.record(method, self.path)
        if self._fault(method):
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if body is not None:
            headers['Content-Length'] = str(len(body))
        for attempt in (1, 2):
            if self.upstream is None:
                self.upstream = http.client.HTTPSConnection(proxy.upstream_host, proxy.upstream_port, context=proxy.upstream_context,
                                                            timeout=120)
            try:
                self.upstream.request(method, self.path, body=body, headers=headers)
                resp = self.upstream.getresponse()
                break
            except (OSError, http.client.HTTPException):
                self.upstream.close()
                self.upstream = None
                if attempt == 2:    # the server is down: the client sees its connection closed, as without a proxy
                    self.close_connection = True
                    return
        streaming = resp.getheader('Content-Length') is None
        self.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        if not streaming:
            data = resp.read()
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            if method not in ('GET', 'HEAD') and proxy.on_write is not None:
                proxy.on_write()
            return
        self.send_header('Transfer-Encoding', 'chunked')
        self.end_headers()
        upstream, self.upstream = self.upstream, None     # a stream owns its upstream connection until it ends
        proxy.track(self, upstream)
        try:
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                self.wfile.write(b'%x\r\n%s\r\n' % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b'0\r\n\r\n')
        except (OSError, ValueError, http.client.HTTPException):
            self.close_connection = True
        finally:
            proxy.untrack(self)
            upstream.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward  # noqa: N815

    def finish(self):
        try:
            super().finish()
        finally:
            if self.upstream is not None:
                self.upstream.close()


class FaultProxy:
    """A TLS proxy on a loopback port in front of the API server, applying a ``Faults`` registry's HTTP rules."""

    def __init__(self, upstream, upstream_ca_file, faults):
        parts = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.upstream_context = ssl.create_default_context(cafile=upstream_ca_file)
        self.faults = faults
        faults.proxy = self
        self.ca_pem, cert, key = generate_certs()
        self.tmpdir = tempfile.mkdtemp(prefix='kubeproxy-')
        cert_file, key_file = os.path.join(self.tmpdir, 'tls.crt'), os.path.join(self.tmpdir, 'tls.key')
        with open(cert_file, 'wb') as handle:
            handle.write(cert + self.ca_pem)
        with open(key_file, 'wb') as handle:
            handle.write(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        self.httpd = TLSSniffingServer(('127.0.0.1', 0), _ProxyHandler, self, context)
        self.port = self.httpd.server_address[1]
        self.streams = {}
        self.lock = threading.Lock()
        self.requests = []      # (method, path) of every request a client sent, faulted or not
        self.on_write = None    # called after each write the API server answered (the controller emulation wakes up)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.05}, name='kube-fault-proxy',
                                       daemon=True)
        self.thread.start()
        self.running = True

    @property
    def url(self):
        """https://127.0.0.1:PORT"""
        return 'https://127.0.0.1:%d' % self.port

    def record(self, method, path):
        """Log one client request."""
        with self.lock:
            self.requests.append((method, path))

    def writes(self):
        """The requests that could change something (not reads, not dry runs), in order."""
        with self.lock:
            log = list(self.requests)
        return [(method, path) for method, path in log if method not in ('GET', 'HEAD') and 'dryRun=' not in path]

    def track(self, handler, upstream):
        """Remember an open stream."""
        with self.lock:
            self.streams[handler] = upstream

    def untrack(self, handler):
        """Forget a stream."""
        with self.lock:
            self.streams.pop(handler, None)

    def cut_streams(self):
        """Close every open streaming answer (the client sees its watch end, as after an API server restart)."""
        with self.lock:
            streams = list(self.streams.items())
        for handler, upstream in streams:
            for sock in (handler.connection, getattr(upstream, 'sock', None)):
                try:
                    if sock is not None:
                        sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self):
        """Stop listening and close every client connection (the API becomes unreachable)."""
        if not self.running:
            return
        self.running = False
        self.httpd.shutdown()
        self.httpd.close_all()
        self.httpd.server_close()


class RealStack:
    """One tools/kubelab stack with virt-api for a test session; see the module docstring."""

    def __init__(self, directory, feature_gates=FEATURE_GATES):
        from tools.kubelab import lab  # pylint: disable=import-outside-toplevel
        self.lab = lab
        self.directory = directory
        started = time.monotonic()
        self.info = lab.up(directory, virt_api=True, feature_gates=list(feature_gates))
        self.up_seconds = time.monotonic() - started
        with open(os.path.join(directory, 'pki', 'admin.token'), encoding='utf-8') as handle:
            self.admin_token = handle.read().strip()
        self.server = self.info['server']
        self.ca_file = self.info['ca_file']
        self.client = lab.Client(self.server, self.ca_file, self.admin_token)
        # tests and the controller write as KubeVirt's controller: virt-api's VMI mutator discards status changes
        # from anyone but KubeVirt's own service accounts
        self.controller_kubeconfig = lab.controller_kubeconfig(directory)
        self.store = RemoteStore(*load_kubeconfig(self.controller_kubeconfig))
        for ns in NAMESPACES:
            self.client.apply('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': ns}})
        self.limited_token = lab.grant(self.client, 'demo', 'converge-virt-test-limited', ALL_RULES)
        self.tokens = 0
        self.resets = 0
        handler_token = lab.grant(self.client, 'kubevirt', 'kubevirt-handler', ALL_RULES, ALL_RULES)
        self.handler = HandlerEmulation(RemoteStore(self.server, self.ca_file, handler_token), *lab.handler_endpoint(directory),
                                        nodes=NODES).start()

    def close(self):
        """Stop the handler emulation and every process of the stack."""
        self.handler.stop()
        self.lab.down(self.directory)

    # reset between tests ------------------------------------------------------------------------------------------
    @staticmethod
    def _base(group, version):
        return '/api/%s' % version if not group else '/apis/%s/%s' % (group, version)

    def _namespaces(self):
        code, body = self.client.request('GET', '/api/v1/namespaces')
        return [n['metadata']['name'] for n in body.get('items', [])] if code == 200 else list(NAMESPACES)

    def _purge(self, base, plural):
        """Strip finalizers from and delete (no grace) every object of ``base/plural``; returns how many were there."""
        try:
            items = self.store.request('GET', '%s/%s' % (base, plural)).get('items') or []
        except ApiError as exc:
            if exc.code == 404:     # a type this build does not serve
                return 0
            if exc.code in (429, 500, 503):     # e.g. "storage is (re)initializing" right after the CRDs are established
                return 1
            raise
        items = [item for item in items if item['metadata'].get('namespace') not in SYSTEM_NAMESPACES]
        for item in items:
            meta = item['metadata']
            path = '%s/%s/%s' % (base, 'namespaces/%s/%s' % (meta['namespace'], plural) if meta.get('namespace') else plural,
                                 urllib.parse.quote(meta['name'], safe=''))
            try:
                if meta.get('finalizers'):
                    meta['finalizers'] = []
                    self.store.request('PUT', path, item)
                self.store.request('DELETE', path, {'apiVersion': 'v1', 'kind': 'DeleteOptions', 'gracePeriodSeconds': 0})
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
        return len(items)

    def reset(self, timeout=60):
        """Delete what a test left (its VMs, VMIs, migrations, snapshots, DataVolumes, pods, claims, volumes, extra
        namespaces, extra nodes) and restore the three nodes (schedulable, untainted, Ready)."""
        self.resets += 1
        deadline = time.monotonic() + timeout
        extra = [ns for ns in self._namespaces() if ns not in KEEP_NAMESPACES]
        while True:
            left = 0
            for group, version, plural in CLEAN:
                left += self._purge(self._base(group, version), plural)
            left += self._purge('/api/v1', 'persistentvolumes')
            for ns in NAMESPACES + tuple(extra):
                left += self._purge_secrets(ns)
            if not left:
                break
            if time.monotonic() > deadline:
                raise RuntimeError('the real stack could not be reset: objects still there after %d s' % timeout)
            time.sleep(0.1)
        for ns in extra:
            self.client.request('DELETE', '/api/v1/namespaces/%s' % ns)
        code, nodes = self.client.request('GET', '/api/v1/nodes')
        for node in (nodes.get('items') or []) if code == 200 else []:
            if node['metadata']['name'] not in NODES:
                self.client.request('DELETE', '/api/v1/nodes/%s' % node['metadata']['name'])
            elif DRAIN_ANNOTATION in (node['metadata'].get('annotations') or {}):
                self._forget_drain(node['metadata']['name'])

    def _forget_drain(self, name):
        """Remove the collection's drain mark a test left on node ``name`` (RealKubeServer.start uncordons and untaints
        the nodes; a mark left behind made the next drain of that node keep the earlier test's reason)."""
        for _attempt in range(10):
            code, node = self.client.request('GET', '/api/v1/nodes/%s' % name)
            if code != 200 or DRAIN_ANNOTATION not in (node['metadata'].get('annotations') or {}):
                return
            del node['metadata']['annotations'][DRAIN_ANNOTATION]
            code, answer = self.client.request('PUT', '/api/v1/nodes/%s' % name, node)
            if code == 200:
                return
            if code != 409:     # 409: the emulated virt-handler's heartbeat wrote the node in between
                raise RuntimeError('the real stack could not be reset: node %s kept its drain mark (%s %s)' % (name, code, answer))
        raise RuntimeError('the real stack could not be reset: node %s changed under every attempt to remove its drain mark' % name)

    def _purge_secrets(self, ns):
        code, listing = self.client.request('GET', '/api/v1/namespaces/%s/secrets' % ns)
        left = 0
        for item in (listing.get('items') or []) if code == 200 else []:
            if item.get('type') == 'kubernetes.io/service-account-token':
                continue
            left += 1
            self.client.request('DELETE', '/api/v1/namespaces/%s/secrets/%s' % (ns, item['metadata']['name']))
        return left

    def mint(self, namespaces, user=None):
        """A ServiceAccount token allowed everything in ``namespaces`` (``'*'``: cluster-wide)."""
        self.tokens += 1
        account = 'converge-virt-test-%d' % self.tokens
        if user:
            account = '%s-%d' % (''.join(c if c.isalnum() else '-' for c in user.lower()).strip('-')[:40] or 'user', self.tokens)
        if '*' in namespaces:
            return self.lab.grant(self.client, 'default', account, ALL_RULES, ALL_RULES)
        token = None
        for ns in namespaces:
            token = self.lab.grant(self.client, ns, account, ALL_RULES) if token is None else token
            if ns != namespaces[0]:
                self._bind(ns, namespaces[0], account)
        return token

    def _bind(self, ns, account_ns, account):
        api = '/apis/rbac.authorization.k8s.io/v1/namespaces/%s' % ns
        name = '%s-%s' % (account, account_ns)
        self.client.apply(api + '/roles', {'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'Role',
                                           'metadata': {'name': name, 'namespace': ns}, 'rules': ALL_RULES})
        self.client.apply(api + '/rolebindings', {
            'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'RoleBinding', 'metadata': {'name': name, 'namespace': ns},
            'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role', 'name': name},
            'subjects': [{'kind': 'ServiceAccount', 'name': account, 'namespace': account_ns}]})


class RealKubeServer:  # pylint: disable=too-many-instance-attributes
    """One test's view of a ``RealStack``; see the module docstring."""

    real = True

    def __init__(self, stack, kubeconfig_path=None, step_delay=0.05, interval=0.05, idle_interval=0.5):
        self.stack = stack
        self.admin_token = stack.admin_token
        self.limited_token = stack.limited_token
        self.faults = ProxyFaults()
        self.store = stack.store
        server, ca_file, token = load_kubeconfig(stack.controller_kubeconfig)
        self.controller = Controller(RemoteStore(server, ca_file, token), self.faults, step_delay=step_delay, auto=False,
                                     nodes=list(NODES))
        self.interval = interval
        self.idle_interval = idle_interval
        self.proxy = None
        self.thread = None
        self.tmpdir = tempfile.mkdtemp(prefix='kubereal-')
        self.kubeconfig_path = kubeconfig_path or os.path.join(self.tmpdir, 'kubeconfig')
        self.ca_pem = None

    def start(self):
        """Start the fault proxy and the controller emulation; returns self."""
        self.proxy = FaultProxy(self.stack.server, self.stack.ca_file, self.faults)
        self.ca_pem = self.proxy.ca_pem
        controller = self.controller
        # a client's write wakes the emulation at once, as a watch wakes virt-controller: polling while idle only has to
        # catch what changed without a write through the proxy (time-driven steps are 'due' and keep the short interval)
        self.proxy.on_write = controller.wake.set
        controller.seed()
        for name in NODES:
            controller.set_node(name, schedulable=True, taints=[], ready=True)
        controller.paused = False
        self.thread = threading.Thread(target=self._loop, name='kubevirt-emulation-real', daemon=True)
        self.thread.start()
        self.write_kubeconfig(self.kubeconfig_path)
        return self

    def _loop(self):
        controller = self.controller
        while not controller.stop_event.is_set():
            changes = 0
            with controller.lock:
                if not controller.paused:
                    try:
                        changes = controller.run_pass(force=False)
                    except Exception as exc:  # pylint: disable=broad-except
                        controller.errors.append(repr(exc))
                        changes = 1
            busy = changes or any(due > controller.now() for due in controller.due.values())
            controller.wake.wait(self.interval if busy else self.idle_interval)
            controller.wake.clear()

    def world(self):
        """What a refused input must not change: the number of write requests clients sent so far, and every object of
        the test namespaces a test could touch (the types ``RealStack.reset`` cleans, and volumes) as bytes."""
        count = len(self.proxy.writes())
        objects = {}
        for group, version, plural in CLEAN + (('', 'v1', 'persistentvolumes'),):
            try:
                items = self.store.request('GET', '%s/%s' % (RealStack._base(group, version), plural)).get('items') or []  # pylint: disable=protected-access
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            for item in items:
                meta = item['metadata']
                if meta.get('namespace') not in SYSTEM_NAMESPACES:
                    objects['%s/%s/%s/%s' % (group, plural, meta.get('namespace', ''), meta['name'])] = item
        return count, json.dumps(objects, sort_keys=True).encode()

    def writes_since(self, count):
        """The write requests clients sent after ``world()`` returned ``count`` (for failure messages)."""
        return ['%s %s' % write for write in self.proxy.writes()[count:]][:20]

    def watch(self, group, plural, ns, callback):
        """Call ``callback(event type, object)`` for every change of ``group/plural`` objects in ``ns`` from now on
        (a watch on the server itself, in a thread, until ``close()`` or until the returned function is called): what
        the emulator's ``store.listeners`` gave."""
        rtype = self.store.rtype(group, plural)
        path = self.store._path(rtype, ns)  # pylint: disable=protected-access
        version = self.store.request('GET', path)['metadata']['resourceVersion']
        ready, ended = threading.Event(), threading.Event()

        def over():
            return self.controller.stop_event.is_set() or ended.is_set()

        def run():
            nonlocal version
            while not over():
                query = urllib.parse.urlencode({'watch': '1', 'resourceVersion': version, 'timeoutSeconds': '30'})
                req = urllib.request.Request('%s%s?%s' % (self.store.server, path, query))
                req.add_header('Authorization', 'Bearer ' + self.store.token)
                try:
                    with urllib.request.urlopen(req, context=self.store.context, timeout=40) as resp:
                        ready.set()
                        for line in resp:
                            if over():
                                return
                            event = json.loads(line)
                            if event.get('type') in ('ADDED', 'MODIFIED', 'DELETED'):
                                version = event['object']['metadata'].get('resourceVersion') or version
                                callback(event['type'], event['object'])
                            elif event.get('type') == 'ERROR':     # e.g. 410 Gone: go on from now
                                version = self.store.request('GET', path)['metadata']['resourceVersion']
                                break
                except (OSError, ValueError):
                    time.sleep(0.1)
        threading.Thread(target=run, name='kube-watch-%s' % plural, daemon=True).start()
        ready.wait(10)
        return ended.set

    def stop(self):
        """Make the API unreachable (the proxy stops listening)."""
        if self.proxy is not None:
            self.proxy.stop()

    def close(self):
        """Stop the controller emulation and the proxy."""
        self.controller.stop()
        self.stop()

    # addresses and credentials ---------------------------------------------------------------------------------------
    @property
    def url(self):
        """The proxy's https:// URL (what modules are given)."""
        return self.proxy.url

    def add_token(self, token, namespaces, user=None):
        """A real ServiceAccount token allowed on ``namespaces`` ('*' = all): RETURNED (``token`` is not used)."""
        del token
        return self.stack.mint(list(namespaces), user)

    def kubeconfig(self, token=None, context='kubeapi-test'):
        """Kubeconfig dict for ``token`` (default admin) through the proxy."""
        cluster = {'server': self.url, 'certificate-authority-data': base64.b64encode(self.ca_pem).decode()}
        return {'apiVersion': 'v1', 'kind': 'Config', 'current-context': context, 'preferences': {},
                'clusters': [{'name': 'kubeapi-test', 'cluster': cluster}],
                'users': [{'name': 'kubeapi-user', 'user': {'token': token or self.admin_token}}],
                'contexts': [{'name': context, 'context': {'cluster': 'kubeapi-test', 'user': 'kubeapi-user', 'namespace': 'default'}}]}

    def write_kubeconfig(self, path, token=None):
        """Write a kubeconfig file; returns the path."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, 'w', encoding='utf-8') as handle:
            yaml.safe_dump(self.kubeconfig(token), handle)
        return path

    def api_client(self, token=None):
        """A configured ``kubernetes.client.ApiClient`` through the proxy."""
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        path = self.write_kubeconfig(os.path.join(self.tmpdir, 'kubeconfig-%d' % abs(hash(token or self.admin_token))), token)
        cfg = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=cfg)
        return client.ApiClient(cfg)


def wait_gone(store, rtype, ns, name, timeout=30):
    """Poll until an object is gone (deletions on a real server may take a GC round)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.peek(rtype, ns, name) is None:
            return True
        time.sleep(0.1)
    return False


__all__ = ['RealStack', 'RealKubeServer', 'FaultProxy', 'ProxyFaults', 'ApiError', 'wait_gone']
