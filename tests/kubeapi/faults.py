"""Fault injection registry shared by the HTTP layer and the KubeVirt emulation.

Two families of faults exist:

* HTTP faults (``add_http``): a request whose method and path match a rule gets
  an error Status (500, 503, 409 Conflict, 429, ...) and/or an extra delay
  before being served.  Rules are count limited (``count=None`` means
  forever).  ``drop_watches()`` closes every open watch stream (the client sees
  the stream end, as after an apiserver restart or a load balancer timeout).
* Cluster faults (``inject``) consulted by the controller emulation, keyed by
  ``kind`` and object namespace/name:

  ``unschedulable``          VMI pods for that VM/VMI cannot be scheduled
                             (PodScheduled=False, reason Unschedulable)
  ``image_pull``             virt-launcher image pull fails: Synchronized=False
                             with ErrImagePull, then ImagePullBackOff (alternating)
  ``guest_crash``            the VMI fails right before reaching Running
                             (counts as a start failure -> CrashLoopBackOff)
  ``dv_fail``                a DataVolume import fails (phase Failed,
                             Running condition reason Error); name = DV name
  ``migration_target_fail``  the target pod of a migration of that VMI fails
  ``migration_no_converge``  a migration of that VMI stays Running (the guest dirties
                             memory faster than it is copied) until it is aborted
  ``pvc_bind_stuck``         a PVC never binds; name = PVC name

  ``name`` may be ``'*'`` to match every object of the namespace, and
  ``namespace`` ``'*'`` to match every namespace.  ``count`` limits how many
  times the fault fires (``None`` = until cleared).

The HTTP admin endpoint ``/__admin__/faults`` maps onto ``apply_json``.
"""

# pylint: disable=consider-using-f-string,too-many-arguments,too-many-positional-arguments

import re
import threading


class Faults:
    """Thread-safe fault registry."""

    KINDS = ('unschedulable', 'image_pull', 'guest_crash', 'dv_fail', 'migration_target_fail', 'pvc_bind_stuck',
             'migration_no_converge')

    def __init__(self):
        self.lock = threading.Lock()
        self.http_rules = []
        self.cluster = []
        self.watch_generation = 0
        self._next_id = 1

    # HTTP ---------------------------------------------------------------------------------------
    def add_http(self, path, status=500, method=None, count=1, delay=0.0, reason=None, message=None):
        """Add a rule: requests whose path matches regex ``path`` (and ``method``) fail/are delayed.

        ``status=None`` only delays.  Returns the rule id.
        """
        with self.lock:
            rule = {'id': self._next_id, 'path': path, 'regex': re.compile(path), 'method': method.upper() if method else None,
                    'status': status, 'count': count, 'delay': float(delay or 0.0), 'reason': reason, 'message': message, 'hits': 0}
            self._next_id += 1
            self.http_rules.append(rule)
            return rule['id']

    def conflict(self, path, method=None, count=1):
        """Force 409 Conflict answers on matching requests."""
        return self.add_http(path, status=409, method=method, count=count, reason='Conflict')

    def match_http(self, method, path):
        """Consume and return the first matching rule, or None."""
        with self.lock:
            for rule in self.http_rules:
                if rule['method'] and rule['method'] != method:
                    continue
                if not rule['regex'].search(path):
                    continue
                if rule['count'] is not None and rule['count'] <= 0:
                    continue
                if rule['count'] is not None:
                    rule['count'] -= 1
                rule['hits'] += 1
                return dict(rule)
        return None

    def drop_watches(self):
        """Close all currently open watch streams."""
        with self.lock:
            self.watch_generation += 1

    # cluster --------------------------------------------------------------------------------------
    def inject(self, kind, namespace='*', name='*', count=None, **params):
        """Add a cluster fault; see module docstring for kinds."""
        if kind not in self.KINDS:
            raise ValueError('unknown fault kind %r (known: %s)' % (kind, ', '.join(self.KINDS)))
        with self.lock:
            self.cluster.append({'kind': kind, 'namespace': namespace, 'name': name, 'count': count, 'params': params, 'hits': 0})

    def _find(self, kind, namespace, name):
        for fault in self.cluster:
            if fault['kind'] != kind or (fault['count'] is not None and fault['count'] <= 0):
                continue
            if fault['namespace'] not in ('*', namespace) or fault['name'] not in ('*', name):
                continue
            return fault
        return None

    def active(self, kind, namespace, name):
        """Whether a fault is active (does not consume it)."""
        with self.lock:
            return self._find(kind, namespace, name) is not None

    def consume(self, kind, namespace, name):
        """Fire a fault once if active; returns True if it fired."""
        with self.lock:
            fault = self._find(kind, namespace, name)
            if fault is None:
                return False
            if fault['count'] is not None:
                fault['count'] -= 1
            fault['hits'] += 1
            return True

    def clear(self, kind=None, namespace=None, name=None, http=True):
        """Remove cluster faults (filtered) and, with ``http``, all HTTP rules."""
        with self.lock:
            self.cluster = [f for f in self.cluster if not ((kind is None or f['kind'] == kind) and (namespace is None or f['namespace'] == namespace)
                                                            and (name is None or f['name'] == name))]
            if http and kind is None:
                self.http_rules = []

    # admin endpoint -------------------------------------------------------------------------------
    def to_dict(self):
        """JSON-able snapshot."""
        with self.lock:
            return {'http': [{k: v for k, v in r.items() if k != 'regex'} for r in self.http_rules],
                    'cluster': [dict(f) for f in self.cluster],
                    'watchGeneration': self.watch_generation}

    def apply_json(self, body):
        """Apply ``{"http": [...], "cluster": [...], "dropWatches": bool, "clear": bool}``."""
        if body.get('clear'):
            self.clear()
        for rule in body.get('http') or []:
            self.add_http(rule['path'], status=rule.get('status', 500), method=rule.get('method'), count=rule.get('count', 1),
                          delay=rule.get('delay', 0.0), reason=rule.get('reason'), message=rule.get('message'))
        for fault in body.get('cluster') or []:
            extra = {k: v for k, v in fault.items() if k not in ('kind', 'namespace', 'name', 'count')}
            self.inject(fault['kind'], fault.get('namespace', '*'), fault.get('name', '*'), fault.get('count'), **extra)
        if body.get('dropWatches'):
            self.drop_watches()
        return self.to_dict()
