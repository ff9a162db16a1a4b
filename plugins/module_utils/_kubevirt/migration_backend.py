# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt backend of the migration modules and of the node drain mark.

KubeVirt moves a VirtualMachineInstance when a VirtualMachineInstanceMigration
(VMIM) object names it; its controller reports the phases. This file observes
the VMIM and the VMI, maps what it sees to a
:class:`~.._phase.migration.MigrationObservation`, and lets the shared phase
machine (``_phase.migration.next_phase``) decide the phase and the reason of a
failure, so the words are the same as on libvirt. It executes the few writes
a migration needs: create the VMIM (one per VM: one in flight is attached to),
delete it (KubeVirt's abort), and the task record (task_state MIGRATING,
vm_state unchanged afterwards) in the VM's annotations (:mod:`.taskstore`).

The drain mark of a node is ``spec.unschedulable`` (cordon), optionally a
``NoSchedule`` taint :data:`DRAIN_TAINT_KEY`, and an annotation
:data:`DRAIN_ANNOTATION` with the reason, time and controller. The scheduler
never places a pod (a VM's or a migration target's) on such a node.
"""

from __future__ import annotations

import calendar
import json
import time
from typing import NamedTuple, Optional

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, InvalidDeclaration, TaskConflict, TransitionRefused)
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import CORE_API, KUBEVIRT_API, ApiStatusError, Conflict, check_node_name, segment
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import DNS_LABEL as _DNS_LABEL, is_subdomain
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._common import journal, migrate
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_fields
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, migration, tasks, views
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get

VMIM = 'virtualmachineinstancemigrations'
TASK_LABEL = 'converge.virt/task-id'
UNSCHEDULABLE_TIMEOUT_ANNOTATION = 'kubevirt.io/migrationUnschedulablePodTimeoutSeconds'
HOSTNAME_LABEL = 'kubernetes.io/hostname'
DRAIN_ANNOTATION = 'converge.virt/drain'
DRAIN_TAINT_KEY = 'converge.virt/draining'
HISTORY_LENGTH = 5
CANCEL_GRACE = 5.0


def _ts(value):
    """Epoch seconds of an RFC 3339 timestamp, or None."""
    if not value:
        return None
    try:
        return float(calendar.timegm(time.strptime(value, '%Y-%m-%dT%H:%M:%SZ')))
    except (TypeError, ValueError):
        return None


class KubevirtMigrationOptions(NamedTuple):
    """How to migrate on KubeVirt."""

    target_node: Optional[str] = None
    source_node: Optional[str] = None
    wait_timeout: int = 600
    pending_timeout: Optional[int] = None
    poll_interval: float = 0.1


task_lease_seconds = migrate.task_lease_seconds


def validate_options(opts):
    """Raise :class:`InvalidDeclaration` naming the field of a bad option."""
    tasks.check_timeout('wait_timeout', opts.wait_timeout)
    if opts.pending_timeout is not None and opts.pending_timeout <= 0:
        raise InvalidDeclaration('pending_timeout', 'must be a positive number of seconds, got %r' % opts.pending_timeout)
    tasks.check_timeout('pending_timeout', opts.pending_timeout)
    for field in ('target_node', 'source_node'):
        if getattr(opts, field) is not None:
            check_node_name(getattr(opts, field), field)
    if opts.target_node and opts.source_node and opts.target_node == opts.source_node:
        raise InvalidDeclaration('target_node', 'is the same node as source_node (%s)' % opts.source_node)
    return opts


def split_name(entry, namespace, field='names'):
    """``namespace/name`` or ``name`` -> (namespace, name); both must be valid Kubernetes names."""
    ns, _sep, name = entry.rpartition('/') if isinstance(entry, str) else ('', '', None)
    ns = ns or namespace
    if not (is_subdomain(name) and _DNS_LABEL.match(ns or '') and len(ns) <= 63
            and entry.count('/') <= 1 and not entry.startswith('/')):
        raise InvalidDeclaration(field, 'an entry is "name" or "namespace/name" (Kubernetes names: lower case a-z, 0-9, - and .), got %r' % (entry,))
    return ns, name


# ------------------------------------------------------------------ nodes
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


# ----------------------------------------------------------- observation
def kubevirt_phase(vmim):
    """The VMIM's own phase ('' before the controller saw it)."""
    return _get(vmim, 'status', 'phase') or ''


