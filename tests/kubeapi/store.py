"""In-memory object store with kube-apiserver (apimachinery) semantics.

Design
------
One ``Store`` holds every object of every registered resource type, keyed by
``(group, plural)`` then ``(namespace, name)``.  All mutations go through
``_commit`` under a single re-entrant lock, which bumps ONE global
``resourceVersion`` counter (like etcd's revision) and appends a watch event to
a bounded history list.  Watchers block on a condition variable.

Upstream rules followed (k8s.io/apiserver registry/generic/registry/store.go,
k8s.io/apimachinery):

* ``metadata.uid``/``creationTimestamp`` set on create, ``generateName`` gets a
  5 character random suffix, ``generation`` starts at 1 and is bumped only when
  something outside ``metadata`` and ``status`` changes.
* ``resourceVersion`` is set on every write; an update/patch carrying a stale
  ``metadata.resourceVersion`` fails with 409 ``Conflict``; create of an
  existing name fails with 409 ``AlreadyExists``; missing objects give 404
  ``NotFound``.  Custom resources require ``resourceVersion`` on PUT
  (``AllowUnconditionalUpdate`` is false for CRDs), core types do not.
* Status subresource: writes to the main resource keep the stored ``.status``
  (and on create drop it); writes to ``/status`` keep everything except
  ``.status``.  Types without a status subresource accept status anywhere.
* Deletion: an object with finalizers only gets ``deletionTimestamp``; it is
  removed when the last finalizer is removed.  Once removed, dependents (via
  ``ownerReferences``) are deleted (Background/Foreground) or orphaned
  (Orphan) like the garbage collector does.
* Patches: RFC 7386 merge patch, RFC 6902 JSON patch (incl. ``test``),
  strategic merge patch only for built-in types (merging named lists by
  ``name``), apply patch approximated by merge.  Unsupported types -> 415.
* ``dryRun=All`` runs the whole pipeline but stores nothing and does not bump
  the resourceVersion.
* Label selectors (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``)
  and field selectors (``metadata.name``, ``metadata.namespace``,
  ``status.phase``, ``spec.nodeName``) as in apimachinery/pkg/labels|fields.
* Lists support ``limit``/``continue``; watch history is bounded and asking for
  a compacted resourceVersion gives 410 ``Gone`` ("too old resource version").
"""

# pylint: disable=consider-using-f-string,too-many-arguments,too-many-positional-arguments
# pylint: disable=too-many-locals,too-many-instance-attributes,too-few-public-methods

import base64
import copy
import datetime
import json
import random
import re
import string
import threading
import uuid


def now_iso(offset=0.0):
    """RFC 3339 timestamp in UTC, second precision like metav1.Time."""
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime('%Y-%m-%dT%H:%M:%SZ')


