# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An in-memory backend of the vm and volume drivers (``_common.driver.VmBackend``, ``_common.volume_driver.VolumeBackend``).

No libvirt, no Kubernetes.

It implements only the hooks, as a real backend does, on a dict of guests with
a :class:`MemoryTaskStore` each; the shared driver plans and calls them. Tests
reach into :class:`World` to set a guest up (a stale task, a record the
hypervisor contradicts, an action that fails) and to read what was done.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import time

from ansible_collections.converge.virt.plugins.module_utils._common import driver, volume_driver
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks, views
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import MemoryTaskStore, TaskRecord

# the power state each action leaves the guest in (None: unchanged)
POWER_AFTER = {
    'start': s.RUNNING, 'stop': s.SHUTDOWN, 'reboot_soft': s.RUNNING, 'reboot_hard': s.RUNNING, 'pause': s.PAUSED,
    'unpause': s.RUNNING, 'suspend': s.SHUTDOWN, 'resume': s.RUNNING,
}
# the power a declared state settles in
SETTLED_POWER = {'running': s.RUNNING, 'restarted': s.RUNNING, 'stopped': s.SHUTDOWN, 'paused': s.PAUSED}
# actions that boot the guest anew (a changed definition is applied)
BOOTS = ('start', 'reboot_soft', 'reboot_hard', 'resume')


class Guest:  # pylint: disable=too-few-public-methods
    """One guest of the world: its power, definition and task record."""

    def __init__(self, power_state=s.SHUTDOWN, definition=None, record=None, autostart=False, managed_save=False):  # pylint: disable=too-many-arguments
        self.power_state = power_state
        self.definition = dict(definition or {})
        self.store = MemoryTaskStore(record or TaskRecord())
        self.autostart = autostart
        self.managed_save = managed_save
        self.pending_restart = False
        self.boots = 0
        self.target = None      # the power an action asked for, reached at the next sleep (World.lag)
        self.deleting = False   # deletion requested: the guest goes at the next sleep


class World:
    """Every guest by name, what ran (``calls``), what fails (``fail``), which task owners are known dead (``dead``)."""

    def __init__(self):
        self.guests = {}
        self.calls = []
        self.fail = {}          # (name, action) -> message of the BackendError the action raises
        self.dead = set()       # owners whose run is gone
        self.on_wait = None     # called at each sleep of a wait (a test ends a task in flight there)
        self.clock = 1000.0
        self.snapshots_read = 0
        self.lag = False        # power actions are carried out later (as KubeVirt does): settle waits for them

    def add(self, name, **guest):
        """Put a guest in place."""
        self.guests[name] = Guest(**guest)
        return self.guests[name]

    def sleep(self, seconds):
        """The fake clock of a wait: time passes, and ``on_wait`` may change the world."""
        self.clock += seconds
        for name, guest in list(self.guests.items()):
            if guest.deleting:
                del self.guests[name]
            elif guest.target is not None:
                guest.power_state, guest.target = guest.target, None
        if self.on_wait is not None:
            self.on_wait(self)

    def monotonic(self):
        """The fake clock."""
        return self.clock

    def snapshot(self):
        """What a fleet reads once for all its VMs (a copy of every guest's power)."""
        self.snapshots_read += 1
        return dict((name, guest.power_state) for name, guest in self.guests.items())


