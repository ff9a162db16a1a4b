# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt snapshot module (the runners of snapshot and snapshot_info: _common/snapshot_run.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import snapshot_run as common
from ansible_collections.converge.virt.plugins.module_utils._libvirt import snapshots as backend
from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase
from ansible_collections.converge.virt.plugins.module_utils._phase import states


def report(connection, vm, names):
    """The result dict for VM ``vm``."""
    observer = backend.SnapshotObserver(connection, vm)
    snaps, current = observer.snapshots()
    by_name = dict((snap.name, snap) for snap in snaps)
    ordered = phase.age_order(snaps)
    if names:
        entries = [dict(backend.public_snapshot(by_name[name], vm, current), exists=True) if name in by_name
                   else {'name': name, 'vm': vm, 'exists': False, 'phase': 'absent'} for name in names]
    else:
        entries = [dict(backend.public_snapshot(snap, vm, current), exists=True) for snap in ordered]
    meta = taskstore.read_metadata(observer.dom)
    return {'changed': False, 'snapshots': entries, 'current': current, 'task_state': meta.get('task_state') or None}


def info(connection, params):
    """snapshot_info with backend libvirt: the snapshots of VM ``vm``."""
    return report(connection, params['vm'], params['name'])


def converge(connection, params, check_mode):
    """One VM of the snapshot module: observe, plan, refuse or execute; return the result dict."""
    common.check_name('vm', params['vm'])
    common.check_name('name', params['name'])
    common.parse_older_than(params.get('older_than'))
    observer = backend.SnapshotObserver(connection, params['vm'])
    backend.check_task_free(observer)
    memory = params['memory']
    if memory is None:
        memory = observer.power_state() in (states.RUNNING, states.PAUSED)
    declared = dict(params, memory=memory)
    safety = common.safety_name(params['name']) if params['state'] == 'restored' and params['safety_snapshot'] else None
    steps, before, _current = backend.refuse_or_plan(observer, declared, safety)
    steps = common.add_older_than(steps, before, declared)
    names_before = sorted(snap.name for snap in before)
    operations = common.operations_of(steps)
    cleared = None
    if not steps:
        # a killed run's step had finished in libvirtd: nothing to do but the task it left on the VM
        cleared = backend.clear_stale_snapshot_task(observer, check_mode)
    if not check_mode:
        operations = backend.execute_plan(observer, steps)
    if cleared:
        operations.append(cleared)
    after, current = observer.snapshots()
    names_after = common.predicted_names(names_before, steps) if check_mode else sorted(snap.name for snap in after)
    found = [snap for snap in after if snap.name == params['name']]
    snapshot = {'phase': phase.ABSENT}
    if found and not (check_mode and params['state'] == 'absent'):
        snapshot = backend.public_snapshot(found[0], params['vm'], current)
        if params['state'] == 'restored' and not check_mode:
            snapshot['phase'] = phase.RESTORED
    elif check_mode and params['state'] == 'present':
        snapshot = {'name': params['name'], 'vm': params['vm'], 'phase': phase.PENDING, 'memory': memory, 'consistency': phase.CRASH_CONSISTENT}
    result = {'changed': bool(steps) or bool(cleared), 'operations': operations, 'snapshots': names_after, 'snapshot': snapshot,
              'diff': {'before': {'snapshots': names_before}, 'after': {'snapshots': names_after}}}
    if safety:
        result['safety_snapshot'] = safety
    return result
