"""A ``store.Store`` look-alike backed by a real kube-apiserver, for ``kubevirt.Controller``.

``kubevirt.Controller`` (the emulation of virt-controller, virt-handler, kube-scheduler, the kubelet, the
PV controller and CDI) only calls ``rtype``, ``create``, ``delete``, ``get``, ``items``, ``mutate`` and
``peek`` of its store and appends to ``admission`` and ``listeners``.  ``RemoteStore`` implements exactly
these over HTTPS (bearer token + CA of a kubeconfig), so the same controller code writes to a real API
server (tools/kubelab): see ``tests/kubeapi/controller.py``.

How the writes map onto the real API:

* ``mutate(func)``: GET, apply ``func`` to a copy, then PUT the main object when anything outside
  ``status`` changed and PUT ``/status`` when ``status`` changed and the type has a status subresource
  (discovered from the server); a 409 conflict re-reads and re-applies ``func`` (a few times, then the next
  pass tries again), a 404 returns None.
* Pods: setting ``spec.nodeName`` becomes a ``pods/binding`` POST (the scheduler's way: a PUT may not
  change a pod's spec); other pod spec changes are not allowed by the API server and are dropped (logged).
* ``delete`` of a pod uses ``gracePeriodSeconds: 0``: there is no kubelet to confirm a graceful deletion.
* Admission hooks appended to ``admission`` are never called: admission belongs to the real server
  (KubeVirt's virt-api webhooks); ``listeners`` are never called either (the controller polls).
"""

# pylint: disable=consider-using-f-string

import copy
import http.client
import json
import logging
import ssl
import threading
import urllib.parse

from .store import ApiError, ResourceType

LOG = logging.getLogger('kubeapi.remote')

# (group, plural) -> API version the controller uses
WANTED = {
    ('kubevirt.io', 'virtualmachines'): 'v1', ('kubevirt.io', 'virtualmachineinstances'): 'v1',
    ('kubevirt.io', 'virtualmachineinstancemigrations'): 'v1', ('cdi.kubevirt.io', 'datavolumes'): 'v1beta1',
    ('cdi.kubevirt.io', 'datasources'): 'v1beta1',
    ('', 'persistentvolumeclaims'): 'v1', ('', 'persistentvolumes'): 'v1', ('', 'pods'): 'v1', ('', 'nodes'): 'v1',
    ('', 'namespaces'): 'v1', ('', 'events'): 'v1', ('storage.k8s.io', 'storageclasses'): 'v1',
    ('snapshot.kubevirt.io', 'virtualmachinesnapshots'): 'v1beta1', ('snapshot.kubevirt.io', 'virtualmachinesnapshotcontents'): 'v1beta1',
    ('snapshot.kubevirt.io', 'virtualmachinerestores'): 'v1beta1',
}
VOLATILE = ('resourceVersion', 'managedFields', 'generation')