class InMemoryVm(driver.VmBackend):
    """One guest of a :class:`World`."""

    def __init__(self, world, name, owner='run-1'):
        self.world = world
        self.name = name
        self.owner = owner

    # ------------------------------------------------------------ observation
    def observe(self, spec=None, snapshot=None):
        guest = self.world.guests.get(self.name)
        if guest is None:
            obs = {'exists': False, 'name': self.name}
            obs.update(views.absent_view())
            return obs
        power = snapshot[self.name] if snapshot is not None and self.name in snapshot else guest.power_state
        record, _version = guest.store.load()
        effective = views.effective_vm_state(record.vm_state, power, guest.managed_save, record.task_state)
        obs = {
            'exists': True, 'name': self.name, 'power_state': power, 'vm_state': record.vm_state or effective,
            'effective_vm_state': effective, 'recorded_vm_state': record.vm_state, 'task_state': record.task_state,
            'task_id': record.task_id, 'task_owner': record.owner, 'lease_until': record.lease_until, 'autostart': guest.autostart,
            'managed_save': guest.managed_save, 'pending_restart': guest.pending_restart, 'status': power.capitalize(),
            'definition': dict(guest.definition),
        }
        if spec is not None:
            wanted = spec.get('definition') or {}
            obs['diff'] = [{'path': key, 'before': guest.definition.get(key), 'after': value}
                           for key, value in sorted(wanted.items()) if guest.definition.get(key) != value]
        return obs

    def public_view(self, obs):
        keep = ('name', 'exists', 'vm_state', 'power_state', 'task_state', 'task_id', 'status', 'autostart', 'managed_save',
                'pending_restart', 'definition')
        return dict((k, obs.get(k)) for k in keep if k in obs)

    def diffable(self, view):
        return dict((k, view.get(k)) for k in ('exists', 'vm_state', 'power_state', 'status', 'autostart', 'pending_restart') if k in view)

    def changes(self, obs):
        return list(obs.get('diff') or [])

    def recorded_drift(self, obs):
        if not obs.get('exists') or obs.get('task_state'):
            return None
        recorded, effective = obs.get('recorded_vm_state'), obs.get('effective_vm_state')
        return (recorded, effective) if recorded and effective and recorded != effective else None

    # ----------------------------------------------------------- task control
    def recover_stale(self, obs, now):
        guest = self.world.guests[self.name]
        cleared = views.clear_stale(guest.store, obs['power_state'], now, lambda owner: owner in self.world.dead, name=self.name,
                                    managed_save=guest.managed_save)
        return cleared.as_dict() if cleared else None

    def wait_idle(self, obs, options, spec=None):
        # as the libvirt backend: a task whose lease ran out or whose run is gone ends the wait too
        return driver.wait_until_idle(self.name, obs, options, lambda: self.observe(spec),
                                      lambda value: value.get('task_state') is None or not value.get('exists')
                                      or tasks.lease_expired(value.get('lease_until'), time.time()) or value.get('task_owner') in self.world.dead,
                                      clock=self.world.monotonic, sleep=self.world.sleep)

    def record_vm_state(self, obs, vm_state):
        tasks.record_vm_state(self.world.guests[self.name].store, vm_state, name=self.name)

    def deleting(self, obs):
        return obs['exists'] and self.world.guests[self.name].deleting

    # -------------------------------------------------------------- execution
    def validate_steps(self, steps, spec, obs):
        if steps and steps[0].action == 'create':
            _definition(spec)

    def store(self, obs):
        return self.world.guests[self.name].store

    def create(self, spec, obs, options, task_id):
        _definition(spec)
        guest = self.world.add(self.name, definition=(spec or {}).get('definition'),
                               record=TaskRecord(vm_state=s.DELETED, task_state='SPAWNING', task_id=task_id, action='create',
                                                 owner=self.owner, lease_until=time.time() + options.lease_seconds))
        self.world.calls.append((self.name, 'create'))
        tasks.finish_task(guest.store, task_id, name=self.name, vm_state=s.STOPPED)
        return self.observe(spec)

    def act(self, step, spec, obs, options):
        self._act(self.world.guests[self.name], step.action, spec)
        if step.action == 'delete':
            del self.world.guests[self.name]

    def _act(self, guest, action, spec):
        self.world.calls.append((self.name, action))
        if (self.name, action) in self.world.fail:
            raise BackendError(self.world.fail[(self.name, action)])
        if action == 'update':
            changed = dict((spec or {}).get('definition') or {}) != guest.definition
            guest.definition.update((spec or {}).get('definition') or {})
            if changed and guest.power_state in (s.RUNNING, s.PAUSED):
                guest.pending_restart = True
            return
        if action in POWER_AFTER and self.world.lag:
            guest.target = POWER_AFTER[action]
        elif action in POWER_AFTER:
            guest.power_state = POWER_AFTER[action]
            guest.managed_save = action == 'suspend'
        if action in BOOTS:
            guest.boots += 1
            guest.pending_restart = False

    def settle(self, decl, obs, options):
        """Without ``lag`` an action is done when it returns (as on libvirt): nothing to wait for."""
        target = SETTLED_POWER.get(decl.state)
        if not self.world.lag or not options.wait or target is None:
            return None
        return wait_for(self.observe, lambda value: value.get('power_state') == target, options.wait_timeout, '%s to be %s' % (self.name, target),
                        clock=self.world.monotonic, sleep=self.world.sleep)

    def wait_deleted(self, options):
        return wait_for(self.observe, lambda value: not value['exists'], options.wait_timeout, '%s to be deleted' % self.name,
                        clock=self.world.monotonic, sleep=self.world.sleep)


def _definition(spec):
    if not (spec or {}).get('definition'):
        raise InvalidDeclaration('definition', 'is required to create a VM')


