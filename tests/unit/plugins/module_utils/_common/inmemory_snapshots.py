# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-memory backend of the snapshot protocol (``_common.snapshot_driver.SnapshotBackend``) on a guest of
:class:`~.inmemory_backend.World`: no libvirt, no Kubernetes.

It implements only the hooks, as the real backends do: the driver plans, refuses and builds the result. A guest's
snapshots live in ``world.snapshots_by_vm[vm]`` (name -> :class:`~._phase.snapshots.ActualSnapshot`); every step taken
is noted in ``world.calls`` as ``(vm, op, snapshot)``; ``world.fail[(vm, op)]`` makes that step fail.
"""

from __future__ import annotations

import time
import uuid

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, InvalidDeclaration, TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._common import snapshot_run
from ansible_collections.converge.virt.plugins.module_utils._common.snapshot_driver import SnapshotBackend
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks

# the vm_state_at_snapshot each power state is recorded as, and the power a restore brings back
AT_SNAPSHOT = {s.RUNNING: 'running', s.PAUSED: 'paused', s.SHUTDOWN: 'shutoff'}
POWER_OF = dict((value, key) for key, value in AT_SNAPSHOT.items())
# world id -> vm -> snapshot name -> ActualSnapshot


def snapshots_of(world, vm):
    """The snapshots of guest ``vm`` (a dict a test may set up), kept on the world itself: a table keyed by id(world)
    handed a new world the snapshots of a collected one whose id it reused (seen as a flaky test_snapshot_delete)."""
    if not hasattr(world, 'snapshots_by_vm'):
        world.snapshots_by_vm = {}
    return world.snapshots_by_vm.setdefault(vm, {})


class InMemorySnapshots(SnapshotBackend):
    """The snapshots of one guest of a World."""

    def __init__(self, world, vm, owner='run-1'):
        if vm not in world.guests:
            raise InvalidDeclaration('vm', 'VM %r does not exist' % vm)
        self.world = world
        self.vm = vm
        self.owner = owner
        self.guest = world.guests[vm]
        self.snaps = snapshots_of(world, vm)

    def _gone(self, owner):
        return owner in self.world.dead

    def check_task_free(self):
        record, _version = self.guest.store.load()
        now = time.time()
        if not record.idle() and not phase.stale_snapshot_task(record, now, self._gone):
            raise TaskConflict(self.vm, record.task_id, record.task_state, stale=record.stale(now), action=record.action)

    def declared(self, params):
        memory = params.get('memory')
        if memory is None:
            memory = self.guest.power_state in (s.RUNNING, s.PAUSED)
        return dict(params, memory=memory)

    def safety_name(self, declared):
        if declared['state'] == 'restored' and declared['safety_snapshot']:
            return snapshot_run.safety_name(declared['name'])
        return None

    def plan(self, declared, safety):
        before = [snap for _name, snap in sorted(self.snaps.items())]
        return phase.plan_snapshot(dict(declared, current=None), before, safety_name=safety), before

    def clear_stale_task(self, check_mode):
        return phase.clear_stale_snapshot_task(self.guest.store, time.time(), self._gone, name=self.vm, check_mode=check_mode)

    def execute(self, steps, declared, names_before):
        if not steps:
            return []
        ops = set(step.op for step in steps)
        action = 'restore_snapshot' if phase.RESTORE in ops else 'snapshot' if phase.CREATE in ops else 'delete_snapshot'
        record, _version = self.guest.store.load()
        if phase.stale_snapshot_task(record, time.time(), self._gone):
            tasks.clear_stale_task(self.guest.store, record.task_id, record.vm_state, name=self.vm)
        task_id = uuid.uuid4().hex
        tasks.take_task(self.guest.store, action, task_id, time.time(), owner=self.owner, name=self.vm)
        done = []
        try:
            for step in steps:
                done.append(self._run(step))
        except ConvergeError:
            tasks.abandon_task(self.guest.store, task_id, name=self.vm, rolled_back=True)
            raise
        tasks.finish_task(self.guest.store, task_id, name=self.vm)
        return done

    def _run(self, step):
        self.world.calls.append((self.vm, step.op, step.name))
        if (self.vm, step.op) in self.world.fail:
            raise BackendError(self.world.fail[(self.vm, step.op)])
        detail = dict(step.detail)
        if step.op == phase.CREATE:
            self.world.clock += 1
            self.snaps[step.name] = phase.ActualSnapshot(step.name, self.world.clock, None, (), AT_SNAPSHOT.get(self.guest.power_state),
                                                         bool(detail.get('memory')), detail.get('description'))
        elif step.op == phase.DELETE:
            del self.snaps[step.name]
        else:
            self.guest.power_state = POWER_OF.get(self.snaps[step.name].vm_state_at_snapshot, self.guest.power_state)
        return dict([('op', step.op), ('snapshot', step.name)] + list(step.detail))

    def after(self, name):
        found = self.snaps.get(name)
        return sorted(self.snaps), None if found is None else self.public(found)

    def public(self, snap):
        return {'name': snap.name, 'vm': self.vm, 'phase': phase.READY, 'creation_time': snap.created, 'memory': snap.memory,
                'vm_state_at_snapshot': snap.vm_state_at_snapshot, 'description': snap.description}

    def pending(self, declared):
        return {'name': declared['name'], 'vm': self.vm, 'phase': phase.PENDING, 'memory': declared['memory']}