def _reached(kphase, phase):
    return kphase in migration.ORDER and migration.ORDER.index(kphase) >= migration.ORDER.index(phase)


def _condition(obj, ctype):
    for cond in _get(obj, 'status', 'conditions') or []:
        if cond.get('type') == ctype:
            return cond
    return None


def _vmi_state_of(vmi, uid):
    state = _get(vmi, 'status', 'migrationState') or {}
    return state if uid and state.get('migrationUid') == uid else {}


def failure_kind(vmim, vmi, uid=None):
    """Why a VMIM failed, as the phase machine's fields: 'aborted', 'vm', 'pending', 'target', 'source' (None when not failed)."""
    uid = uid or _get(vmim, 'metadata', 'uid')
    vstate = _vmi_state_of(vmi, uid)
    mstate = _get(vmim, 'status', 'migrationState') or {}
    if vmim is None:
        if vstate.get('completed') and not vstate.get('failed'):
            return None
        return 'aborted'    # the migration object was deleted: KubeVirt's abort
    if kubevirt_phase(vmim) != migration.FAILED:
        return None
    if _get(vmim, 'metadata', 'deletionTimestamp') or _condition(vmim, 'MigrationAbortRequested') is not None \
            or mstate.get('abortStatus') or vstate.get('abortStatus'):
        return 'aborted'
    if vmi is None or _get(vmi, 'status', 'phase') in ('Succeeded', 'Failed') or _get(vmi, 'metadata', 'deletionTimestamp'):
        return 'vm'
    cond = _condition(vmim, 'PodScheduled')
    if cond is not None and cond.get('status') == 'False' and cond.get('reason') == 'Unschedulable':
        return 'pending'
    if vstate.get('startTimestamp') or mstate.get('startTimestamp'):
        return 'source'
    return 'target'


def failure_message(vmim):
    """The message KubeVirt gave for a failed VMIM (Failed / MigrationAbortRequested condition), or None."""
    for ctype in ('Failed', 'MigrationAbortRequested', 'PodScheduled'):
        cond = _condition(vmim, ctype)
        if cond is not None and cond.get('message'):
            return '%s: %s' % (cond.get('reason') or ctype, cond['message'])
    return None


def observation(phase, vmim, vmi, uid=None, vmim_gone=False):
    """The :class:`MigrationObservation` of a VMIM (None when it vanished) and its VMI."""
    uid = uid or _get(vmim, 'metadata', 'uid')
    vstate = _vmi_state_of(vmi, uid)
    kphase = kubevirt_phase(vmim) if vmim is not None else ''
    if vmim is None and vmim_gone:
        kphase = migration.SUCCEEDED if vstate.get('completed') and not vstate.get('failed') else migration.FAILED
    kind = failure_kind(vmim, vmi, uid) if kphase == migration.FAILED or vmim is None else None
    mstate = _get(vmim, 'status', 'migrationState') or {}
    vm_running = vmi is not None and _get(vmi, 'status', 'phase') not in ('Succeeded', 'Failed') \
        and not _get(vmi, 'metadata', 'deletionTimestamp')
    return migration.MigrationObservation(
        phase=phase,
        vm_running=vm_running and kind != 'vm',
        target_exists=_reached(kphase, migration.SCHEDULING) or bool(mstate.get('targetPod')),
        target_ready=_reached(kphase, migration.SCHEDULED),
        target_node_known=_reached(kphase, migration.PREPARING_TARGET) or bool(vstate.get('targetNode')),
        target_address_known=_reached(kphase, migration.TARGET_READY) or bool(vstate.get('targetNodeAddress')),
        transfer_started=_reached(kphase, migration.RUNNING) or bool(vstate.get('startTimestamp')),
        transfer_completed=kphase == migration.SUCCEEDED,
        target_failed=kind == 'target',
        # a VMIM that ended Failed (or vanished unfinished) after an abort is the source's answer to it: the transfer is over
        source_failed=kind == 'source' or (kind == 'aborted' and kphase == migration.FAILED),
        abort_requested=kind == 'aborted' or bool(_get(vmim, 'metadata', 'deletionTimestamp')),
        pending_seconds=1.0 if kind == 'pending' else 0.0,
        pending_timeout=0.0 if kind == 'pending' else 300.0,
    )