# ------------------------------------------------------------------ volumes
class VolumeWorld:
    """Volumes (key -> capacity), attachments ((vm, target) -> [volume, live, persistent]), which VMs run, what fails."""

    def __init__(self, running=None):
        self.volumes = {}
        self.attachments = {}
        self.running = dict(running or {})
        self.fail = {}          # (op kind, volume) -> the ConvergeError the operation raises
        self.calls = []
        self.unsettled = None   # the error settle() returns (a hot-plug the backend did not confirm in time)
        self.partial = set()    # volumes an interrupted import left behind: removed (and imported again) by the next run


class InMemoryVolumes(volume_driver.VolumeBackend):
    """The volumes of a :class:`VolumeWorld`; specs: key, state, capacity, attachments (list of {vm, target} or None)."""

    def __init__(self, world):
        self.world = world
        self.writes = 0

    def _actual(self, specs):
        keys = set(spec['key'] for spec in specs)
        users = {}
        for (vm, _target), (volume, _live, _persistent) in self.world.attachments.items():
            users.setdefault(volume, set()).add(vm)
        volumes = [phase.ActualVolume(key, capacity, 'raw', frozenset(users.get(key, ())))
                   for key, capacity in sorted(self.world.volumes.items()) if key in keys]
        attachments = [phase.Attachment(vm, target, volume, live=live, persistent=persistent, vm_running=self.world.running.get(vm, False))
                       for (vm, target), (volume, live, persistent) in sorted(self.world.attachments.items()) if volume in keys]
        return volumes, attachments

    def plan(self, specs, force, check_mode):
        recovered = []
        for key in sorted(self.world.partial & set(spec['key'] for spec in specs)):
            recovered.append({'op': 'remove_partial', 'volume': key, 'reason': 'an earlier import into it did not finish'})
            if not check_mode:
                self.world.partial.discard(key)
                del self.world.volumes[key]
        volumes, attachments = self._actual(specs)
        volumes = [vol for vol in volumes if vol.key not in self.world.partial]
        desired = [phase.DesiredVolume(spec['key'], spec['state'] == 'present', spec.get('capacity')) for spec in specs]
        wanted = [phase.Attachment(att['vm'], att['target'], spec['key']) for spec in specs for att in spec.get('attachments') or ()]
        managed = set(spec['key'] for spec in specs if spec.get('attachments') is not None)
        plan_atts = [a for a in attachments if a.volume in managed]
        managed_vms = set(a.vm for a in plan_atts) | set(a.vm for a in wanted)
        planned = phase.plan_volumes(desired, volumes, wanted, plan_atts, force_detach=force, managed_vms=managed_vms, vms_running=self.world.running)
        refused = set(r['volume'] for r in planned.refusals)
        operations = [op for op in planned.operations if op.volume not in refused]
        return volume_driver.PlannedVolumes(volumes, attachments, operations, planned.refusals, planned.deferred, planned.uncertain,
                                            recovered=tuple(recovered))

    def summary(self, volumes, attachments):
        return dict((vol.key, {'exists': True, 'capacity': vol.capacity,
                               'attachments': sorted('%s:%s' % (a.vm, a.target) for a in attachments if a.volume == vol.key)}) for vol in volumes)

    def execute(self, operations, check_mode):
        done = []
        for op in operations:
            item = op.as_dict()
            try:
                self._run(op)
            except ConvergeError as exc:
                item['failed'] = True
                done.append(item)
                return done, exc
            done.append(item)
        return done, None

    def _run(self, op):
        self.world.calls.append((op.kind, op.volume))
        if (op.kind, op.volume) in self.world.fail:
            raise self.world.fail[(op.kind, op.volume)]
        self.writes += 1
        if op.kind == phase.CREATE:
            self.world.volumes[op.volume] = dict(op.detail)['capacity']
        elif op.kind == phase.GROW:
            self.world.volumes[op.volume] = dict(op.detail)['to']
        elif op.kind == phase.DELETE:
            del self.world.volumes[op.volume]
        else:
            volume, live, persistent = self.world.attachments.get((op.vm, op.target), (op.volume, False, False))
            live = op.kind == phase.ATTACH_LIVE or (live and op.kind != phase.DETACH_LIVE)
            persistent = op.kind == phase.ATTACH_CONFIG or (persistent and op.kind != phase.DETACH_CONFIG)
            if live or persistent:
                self.world.attachments[(op.vm, op.target)] = (volume, live, persistent)
            else:
                del self.world.attachments[(op.vm, op.target)]

    def settle(self):
        return self.world.unsettled

    def observe_after(self, specs, done):
        return self._actual(specs)

    def changed(self, done, planned):
        return self.writes > 0 or bool(planned.recovered)

    def public(self, specs):
        return [{'key': spec['key'], 'exists': spec['key'] in self.world.volumes, 'capacity': self.world.volumes.get(spec['key'])}
                for spec in specs]
