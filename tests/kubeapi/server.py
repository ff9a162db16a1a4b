"""HTTP(S) front end of the test API server.

Design
------
A ``ThreadingHTTPServer`` (HTTP/1.1 keep-alive, one thread per connection)
listens on ONE loopback port and serves both plain HTTP and HTTPS: the first
byte of every new connection is peeked, a TLS ClientHello (0x16) gets the
socket wrapped with the server certificate, anything else is served in clear.

Request handling follows kube-apiserver's filter chain order:

1. fault injection hooks (``faults.Faults``; delays and error answers),
2. authentication: ``Authorization: Bearer <token>``; missing/unknown token
   -> 401 Status ``Unauthorized``,
3. authorization: each token maps to allowed namespaces (``'*'`` = cluster
   admin); other namespaces and cluster-scoped writes -> 403 ``Forbidden``
   with the RBAC style message,
4. routing: discovery (``/version``, ``/api``, ``/api/v1``, ``/apis``,
   ``/apis/<g>``, ``/apis/<g>/<v>``), resources
   (``/api/v1/...``, ``/apis/<g>/<v>/...``, namespaced and cluster scoped,
   ``/status`` subresources), KubeVirt subresources
   (``/apis/subresources.kubevirt.io/v1/...``) and the admin endpoints
   (``/__admin__/...``, unauthenticated, for tests).

Watches (``?watch=true``) are streamed with chunked encoding as newline
delimited JSON ``{"type": ..., "object": ...}`` events; a too old
``resourceVersion`` yields an ``ERROR`` event carrying a 410 Status, exactly
as the etcd3 watcher of kube-apiserver does.
"""

# pylint: disable=consider-using-f-string,too-many-arguments,too-many-positional-arguments,too-many-locals,too-many-statements

import json
import re
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from .store import ApiError, ResourceType, bad_request, parse_field_selector, parse_label_selector, unsupported_patch
from .kubevirt import SUBRESOURCES

CORE_TYPES = [
    ResourceType('', 'v1', 'namespaces', 'Namespace', namespaced=False, subresources=('status', 'finalize'), short_names=('ns',)),
    ResourceType('', 'v1', 'nodes', 'Node', namespaced=False, short_names=('no',)),
    ResourceType('', 'v1', 'pods', 'Pod', short_names=('po',), categories=('all',)),
    ResourceType('', 'v1', 'services', 'Service', short_names=('svc',), categories=('all',)),
    ResourceType('', 'v1', 'persistentvolumeclaims', 'PersistentVolumeClaim', short_names=('pvc',)),
    ResourceType('', 'v1', 'persistentvolumes', 'PersistentVolume', namespaced=False, short_names=('pv',)),
    ResourceType('', 'v1', 'events', 'Event', subresources=(), short_names=('ev',)),
    ResourceType('', 'v1', 'configmaps', 'ConfigMap', subresources=(), short_names=('cm',)),
    ResourceType('', 'v1', 'secrets', 'Secret', subresources=()),
    ResourceType('', 'v1', 'serviceaccounts', 'ServiceAccount', subresources=(), short_names=('sa',)),
    ResourceType('storage.k8s.io', 'v1', 'storageclasses', 'StorageClass', namespaced=False, subresources=(), short_names=('sc',)),
]

SUBRESOURCE_GROUP = 'subresources.kubevirt.io'
BOOKMARK_INTERVAL = 0.5
VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch']
PATCH_TYPES = {'application/merge-patch+json': 'merge', 'application/json-patch+json': 'json',
               'application/strategic-merge-patch+json': 'strategic', 'application/apply-patch+yaml': 'apply'}


