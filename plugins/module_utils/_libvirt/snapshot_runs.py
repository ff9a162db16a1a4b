# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt runners of the snapshot_info module (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._libvirt import snapshots as backend
from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase


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


def run_snapshot_info(module):
    """snapshot_info with backend libvirt."""
    with ModuleSession(module) as session:
        with session.connect() as connection:
            result = report(connection, module.params['vm'], module.params['name'])
    module.exit_json(**session.redact_result(result))
