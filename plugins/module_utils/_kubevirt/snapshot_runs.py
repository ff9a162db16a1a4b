# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runners of the snapshot_info module (selected through _common.registry)."""

from __future__ import annotations

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


def run_snapshot_info(module):
    """snapshot_info with backend kubevirt."""
    with kubevirt_client.ModuleSession(module) as session:
        with session.connect() as client:
            result = report(client, module.params['namespace'], module.params['vm'], module.params['name'])
    module.exit_json(**session.redact_result(result))
