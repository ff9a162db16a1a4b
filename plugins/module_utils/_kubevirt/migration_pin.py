# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a KubeVirt migration can go: the instance's own placement against ``target_node`` (checked before a migration
is created) and the scheduling of the migration's target pod (read while the migration waits for it).

KubeVirt builds the target pod from the instance's own pod template: the VMI's ``nodeSelector`` and its required node
affinity stay in it, and the migration's ``addedNodeSelector`` only adds to them. A VM pinned to its node (for example
``nodeSelector: {kubernetes.io/hostname: node1}``) therefore cannot be moved to another node: its target pod stays
Pending (Unschedulable) until KubeVirt's unschedulable timeout (300 s by default) deletes it. The rules written here
are the scheduler's for these two fields (NodeAffinity plugin): every ``nodeSelector`` pair must be a label of the
node; the ``nodeSelectorTerms`` of the required affinity are ORed, the expressions of a term ANDed (In, NotIn, Exists,
DoesNotExist, Gt, Lt on labels; In, NotIn on the field metadata.name), a term with nothing in it matches no node.
"""

from __future__ import annotations

import json

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import CORE_API

MIGRATION_JOB_LABEL = 'kubevirt.io/migrationJobUID'     # KubeVirt's label of a migration's target pod (the VMIM's uid)
SHOWN = 300     # characters of a placement or a scheduler message quoted in an error


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _requirement(expression, values_of):
    """Whether one matchExpressions / matchFields entry holds for the node (None: an operator this code does not know)."""
    key, operator, values = expression.get('key'), expression.get('operator'), list(expression.get('values') or [])
    present, value = values_of(key)
    if operator == 'In':
        return present and value in values
    if operator == 'NotIn':
        return not present or value not in values
    if operator == 'Exists':
        return present
    if operator == 'DoesNotExist':
        return not present
    if operator in ('Gt', 'Lt'):
        mine, bound = _int(value) if present else None, _int(values[0]) if len(values) == 1 else None
        if mine is None or bound is None:
            return False
        return mine > bound if operator == 'Gt' else mine < bound
    return None


def _term(term, node):
    """Whether a nodeSelectorTerm selects the node (None when it cannot be told)."""
    labels = _get(node, 'metadata', 'labels') or {}
    fields = {'metadata.name': _get(node, 'metadata', 'name')}
    checks = [(e, lambda key: (key in labels, labels.get(key))) for e in term.get('matchExpressions') or []]
    checks += [(e, lambda key: (key in fields, fields.get(key))) for e in term.get('matchFields') or []]
    if not checks:
        return False
    unknown = False
    for expression, values_of in checks:
        held = _requirement(expression, values_of)
        if held is False:
            return False
        unknown = unknown or held is None
    return None if unknown else True


def placement_excluding(vmi, node):
    """The part of the instance's own placement that excludes ``node`` (text for an error), or None when the node
    fits it or it cannot be told here (an operator not known: the scheduler decides)."""
    labels = _get(node, 'metadata', 'labels') or {}
    selector = _get(vmi, 'spec', 'nodeSelector') or {}
    wrong = sorted((key, value) for key, value in selector.items() if labels.get(key) != value)
    if wrong:
        return 'nodeSelector %s' % ', '.join('%s=%s' % pair for pair in wrong)
    required = _get(vmi, 'spec', 'affinity', 'nodeAffinity', 'requiredDuringSchedulingIgnoredDuringExecution')
    if not required:
        return None
    terms = required.get('nodeSelectorTerms') or []
    results = [_term(term, node) for term in terms]
    if any(result is not False for result in results):
        return None
    return 'required node affinity %s' % json.dumps(terms, sort_keys=True, separators=(',', ':'))


def check_placement(vmi, node, target_node, current_node):
    """Raise :class:`InvalidDeclaration` (field target_node) when the instance's own placement excludes the target."""
    excluding = placement_excluding(vmi, node)
    if excluding is None:
        return
    if len(excluding) > SHOWN:
        excluding = excluding[:SHOWN] + '...'
    raise InvalidDeclaration('target_node', (
        'node %s is excluded by the VM\'s own placement, %s (the VM runs on node %s): KubeVirt keeps that placement in the '
        'migration\'s target pod, which would stay Pending; no migration was created. Move a pinned VM by changing its '
        'placement (and restarting it), not with a migration') % (target_node, excluding, current_node or 'unknown'))


def _condition(pod, ctype):
    for cond in _get(pod, 'status', 'conditions') or []:
        if cond.get('type') == ctype:
            return cond
    return None


def unschedulable_target(client, namespace, vmim_uid):
    """``(pod name, the scheduler's message)`` when the migration's target pod is Pending and the scheduler reported it
    Unschedulable (PodScheduled False, reason Unschedulable); None otherwise. The client's errors are raised."""
    pods = client.list(CORE_API, namespace, 'pods', label_selector='%s=%s' % (MIGRATION_JOB_LABEL, vmim_uid))
    for pod in pods:
        if _get(pod, 'status', 'phase') not in (None, 'Pending') or _get(pod, 'metadata', 'deletionTimestamp'):
            continue
        cond = _condition(pod, 'PodScheduled')
        if cond is not None and cond.get('status') == 'False' and cond.get('reason') == 'Unschedulable':
            message = (cond.get('message') or 'no message from the scheduler').strip()
            return _get(pod, 'metadata', 'name'), message[:SHOWN] + ('...' if len(message) > SHOWN else '')
    return None
