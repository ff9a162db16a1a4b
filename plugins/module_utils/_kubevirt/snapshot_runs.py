# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt snapshot module: the snapshot protocol on a VirtualMachine (its loop: _common/snapshot_driver.py; the runners
of snapshot and snapshot_info: _common/snapshot_run.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import snapshot_run as common
from ansible_collections.converge.virt.plugins.module_utils._common.snapshot_driver import SnapshotBackend, converge_snapshot
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


class KubevirtSnapshots(SnapshotBackend):  # pylint: disable=too-many-instance-attributes
    """The VirtualMachineSnapshots of one VirtualMachine: the hooks of _common/snapshot_driver.converge_snapshot."""

    def __init__(self, client, params, target, failure_deadline, now=None):  # pylint: disable=too-many-arguments
        self.vm = params['vm']
        self.namespace = params['namespace']
        self.target = target
        self.failure_deadline = failure_deadline
        self.now = now
        self.observer = backend.SnapshotObserver(client, self.namespace, self.vm)
        self.objects = {}

    def check_task_free(self):
        backend.check_task_free(self.observer)

    def declared(self, params):
        return dict(params, memory=None)

    def safety_name(self, declared):
        if declared['state'] == 'restored' and declared['safety_snapshot'] and self.target is None:
            return common.safety_name(declared['name'], now=self.now, kubernetes=True)
        return None

    def plan(self, declared, safety):
        if self.target is None:
            return backend.refuse_or_plan(self.observer, declared, safety)
        return backend.plan_restore_into_new_vm(self.observer, declared['name'], self.target)

    def clear_stale_task(self, check_mode):
        return backend.clear_stale_snapshot_task(self.observer, check_mode)

    def execute(self, steps, declared, names_before):
        runner = backend.Runner(self.observer, wait_timeout=declared.get('wait_timeout') or 300, deletion_policy=declared.get('deletion_policy'),
                                failure_deadline=self.failure_deadline)
        operations = runner.run(steps)
        if declared['state'] == 'present' and declared['name'] in names_before:
            # taken by an earlier run that stopped waiting (wait_timeout): KubeVirt is still at it, so this run waits (or
            # fails with KubeVirt's error when it failed; a failed snapshot is deleted with state absent and taken again)
            runner.await_ready(declared['name'])
        return operations

    def after(self, name):
        objects = self.observer.objects()
        found = objects.get(name)
        return sorted(objects), None if found is None else backend.public_snapshot(found)

    def pending(self, declared):
        return {'name': declared['name'], 'vm': self.vm, 'namespace': self.namespace, 'phase': phase.PENDING, 'memory': False,
                'kind': 'VirtualMachineSnapshot', 'consistency': phase.CRASH_CONSISTENT, 'deletion_policy': declared.get('deletion_policy')}

    def shows_restored(self, check_mode, steps):
        return not (check_mode and steps)

    def result_extra(self):
        return {} if self.target is None else {'target_vm': self.target}


def snapshots(client, params, now=None):
    """The snapshot module's backend for VirtualMachine ``vm`` (its names and durations checked first; the VM must exist)."""
    check_kubernetes_name('vm', params['vm'])
    check_kubernetes_name('name', params['name'])
    check_kubernetes_name('namespace', params['namespace'])
    common.parse_older_than(params.get('older_than'))
    failure_deadline = common.parse_older_than(params.get('failure_deadline'), field='failure_deadline')
    target = params.get('target_vm')
    if target is not None:
        check_kubernetes_name('target_vm', target)
        if params['state'] != 'restored':
            raise InvalidDeclaration('target_vm', 'applies with state=restored only')
        if target == params['vm']:
            target = None
    return KubevirtSnapshots(client, params, target, failure_deadline, now=now)


def converge(client, params, check_mode, now=None):
    """One VM of the snapshot module: the driver's loop on :func:`snapshots` (the result dict; ``now``: the safety snapshot's time)."""
    return converge_snapshot(snapshots(client, params, now=now), params, check_mode)