def load_kubeconfig(path):
    """(server, CA file, token) of the current context of a kubeconfig (token users only)."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(path, encoding='utf-8') as handle:
        config = yaml.safe_load(handle)
    context = next(c['context'] for c in config['contexts'] if c['name'] == config['current-context'])
    cluster = next(c['cluster'] for c in config['clusters'] if c['name'] == context['cluster'])
    user = next(u['user'] for u in config['users'] if u['name'] == context['user'])
    if not user.get('token'):
        raise ValueError('%s: user %s has no token (only bearer tokens are supported)' % (path, context['user']))
    return cluster['server'], cluster.get('certificate-authority'), user['token']


def _main_part(obj):
    out = {k: v for k, v in obj.items() if k != 'status'}
    out['metadata'] = {k: v for k, v in (obj.get('metadata') or {}).items() if k not in VOLATILE}
    return out


class RemoteStore:
    """The subset of ``store.Store`` that ``kubevirt.Controller`` uses, over HTTP; see the module docstring."""

    def __init__(self, server, ca_file, token, timeout=10, retries=4):
        self.server = server.rstrip('/')
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
        parsed = urllib.parse.urlsplit(self.server)
        self._address = (parsed.hostname, parsed.port or 443)
        self._prefix = parsed.path.rstrip('/')
        # one keep-alive connection per thread: the controller polls several lists a few times a second, and a TLS
        # handshake per request (urllib's way) cost both this process and the API server more CPU than the requests
        self._local = threading.local()
        self.lock = threading.RLock()
        self.admission = []
        self.listeners = []
        self.types = {}
        self.requests = 0
        self.conflicts = 0
        self._warned = set()
        self._discover()

    # HTTP ------------------------------------------------------------------------------------------
    def request(self, method, path, body=None, query=None):
        """Parsed JSON answer of one request; raises ``ApiError`` (from the server's Status) on HTTP >= 400.

        Sent on this thread's keep-alive connection; a connection the server closed while idle is opened again once
        (only a reused one: a request that failed on a fresh connection fails)."""
        target = self._prefix + path + ('?' + urllib.parse.urlencode(query) if query else '')
        data = json.dumps(body).encode() if body is not None else None
        headers = {'Authorization': 'Bearer ' + self.token, 'Accept': 'application/json'}
        if data is not None:
            headers['Content-Type'] = 'application/json'
        self.requests += 1
        while True:
            conn = getattr(self._local, 'conn', None)
            reused = conn is not None
            if conn is None:
                conn = self._local.conn = http.client.HTTPSConnection(*self._address, timeout=self.timeout, context=self.context)
            try:
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                if reused and isinstance(exc, (ConnectionError, http.client.RemoteDisconnected, http.client.CannotSendRequest)):
                    continue
                if isinstance(exc, OSError):
                    raise
                raise OSError('%s %s: %s' % (method, path, exc)) from exc
            if resp.will_close:
                conn.close()
                self._local.conn = None
            break
        if resp.status >= 400:
            try:
                status = json.loads(raw)
            except ValueError:
                status = {}
            raise ApiError(resp.status, status.get('reason') or 'Unknown', status.get('message') or raw.decode(errors='replace')[:500],
                           status.get('details')) from None
        return json.loads(raw) if raw else {}

    def _discover(self):
        """Resource types (kind, scope, status subresource) as the server lists them."""
        by_gv = {}
        for (group, plural), version in WANTED.items():
            by_gv.setdefault((group, version), []).append(plural)
        for (group, version), plurals in by_gv.items():
            listing = self.request('GET', '/api/%s' % version if not group else '/apis/%s/%s' % (group, version))
            resources = {r['name']: r for r in listing.get('resources') or []}
            for plural in plurals:
                if plural not in resources:
                    raise RuntimeError('%s/%s %s is not served by %s (CRDs installed?)' % (group, version, plural, self.server))
                res = resources[plural]
                subs = ('status',) if plural + '/status' in resources else ()
                self.types[(group, plural)] = ResourceType(group, version, plural, res['kind'], namespaced=res['namespaced'],
                                                           subresources=subs)

    def rtype(self, group, plural):
        """The ``store.ResourceType`` of (group, plural)."""
        return self.types[(group, plural)]

    @staticmethod
    def _path(rt, ns=None, name=None, sub=None):
        base = '/api/%s' % rt.version if not rt.group else '/apis/%s/%s' % (rt.group, rt.version)
        if rt.namespaced and ns:
            base += '/namespaces/%s' % urllib.parse.quote(ns, safe='')
        base += '/' + rt.plural
        if name:
            base += '/' + urllib.parse.quote(name, safe='')
        if sub:
            base += '/' + sub
        return base

    @staticmethod
    def _typed(rt, obj):
        obj['apiVersion'] = rt.api_version
        obj['kind'] = rt.kind
        return obj

    # reads -----------------------------------------------------------------------------------------
    def get(self, rtype, ns, name):
        """The object, or ApiError 404."""
        return self._typed(rtype, self.request('GET', self._path(rtype, ns, name)))

    def peek(self, rtype, ns, name):
        """The object or None."""
        try:
            return self.get(rtype, ns, name)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def items(self, rtype, ns=None):
        """Every object of a type (optionally of one namespace), sorted by (namespace, name)."""
        listing = self.request('GET', self._path(rtype, ns))
        found = [self._typed(rtype, item) for item in listing.get('items') or []]
        return sorted(found, key=lambda o: (o['metadata'].get('namespace', ''), o['metadata']['name']))

    # writes ----------------------------------------------------------------------------------------
    def create(self, rtype, ns, obj, dry_run=False):
        """POST, then PUT /status when ``obj`` carries a status and the type has a status subresource."""
        body = self._typed(rtype, copy.deepcopy(obj))
        status = body.get('status')
        if rtype.namespaced:
            body['metadata']['namespace'] = ns
        try:
            created = self._typed(rtype, self.request('POST', self._path(rtype, ns), body, {'dryRun': 'All'} if dry_run else None))
        except ApiError as exc:
            if rtype.key != ('', 'events'):
                LOG.warning('create %s %s/%s refused: %s %s', rtype.plural, ns, body['metadata'].get('name'), exc.code, exc.message)
            raise
        if status and rtype.has_status() and not dry_run and created.get('status') != status:
            created['status'] = status
            created = self._typed(rtype, self.request('PUT', self._path(rtype, ns, created['metadata']['name'], 'status'), created))
        return created

    def delete(self, rtype, ns, name, propagation=None, dry_run=False, preconditions=None):
        """DELETE (pods without grace: no kubelet confirms a graceful deletion here)."""
        options = {'apiVersion': 'v1', 'kind': 'DeleteOptions'}
        if propagation:
            options['propagationPolicy'] = propagation
        if preconditions:
            options['preconditions'] = preconditions
        if rtype.key == ('', 'pods'):
            options['gracePeriodSeconds'] = 0
        if dry_run:
            options['dryRun'] = ['All']
        return self.request('DELETE', self._path(rtype, ns, name), options)

    def mutate(self, rtype, ns, name, func):
        """Read-modify-write of main object and status; the new object, or None when it is gone."""
        for _attempt in range(self.retries):
            old = self.peek(rtype, ns, name)
            if old is None:
                return None
            new = copy.deepcopy(old)
            func(new)
            if new == old:
                return old
            try:
                return self._write(rtype, ns, name, old, new)
            except ApiError as exc:
                if exc.code == 404:
                    return None
                if exc.code != 409:
                    LOG.warning('update %s %s/%s refused: %s %s', rtype.plural, ns, name, exc.code, exc.message)
                    raise
                self.conflicts += 1
        LOG.info('%s %s/%s: still conflicting after %d attempts, next pass', rtype.plural, ns, name, self.retries)
        return self.peek(rtype, ns, name)

    def _write(self, rtype, ns, name, old, new):
        current = old
        if rtype.key == ('', 'pods'):
            node = (new.get('spec') or {}).get('nodeName')
            if node and not (old.get('spec') or {}).get('nodeName'):
                self.request('POST', self._path(rtype, ns, name, 'binding'),
                             {'apiVersion': 'v1', 'kind': 'Binding', 'metadata': {'name': name, 'namespace': ns},
                              'target': {'apiVersion': 'v1', 'kind': 'Node', 'name': node}})
                current = self.get(rtype, ns, name)
            if new.get('spec') != current.get('spec'):
                if (ns, name, 'spec') not in self._warned:
                    self._warned.add((ns, name, 'spec'))
                    LOG.warning('pod %s/%s: a pod spec cannot change after creation; dropped %s', ns, name, new.get('spec'))
                new['spec'] = current.get('spec')
        main_changed = _main_part(new) != _main_part(current)
        status_changed = new.get('status') != current.get('status')
        if main_changed or (status_changed and not rtype.has_status()):
            body = copy.deepcopy(new)
            body['metadata']['resourceVersion'] = current['metadata']['resourceVersion']
            current = self._typed(rtype, self.request('PUT', self._path(rtype, ns, name), body))
            if not current.get('metadata'):
                return None
        if status_changed and rtype.has_status() and new.get('status') != current.get('status'):
            body = copy.deepcopy(current)
            body['status'] = new.get('status')
            current = self._typed(rtype, self.request('PUT', self._path(rtype, ns, name, 'status'), body))
        return current