class ApiError(Exception):
    """An error rendered as a metav1.Status object."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self):
        """The Status body."""
        body = {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                'message': self.message, 'reason': self.reason, 'code': self.code}
        if self.details:
            body['details'] = self.details
        return body


class ResourceType:
    """One API resource (like one entry of an APIResourceList)."""

    def __init__(self, group, version, plural, kind, namespaced=True, subresources=('status',), short_names=(),
                 custom=False, singular=None, categories=()):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.subresources = tuple(subresources)
        self.short_names = list(short_names)
        self.custom = custom
        self.singular = singular or kind.lower()
        self.categories = list(categories)

    @property
    def api_version(self):
        """apiVersion string of objects of this type."""
        return '%s/%s' % (self.group, self.version) if self.group else self.version

    @property
    def key(self):
        """Store key."""
        return (self.group, self.plural)

    @property
    def qualified(self):
        """plural.group as used in error messages."""
        return '%s.%s' % (self.plural, self.group) if self.group else self.plural

    def has_status(self):
        """Whether this type has a status subresource."""
        return 'status' in self.subresources

    # error helpers -------------------------------------------------------------------------------
    def details(self, name):
        """Status details."""
        return {'name': name, 'group': self.group, 'kind': self.plural}

    def not_found(self, name):
        """404."""
        return ApiError(404, 'NotFound', '%s "%s" not found' % (self.qualified, name), self.details(name))

    def already_exists(self, name):
        """409 AlreadyExists."""
        return ApiError(409, 'AlreadyExists', '%s "%s" already exists' % (self.qualified, name), self.details(name))

    def conflict(self, name, msg='the object has been modified; please apply your changes to the latest version and try again'):
        """409 Conflict (errors.NewConflict)."""
        return ApiError(409, 'Conflict', 'Operation cannot be fulfilled on %s "%s": %s' % (self.qualified, name, msg), self.details(name))

    def invalid(self, name, field, msg):
        """422 Invalid (errors.NewInvalid)."""
        det = self.details(name)
        det['kind'] = self.kind
        det['causes'] = [{'reason': 'FieldValueInvalid', 'message': msg, 'field': field}]
        return ApiError(422, 'Invalid', '%s.%s "%s" is invalid: %s: %s' % (self.kind, self.group or 'core', name, field, msg)
                        if self.group else '%s "%s" is invalid: %s: %s' % (self.kind, name, field, msg), det)


def bad_request(msg):
    """400 BadRequest."""
    return ApiError(400, 'BadRequest', msg)


# ------------------------------------------------------------------------------------------------
# patches
# ------------------------------------------------------------------------------------------------

def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target, patch):
    """Approximation of strategic merge patch: merge patch, but lists of named dicts merge by ``name``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith('$'):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list) and value and \
                all(isinstance(v, dict) and 'name' in v for v in value + result[key]):
            merged = copy.deepcopy(result[key])
            index = {item['name']: i for i, item in enumerate(merged)}
            for item in value:
                if item.get('$patch') == 'delete':
                    merged = [m for m in merged if m['name'] != item['name']]
                    index = {m['name']: i for i, m in enumerate(merged)}
                elif item['name'] in index:
                    merged[index[item['name']]] = strategic_merge_patch(merged[index[item['name']]], item)
                else:
                    merged.append(copy.deepcopy(item))
                    index[item['name']] = len(merged) - 1
            result[key] = merged
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _unescape(token):
    return token.replace('~1', '/').replace('~0', '~')


def _split_pointer(path):
    if path == '':
        return []
    if not path.startswith('/'):
        raise ApiError(422, 'Invalid', 'json patch path %r must start with /' % path)
    return [_unescape(t) for t in path[1:].split('/')]


def _resolve(doc, tokens, path):
    cur = doc
    for tok in tokens:
        if isinstance(cur, dict):
            if tok not in cur:
                raise ApiError(422, 'Invalid', 'jsonpatch: path %s not found (missing key %s)' % (path, tok))
            cur = cur[tok]
        elif isinstance(cur, list):
            try:
                cur = cur[int(tok)]
            except (ValueError, IndexError) as exc:
                raise ApiError(422, 'Invalid', 'jsonpatch: path %s not found: %s' % (path, exc)) from exc
        else:
            raise ApiError(422, 'Invalid', 'jsonpatch: path %s not found' % path)
    return cur


def _jp_add(doc, path, value, replace=False):
    tokens = _split_pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, 'Invalid', 'jsonpatch replace operation does not apply: doc is missing key: %s' % path)
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == '-' and not replace:
            parent.append(copy.deepcopy(value))
        else:
            try:
                idx = int(last)
            except ValueError as exc:
                raise ApiError(422, 'Invalid', 'jsonpatch: invalid array index %s' % last) from exc
            if replace:
                if not 0 <= idx < len(parent):
                    raise ApiError(422, 'Invalid', 'jsonpatch replace operation does not apply: doc is missing key: %s' % path)
                parent[idx] = copy.deepcopy(value)
            else:
                if not 0 <= idx <= len(parent):
                    raise ApiError(422, 'Invalid', 'jsonpatch add operation does not apply: index out of bounds: %s' % path)
                parent.insert(idx, copy.deepcopy(value))
    else:
        raise ApiError(422, 'Invalid', 'jsonpatch add operation does not apply: doc is missing path: %s' % path)
    return doc


