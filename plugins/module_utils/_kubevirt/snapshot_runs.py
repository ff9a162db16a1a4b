# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt snapshot module (the runners of snapshot and snapshot_info: _common/snapshot_run.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import snapshot_run as common
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshots as backend
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase


def report(client, namespace, vm, names):
    """The result dict: the VirtualMachineSnapshots of ``vm`` (every VM's when None) in ``namespace``, oldest first."""
    task_state = None
    if vm:
        observer = backend.SnapshotObserver(client, namespace, vm)
        objects = observer.objects()
        task_state = observer.obs.get('task_state')
    else:
        objects = dict((obj['metadata']['name'], obj) for obj in client.list(backend.SNAPSHOT_API, namespace, 'virtualmachinesnapshots'))
    actual = dict((name, backend.actual_snapshot(obj)) for name, obj in objects.items())
    ordered = [snap.name for snap in phase.age_order(list(actual.values()))]
    if names:
        entries = [dict(backend.public_snapshot(objects[name]), exists=True) if name in objects
                   else {'name': name, 'vm': vm, 'namespace': namespace, 'exists': False, 'phase': phase.ABSENT} for name in names]
    else:
        entries = [dict(backend.public_snapshot(objects[name]), exists=True) for name in ordered]
    return {'changed': False, 'snapshots': entries, 'current': None, 'task_state': task_state}


def info(client, params):
    """snapshot_info with backend kubevirt: the snapshots of ``vm`` (every VM's when not given) in the namespace."""
    return report(client, params['namespace'], params['vm'], params['name'])


def check_kubernetes_name(field, value):
    """A VirtualMachine or VirtualMachineSnapshot name: a DNS subdomain (lower case, digits, '-' and '.', at most 253)."""
    if not value or len(value) > 253 or not kubevirt_client.is_subdomain(value):
        raise InvalidDeclaration(field, '%r is not a valid Kubernetes name (a DNS subdomain: lower case letters, digits, \'-\' and \'.\', '
                                        'starting and ending with a letter or digit, at most 253 characters)' % value)


def converge(client, params, check_mode, now=None):  # pylint: disable=too-many-locals
    """One VM of the snapshot module: observe, plan, refuse or execute; return the result dict."""
    namespace = params['namespace']
    check_kubernetes_name('vm', params['vm'])
    check_kubernetes_name('name', params['name'])
    check_kubernetes_name('namespace', namespace)
    common.parse_older_than(params.get('older_than'))
    failure_deadline = common.parse_older_than(params.get('failure_deadline'), field='failure_deadline')
    target = params.get('target_vm')
    if target is not None:
        check_kubernetes_name('target_vm', target)
        if params['state'] != 'restored':
            raise InvalidDeclaration('target_vm', 'applies with state=restored only')
        if target == params['vm']:
            target = None
    observer = backend.SnapshotObserver(client, namespace, params['vm'])
    backend.check_task_free(observer)
    safety = None
    if params['state'] == 'restored' and params['safety_snapshot'] and target is None:
        safety = common.safety_name(params['name'], now=now, kubernetes=True)
    if target is None:
        steps, before = backend.refuse_or_plan(observer, dict(params, memory=None), safety)
    else:
        steps, before = backend.plan_restore_into_new_vm(observer, params['name'], target)
    steps = common.add_older_than(steps, before, params)
    names_before = sorted(snap.name for snap in before)
    operations = common.operations_of(steps)
    # a killed run's step had finished in KubeVirt: nothing to do but the task it left on the VM
    cleared = None if steps else backend.clear_stale_snapshot_task(observer, check_mode)
    if not check_mode:
        runner = backend.Runner(observer, wait_timeout=params.get('wait_timeout') or 300, deletion_policy=params.get('deletion_policy'),
                                failure_deadline=failure_deadline)
        operations = runner.run(steps)
        if params['state'] == 'present' and params['name'] in names_before:
            # taken by an earlier run that stopped waiting (wait_timeout): KubeVirt is still at it, so this run waits (or
            # fails with KubeVirt's error when it failed; a failed snapshot is deleted with state absent and taken again)
            runner.await_ready(params['name'])
    if cleared:
        operations.append(cleared)
    objects = observer.objects()
    names_after = common.predicted_names(names_before, steps) if check_mode else sorted(objects)
    found = objects.get(params['name'])
    snapshot = {'phase': phase.ABSENT}
    if found is not None and not (check_mode and params['state'] == 'absent'):
        snapshot = backend.public_snapshot(found)
        if params['state'] == 'restored' and not (check_mode and steps):
            snapshot['phase'] = phase.RESTORED
    elif check_mode and params['state'] == 'present':
        snapshot = {'name': params['name'], 'vm': params['vm'], 'namespace': namespace, 'phase': phase.PENDING, 'memory': False,
                    'kind': 'VirtualMachineSnapshot', 'consistency': phase.CRASH_CONSISTENT, 'deletion_policy': params.get('deletion_policy')}
    result = {'changed': bool(steps) or bool(cleared), 'operations': operations, 'snapshots': names_after, 'snapshot': snapshot,
              'diff': {'before': {'snapshots': names_before}, 'after': {'snapshots': names_after}}}
    if safety:
        result['safety_snapshot'] = safety
    if target is not None:
        result['target_vm'] = target
    return result
