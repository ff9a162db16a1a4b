# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snapshot module of the ``memory`` backend: what _common/snapshot_run.run_snapshot and run_snapshot_info ask of a backend."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import snapshot_run
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_snapshots import InMemorySnapshots


def snapshots(world, params):
    """One guest's snapshots (the names checked as libvirt checks them)."""
    snapshot_run.check_name('vm', params['vm'])
    snapshot_run.check_name('name', params['name'])
    return InMemorySnapshots(world, params['vm'], owner='this-run')


def info(world, params):
    """snapshot_info: the guest's snapshots, oldest first."""
    backend = InMemorySnapshots(world, params['vm'])
    names = params['name'] or sorted(backend.snaps, key=lambda name: backend.snaps[name].created)
    return {'changed': False, 'snapshots': [dict(backend.public(backend.snaps[name]), exists=True) if name in backend.snaps
                                            else {'name': name, 'vm': params['vm'], 'exists': False, 'phase': 'absent'} for name in names],
            'current': None, 'task_state': backend.guest.store.load()[0].task_state}