def _jp_remove(doc, path):
    tokens = _split_pointer(path)
    if not tokens:
        raise ApiError(422, 'Invalid', 'jsonpatch: cannot remove root')
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    try:
        if isinstance(parent, dict):
            value = parent.pop(last)
        else:
            value = parent.pop(int(last))
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        raise ApiError(422, 'Invalid', 'jsonpatch remove operation does not apply: doc is missing path: "%s"' % path) from exc
    return value


def json_patch(doc, ops):
    """RFC 6902 JSON patch."""
    if not isinstance(ops, list):
        raise bad_request('json: cannot unmarshal object into Go value of type jsonpatch.Patch')
    doc = copy.deepcopy(doc)
    for op in ops:
        kind = op.get('op')
        path = op.get('path', '')
        if kind == 'add':
            doc = _jp_add(doc, path, op.get('value'))
        elif kind == 'replace':
            doc = _jp_add(doc, path, op.get('value'), replace=True)
        elif kind == 'remove':
            _jp_remove(doc, path)
        elif kind == 'test':
            try:
                actual = _resolve(doc, _split_pointer(path), path)
            except ApiError:
                actual = None
            if actual != op.get('value'):
                raise ApiError(422, 'Invalid', 'testing value %s failed: test failed' % path)
        elif kind in ('move', 'copy'):
            src = op.get('from', '')
            value = copy.deepcopy(_resolve(doc, _split_pointer(src), src))
            if kind == 'move':
                _jp_remove(doc, src)
            doc = _jp_add(doc, path, value)
        else:
            raise bad_request('Unexpected kind: %s' % kind)
    return doc


# ------------------------------------------------------------------------------------------------
# selectors
# ------------------------------------------------------------------------------------------------

def _split_top(expr):
    parts, depth, cur = [], 0, ''
    for ch in expr:
        if ch == '(':
            depth += 1
        elif ch == ')':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r'^([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)$')
_CMP_RE = re.compile(r'^([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_./-]*)$')
_KEY_RE = re.compile(r'^(!?)\s*([A-Za-z0-9_./-]+)$')


def parse_label_selector(expr):
    """Parse a label selector into a predicate over a labels dict."""
    reqs = []
    for part in _split_top(expr or ''):
        m = _SET_RE.match(part)
        if m:
            values = {v.strip() for v in m.group(3).split(',') if v.strip()}
            reqs.append((m.group(1), m.group(2), values))
            continue
        m = _CMP_RE.match(part)
        if m:
            op = '=' if m.group(2) == '==' else m.group(2)
            reqs.append((m.group(1), op, {m.group(3)}))
            continue
        m = _KEY_RE.match(part)
        if m:
            reqs.append((m.group(2), '!exists' if m.group(1) else 'exists', set()))
            continue
        raise bad_request('unable to parse requirement: %r' % part)

    def match(labels):
        labels = labels or {}
        for key, op, values in reqs:
            present = key in labels
            val = labels.get(key)
            ok = {'=': present and val in values,
                  '!=': not present or val not in values,
                  'in': present and val in values,
                  'notin': not present or val not in values,
                  'exists': present,
                  '!exists': not present}[op]
            if not ok:
                return False
        return True
    return match


FIELD_PATHS = {
    'metadata.name': lambda o: o.get('metadata', {}).get('name'),
    'metadata.namespace': lambda o: o.get('metadata', {}).get('namespace'),
    'status.phase': lambda o: (o.get('status') or {}).get('phase'),
    'spec.nodeName': lambda o: (o.get('spec') or {}).get('nodeName'),
    'involvedObject.name': lambda o: (o.get('involvedObject') or {}).get('name'),
}


def parse_field_selector(expr):
    """Parse a field selector into a predicate over an object."""
    reqs = []
    for part in _split_top(expr or ''):
        m = re.match(r'^([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)$', part)
        if not m:
            raise bad_request('invalid selector: %r; can\'t understand %r' % (expr, part))
        if m.group(1) not in FIELD_PATHS:
            raise bad_request('"%s" is not a known field selector: only "metadata.name", "metadata.namespace"' % m.group(1))
        reqs.append((FIELD_PATHS[m.group(1)], m.group(2) != '!=', m.group(3)))

    def match(obj):
        return all((getter(obj) == value) == equal for getter, equal, value in reqs)
    return match