def migration_reason(vmim, vmi):
    """The phase machine's failure reason of a final VMIM (None when it succeeded)."""
    if kubevirt_phase(vmim) != migration.FAILED:
        return None
    _phase, reason, _path = migration.run_to_phase(observation(migration.UNSET, vmim, vmi))
    return reason or migration.SOURCE_FAILED


def progress_of(vmim, vmi):
    """Timestamps, nodes and mode of a migration (KubeVirt reports no byte counts in its objects)."""
    uid = _get(vmim, 'metadata', 'uid')
    state = dict(_get(vmim, 'status', 'migrationState') or {})
    state.update(_vmi_state_of(vmi, uid))
    start, end = _ts(state.get('startTimestamp')), _ts(state.get('endTimestamp'))
    out = {'mode': state.get('mode'), 'started_at': state.get('startTimestamp'), 'ended_at': state.get('endTimestamp'),
           'source_node': state.get('sourceNode'), 'target_node': state.get('targetNode'), 'target_pod': state.get('targetPod'),
           'abort_status': state.get('abortStatus'), 'completed': state.get('completed'), 'failed': state.get('failed')}
    if start is not None:
        out['time_elapsed'] = int(max(0.0, ((end if end is not None else time.time()) - start)) * 1000)
    return out


def phases_of(vmim):
    """The phases KubeVirt recorded for a VMIM (phaseTransitionTimestamps), in order."""
    return [t.get('phase') for t in _get(vmim, 'status', 'phaseTransitionTimestamps') or [] if t.get('phase')]


def migrations_of(client, namespace, vmi_name=None):
    """VMIMs of ``namespace`` (of one VMI when given), oldest first."""
    items = client.list(KUBEVIRT_API, namespace, VMIM)
    if vmi_name is not None:
        items = [m for m in items if _get(m, 'spec', 'vmiName') == vmi_name]
    return sorted(items, key=lambda m: (_get(m, 'metadata', 'creationTimestamp') or '', _get(m, 'metadata', 'name') or ''))


def in_flight(vmims):
    """The VMIMs that are not final (the newest last)."""
    return [m for m in vmims if kubevirt_phase(m) not in migration.FINAL]


def migration_entry(vmim, vmi):
    """One VMIM as migration_info reports it."""
    kphase = kubevirt_phase(vmim)
    prog = progress_of(vmim, vmi)
    final = kphase in migration.FINAL
    reason = migration_reason(vmim, vmi) if final else None
    outcome = None
    if final:
        outcome = 'succeeded' if kphase == migration.SUCCEEDED else ('aborted' if reason == migration.ABORTED else 'failed')
    transitions = _get(vmim, 'status', 'phaseTransitionTimestamps') or []
    return {'id': vmim['metadata']['name'], 'uid': vmim['metadata'].get('uid'), 'phase': kphase or migration.PENDING,
            'phases': phases_of(vmim), 'reason': reason, 'outcome': outcome, 'message': failure_message(vmim) if kphase == migration.FAILED else None,
            'source': prog.get('source_node'), 'target': prog.get('target_node'), 'mode': prog.get('mode'),
            'created_at': _get(vmim, 'metadata', 'creationTimestamp'), 'started_at': prog.get('started_at'),
            'finished_at': prog.get('ended_at') or (transitions[-1].get('phaseTransitionTimestamp') if final and transitions else None),
            'task_id': (_get(vmim, 'metadata', 'labels') or {}).get(TASK_LABEL), 'deleting': bool(_get(vmim, 'metadata', 'deletionTimestamp')),
            'progress': prog}


