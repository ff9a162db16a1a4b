# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A KubeVirt node: its drain mark and what keeps a migration target off it, and its summary for the host module.

The drain mark of a node is ``spec.unschedulable`` (cordon), optionally a ``NoSchedule`` taint :data:`DRAIN_TAINT_KEY`,
and an annotation :data:`DRAIN_ANNOTATION` with the reason, time and controller. The scheduler never places a pod (a
VM's or a migration target's) on such a node.
"""

from __future__ import annotations

import json
import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import ApiStatusError, CORE_API, Conflict, KUBEVIRT_API, segment

HOSTNAME_LABEL = 'kubernetes.io/hostname'
DRAIN_ANNOTATION = 'converge.virt/drain'
DRAIN_TAINT_KEY = 'converge.virt/draining'


def node_path(name):
    """``/api/v1/nodes/NAME``."""
    return '%s/nodes/%s' % (CORE_API, segment(name))


def read_node(client, name):
    """The Node object or None."""
    try:
        return client.request('GET', node_path(name), what='read node %s' % name)
    except ApiStatusError as exc:
        if exc.code == 404:
            return None
        raise


def _tolerates(tol, taint):
    if tol.get('effect') and tol['effect'] != taint.get('effect'):
        return False
    if tol.get('operator') == 'Exists':
        return not tol.get('key') or tol['key'] == taint.get('key')
    return tol.get('key') == taint.get('key') and tol.get('value', '') == taint.get('value', '')


def node_blockers(node, tolerations=()):
    """Why the scheduler places no new pod on ``node``: cordoned, untolerated NoSchedule/NoExecute taints, not Ready."""
    spec = node.get('spec') or {}
    out = []
    if spec.get('unschedulable'):
        out.append('cordoned (spec.unschedulable)')
    for taint in spec.get('taints') or []:
        if taint.get('effect') in ('NoSchedule', 'NoExecute') and not any(_tolerates(t, taint) for t in tolerations or ()):
            out.append('taint %s%s:%s' % (taint.get('key'), '=' + taint['value'] if taint.get('value') else '', taint.get('effect')))
    ready = [c for c in _get(node, 'status', 'conditions') or [] if c.get('type') == 'Ready']
    if ready and ready[0].get('status') != 'True':
        out.append('not Ready')
    return out


def drain_mark(node):
    """Our drain record of ``node`` (dict: reason, since, by) or None.

    A record on a node that is no longer draining (uncordoned and untainted by someone else, e.g. ``kubectl uncordon``) is
    stale: :func:`live_drain_mark` ignores it and the next :func:`set_drain` writes a new one."""
    raw = (_get(node, 'metadata', 'annotations') or {}).get(DRAIN_ANNOTATION)
    if raw is None:
        return None
    try:
        mark = json.loads(raw)
    except ValueError:
        mark = {}
    return mark if isinstance(mark, dict) else {}


def _our_taint(node):
    return [t for t in (_get(node, 'spec', 'taints') or []) if t.get('key') == DRAIN_TAINT_KEY]


def node_draining(node):
    """A node is draining when it is cordoned or carries our taint."""
    return bool(_get(node, 'spec', 'unschedulable')) or bool(_our_taint(node))


def live_drain_mark(node):
    """:func:`drain_mark` of a node that is draining; None for a stale record on a node that is not."""
    return drain_mark(node) if node_draining(node) else None


def _patch_node(client, name, build, check_mode):
    """Merge-patch the node with ``build(node)`` (None: nothing to do), guarded by resourceVersion; return True when changed."""
    for _attempt in range(8):
        node = read_node(client, name)
        if node is None:
            raise InvalidDeclaration('node', 'no node called %r in the cluster' % name)
        patch = build(node)
        if patch is None:
            return False
        if check_mode:
            return True
        patch.setdefault('metadata', {})['resourceVersion'] = node['metadata'].get('resourceVersion')
        try:
            client.request('PATCH', node_path(name), body=patch, content_type='application/merge-patch+json', what='patch node %s' % name)
            return True
        except Conflict:
            continue    # the kubelet or another controller wrote the node in between: read it again
    raise BackendError('node %s changed under every attempt to patch it' % name)


def set_drain(client, name, reason, taint, by, check_mode=False):
    """Cordon the node, add our taint (with ``taint``) and the drain annotation; True when something changed."""
    def build(node):
        patch = {}
        if not _get(node, 'spec', 'unschedulable'):
            patch.setdefault('spec', {})['unschedulable'] = True
        if taint and not _our_taint(node):
            taints = list(_get(node, 'spec', 'taints') or [])
            taints.append({'key': DRAIN_TAINT_KEY, 'effect': 'NoSchedule', 'value': 'true'})
            patch.setdefault('spec', {})['taints'] = taints
        if live_drain_mark(node) is None:   # none, or a stale one left by an uncordon behind our back: this drain's reason and time
            patch['metadata'] = {'annotations': {DRAIN_ANNOTATION: json.dumps({'reason': reason or '', 'since': time.time(), 'by': by},
                                                                              sort_keys=True)}}
        return patch or None
    return _patch_node(client, name, build, check_mode)


def clear_drain(client, name, check_mode=False):
    """Uncordon the node, remove our taint and annotation (other taints stay); True when something changed."""
    def build(node):
        patch = {}
        if _get(node, 'spec', 'unschedulable'):
            patch.setdefault('spec', {})['unschedulable'] = None
        if _our_taint(node):
            kept = [t for t in _get(node, 'spec', 'taints') or [] if t.get('key') != DRAIN_TAINT_KEY]
            patch.setdefault('spec', {})['taints'] = kept or None
        if drain_mark(node) is not None:
            patch['metadata'] = {'annotations': {DRAIN_ANNOTATION: None}}
        return patch or None
    return _patch_node(client, name, build, check_mode)


def vmis_on_node(client, node_name, namespace):
    """Every VMI whose instance runs on ``node_name`` (all namespaces; only ``namespace`` when listing them all is forbidden)."""
    notes = []
    try:
        items = client.request('GET', '%s/%s' % (KUBEVIRT_API, 'virtualmachineinstances'), what='list virtualmachineinstances')
        items = (items or {}).get('items') or []
    except ApiStatusError as exc:
        if exc.code != 403:
            raise
        notes.append('listing VMIs of every namespace is forbidden: only namespace %s was read' % namespace)
        items = client.list(KUBEVIRT_API, namespace, 'virtualmachineinstances')
    return [v for v in items if _get(v, 'status', 'nodeName') == node_name], notes


def node_summary(client, node, namespace):
    """The host dict of a node: drain state and the VMs on it."""
    name = node['metadata']['name']
    vmis, notes = vmis_on_node(client, name, namespace)
    vms = []
    for vmi in vmis:
        phase = _get(vmi, 'status', 'phase') or ''
        vms.append({'name': vmi['metadata']['name'], 'namespace': vmi['metadata'].get('namespace'), 'phase': phase,
                    'running': phase not in ('Succeeded', 'Failed') and not _get(vmi, 'metadata', 'deletionTimestamp'),
                    'migrating': bool(_get(vmi, 'status', 'migrationState', 'startTimestamp')
                                      and not _get(vmi, 'status', 'migrationState', 'endTimestamp')),
                    'memory': _get(vmi, 'spec', 'domain', 'resources', 'requests', 'memory')})
    vms.sort(key=lambda v: (v['namespace'] or '', v['name']))
    ready = [c for c in _get(node, 'status', 'conditions') or [] if c.get('type') == 'Ready']
    result = {'node': name, 'hostname': (_get(node, 'metadata', 'labels') or {}).get(HOSTNAME_LABEL, name),
              'unschedulable': bool(_get(node, 'spec', 'unschedulable')), 'taints': list(_get(node, 'spec', 'taints') or []),
              'ready': bool(ready and ready[0].get('status') == 'True'), 'draining': node_draining(node), 'drain': live_drain_mark(node),
              'blockers': node_blockers(node), 'allocatable_memory': _get(node, 'status', 'allocatable', 'memory'),
              'vms': vms, 'running_vms': ['%s/%s' % (v['namespace'], v['name']) for v in vms if v['running']], 'stopped_vms': []}
    if notes:
        result['notes'] = notes
    return result
