# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt snapshot module: the snapshot protocol on a domain (its loop: _common/snapshot_driver.py; the runners of
snapshot and snapshot_info: _common/snapshot_run.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import snapshot_run as common
from ansible_collections.converge.virt.plugins.module_utils._common.snapshot_driver import SnapshotBackend, converge_snapshot
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


class LibvirtSnapshots(SnapshotBackend):
    """The snapshots of one domain: the hooks of _common/snapshot_driver.converge_snapshot."""

    def __init__(self, connection, vm):
        self.vm = vm
        self.observer = backend.SnapshotObserver(connection, vm)

    def check_task_free(self):
        backend.check_task_free(self.observer)

    def declared(self, params):
        memory = params['memory']
        if memory is None:
            memory = self.observer.power_state() in (states.RUNNING, states.PAUSED)
        return dict(params, memory=memory)

    def safety_name(self, declared):
        return common.safety_name(declared['name']) if declared['state'] == 'restored' and declared['safety_snapshot'] else None

    def plan(self, declared, safety):
        steps, before, _current = backend.refuse_or_plan(self.observer, declared, safety)
        return steps, before

    def clear_stale_task(self, check_mode):
        return backend.clear_stale_snapshot_task(self.observer, check_mode)

    def execute(self, steps, declared, names_before):
        del declared, names_before
        return backend.execute_plan(self.observer, steps)

    def after(self, name):
        after, current = self.observer.snapshots()
        found = [snap for snap in after if snap.name == name]
        return sorted(snap.name for snap in after), backend.public_snapshot(found[0], self.vm, current) if found else None

    def pending(self, declared):
        return {'name': declared['name'], 'vm': self.vm, 'phase': phase.PENDING, 'memory': declared['memory'],
                'consistency': phase.CRASH_CONSISTENT}


def snapshots(connection, params):
    """The snapshot module's backend for VM ``vm`` (its names checked first; the VM must exist)."""
    common.check_name('vm', params['vm'])
    common.check_name('name', params['name'])
    common.parse_older_than(params.get('older_than'))
    return LibvirtSnapshots(connection, params['vm'])


def converge(connection, params, check_mode):
    """One VM of the snapshot module: the driver's loop on :func:`snapshots` (the result dict)."""
    return converge_snapshot(snapshots(connection, params), params, check_mode)