def migrations_info(client, namespace, names=None):
    """In-flight and recent migrations per VM of ``namespace``."""
    snapshot = kobserve.NamespaceSnapshot(client, namespace)
    by_vmi = {}
    for vmim in migrations_of(client, namespace):
        by_vmi.setdefault(_get(vmim, 'spec', 'vmiName'), []).append(vmim)
    out = []
    for name in sorted(n for n in by_vmi if n):
        if names and name not in names:
            continue
        obs = snapshot.observe(name)
        vmi = snapshot.vmis.get(name)
        entries = [migration_entry(m, vmi) for m in by_vmi[name]]
        flying = [e for e in entries if e['outcome'] is None]
        recent = [e for e in entries if e['outcome'] is not None][-HISTORY_LENGTH:]
        out.append({'name': name, 'namespace': namespace, 'exists': obs['exists'], 'vm_state': obs.get('vm_state'),
                    'task_state': obs.get('task_state'), 'power_state': obs.get('power_state'), 'status': obs.get('status'),
                    'node': _get(vmi, 'status', 'nodeName'), 'in_flight': flying[-1] if flying else None, 'recent': recent,
                    'last': recent[-1] if recent else None})
    return out


class _FollowKubevirt(migrate.FollowHooks):
    """The KubeVirt hooks of the shared follow loop: read the VMIM and the VMI, delete the VMIM to abort, renew by annotation."""

    API_ERROR_BUDGET = 30.0     # seconds of failed reads (an error answer, or none in time) before the follow gives up

    def __init__(self, run, vmim_name, uid, task_id, attached):  # pylint: disable=too-many-arguments
        self.run = run
        self.vmim_name = vmim_name
        self.uid = uid
        self.task_id = task_id
        self.attached = attached
        self.vmim = None
        self.api_errors_since = None

    def look(self):
        run = self.run
        try:
            vmim = run.client.get(KUBEVIRT_API, run.namespace, VMIM, self.vmim_name)
            vmi = run._vmi()  # pylint: disable=protected-access
            self.api_errors_since = None
        except BackendError:    # a read is safe to repeat
            self.api_errors_since = self.api_errors_since or time.monotonic()
            if time.monotonic() - self.api_errors_since > self.API_ERROR_BUDGET:
                raise
            time.sleep(1.0)
            return None
        self.vmim = vmim
        if vmim is not None:
            run.kphase = kubevirt_phase(vmim) or None
        run._advance(observation(run.phase, vmim, vmi, uid=self.uid, vmim_gone=vmim is None))  # pylint: disable=protected-access
        run.progress = progress_of(vmim, vmi) if vmim is not None else run.progress
        run.source_node = run.source_node or run.progress.get('source_node')
        if run.progress.get('target_node') and not run.opts.target_node:
            run.target_node = run.progress['target_node']
        if run.on_started is not None:
            announce, run.on_started = run.on_started, None
            what = 'migration %s %s' % (self.vmim_name, 'attached' if self.attached else 'started')
            announce(run._result(changed=True, msg=what, obs=run._observe()))  # pylint: disable=protected-access
        # over when KubeVirt reached its final phase too (an abort is over only when KubeVirt says so)
        return migrate.Look(run.phase, over=run.phase in migration.FINAL and (vmim is None or kubevirt_phase(vmim) in migration.FINAL))

    def abort(self):
        self.run.client.delete(KUBEVIRT_API, self.run.namespace, VMIM, self.vmim_name)     # KubeVirt's abort

    def renew(self, seconds):
        if self.task_id is None:
            return False
        run = self.run
        try:
            store = run._store(run._observe())  # pylint: disable=protected-access
            tasks.renew_task(store, self.task_id, time.time(), lease_seconds=min(seconds, tasks.MAX_LEASE_SECONDS), name=run.name)
            return True
        except ConvergeError:
            return False


