# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt backend of the volume modules: PersistentVolumeClaims, DataVolumes and hotplug.

The same planner as libvirt decides (``_phase.volumes.plan_volumes``): this
file turns a namespace's claims, DataVolumes, VirtualMachines and instances
into the planner's actual world, and runs the operations it returns:

* ``create_volume``: a PersistentVolumeClaim, or a CDI DataVolume (source
  http, registry, pvc clone or blank), waiting for Bound / Succeeded;
* ``grow_volume``: ``spec.resources.requests.storage`` of the claim, waiting
  for the resizer (``status.capacity``); never a smaller size (the planner
  refuses it, naming the current size);
* ``delete_volume``: the DataVolume (its claim is garbage collected) or the
  claim; refused by the planner while a VM or instance references it;
* ``attach_config`` / ``attach_live``: the ``addvolume`` subresource of the
  VirtualMachine (persisted in ``spec.template`` and plugged into the running
  instance), or of the instance alone; for a stopped VM a JSON patch of
  ``spec.template`` guarded by ``resourceVersion``; a hotplug is waited for
  through the volume phases Pending, Bound, AttachedToNode, MountedToPod, Ready;
* ``detach_live`` / ``detach_config``: ``removevolume`` likewise, waiting for
  the instance to release the volume.

Beside the run (the executor, the VM task of an attach or detach, the driver's hooks: :class:`KubevirtVolumes`): the
declaration, sizes and manifests (:mod:`.volume_spec`), what is read and reported (:mod:`.volume_observe`) and the
plan (:mod:`.volume_plan`).

Attach and detach take the VM's task (``attach_volume`` / ``detach_volume`` of
the action table, record in the VM's annotations), as on libvirt. Check mode
sends every write with ``dryRun=All``, so the API server validates the plan,
and predicts the result with ``apply_operation``.
"""

from __future__ import annotations

import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, WaitTimeout
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_id
from ansible_collections.converge.virt.plugins.module_utils._common import journal, volume_driver
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import (
    ApiStatusError, CDI_API, CORE_API, Conflict, KUBEVIRT_API, SUBRESOURCE_API, retry_unavailable)
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.volume_observe import (
    NamespaceVolumes, REQUESTED_ANNOTATION, dv_message, hotplug_phase, instance_running, volume_claim)
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.volume_plan import group_operations, plan, summary
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.volume_spec import (
    bytes_quantity, claim_manifest, datavolume_manifest, hotplug_disk, hotplug_volume, quantity_bytes)
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks, volumes as phase


STORAGE_API = '/apis/storage.k8s.io/v1'
DV_DONE_PHASES = ('Succeeded', 'WaitForFirstConsumer', 'PendingPopulation')
DEFAULT_WAIT_TIMEOUT = 300


# ------------------------------------------------------------------ execution
class Executor:
    """Runs the planned operations against the API server (``dry_run``: every write with dryRun=All)."""

    def __init__(self, client, namespace, world, specs, wait_timeout=DEFAULT_WAIT_TIMEOUT, dry_run=False, owner=None, clock=time.monotonic):
        self.client = client
        self.namespace = namespace
        self.world = world
        self.specs = dict((s['key'], s) for s in specs)
        self.wait_timeout = wait_timeout
        self.dry_run = dry_run
        self.owner = owner or owner_id()
        self.clock = clock
        self.writes = 0

    # -- helpers
    def _wait(self, observe, done, what, describe=None):
        if self.dry_run or self.wait_timeout <= 0:
            return observe()
        return wait_for(observe, done, self.wait_timeout, what, initial=0.02, factor=1.5, cap=0.25, describe=describe)

    def _pvc(self, name):
        return self.client.get(CORE_API, self.namespace, 'persistentvolumeclaims', name)

    def _dv(self, name):
        return self.client.get(CDI_API, self.namespace, 'datavolumes', name)

    def _binding_mode(self, class_name):
        if not class_name:
            return None
        try:
            sc = self.client.request('GET', '%s/storageclasses/%s' % (STORAGE_API, class_name), what='read storage class %s' % class_name)
        except ConvergeError:
            return None
        return (sc or {}).get('volumeBindingMode')

    # -- volumes
    def create(self, op):
        """Create the claim or DataVolume and wait until it is usable."""
        spec = self.specs[op.volume]
        if spec['kind'] == 'DataVolume':
            self.client.create(CDI_API, self.namespace, 'datavolumes', datavolume_manifest(spec, self.namespace), dry_run=self.dry_run)
            self.writes += 1
            if self.dry_run:
                return {}
            return self._wait_datavolume(op.volume)
        created = self.client.create(CORE_API, self.namespace, 'persistentvolumeclaims', claim_manifest(spec, self.namespace), dry_run=self.dry_run)
        self.writes += 1
        if self.dry_run:
            return {}
        return self._wait_claim(op.volume, _get(created, 'spec', 'storageClassName'))

    def _wait_datavolume(self, name):
        """Wait for a DataVolume's import / clone to end; a Failed one raises."""
        phases = []

        def observe():
            dv = self._dv(name)
            current = _get(dv, 'status', 'phase')
            if current and (not phases or phases[-1] != current):
                phases.append(current)
            return dv
        dv = self._wait(observe, lambda d: _get(d, 'status', 'phase') in DV_DONE_PHASES + ('Failed',),
                        'DataVolume %s/%s to be imported' % (self.namespace, name),
                        describe=lambda d: {'dv_phase': _get(d, 'status', 'phase'), 'progress': _get(d, 'status', 'progress'),
                                            'message': dv_message(d)})
        if _get(dv, 'status', 'phase') == 'Failed':
            raise BackendError('DataVolume %s/%s failed: %s' % (self.namespace, name, dv_message(dv) or 'phase Failed'),
                               volume=name, dv_phase='Failed', phases=phases)
        return {'phases': phases, 'dv_phase': _get(dv, 'status', 'phase')}

    def _wait_claim(self, name, class_name):
        """Wait for a claim to be Bound (not with a WaitForFirstConsumer storage class: its first pod binds it)."""
        if self._binding_mode(class_name) == 'WaitForFirstConsumer':
            return {'phase': _get(self._pvc(name), 'status', 'phase') or 'Pending', 'binding': 'WaitForFirstConsumer'}
        pvc = self._wait(lambda: self._pvc(name), lambda p: _get(p, 'status', 'phase') == 'Bound',
                         'PersistentVolumeClaim %s/%s to be Bound' % (self.namespace, name),
                         describe=lambda p: {'phase': _get(p, 'status', 'phase'), 'storage_class': _get(p, 'spec', 'storageClassName')})
        return {'phase': _get(pvc, 'status', 'phase')}

    def grow(self, op):
        """Raise the claim's storage request and wait for the resizer."""
        want = dict(op.detail)['to']
        spec = self.specs[op.volume]
        quantity = spec['quantity'] if spec['capacity'] == want else bytes_quantity(want)
        patch = {'spec': {'resources': {'requests': {'storage': quantity}}}}
        if op.volume in self.world.dvs:
            patch['metadata'] = {'annotations': {REQUESTED_ANNOTATION: quantity}}
        self.client.merge_patch(CORE_API, self.namespace, 'persistentvolumeclaims', op.volume, patch, dry_run=self.dry_run)
        self.writes += 1
        if self.dry_run:
            return {'online': self._online(op.volume)}
        pvc = self._wait(lambda: self._pvc(op.volume), lambda p: (quantity_bytes(_get(p, 'status', 'capacity', 'storage')) or 0) >= want,
                         'PersistentVolumeClaim %s/%s to be resized to %s' % (self.namespace, op.volume, quantity),
                         describe=lambda p: {'capacity': _get(p, 'status', 'capacity', 'storage'),
                                             'conditions': [c.get('type') for c in _get(p, 'status', 'conditions') or []]})
        return {'bound_capacity': quantity_bytes(_get(pvc, 'status', 'capacity', 'storage')), 'online': self._online(op.volume)}

    def _online(self, key):
        """A running instance uses the claim (KubeVirt expands the disk of the guest online)."""
        return any(a.volume == key and a.live and a.vm_running for a in self.world.attachments)

    def delete(self, op):
        """Delete the DataVolume (its claim goes with it) or the claim, and wait until it is gone."""
        if op.volume in self.world.dvs:
            self.client.delete(CDI_API, self.namespace, 'datavolumes', op.volume, propagation='Background', dry_run=self.dry_run)
        if op.volume in self.world.pvcs and (op.volume not in self.world.dvs or self.dry_run):
            self.client.delete(CORE_API, self.namespace, 'persistentvolumeclaims', op.volume, propagation='Background', dry_run=self.dry_run)
        self.writes += 1
        if not self.dry_run:
            self._wait(lambda: (self._dv(op.volume), self._pvc(op.volume)), lambda pair: pair == (None, None),
                       'volume %s/%s to be deleted' % (self.namespace, op.volume),
                       describe=lambda pair: {'dv_exists': pair[0] is not None, 'pvc_exists': pair[1] is not None,
                                              'finalizers': _get(pair[1], 'metadata', 'finalizers')})
        return {}

    # -- attachments
    def _vm(self, name):
        vm = self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachines', name)
        if vm is None:
            raise BackendError('VirtualMachine %s/%s vanished while its volumes were converged' % (self.namespace, name))
        return vm

    def _vmi(self, name):
        return self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachineinstances', name)

    def _instance_only(self, op, action, body):
        """Only the running instance lacks (or still has) a disk the VM's spec already says: with KubeVirt's HotplugVolumes
        feature gate the instance's own ``addvolume`` / ``removevolume`` plugs it (an ephemeral hot-plug); under
        DeclarativeHotplugVolumes alone virt-api refuses those for an instance a VM owns ("VMI ... is owned by a VM": seen on
        the real stack after an interrupted hot-plug) and KubeVirt carries the VM's spec over to the instance by itself,
        so there is nothing to write: the wait that follows sees it through."""
        try:
            self._subresource('virtualmachineinstances', op.vm, action, body)
        except ApiStatusError as exc:
            if exc.code != 400 or 'is owned by a VM' not in (exc.details.get('api_message') or ''):
                raise

    def _subresource(self, plural, vm, action, body):
        if self.dry_run:
            body = dict(body, dryRun=['All'])
        path = self.client.path(SUBRESOURCE_API, self.namespace, plural, vm, action)
        what = '%s of %s %s/%s' % (action, plural.rstrip('s'), self.namespace, vm)
        # a 503 (virt-api just restarted, or down) is retried until wait_timeout from now: kube-apiserver's aggregator
        # answers it without passing the request on while the APIService is not Available. Before a retry the object is read:
        # a request virt-api carried out although its answer was a 503 is not sent again (a second addvolume of the same
        # name is refused by virt-api, which would fail a task whose change is in place)
        done = None if self.dry_run else (lambda: self._plugged(plural, vm, body.get('name')) == (action == 'addvolume'))
        retry_unavailable(lambda: self.client.request('PUT', path, body=body, what=what), time.monotonic() + max(self.wait_timeout, 0), done)
        self.writes += 1

    def _plugged(self, plural, name, volume):
        """Whether the VM's template (or the instance's spec) lists ``volume``; None when the object is gone."""
        obj = self.client.get(KUBEVIRT_API, self.namespace, plural, name)
        if obj is None:
            return None
        path = ('spec', 'template', 'spec', 'volumes') if plural == 'virtualmachines' else ('spec', 'volumes')
        return any(v.get('name') == volume for v in _get(obj, *path) or [])

    def _patch_template(self, vm_name, edit):
        """JSON patch of the VM's template built by ``edit(vm) -> ops``, guarded by resourceVersion (retried on a race)."""
        for _attempt in range(5):
            vm = self._vm(vm_name)
            ops = edit(vm)
            if not ops:
                return False
            body = [{'op': 'test', 'path': '/metadata/resourceVersion', 'value': vm['metadata']['resourceVersion']}] + ops
            try:
                self.client.request('PATCH', self.client.path(KUBEVIRT_API, self.namespace, 'virtualmachines', vm_name), body=body,
                                    content_type='application/json-patch+json', query={'dryRun': 'All' if self.dry_run else None},
                                    what='patch virtualmachines %s/%s' % (self.namespace, vm_name))
                self.writes += 1
                return True
            except (Conflict, BackendError) as exc:
                if 'test failed' not in str(exc) and not isinstance(exc, Conflict):
                    raise
        raise BackendError('VirtualMachine %s/%s kept changing while its template was edited; try again' % (self.namespace, vm_name))

    def _template_add(self, op, volume, disk):
        def edit(vm):
            tspec = _get(vm, 'spec', 'template', 'spec') or {}
            if any(v.get('name') == op.target for v in tspec.get('volumes') or []):
                return []
            ops = []
            if tspec.get('volumes') is None:
                ops.append({'op': 'add', 'path': '/spec/template/spec/volumes', 'value': [volume]})
            else:
                ops.append({'op': 'add', 'path': '/spec/template/spec/volumes/-', 'value': volume})
            devices = _get(tspec, 'domain', 'devices')
            if devices is None:
                ops.append({'op': 'add', 'path': '/spec/template/spec/domain/devices', 'value': {'disks': [disk]}})
            elif devices.get('disks') is None:
                ops.append({'op': 'add', 'path': '/spec/template/spec/domain/devices/disks', 'value': [disk]})
            elif not any(d.get('name') == op.target for d in devices['disks']):
                ops.append({'op': 'add', 'path': '/spec/template/spec/domain/devices/disks/-', 'value': disk})
            return ops
        return self._patch_template(op.vm, edit)

    def _template_remove(self, op):
        def edit(vm):
            tspec = _get(vm, 'spec', 'template', 'spec') or {}
            ops = []
            for index, vol in enumerate(tspec.get('volumes') or []):
                if vol.get('name') == op.target and volume_claim(vol) == op.volume:
                    ops.append({'op': 'remove', 'path': '/spec/template/spec/volumes/%d' % index})
                    break
            if not ops:
                return []
            for index, disk in enumerate(_get(tspec, 'domain', 'devices', 'disks') or []):
                if disk.get('name') == op.target:
                    ops.append({'op': 'remove', 'path': '/spec/template/spec/domain/devices/disks/%d' % index})
                    break
            return ops
        return self._patch_template(op.vm, edit)

    def settle(self):
        """Wait for what an earlier run started and failed waiting for (a read failed, a timeout): a DataVolume still importing,
        a claim not yet Bound, a declared hotplug on its way to Ready. The next run then ends where the first one would have."""
        running = self.world.running()
        for spec in self.specs.values():
            if spec['state'] != 'present':
                continue
            dv, pvc = self.world.dvs.get(spec['key']), self.world.pvcs.get(spec['key'])
            if dv is not None and _get(dv, 'status', 'phase') not in DV_DONE_PHASES + ('Failed',) and not _get(dv, 'metadata', 'deletionTimestamp'):
                self._wait_datavolume(spec['key'])
            elif dv is None and pvc is not None and _get(pvc, 'status', 'phase') == 'Pending' and not _get(pvc, 'metadata', 'deletionTimestamp'):
                self._wait_claim(spec['key'], _get(pvc, 'spec', 'storageClassName'))
            for att in spec['attachments'] or []:
                facts = self.world.facts.get((att['vm'], att['dev'])) or {}
                # on its way: a phase short of Ready, or none yet for a hot-pluggable disk the instance has not reported
                on_its_way = facts.get('hotplug_phase') not in (None, 'Ready') or (facts.get('hotplug_phase') is None and facts.get('hotpluggable'))
                if on_its_way and running.get(att['vm']):
                    self._wait_hotplug(phase.Operation(phase.ATTACH_LIVE, spec['key'], vm=att['vm'], target=att['dev']), True)

    def _wait_hotplug(self, op, present):
        """Wait for the instance to report disk ``op.target`` Ready (present) or gone; return the phases seen."""
        phases = []

        def observe():
            vmi = self._vmi(op.vm)
            in_spec = any(v.get('name') == op.target for v in _get(vmi, 'spec', 'volumes') or [])
            current = hotplug_phase(vmi, op.target)
            label = current if current else ('Detached' if not (in_spec or present) else None)
            if label and (not phases or phases[-1] != label):
                phases.append(label)
            return {'in_spec': in_spec, 'phase': current, 'running': instance_running(vmi)}

        def done(value):
            if not value['running']:
                return True
            return value['phase'] == 'Ready' if present else (not value['in_spec'] and value['phase'] is None)
        try:
            what = 'volume %s to be %s VM %s/%s (disk %s)' % (op.volume, 'Ready in' if present else 'released by', self.namespace, op.vm, op.target)
            self._wait(observe, done, what)
        except WaitTimeout as exc:
            exc.details.update(vm=op.vm, target=op.target, volume=op.volume, phases=phases)
            raise
        return phases

    def attach(self, group):
        """Plug a claim into a VM: addvolume (running VM) or a template edit (stopped VM)."""
        first = group[0]
        detail = dict(first.detail)
        kind = 'DataVolume' if first.volume in self.world.dvs or (self.specs.get(first.volume) or {}).get('kind') == 'DataVolume' else None
        volume = hotplug_volume(first.volume, kind, first.target)
        disk = hotplug_disk(first.target, detail.get('bus'), detail.get('readonly'), detail.get('serial'))
        kinds = [op.kind for op in group]
        source = dict((k, v) for k, v in volume.items() if k != 'name')
        body = {'name': first.target, 'disk': disk, 'volumeSource': source}
        if kinds == [phase.ATTACH_CONFIG]:
            self._template_add(first, volume, disk)
            return {}
        if not self._plug(first, phase.ATTACH_CONFIG in kinds, 'addvolume', body):
            return {}
        try:
            return {'phases': self._wait_hotplug(first, True)}
        except WaitTimeout as exc:
            raise _hotplug_not_ready(exc, first, phase.ATTACH_CONFIG in kinds, self.namespace) from None

    def detach(self, group):
        """Unplug a claim: removevolume (running VM) or a template edit (stopped VM)."""
        first = group[0]
        kinds = [op.kind for op in group]
        if kinds == [phase.DETACH_CONFIG]:
            self._template_remove(first)
            return {}
        body = {'name': first.target}
        if not self._plug(first, phase.DETACH_CONFIG in kinds, 'removevolume', body):
            return {}
        return {'phases': self._wait_hotplug(first, False)}

    def _plug(self, first, with_config, verb, body):
        """``verb`` (addvolume, removevolume) on the VM when the group also edits its template, else on the running instance
        only; False in a dry run (nothing to wait for)."""
        if with_config:
            self._subresource('virtualmachines', first.vm, verb, body)
        else:
            self._instance_only(first, verb, body)
        return not self.dry_run

    def run_group(self, group):
        """One volume operation, or one attach / detach under the VM's task."""
        op = group[0]
        if op.kind == phase.CREATE:
            return self.create(op)
        if op.kind == phase.GROW:
            return self.grow(op)
        if op.kind == phase.DELETE:
            return self.delete(op)
        action = 'detach_volume' if op.kind in (phase.DETACH_LIVE, phase.DETACH_CONFIG) else 'attach_volume'
        run = self.detach if action == 'detach_volume' else self.attach
        if self.dry_run:
            return run(group)
        obs = self.world.vm_observation(op.vm)
        store = KubevirtTaskStore(self.client, self.namespace, op.vm, inferred_vm_state=obs.get('effective_vm_state'), vm=None)
        task_id = tasks.new_task_id()
        tasks.take_task(store, action, task_id, time.time(), owner=self.owner, name=op.vm)
        # the VM's interval in the audit journal: begun once the task is ours, ended before it is released
        journal.append('begin', op.vm, task_id, action, target=op.volume)
        try:
            extra = run(group)
        except BaseException:
            journal.append('end', op.vm, task_id, action, target=op.volume, outcome='failed')
            try:
                release_task(store, task_id, op.vm, finish=False)
            except ConvergeError:
                pass
            raise
        journal.append('end', op.vm, task_id, action, target=op.volume, outcome='done')
        release_task(store, task_id, op.vm)
        return extra


def _hotplug_not_ready(exc, op, persisted, namespace):
    """A hotplug that never reached Ready: the result says the VM spec keeps it (no rollback) and the next run finishes it.

    KubeVirt's ``addvolume`` writes ``spec.template`` and the instance in one request that either fails (nothing
    changed) or is accepted; a hotplug accepted but slow (a claim not bound yet, an attachment pod waiting) is still on
    its way, so unplugging it would undo what KubeVirt may finish a moment later. The declaration is kept and the next
    run, finding the volume in the VM and its instance, waits for the phase Ready again (or, declared away with
    ``force``, unplugs it).
    """
    where = "VM %s/%s's spec.template (its persistent definition) and its instance" if persisted else 'the instance of VM %s/%s'
    message = ('%s; the volume stays in %s (not rolled back: KubeVirt may still finish the hotplug), and the next run waits for it '
               'again' % (exc.message, where % (namespace, op.vm)))
    return WaitTimeout(message, **dict(exc.details, rolled_back=False))


RELEASE_ATTEMPTS = 3


def release_task(store, task_id, name, finish=True):
    """Finish (or abandon) our task on the VM, retried when the API server fails the write (5xx, timeout).

    The next run finds the volume plugged and has nothing to do, so a record
    left behind by one failed write would stay. A retry that finds the task
    gone means an earlier attempt went through (only its answer was lost).
    """
    for attempt in range(RELEASE_ATTEMPTS):
        try:
            if finish:
                tasks.finish_task(store, task_id, name=name)
            else:
                tasks.abandon_task(store, task_id, name=name, rolled_back=True)
            return
        except tasks.TaskPreempted:
            if attempt == 0:
                raise
            return
        except BackendError:
            if attempt == RELEASE_ATTEMPTS - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def converge_volumes(client, namespace, specs, force=False, check_mode=False, wait_timeout=DEFAULT_WAIT_TIMEOUT, owner=None):
    """Converge normalized declarations (:func:`normalize_volume`) in ``namespace``; return the result dict.

    The same shape as the libvirt backend's (one driver, :mod:`.._common.volume_driver`): operations, refusals,
    deferred, uncertain, volumes, diff, changed and error (the first failure, after which nothing else is run).
    """
    backend = KubevirtVolumes(client, namespace, wait_timeout, owner)
    return volume_driver.converge_volumes(backend, specs, force=force, check_mode=check_mode)


class KubevirtVolumes(volume_driver.VolumeBackend):
    """The claims and DataVolumes of one namespace: the hooks of the shared volume driver.

    In check mode the executor runs too, without writing (``dry_run``): its answers are the returned operations.
    """

    executes_in_check_mode = True

    def __init__(self, client, namespace, wait_timeout=DEFAULT_WAIT_TIMEOUT, owner=None):
        self.client = client
        self.namespace = namespace
        self.wait_timeout = wait_timeout
        self.owner = owner
        self.world = self.executor = None
        self.by_key = {}

    def plan(self, specs, force, check_mode):
        world = self.world = NamespaceVolumes(self.client, self.namespace)
        result_plan, refusals, operations = plan(specs, world, force)
        self.by_key = dict((s['key'], s) for s in specs)
        actual_vols = [v for v in (world.actual_volume(s['key']) for s in specs) if v is not None]
        scoped = [a for a in world.attachments if a.volume in self.by_key]
        self.executor = Executor(self.client, self.namespace, world, specs, wait_timeout=self.wait_timeout, dry_run=check_mode, owner=self.owner)
        return volume_driver.PlannedVolumes(actual_vols, scoped, operations, refusals, result_plan.deferred, result_plan.uncertain)

    def summary(self, volumes, attachments):
        return summary(volumes, attachments)

    def execute(self, operations, check_mode):
        done = []
        for group in group_operations(operations):
            items = [op.as_dict() for op in group]
            try:
                extra = self.executor.run_group(group)
            except ConvergeError as exc:
                for item in items:
                    item['failed'] = True
                done.extend(items)
                return done, exc
            for item in items:
                item.update(extra)
            done.extend(items)
        return done, None

    def settle(self):
        try:
            self.executor.settle()
        except ConvergeError as exc:
            return exc
        return None

    def observe_after(self, specs, done):
        self.world.refresh()
        return ([v for v in (self.world.actual_volume(s['key']) for s in specs) if v is not None],
                [a for a in self.world.attachments if a.volume in self.by_key])

    def changed(self, done, planned):
        return self.executor.writes > 0

    def public(self, specs):
        return [self.world.public(s['key']) for s in specs]