class TLSSniffingServer(ThreadingHTTPServer):
    """ThreadingHTTPServer serving HTTP and HTTPS on the same port."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler, app, ssl_context=None):
        self.app = app
        self.ssl_context = ssl_context
        self.open_sockets = set()
        self.sock_lock = threading.Lock()
        super().__init__(address, handler)

    def finish_request(self, request, client_address):
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request.settimeout(30)
            first = request.recv(1, socket.MSG_PEEK)
            if first == b'\x16' and self.ssl_context is not None:
                request = self.ssl_context.wrap_socket(request, server_side=True)
            request.settimeout(None)
        except (OSError, ssl.SSLError):
            return
        with self.sock_lock:
            self.open_sockets.add(request)
        try:
            self.RequestHandlerClass(request, client_address, self)
        finally:
            with self.sock_lock:
                self.open_sockets.discard(request)

    def close_all(self):
        """Force-close client connections (used on stop)."""
        with self.sock_lock:
            socks = list(self.open_sockets)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class App:  # pylint: disable=too-many-instance-attributes
    """Request processing independent of the socket layer."""

    def __init__(self, store, controller, subresource_api, faults, tokens):
        self.store = store
        self.controller = controller
        self.subapi = subresource_api
        self.faults = faults
        self.tokens = tokens
        self.stopping = threading.Event()
        self.request_count = 0

    # discovery ---------------------------------------------------------------------------------------
    def groups(self):
        """{group: [versions]} for non-core groups, in registration order."""
        groups = {}
        for rt in self.store.types.values():
            if rt.group:
                groups.setdefault(rt.group, [])
                if rt.version not in groups[rt.group]:
                    groups[rt.group].append(rt.version)
        groups[SUBRESOURCE_GROUP] = ['v1']
        return groups

    def api_group(self, name, versions):
        """APIGroup object."""
        vers = [{'groupVersion': '%s/%s' % (name, v), 'version': v} for v in versions]
        return {'name': name, 'versions': vers, 'preferredVersion': vers[0]}

    def resource_list(self, group, version):
        """APIResourceList or None."""
        if group == SUBRESOURCE_GROUP and version == 'v1':
            resources = [{'name': n, 'singularName': '', 'namespaced': True, 'kind': k, 'verbs': ['put', 'update']} for n, k in SUBRESOURCES]
            return {'kind': 'APIResourceList', 'apiVersion': 'v1', 'groupVersion': '%s/%s' % (group, version), 'resources': resources}
        resources = []
        for rt in self.store.types.values():
            if rt.group != group or rt.version != version:
                continue
            entry = {'name': rt.plural, 'singularName': rt.singular, 'namespaced': rt.namespaced, 'kind': rt.kind, 'verbs': VERBS}
            if rt.short_names:
                entry['shortNames'] = rt.short_names
            if rt.categories:
                entry['categories'] = rt.categories
            resources.append(entry)
            for sub in rt.subresources:
                resources.append({'name': '%s/%s' % (rt.plural, sub), 'singularName': '', 'namespaced': rt.namespaced, 'kind': rt.kind,
                                  'verbs': ['get', 'patch', 'update'] if sub == 'status' else ['update']})
        if not resources:
            return None
        return {'kind': 'APIResourceList', 'apiVersion': 'v1', 'groupVersion': '%s/%s' % (group, version) if group else version,
                'resources': resources}

    # auth -------------------------------------------------------------------------------------------
    def authenticate(self, header):
        """Returns (user, namespaces) or raises 401."""
        if not header or not header.startswith('Bearer '):
            raise ApiError(401, 'Unauthorized', 'Unauthorized')
        entry = self.tokens.get(header[7:].strip())
        if entry is None:
            raise ApiError(401, 'Unauthorized', 'Unauthorized')
        return entry['user'], entry['namespaces']

    @staticmethod
    def authorize(user, namespaces, verb, rtype_plural, group, ns, name):
        """RBAC emulation: '*' = everything; otherwise only the listed namespaces (and get/list of those Namespace objects)."""
        if '*' in namespaces:
            return
        if ns and ns in namespaces:
            return
        if not ns and rtype_plural == 'namespaces' and name in namespaces and verb in ('get', 'watch'):
            return
        res = '%s.%s' % (rtype_plural, group) if group else rtype_plural
        subject = '%s "%s"' % (res, name) if name else res
        where = ' in the namespace "%s"' % ns if ns else ' at the cluster scope'
        raise ApiError(403, 'Forbidden', '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s"%s'
                       % (subject, user, verb, rtype_plural, group, where),
                       {'name': name or '', 'group': group, 'kind': rtype_plural})

    # routing ----------------------------------------------------------------------------------------
    @staticmethod
    def parse_path(path):
        """Split a resource URL into (group, version, ns, plural, name, sub) or None."""
        parts = [p for p in path.split('/') if p]
        if not parts:
            return None
        if parts[0] == 'api':
            if len(parts) < 3:
                return None
            group, version, rest = '', parts[1], parts[2:]
        elif parts[0] == 'apis':
            if len(parts) < 4:
                return None
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        ns = None
        if rest[0] == 'namespaces' and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ('status', 'finalize')):
            ns, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = '/'.join(rest[2:]) if len(rest) > 2 else None
        return group, version, ns, plural, name, sub


class Handler(BaseHTTPRequestHandler):
    """Per-connection request handler."""

    protocol_version = 'HTTP/1.1'
    server_version = 'kubeapi-test/1.0'

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        return

    # plumbing ---------------------------------------------------------------------------------------
    @property
    def app(self):
        """The App."""
        return self.server.app

    def send_json(self, code, body, headers=None):
        """Send a JSON response with Content-Length."""
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.send_header('Audit-Id', 'test')
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(data)

    def send_error_status(self, err):
        """Send an ApiError as a Status."""
        headers = {'Retry-After': '1'} if err.code in (429, 503) else None
        self.send_json(err.code, err.status(), headers)

    def read_body(self):
        """Parsed request body (JSON or YAML) or None."""
        length = int(self.headers.get('Content-Length') or 0)
        raw = self.rfile.read(length) if length else b''
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            raw = self._read_chunked()
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise bad_request('invalid body: %s' % exc) from exc

    def _read_chunked(self):
        data = b''
        while True:
            size = int(self.rfile.readline().strip() or b'0', 16)
            if size == 0:
                self.rfile.readline()
                return data
            data += self.rfile.read(size)
            self.rfile.readline()

    # verbs ------------------------------------------------------------------------------------------
    def do_GET(self):  # pylint: disable=invalid-name
        """GET."""
        self.dispatch('GET')

    def do_POST(self):  # pylint: disable=invalid-name
        """POST."""
        self.dispatch('POST')

    def do_PUT(self):  # pylint: disable=invalid-name
        """PUT."""
        self.dispatch('PUT')

    def do_PATCH(self):  # pylint: disable=invalid-name
        """PATCH."""
        self.dispatch('PATCH')

    def do_DELETE(self):  # pylint: disable=invalid-name
        """DELETE."""
        self.dispatch('DELETE')

    def dispatch(self, method):
        """Run the filter chain then route."""
        self.app.request_count += 1
        url = urlsplit(self.path)
        path = url.path.rstrip('/') or '/'
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        body = None
        try:
            body = self.read_body()
            if path.startswith('/__admin__'):
                self.admin(method, path, body)
                return
            rule = self.app.faults.match_http(method, self.path)
            if rule:
                if rule['delay']:
                    time.sleep(rule['delay'])
                if rule['status']:
                    reason = rule['reason'] or {409: 'Conflict', 429: 'TooManyRequests', 503: 'ServiceUnavailable',
                                                504: 'Timeout', 500: 'InternalError'}.get(rule['status'], 'InternalError')
                    message = rule['message'] or ('Operation cannot be fulfilled: the object has been modified; please apply your changes '
                                                  'to the latest version and try again' if rule['status'] == 409
                                                  else 'Internal error occurred: injected fault')
                    raise ApiError(rule['status'], reason, message)
            if path in ('/healthz', '/readyz', '/livez'):
                self.send_response(200)
                self.send_header('Content-Type', 'text/plain')
                self.send_header('Content-Length', '2')
                self.end_headers()
                self.wfile.write(b'ok')
                return
            user, namespaces = self.app.authenticate(self.headers.get('Authorization'))
            if method == 'GET' and self.discovery(path):
                return
            self.resource(method, path, params, body, user, namespaces)
        except ApiError as err:
            self.send_error_status(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # pylint: disable=broad-except
            self.send_error_status(ApiError(500, 'InternalError', 'Internal error occurred: %r' % exc))

    def discovery(self, path):
        """Serve discovery documents; True if handled."""
        app = self.app
        if path == '/version':
            self.send_json(200, {'major': '1', 'minor': '30', 'gitVersion': 'v1.30.0-kubeapi-test', 'gitCommit': 'test', 'gitTreeState': 'clean',
                                 'buildDate': '2024-04-17T00:00:00Z', 'goVersion': 'go1.22.2', 'compiler': 'gc', 'platform': 'linux/amd64'})
        elif path == '/api':
            self.send_json(200, {'kind': 'APIVersions', 'versions': ['v1'],
                                 'serverAddressByClientCIDRs': [{'clientCIDR': '0.0.0.0/0', 'serverAddress': '127.0.0.1'}]})
        elif path == '/api/v1':
            self.send_json(200, app.resource_list('', 'v1'))
        elif path == '/apis':
            self.send_json(200, {'kind': 'APIGroupList', 'apiVersion': 'v1',
                                 'groups': [app.api_group(g, v) for g, v in app.groups().items()]})
        elif re.match(r'^/apis/[^/]+$', path):
            group = path.split('/')[2]
            if group not in app.groups():
                raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
            body = app.api_group(group, app.groups()[group])
            body.update(kind='APIGroup', apiVersion='v1')
            self.send_json(200, body)
        elif re.match(r'^/apis/[^/]+/[^/]+$', path):
            _unused0, _unused1, group, version = path.split('/')
            lst = app.resource_list(group, version)
            if lst is None:
                raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
            self.send_json(200, lst)
        elif path in ('/openapi/v2', '/openapi/v3'):
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        else:
            return False
        return True

    # resources --------------------------------------------------------------------------------------
    def resource(self, method, path, params, body, user, namespaces):  # pylint: disable=too-many-arguments,too-many-branches
        """CRUD + watch + subresources."""
        parsed = App.parse_path(path)
        if parsed is None:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        group, version, ns, plural, name, sub = parsed
        store = self.app.store
        if group == SUBRESOURCE_GROUP:
            if method not in ('PUT', 'POST') or not (ns and name and sub):
                raise ApiError(405 if ns and name and sub else 404, 'MethodNotAllowed' if ns and name and sub else 'NotFound',
                               'the server could not find the requested resource')
            App.authorize(user, namespaces, 'update', '%s/%s' % (plural, sub), group, ns, name)
            code, result = self.app.subapi.handle(plural, ns, name, sub, body)
            self.send_response(code)
            self.send_header('Content-Length', '0')
            self.end_headers()
            del result
            return
        rtype = store.find_type(group, version, plural)
        if rtype is None:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        if sub and sub not in rtype.subresources:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        if ns and not rtype.namespaced:
            raise ApiError(404, 'NotFound', 'the server could not find the requested resource')
        watch = params.get('watch') in ('true', '1')
        verb = {'GET': 'watch' if watch else ('get' if name else 'list'), 'POST': 'create', 'PUT': 'update', 'PATCH': 'patch',
                'DELETE': 'delete' if name else 'deletecollection'}[method]
        App.authorize(user, namespaces, verb, plural if not sub else '%s/%s' % (plural, sub), group, ns or '', name)
        dry_run = params.get('dryRun') == 'All' or (isinstance(body, dict) and body.get('kind') == 'DeleteOptions'
                                                    and 'All' in (body.get('dryRun') or []))
        if dry_run and params.get('dryRun') not in (None, 'All'):
            raise bad_request('Invalid dryRun value %r, only "All" is supported' % params.get('dryRun'))
        if sub == 'finalize':
            sub = None
        if method == 'GET':
            if watch:
                self.watch(rtype, ns, params)
            elif name:
                self.send_json(200, store.get(rtype, ns or '', name))
            else:
                self.list(rtype, ns, params)
        elif method == 'POST':
            if name:
                raise ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource')
            if not isinstance(body, dict):
                raise bad_request('the request body must be a JSON object')
            self.send_json(201, store.create(rtype, ns or '', body, dry_run=dry_run))
        elif method == 'PUT':
            if not isinstance(body, dict):
                raise bad_request('the request body must be a JSON object')
            self.send_json(200, store.update(rtype, ns or '', name, body, subresource=sub, dry_run=dry_run))
        elif method == 'PATCH':
            ctype = (self.headers.get('Content-Type') or '').split(';')[0].strip()
            ptype = PATCH_TYPES.get(ctype)
            if ptype is None:
                raise ApiError(415, 'UnsupportedMediaType', 'the body of the request was in an unknown format - accepted media types include: '
                               'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml')
            if ptype == 'strategic' and rtype.custom:
                raise unsupported_patch()
            if ptype == 'apply' and not params.get('fieldManager'):
                raise bad_request('PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch')
            self.send_json(200, store.patch(rtype, ns or '', name, ptype, body, subresource=sub, dry_run=dry_run))
        elif method == 'DELETE':
            self.delete(rtype, ns, name, params, body, dry_run)

    def list(self, rtype, ns, params):
        """LIST."""
        limit = int(params['limit']) if params.get('limit') else None
        items, rv, cont, remaining = self.app.store.list(rtype, ns, params.get('labelSelector'), params.get('fieldSelector'),
                                                         limit, params.get('continue'))
        meta = {'resourceVersion': rv}
        if cont:
            meta['continue'] = cont
            meta['remainingItemCount'] = remaining
        self.send_json(200, {'kind': rtype.kind + 'List', 'apiVersion': rtype.api_version, 'metadata': meta, 'items': items})

    def delete(self, rtype, ns, name, params, body, dry_run):  # pylint: disable=too-many-arguments
        """DELETE one or a collection."""
        opts = body if isinstance(body, dict) else {}
        propagation = params.get('propagationPolicy') or opts.get('propagationPolicy')
        if opts.get('orphanDependents') is True:
            propagation = 'Orphan'
        store = self.app.store
        if name:
            result = store.delete(rtype, ns or '', name, propagation=propagation, dry_run=dry_run, preconditions=opts.get('preconditions'))
            still = store.peek(rtype, ns or '', name)
            code = 202 if still is not None and not dry_run and still['metadata'].get('deletionTimestamp') else 200
            self.send_json(code, result)
            return
        items, rv, _unused0, _unused1 = store.list(rtype, ns, params.get('labelSelector'), params.get('fieldSelector'))
        for item in items:
            try:
                store.delete(rtype, ns or '', item['metadata']['name'], propagation=propagation, dry_run=dry_run)
            except ApiError:
                pass
        self.send_json(200, {'kind': rtype.kind + 'List', 'apiVersion': rtype.api_version, 'metadata': {'resourceVersion': rv}, 'items': items})

    # watch ------------------------------------------------------------------------------------------
    def write_chunk(self, data):
        """One HTTP chunk."""
        self.wfile.write(b'%x\r\n%s\r\n' % (len(data), data))
        self.wfile.flush()

    def watch(self, rtype, ns, params):  # pylint: disable=too-many-locals,too-many-branches,too-many-statements
        """Streaming watch; see module docstring."""
        store = self.app.store
        lmatch = parse_label_selector(params.get('labelSelector'))
        fmatch = parse_field_selector(params.get('fieldSelector'))
        timeout = float(params.get('timeoutSeconds') or 1800)
        deadline = time.time() + timeout
        bookmarks = params.get('allowWatchBookmarks') == 'true'
        faults = self.app.faults
        generation = faults.watch_generation
        rv_param = params.get('resourceVersion')

        def matches(obj):
            if obj is None:
                return False
            if ns and obj['metadata'].get('namespace') != ns:
                return False
            return lmatch(obj['metadata'].get('labels')) and fmatch(obj)

        initial = []
        with store.lock:
            if not rv_param or rv_param == '0':
                items, _unused0, _unused1, _unused2 = store.list(rtype, ns, params.get('labelSelector'), params.get('fieldSelector'))
                initial = [{'type': 'ADDED', 'object': o} for o in items]
                last = store.rv
                expired = None
            else:
                try:
                    last = int(rv_param)
                except ValueError as exc:
                    raise bad_request('invalid resource version %r' % rv_param) from exc
                expired = None
                try:
                    store.events_since(last)
                except ApiError as err:
                    expired = err
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Transfer-Encoding', 'chunked')
        self.send_header('Cache-Control', 'no-cache, private')
        self.end_headers()
        self.close_connection = True
        try:
            if expired is not None:
                self.write_chunk(json.dumps({'type': 'ERROR', 'object': expired.status()}).encode() + b'\n')
                self.write_chunk(b'')
                return
            for ev in initial:
                self.write_chunk(json.dumps(ev).encode() + b'\n')
            last_bookmark = time.time()
            while True:
                now = time.time()
                if now >= deadline or self.app.stopping.is_set() or faults.watch_generation != generation:
                    break
                with store.cond:
                    try:
                        events = store.events_since(last)
                    except ApiError as err:
                        self.write_chunk(json.dumps({'type': 'ERROR', 'object': err.status()}).encode() + b'\n')
                        break
                    if not events:
                        store.cond.wait(min(0.2, max(deadline - now, 0.01)))
                        events = []
                out = []
                for ev in events:
                    last = ev.rv
                    if ev.key != rtype.key:
                        continue
                    new_ok, old_ok = matches(ev.obj), matches(ev.old)
                    if ev.type == 'DELETED':
                        if matches(ev.obj) or old_ok:
                            out.append({'type': 'DELETED', 'object': ev.obj})
                    elif new_ok and (ev.type == 'ADDED' or not old_ok):
                        out.append({'type': 'ADDED', 'object': ev.obj})
                    elif new_ok:
                        out.append({'type': 'MODIFIED', 'object': ev.obj})
                    elif old_ok:
                        out.append({'type': 'DELETED', 'object': ev.obj})
                if bookmarks and time.time() - last_bookmark > BOOKMARK_INTERVAL:
                    out.append({'type': 'BOOKMARK', 'object': {'kind': rtype.kind, 'apiVersion': rtype.api_version,
                                                               'metadata': {'resourceVersion': str(last)}}})
                    last_bookmark = time.time()
                if out:
                    self.write_chunk(b''.join(json.dumps(e).encode() + b'\n' for e in out))
            self.write_chunk(b'')
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass

    # admin ------------------------------------------------------------------------------------------
    def admin(self, method, path, body):  # pylint: disable=too-many-branches
        """/__admin__/{faults,settle,tick,advance,nodes,pause,resume,compact,state}."""
        app = self.app
        ctrl = app.controller
        what = path[len('/__admin__/'):]
        body = body or {}
        if what == 'faults':
            if method == 'GET':
                self.send_json(200, app.faults.to_dict())
            elif method == 'DELETE':
                app.faults.clear()
                self.send_json(200, app.faults.to_dict())
            else:
                try:
                    self.send_json(200, app.faults.apply_json(body))
                except (ValueError, KeyError) as exc:
                    raise bad_request(str(exc)) from exc
        elif what == 'settle':
            self.send_json(200, {'passes': ctrl.settle()})
        elif what == 'tick':
            self.send_json(200, {'changes': ctrl.tick(int(body.get('passes', 1)))})
        elif what == 'advance':
            ctrl.advance(float(body.get('seconds', 0)))
            self.send_json(200, {'offset': ctrl.offset})
        elif what == 'pause':
            ctrl.pause()
            self.send_json(200, {'paused': True})
        elif what == 'resume':
            ctrl.resume()
            self.send_json(200, {'paused': False})
        elif what == 'compact':
            app.store.compact()
            self.send_json(200, {'compactedResourceVersion': app.store.compacted_rv})
        elif what.startswith('nodes/'):
            ctrl.set_node(what.split('/', 1)[1], schedulable=body.get('schedulable'), taints=body.get('taints'), ready=body.get('ready'))
            self.send_json(200, app.store.get(ctrl.t_node, '', what.split('/', 1)[1]))
        elif what == 'state':
            self.send_json(200, {'resourceVersion': app.store.rv, 'requests': app.request_count, 'passes': ctrl.passes, 'errors': ctrl.errors})
        else:
            raise ApiError(404, 'NotFound', 'unknown admin endpoint %s' % what)