# ------------------------------------------------------------ migration
class KubevirtMigration(migrate.MigrationRun):  # pylint: disable=too-many-instance-attributes
    """One VM of a namespace to move to another node (see the module docstring)."""

    def __init__(self, client, namespace, name, opts, check_mode=False, on_started=None):
        super().__init__(name, opts, owner_id(), check_mode=check_mode, on_started=on_started)
        self.client = client
        self.namespace = namespace
        self.kphase = None
        self.vmim_name = None
        self.source_node = None
        self.target_node = opts.target_node
        self.message = None
        self.closed_leftover = False
        self.journaled = None   # the task id whose begin this run wrote to the audit journal

    # ---------------------------------------------------------- plumbing
    def _observe(self):
        return kobserve.observe_vm(self.client, self.namespace, self.name)

    def _store(self, obs):
        return KubevirtTaskStore(self.client, self.namespace, self.name, inferred_vm_state=obs.get('effective_vm_state'))

    def _vmi(self):
        return self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachineinstances', self.name)

    def _result(self, changed, failed=False, msg=None, obs=None):
        result = {'name': self.name, 'namespace': self.namespace, 'changed': changed, 'failed': failed, 'phase': self.phase or None,
                  'phases': list(self.phases), 'reason': self.reason, 'kubevirt_phase': self.kphase, 'migration': self.vmim_name,
                  'source_node': self.source_node, 'target_node': self.target_node, 'progress': self.progress}
        if obs is not None:
            result['vm'] = kobserve.public_view(obs)
            result['node'] = obs.get('node')
            if self.target_node:
                result['on_target'] = obs.get('node') == self.target_node
            elif self.source_node:
                result['on_target'] = obs.get('node') not in (None, self.source_node)
        if msg:
            result['msg'] = self.client.redact(msg)
        if self.notes:
            result['notes'] = list(self.notes)
        return result

    # ---------------------------------------------------------- task record
    def _journal(self, event, task_id, succeeded=None):
        """The VM's interval in the audit journal (action live_migrate; target: the declared node, '' when KubeVirt chooses)."""
        extra = {'target': self.opts.target_node or ''}
        if event == 'begin':
            self.journaled = task_id
        else:
            extra.update(phase=self.phase or None, outcome='done' if succeeded else 'failed')
        journal.append(event, self.name, task_id, 'live_migrate', **extra)

    def _close_task(self, task_id, succeeded):
        """Finish (success) or abandon (vm_state unchanged) our task; another run may have closed it already.

        The journal's end record is written by the run that wrote the begin, or, for a task adopted from a run that is
        gone (its owner's process is dead), by the run that closes it: one end per begin.
        """
        if task_id is None:
            return
        began = self.journaled == task_id
        if began:
            self._journal('end', task_id, succeeded)
        obs = self._observe()
        if not obs['exists']:
            return
        store = self._store(obs)
        try:
            record, _version = store.load()
            if record.task_id != task_id:
                return
            adopted_from_gone = not began and owner_gone(record.owner)
            if succeeded:
                tasks.finish_task(store, task_id, name=self.name)
            else:
                tasks.abandon_task(store, task_id, name=self.name, rolled_back=True)
            if adopted_from_gone:
                self._journal('end', task_id, succeeded)
        except TaskConflict:
            self.notes.append('the task %s was closed by another run' % task_id)

    def _close_leftover_task(self, obs, vmims):
        """A MIGRATING record whose migration is over (its run was interrupted): close it as its VMIM ended."""
        store = self._store(obs)
        record, _version = store.load()
        if record.task_state != 'MIGRATING' or record.action != 'live_migrate':
            return obs
        mine = [m for m in vmims if (_get(m, 'metadata', 'labels') or {}).get(TASK_LABEL) == record.task_id]
        if in_flight(mine):
            return obs
        if not mine and not (owner_gone(record.owner) or record.stale(time.time())):
            return obs      # its VMIM is not created yet: the other run is still starting it
        if self.check_mode:
            self.closed_leftover = True
            self.notes.append('would close the task %s left by an interrupted run' % record.task_id)
            return obs
        succeeded = bool(mine) and kubevirt_phase(mine[-1]) == migration.SUCCEEDED
        try:
            if succeeded:
                tasks.finish_task(store, record.task_id, name=self.name)
            else:
                tasks.abandon_task(store, record.task_id, name=self.name, rolled_back=True)
            self.closed_leftover = True
            self.notes.append('closed the task %s left by an interrupted run (its migration %s)' % (
                record.task_id, 'succeeded' if succeeded else 'ended without success'))
        except TaskConflict:
            pass
        return self._observe()

    def _recover_stale(self, obs):
        """A task of another kind whose run is gone, or whose lease no task can have written: recovered as the vm module does.

        Returns the observation to plan from (the task cleared; in check mode as it would be). A live task is
        left alone (refused next, naming it).
        """
        cleared = views.clear_stale(self._store(obs), kobserve.intended_power(obs), time.time(), owner_gone, name=self.name, dry_run=self.check_mode)
        if cleared is None:
            return obs
        self.notes.append(cleared.note(dry_run=self.check_mode))
        if self.check_mode:
            return dict(obs, task_state=None, task_id=None, effective_vm_state=cleared.vm_state)
        return self._observe()

    # ---------------------------------------------------------- converge
    def converge(self):
        """Run the migration (state finished / started); return the result dict."""
        obs = self._observe()
        if not obs['exists']:
            raise BackendError('VirtualMachine %s/%s does not exist' % (self.namespace, self.name))
        vmi = obs.get('vmi')
        self.source_node = obs.get('node')
        vmims = migrations_of(self.client, self.namespace, self.name)
        flying = in_flight(vmims)
        if flying:
            return self._attach(obs, flying[-1])
        obs = self._close_leftover_task(obs, vmims)
        if obs.get('task_state') is not None and not self.closed_leftover:
            obs = self._recover_stale(obs)
        running = vmi is not None and _get(vmi, 'status', 'phase') == 'Running' and not _get(vmi, 'metadata', 'deletionTimestamp')
        if running and self.opts.target_node and obs.get('node') == self.opts.target_node:
            return self._result(changed=self.closed_leftover, obs=obs,
                                msg='VM %s/%s already runs on node %s' % (self.namespace, self.name, self.opts.target_node))
        if running and self.opts.source_node and obs.get('node') != self.opts.source_node:
            return self._result(changed=self.closed_leftover, msg='VM %s/%s does not run on node %s (it runs on %s)' % (
                self.namespace, self.name, self.opts.source_node, obs.get('node')), obs=obs)
        if not running:
            raise TransitionRefused('live_migrate', obs.get('effective_vm_state'), obs.get('task_state'),
                                    reason='the VM has no running instance (status %s): KubeVirt migrates running instances only'
                                    % obs.get('status'))
        actions.check_action('live_migrate', obs.get('effective_vm_state'), obs.get('task_state'))
        if obs.get('task_state') is not None:
            raise TaskConflict(self.name, obs.get('task_id'), obs.get('task_state'), owner=obs.get('task_owner'))
        migratable = _condition(vmi, 'LiveMigratable')
        if migratable is None or migratable.get('status') != 'True':
            detail = '%s: %s' % ((migratable or {}).get('reason') or 'no LiveMigratable condition', (migratable or {}).get('message') or '')
            raise TransitionRefused('live_migrate', obs.get('effective_vm_state'), obs.get('task_state'),
                                    reason='the instance is not LiveMigratable (%s)' % detail.strip().rstrip(':'))
        refused = self._check_target(vmi)
        if refused is not None:
            return refused
        if self.check_mode:
            self._advance(migration.MigrationObservation(target_exists=True, target_ready=True, target_node_known=True,
                                                         target_address_known=True, transfer_started=True, transfer_completed=True))
            return self._result(changed=True, msg='check mode: the VM would be migrated', obs=obs)
        return self._start(obs)

    def _check_target(self, vmi):
        """Refuse a target node that does not exist or takes no new pods (cordoned, tainted, not Ready)."""
        if not self.opts.target_node:
            return None
        node = read_node(self.client, self.opts.target_node)
        if node is None:
            raise InvalidDeclaration('target_node', 'no node called %r in the cluster' % self.opts.target_node)
        blockers = node_blockers(node, _get(vmi, 'spec', 'tolerations') or [])
        if not blockers:
            return None
        self._advance(migration.MigrationObservation())
        self._advance(migration.MigrationObservation(phase=self.phase, target_draining=True))
        return self._result(changed=False, failed=True, obs=self._observe(),
                            msg='target node %s takes no new VM (%s); no migration was created' % (self.opts.target_node, ', '.join(blockers)))

    def _body(self, task_id):
        body = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstanceMigration',
                'metadata': {'generateName': '%s-converge-' % self.name[:40], 'namespace': self.namespace,
                             'labels': {TASK_LABEL: task_id}},
                'spec': {'vmiName': self.name}}
        if self.opts.target_node:
            body['spec']['addedNodeSelector'] = {HOSTNAME_LABEL: self.opts.target_node}
        if self.opts.pending_timeout:
            body['metadata']['annotations'] = {UNSCHEDULABLE_TIMEOUT_ANNOTATION: str(int(self.opts.pending_timeout))}
        return body

    def _start(self, obs):
        task_id = tasks.new_task_id()
        lease = task_lease_seconds(self.opts)
        store = self._store(obs)
        taken = tasks.take_task(store, 'live_migrate', task_id, time.time(), lease_seconds=lease, owner=self.owner, name=self.name)
        self._journal('begin', task_id)
        try:
            vmim = self.client.create(KUBEVIRT_API, self.namespace, VMIM, self._body(task_id))
        except ConvergeError as exc:
            self._close_task(task_id, succeeded=False)
            raise BackendError('creating the migration of VM %s/%s failed: %s' % (self.namespace, self.name, exc.message))
        self.vmim_name = vmim['metadata']['name']
        return self._follow(vmim['metadata']['name'], vmim['metadata']['uid'], task_id, lease_until=taken.lease_until)

    def _attach(self, obs, vmim):
        """A migration of this VM is in flight: follow it (one per VM), under our task when the VM is idle."""
        self.vmim_name = vmim['metadata']['name']
        self.kphase = kubevirt_phase(vmim) or None
        label = (_get(vmim, 'metadata', 'labels') or {}).get(TASK_LABEL)
        self.notes.append('attached to the migration in flight %s (phase %s)' % (self.vmim_name, self.kphase or migration.PENDING))
        if self.check_mode:
            self._advance(observation(migration.UNSET, vmim, obs.get('vmi')))
            return self._result(changed=True, msg='check mode: would follow the migration in flight %s' % self.vmim_name, obs=obs)
        task_id = lease_until = None
        record, _version = self._store(obs).load()
        if record.task_state == 'MIGRATING' and record.task_id == label:
            task_id = label             # the run that started it is gone or still following: either closes it
            lease_until = record.lease_until
        elif record.idle() and obs.get('effective_vm_state') in ('ACTIVE', 'PAUSED'):
            task_id = label or tasks.new_task_id()
            try:
                lease_until = tasks.take_task(self._store(obs), 'live_migrate', task_id, time.time(), lease_seconds=task_lease_seconds(self.opts),
                                              owner=self.owner, name=self.name).lease_until
                self._journal('begin', task_id)
            except ConvergeError:
                task_id = None
        return self._follow(self.vmim_name, vmim['metadata']['uid'], task_id, attached=True, lease_until=lease_until)

    def _follow(self, vmim_name, uid, task_id, attached=False, lease_until=None):
        """Follow the VMIM and the VMI with the shared loop (:mod:`.._common.migrate`); then close the task."""
        hooks = _FollowKubevirt(self, vmim_name, uid, task_id, attached)
        outcome = migrate.follow(hooks, migrate.Timeouts(wait_timeout=self.opts.wait_timeout, poll_interval=self.opts.poll_interval),
                                 lease_until=lease_until)
        self.notes.extend(outcome.notes)
        vmim = hooks.vmim
        if vmim is not None and self.phase == migration.FAILED:
            self.message = failure_message(vmim)
        succeeded = self.phase == migration.SUCCEEDED
        self._close_task(task_id, succeeded)
        obs = self._observe()
        if succeeded and self.opts.target_node and obs.get('node') != self.opts.target_node:
            text = ('migration %s of VM %s/%s succeeded but the VM runs on node %s, not on target_node %s (a KubeVirt without '
                    'spec.addedNodeSelector, before 1.5, lets its scheduler choose)')
            return self._result(changed=True, failed=True, obs=obs,
                                msg=text % (vmim_name, self.namespace, self.name, obs.get('node'), self.opts.target_node))
        if succeeded:
            return self._result(changed=True, obs=obs)
        where = obs.get('node')
        msg = 'migration %s of VM %s/%s %s (%s)%s; the VM %s' % (
            vmim_name, self.namespace, self.name, 'failed' if self.phase == migration.FAILED else 'did not end in time',
            self.reason or 'no reason reported', ': %s' % self.message if self.message else '',
            'keeps running on node %s' % where if where else 'has no running instance')
        return self._result(changed=True, failed=True, msg=msg, obs=obs)

    # ---------------------------------------------------------- cancel
    def cancel(self):
        """Abort the migration in flight by deleting its VMIM (KubeVirt's abort); return the result dict."""
        obs = self._observe()
        if not obs['exists']:
            raise BackendError('VirtualMachine %s/%s does not exist' % (self.namespace, self.name))
        vmims = migrations_of(self.client, self.namespace, self.name)
        flying = in_flight(vmims)
        if not flying:
            obs = self._close_leftover_task(obs, vmims)
            return self._result(changed=self.closed_leftover, msg='no migration of VM %s/%s is in flight' % (self.namespace, self.name),
                                obs=obs)
        vmim = flying[-1]
        self.vmim_name = vmim['metadata']['name']
        self.kphase = kubevirt_phase(vmim) or migration.PENDING
        self.source_node = obs.get('node')
        self._advance(observation(migration.UNSET, vmim, obs.get('vmi')))
        plan = migration.abort_plan(self.phase)
        if self.check_mode:
            return self._result(changed=True, msg='check mode: would delete %s (%s)' % (self.vmim_name, plan), obs=obs)
        for other in flying:
            self.client.delete(KUBEVIRT_API, self.namespace, VMIM, other['metadata']['name'])
        uid = vmim['metadata']['uid']

        def over():
            current = self.client.get(KUBEVIRT_API, self.namespace, VMIM, self.vmim_name)
            vmi = self._vmi()
            if current is not None:
                self.kphase = kubevirt_phase(current) or self.kphase
            self._advance(observation(self.phase, current, vmi, uid=uid, vmim_gone=current is None))
            if current is None or kubevirt_phase(current) in migration.FINAL:
                self.progress = progress_of(current, vmi) if current is not None else self.progress
                return True
            return False
        migrate.wait_cancelled(over, self.opts.wait_timeout, self.opts.poll_interval)
        self._wait_task_closed(vmims)
        return self._result(changed=True, msg='migration %s aborted (%s)' % (self.vmim_name, plan), obs=self._observe())

    def _wait_task_closed(self, vmims):
        """The run that follows the migration closes its task; when it is gone (or does not close it), close it here."""
        end = time.monotonic() + CANCEL_GRACE
        while True:
            obs = self._observe()
            record, _version = self._store(obs).load()
            if record.task_state != 'MIGRATING':
                return
            if owner_gone(record.owner) or record.stale(time.time()) or time.monotonic() > end:
                labels = [(_get(m, 'metadata', 'labels') or {}).get(TASK_LABEL) for m in vmims]
                if record.task_id in labels or owner_gone(record.owner) or record.stale(time.time()):
                    try:
                        tasks.abandon_task(self._store(obs), record.task_id, name=self.name, rolled_back=True)
                        self.notes.append('closed the task %s of the aborted migration' % record.task_id)
                    except TaskConflict:
                        pass
                return
            time.sleep(0.2)


def migrate_many(client, namespace, entries, opts, check_mode, parallel):
    """Migrate every VM of ``entries`` (name or namespace/name), ``parallel`` at a time; one result per VM."""
    targets = [split_name(e, namespace, 'names[%d]' % index) for index, e in enumerate(entries)]
    seen = set()
    for key in targets:
        if key in seen:
            raise InvalidDeclaration('names', 'a VM is named more than once: %s/%s' % key)
        seen.add(key)

    def failed(key, fields):
        return dict(redact_fields(fields, client.redact), name=key[1], namespace=key[0], changed=False, failed=True)
    return migrate.migrate_each(targets, lambda key: KubevirtMigration(client, key[0], key[1], opts, check_mode=check_mode).converge(),
                                failed, parallel)