# ------------------------------------------------------------------------------------------------
# store
# ------------------------------------------------------------------------------------------------

_NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')


def _strip(obj):
    """Object without metadata and status: what generation tracks."""
    return {k: v for k, v in obj.items() if k not in ('metadata', 'status', 'apiVersion', 'kind')}


class Event:
    """One watch event in the history."""

    __slots__ = ('rv', 'key', 'type', 'obj', 'old')

    def __init__(self, rv, key, etype, obj, old):
        self.rv = rv
        self.key = key
        self.type = etype
        self.obj = obj
        self.old = old


class Store:  # pylint: disable=too-many-public-methods
    """Thread-safe object store; see module docstring."""

    def __init__(self, history=20000):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 1000
        self.types = {}
        self.objects = {}
        self.events = []
        self.history = history
        self.compacted_rv = 0
        self.admission = []      # callables(op, rtype, new, old) that may raise ApiError or mutate new
        self.listeners = []      # callables(event) called after each committed write (under lock)
        self.closed = False

    # registry ----------------------------------------------------------------------------------
    def register(self, rtype):
        """Register a resource type."""
        self.types[rtype.key] = rtype
        self.objects.setdefault(rtype.key, {})
        return rtype

    def rtype(self, group, plural):
        """Look up a type."""
        return self.types[(group, plural)]

    def find_type(self, group, version, plural):
        """Type for a URL or None."""
        rt = self.types.get((group, plural))
        if rt is None or rt.version != version:
            return None
        return rt

    # internals ---------------------------------------------------------------------------------
    def _bucket(self, rtype):
        return self.objects[rtype.key]

    def _commit(self, rtype, etype, obj, old):
        """Bump resourceVersion, store/remove, record event."""
        self.rv += 1
        key = (obj['metadata'].get('namespace', ''), obj['metadata']['name'])
        obj['metadata']['resourceVersion'] = str(self.rv)
        if etype == 'DELETED':
            self._bucket(rtype).pop(key, None)
        else:
            self._bucket(rtype)[key] = obj
        ev = Event(self.rv, rtype.key, etype, copy.deepcopy(obj), old)
        self.events.append(ev)
        if len(self.events) > self.history:
            drop = len(self.events) // 2
            self.compacted_rv = self.events[drop - 1].rv
            del self.events[:drop]
        for listener in list(self.listeners):
            listener(ev)
        self.cond.notify_all()
        return obj

    def compact(self):
        """Forget all watch history (like etcd compaction): older resourceVersions now give 410."""
        with self.lock:
            self.compacted_rv = self.rv
            self.events = []

    def _admit(self, op, rtype, new, old):
        for hook in list(self.admission):
            hook(op, rtype, new, old)

    def _check_namespace(self, rtype, ns, creating=True):
        if not rtype.namespaced:
            return
        nst = self.types[('', 'namespaces')]
        nsobj = self._bucket(nst).get(('', ns))
        if nsobj is None:
            raise nst.not_found(ns)
        if creating and nsobj['metadata'].get('deletionTimestamp'):
            raise ApiError(403, 'Forbidden', '%s "%s" is forbidden: unable to create new content in namespace %s because it is being terminated'
                           % (rtype.qualified, '', ns))

    # reads -------------------------------------------------------------------------------------
    def get(self, rtype, ns, name):
        """Deep copy of an object or 404."""
        with self.lock:
            obj = self._bucket(rtype).get((ns if rtype.namespaced else '', name))
            if obj is None:
                raise rtype.not_found(name)
            return copy.deepcopy(obj)

    def peek(self, rtype, ns, name):
        """Deep copy or None."""
        with self.lock:
            obj = self._bucket(rtype).get((ns if rtype.namespaced else '', name))
            return copy.deepcopy(obj) if obj is not None else None

    def items(self, rtype, ns=None):
        """Deep copies of all objects of a type (optionally in one namespace), sorted by key."""
        with self.lock:
            return [copy.deepcopy(o) for k, o in sorted(self._bucket(rtype).items()) if ns is None or k[0] == ns]

    def list(self, rtype, ns=None, label_selector=None, field_selector=None, limit=None, cont=None):
        """List with selectors and pagination; returns (items, resourceVersion, continue, remaining)."""
        lmatch = parse_label_selector(label_selector)
        fmatch = parse_field_selector(field_selector)
        start = None
        with self.lock:
            list_rv = self.rv
            if cont:
                try:
                    token = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
                    start = tuple(token['start'])
                    list_rv = token['rv']
                except (ValueError, KeyError, TypeError) as exc:
                    raise bad_request('continue key is not valid: %s' % exc) from exc
                if list_rv <= self.compacted_rv:
                    raise ApiError(410, 'Expired', 'The provided continue parameter is too old to display a consistent list result. '
                                   'You can start a new list without the continue parameter.')
            keys = sorted(self._bucket(rtype))
            selected = []
            for key in keys:
                if ns is not None and rtype.namespaced and key[0] != ns:
                    continue
                if start is not None and key <= start:
                    continue
                obj = self._bucket(rtype)[key]
                if lmatch(obj['metadata'].get('labels')) and fmatch(obj):
                    selected.append((key, obj))
            next_token, remaining = None, None
            if limit and len(selected) > limit:
                remaining = len(selected) - limit
                selected = selected[:limit]
                next_token = base64.urlsafe_b64encode(json.dumps({'rv': list_rv, 'start': list(selected[-1][0])}).encode()).decode()
            return [copy.deepcopy(o) for _unused0, o in selected], str(self.rv), next_token, remaining

    # writes ------------------------------------------------------------------------------------
    def _prepare_new(self, rtype, ns, obj):
        meta = obj.setdefault('metadata', {})
        if rtype.namespaced:
            if meta.get('namespace') and meta['namespace'] != ns:
                raise bad_request('the namespace of the provided object does not match the namespace sent on the request')
            meta['namespace'] = ns
        else:
            meta.pop('namespace', None)
        if not meta.get('name'):
            if meta.get('generateName'):
                meta['name'] = meta['generateName'] + ''.join(random.choice(string.ascii_lowercase + string.digits[2:]) for _unused0 in range(5))
            else:
                raise rtype.invalid('', 'metadata.name', 'Required value: name or generateName is required')
        name = meta['name']
        if not _NAME_RE.match(name) or len(name) > 253:
            raise rtype.invalid(name, 'metadata.name', 'Invalid value: "%s": a lowercase RFC 1123 subdomain must consist of lower case '
                                'alphanumeric characters, \'-\' or \'.\', and must start and end with an alphanumeric character' % name)
        if obj.get('kind') and obj['kind'] != rtype.kind:
            raise bad_request('the server could not find the requested resource: kind %s does not match %s' % (obj['kind'], rtype.kind))
        obj['kind'] = rtype.kind
        obj['apiVersion'] = rtype.api_version
        meta['uid'] = str(uuid.uuid4())
        meta['creationTimestamp'] = now_iso()
        meta['generation'] = 1
        for k in ('resourceVersion', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'selfLink', 'managedFields'):
            meta.pop(k, None)
        return name

    def create(self, rtype, ns, obj, dry_run=False):
        """POST."""
        obj = copy.deepcopy(obj)
        with self.lock:
            ns = ns if rtype.namespaced else ''
            name = self._prepare_new(rtype, ns, obj)
            if rtype.namespaced:
                self._check_namespace(rtype, ns)
            if rtype.has_status():
                obj.pop('status', None)
            if rtype.key == ('', 'namespaces'):
                obj.setdefault('spec', {})['finalizers'] = ['kubernetes']
                obj['status'] = {'phase': 'Active'}
            if (ns, name) in self._bucket(rtype):
                raise rtype.already_exists(name)
            self._admit('CREATE', rtype, obj, None)
            if dry_run:
                return obj
            return copy.deepcopy(self._commit(rtype, 'ADDED', obj, None))

    def _merge_for_write(self, rtype, old, new, subresource):
        """Apply status-subresource and immutable-metadata rules; returns the object to store."""
        if subresource == 'status':
            merged = copy.deepcopy(old)
            if 'status' in new:
                merged['status'] = copy.deepcopy(new['status'])
            else:
                merged.pop('status', None)
            return merged
        merged = copy.deepcopy(new)
        meta = merged.setdefault('metadata', {})
        ometa = old['metadata']
        for k in ('uid', 'creationTimestamp', 'namespace', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation'):
            if k in ometa:
                meta[k] = ometa[k]
            else:
                meta.pop(k, None)
        meta['name'] = ometa['name']
        merged['kind'] = rtype.kind
        merged['apiVersion'] = rtype.api_version
        if rtype.has_status():
            if 'status' in old:
                merged['status'] = copy.deepcopy(old['status'])
            else:
                merged.pop('status', None)
        return merged

    def _finish_write(self, rtype, old, merged, dry_run, subresource=None):
        if _strip(merged) != _strip(old):
            merged['metadata']['generation'] = old['metadata'].get('generation', 1) + 1
        self._admit('UPDATE', rtype, merged, old)
        if old.get('metadata', {}).get('deletionTimestamp') and \
                set(merged['metadata'].get('finalizers') or []) - set(old['metadata'].get('finalizers') or []) and subresource is None:
            raise ApiError(422, 'Invalid', '%s "%s" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted'
                           % (rtype.kind, old['metadata']['name']))
        if dry_run:
            return merged
        if merged == old:
            return copy.deepcopy(old)
        if merged['metadata'].get('deletionTimestamp') and not merged['metadata'].get('finalizers') and not self._ns_pending(rtype, merged):
            self._remove(rtype, merged)
            return merged
        return copy.deepcopy(self._commit(rtype, 'MODIFIED', merged, old))

    def _ns_pending(self, rtype, obj):
        return rtype.key == ('', 'namespaces') and bool(obj.get('spec', {}).get('finalizers'))

    def update(self, rtype, ns, name, obj, subresource=None, dry_run=False):
        """PUT (main resource or /status)."""
        with self.lock:
            ns = ns if rtype.namespaced else ''
            old = self._bucket(rtype).get((ns, name))
            if old is None:
                raise rtype.not_found(name)
            meta = obj.get('metadata') or {}
            if meta.get('name') and meta['name'] != name:
                raise bad_request('the name of the object (%s) does not match the name on the URL (%s)' % (meta['name'], name))
            if rtype.namespaced and meta.get('namespace') and meta['namespace'] != ns:
                raise bad_request('the namespace of the provided object does not match the namespace sent on the request')
            rv = meta.get('resourceVersion')
            if rv:
                if rv != old['metadata']['resourceVersion']:
                    raise rtype.conflict(name)
            elif rtype.custom:
                raise rtype.invalid(name, 'metadata.resourceVersion', 'Invalid value: 0x0: must be specified for an update')
            merged = self._merge_for_write(rtype, old, obj, subresource)
            return self._finish_write(rtype, old, merged, dry_run, subresource)

    def patch(self, rtype, ns, name, patch_type, body, subresource=None, dry_run=False):
        """PATCH with merge/json/strategic/apply semantics."""
        with self.lock:
            ns = ns if rtype.namespaced else ''
            old = self._bucket(rtype).get((ns, name))
            if patch_type == 'apply' and old is None:
                obj = copy.deepcopy(body)
                obj.setdefault('metadata', {})['name'] = name
                return self.create(rtype, ns, obj, dry_run=dry_run)
            if old is None:
                raise rtype.not_found(name)
            if patch_type == 'merge':
                new = merge_patch(old, body)
            elif patch_type == 'json':
                new = json_patch(old, body)
            elif patch_type == 'strategic':
                if rtype.custom:
                    raise unsupported_patch()
                new = strategic_merge_patch(old, body)
            elif patch_type == 'apply':
                new = merge_patch(old, body)
            else:
                raise unsupported_patch()
            if not isinstance(new, dict):
                raise bad_request('patch produced a non-object')
            rv = (new.get('metadata') or {}).get('resourceVersion')
            if rv and rv != old['metadata']['resourceVersion']:
                raise rtype.conflict(name)
            meta = new.get('metadata') or {}
            if meta.get('name') and meta['name'] != name:
                raise bad_request('the name of the object (%s) does not match the name on the URL (%s)' % (meta['name'], name))
            merged = self._merge_for_write(rtype, old, new, subresource)
            return self._finish_write(rtype, old, merged, dry_run, subresource)

    def delete(self, rtype, ns, name, propagation=None, dry_run=False, preconditions=None):
        """DELETE: finalizers -> deletionTimestamp, else remove + garbage collect dependents."""
        with self.lock:
            ns = ns if rtype.namespaced else ''
            old = self._bucket(rtype).get((ns, name))
            if old is None:
                raise rtype.not_found(name)
            preconditions = preconditions or {}
            if preconditions.get('uid') and preconditions['uid'] != old['metadata']['uid']:
                raise rtype.conflict(name, 'Precondition failed: UID in precondition: %s, UID in object meta: %s'
                                     % (preconditions['uid'], old['metadata']['uid']))
            if preconditions.get('resourceVersion') and preconditions['resourceVersion'] != old['metadata']['resourceVersion']:
                raise rtype.conflict(name, 'Precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s'
                                     % (preconditions['resourceVersion'], old['metadata']['resourceVersion']))
            obj = copy.deepcopy(old)
            self._admit('DELETE', rtype, obj, old)
            finalizers = list(obj['metadata'].get('finalizers') or [])
            if propagation == 'Orphan' and 'orphan' not in finalizers and self._dependents(obj['metadata']['uid']):
                finalizers.append('orphan')
            if propagation == 'Foreground' and 'foregroundDeletion' not in finalizers and self._dependents(obj['metadata']['uid']):
                finalizers.append('foregroundDeletion')
            if finalizers or self._ns_pending(rtype, obj):
                if obj['metadata'].get('deletionTimestamp') and finalizers == list(old['metadata'].get('finalizers') or []):
                    return obj
                obj['metadata'].setdefault('deletionTimestamp', now_iso())
                obj['metadata'].setdefault('deletionGracePeriodSeconds', 0)
                obj['metadata']['finalizers'] = finalizers
                if rtype.key == ('', 'namespaces'):
                    obj['status'] = {'phase': 'Terminating'}
                if dry_run:
                    return obj
                result = self._commit(rtype, 'MODIFIED', obj, old)
                if 'orphan' in finalizers or 'foregroundDeletion' in finalizers:
                    self._gc_pending(rtype, result)
                if rtype.key == ('', 'namespaces'):
                    self._drain_namespace(name)
                return copy.deepcopy(self._bucket(rtype).get((ns, name), result))
            if dry_run:
                return obj
            obj['metadata'].setdefault('deletionTimestamp', now_iso())
            self._remove(rtype, obj)
            return obj

    def _dependents(self, uid):
        found = []
        for key, bucket in self.objects.items():
            for obj in bucket.values():
                for ref in obj['metadata'].get('ownerReferences') or []:
                    if ref.get('uid') == uid:
                        found.append((self.types[key], obj))
        return found

    def _gc_pending(self, rtype, owner):
        """Handle the orphan / foregroundDeletion finalizers like the garbage collector."""
        uid = owner['metadata']['uid']
        fins = owner['metadata'].get('finalizers') or []
        if 'orphan' in fins:
            for drt, dep in self._dependents(uid):
                new = copy.deepcopy(dep)
                new['metadata']['ownerReferences'] = [r for r in dep['metadata']['ownerReferences'] if r.get('uid') != uid]
                self._commit(drt, 'MODIFIED', new, dep)
            self._drop_finalizer(rtype, owner, 'orphan')
        elif 'foregroundDeletion' in fins:
            for drt, dep in self._dependents(uid):
                try:
                    self.delete(drt, dep['metadata'].get('namespace', ''), dep['metadata']['name'], propagation='Foreground')
                except ApiError:
                    pass
            if not self._dependents(uid):
                self._drop_finalizer(rtype, owner, 'foregroundDeletion')

    def _drop_finalizer(self, rtype, obj, fin):
        cur = self._bucket(rtype).get((obj['metadata'].get('namespace', ''), obj['metadata']['name']))
        if cur is None:
            return
        new = copy.deepcopy(cur)
        new['metadata']['finalizers'] = [f for f in cur['metadata'].get('finalizers') or [] if f != fin]
        if not new['metadata']['finalizers'] and not self._ns_pending(rtype, new):
            self._remove(rtype, new)
        else:
            self._commit(rtype, 'MODIFIED', new, cur)

    def _remove(self, rtype, obj):
        """Really delete and garbage-collect dependents (background)."""
        old = self._bucket(rtype).get((obj['metadata'].get('namespace', ''), obj['metadata']['name']))
        self._commit(rtype, 'DELETED', obj, old)
        uid = obj['metadata']['uid']
        for drt, dep in self._dependents(uid):
            try:
                self.delete(drt, dep['metadata'].get('namespace', ''), dep['metadata']['name'])
            except ApiError:
                pass
        # owners waiting in foreground deletion for this dependent
        for ref in obj['metadata'].get('ownerReferences') or []:
            for key, bucket in self.objects.items():
                for owner in list(bucket.values()):
                    if owner['metadata']['uid'] == ref.get('uid') and 'foregroundDeletion' in (owner['metadata'].get('finalizers') or []):
                        if not self._dependents(owner['metadata']['uid']):
                            self._drop_finalizer(self.types[key], owner, 'foregroundDeletion')
        self._finish_namespaces()

    def _drain_namespace(self, ns):
        for rtype in list(self.types.values()):
            if not rtype.namespaced:
                continue
            for key in [k for k in self._bucket(rtype) if k[0] == ns]:
                obj = self._bucket(rtype).get(key)
                if obj is not None and not obj['metadata'].get('deletionTimestamp'):
                    try:
                        self.delete(rtype, ns, key[1])
                    except ApiError:
                        pass
        self._finish_namespaces()

    def _finish_namespaces(self):
        nst = self.types.get(('', 'namespaces'))
        if nst is None:
            return
        for key, nsobj in list(self._bucket(nst).items()):
            if not nsobj['metadata'].get('deletionTimestamp'):
                continue
            ns = key[1]
            if any(k[0] == ns for rt in self.types.values() if rt.namespaced for k in self._bucket(rt)):
                continue
            new = copy.deepcopy(nsobj)
            new['spec']['finalizers'] = []
            if not new['metadata'].get('finalizers'):
                self._commit(nst, 'DELETED', new, nsobj)

    # controller-side helpers ---------------------------------------------------------------------
    def mutate(self, rtype, ns, name, func):
        """Internal read-modify-write bypassing admission/RV checks; ``func(obj)`` edits in place.

        Returns the new object, or None if the object is gone.  Status rules are not applied
        (controllers write what they want), but generation and finalizer rules are.
        """
        with self.lock:
            ns = ns if rtype.namespaced else ''
            old = self._bucket(rtype).get((ns, name))
            if old is None:
                return None
            new = copy.deepcopy(old)
            func(new)
            if new == old:
                return copy.deepcopy(old)
            if _strip(new) != _strip(old):
                new['metadata']['generation'] = old['metadata'].get('generation', 1) + 1
            if new['metadata'].get('deletionTimestamp') and not new['metadata'].get('finalizers') and not self._ns_pending(rtype, new):
                self._remove(rtype, new)
                return None
            return copy.deepcopy(self._commit(rtype, 'MODIFIED', new, old))

    def events_since(self, rv):
        """Events with resourceVersion > rv; raises 410 if history was compacted past rv."""
        with self.lock:
            if rv < self.compacted_rv:
                raise ApiError(410, 'Expired', 'too old resource version: %d (%d)' % (rv, self.compacted_rv + 1))
            lo, hi = 0, len(self.events)
            while lo < hi:
                mid = (lo + hi) // 2
                if self.events[mid].rv <= rv:
                    lo = mid + 1
                else:
                    hi = mid
            return self.events[lo:]


def unsupported_patch():
    """415 for patch types the resource does not support (strategic merge on CRs)."""
    return ApiError(415, 'UnsupportedMediaType',
                    'the body of the request was in an unknown format - accepted media types include: '
                    'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml')
