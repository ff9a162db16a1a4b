# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt attachments: which volume is plugged into which VM, and the steps that change it.

The actual world is rebuilt on every run from every domain's live XML (when
it runs) and persistent XML (when it is defined), so a run interrupted half
way is simply finished by the next one: :func:`..._phase.volumes.plan_volumes`
sees what is really attached and plans the rest.

Attach and detach take the VM's task (``attach_volume`` / ``detach_volume`` of
the action table) so that they never race a run of the vm module on the same
VM. A live detach asks the guest to release the device, then polls the live
XML with backoff, asking again between attempts.

:func:`converge_volumes` (the volume module) and :func:`reconcile_vm_disks`
(the vm module's ``disks``) both execute the one plan of ``plan_volumes``.
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, InvalidDeclaration, WaitTimeout)
from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._common import volume_driver
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_build, domain_read, domain_spec, storage
from ansible_collections.converge.virt.plugins.module_utils._libvirt import storage_spec
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._phase import states, tasks
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_state import power_state_from_libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import ActualVolume, Attachment
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_id

DETACH_TIMEOUT = 30
DETACH_ATTEMPTS = 3
ATTACH_KINDS = (phase.ATTACH_CONFIG, phase.ATTACH_LIVE)
DETACH_KINDS = (phase.DETACH_LIVE, phase.DETACH_CONFIG)


def owner_name():
    """Who holds a task we take ("host:pid", shown by vm_info; a killed holder on this host is known dead at once)."""
    return owner_id()


# ---------------------------------------------------------------------------------------------------------------------
# Observation
# ---------------------------------------------------------------------------------------------------------------------

def attachments_from_disks(vm, running, live_disks, config_disks, key_of):
    """Actual :class:`Attachment` list of one VM from the disks of its live and persistent XML (pure).

    ``live_disks`` / ``config_disks``: lists of :func:`domain_read.disks_in` dicts (None when that
    definition does not exist). ``key_of(disk)`` returns the volume key or None (the disk is ignored:
    an empty drive, a network disk). CD-ROMs are not volumes the planner manages.
    """
    found = {}
    for disks, where in ((live_disks, 'live'), (config_disks, 'persistent')):
        for disk in disks or ():
            if disk.get('device', 'disk') != 'disk' or not disk.get('dev'):
                continue
            key = key_of(disk)
            if key is None:
                continue
            ident = (vm, disk['dev'], key, bool(disk.get('readonly')), disk.get('bus'), disk.get('serial'))
            entry = found.setdefault(ident, {'live': False, 'persistent': False})
            entry[where] = True
    return [Attachment(vm, ident[1], ident[2], ident[3], ident[4], ident[5], live=flags['live'], persistent=flags['persistent'],
                       vm_running=running) for ident, flags in sorted(found.items(), key=lambda item: (item[0][1], item[0][2]))]


def disk_key(disk, key_of_path):
    """The volume key of a disk dict: ``pool/volume``, a pool key found by path, or the path itself."""
    if disk.get('type') == 'volume' and disk.get('pool') and disk.get('volume'):
        return storage_spec.volume_key(disk['pool'], disk['volume'])
    if disk.get('path'):
        return key_of_path(disk['path']) or disk['path']
    return None


class DomainView:  # pylint: disable=too-few-public-methods
    """One domain as observed: running or not, and its disks live and persistent."""

    def __init__(self, dom):
        self.dom = dom
        self.name = dom.name()
        state, reason = dom.state()
        self.power = power_state_from_libvirt(state, reason)
        self.running = bool(dom.isActive())
        self.persistent = bool(dom.isPersistent())
        self.live_disks = domain_read.disks_in(dom.XMLDesc(0)) if self.running else None
        self.config_disks = domain_read.disks_in(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) if self.persistent else None

    def inferred_vm_state(self):
        """vm_state for a VM the collection never tasked (read off its power state)."""
        managed = False
        if not self.running:
            try:
                managed = bool(self.dom.hasManagedSaveImage(0))
            except libvirt.libvirtError:
                managed = False
        return states.infer_vm_state(self.power.power_state, managed_save=managed)


def observe_domains(connection, names=None):
    """``{name: DomainView}`` of every domain (or of ``names``) of the connection."""
    views = {}
    try:
        if names is None:
            doms = connection.conn.listAllDomains(0)
        else:
            doms = []
            for name in names:
                try:
                    doms.append(connection.conn.lookupByName(name))
                except libvirt.libvirtError as exc:
                    if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                        raise
        for dom in doms:
            try:
                view = DomainView(dom)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    continue  # undefined while we looked
                raise
            views[view.name] = view
    except libvirt.libvirtError as exc:
        raise connection.error(exc, 'cannot read the domains')
    return views


def actual_attachments(views, observer):
    """Every actual :class:`Attachment` of the observed domains, in a stable order (VM name, then target)."""
    result = []
    for _name, view in sorted(views.items()):
        result.extend(attachments_from_disks(view.name, view.running, view.live_disks, view.config_disks,
                                             lambda disk: disk_key(disk, observer.key_of_path)))
    return result


def users_of(attachments):
    """volume key -> set of VM names (live or persistent)."""
    users = {}
    for att in attachments:
        users.setdefault(att.volume, set()).add(att.vm)
    return users


def public_attachments(attachments, key):
    """The attachments of volume ``key`` as reported in results."""
    return sorted(({'vm': a.vm, 'dev': a.target, 'bus': a.bus, 'readonly': a.readonly, 'serial': a.serial, 'live': a.live,
                    'persistent': a.persistent, 'vm_running': a.vm_running} for a in attachments if a.volume == key),
                  key=lambda item: (item['vm'], item['dev']))


# ---------------------------------------------------------------------------------------------------------------------
# Execution of attach / detach
# ---------------------------------------------------------------------------------------------------------------------

def _disk_element(xml, target):
    for elem in ET.fromstring(xml).findall('./devices/disk'):
        tgt = elem.find('target')
        if tgt is not None and tgt.get('dev') == target:
            return elem
    return None


def _live_targets(dom):
    return set(d['dev'] for d in domain_read.disks_in(dom.XMLDesc(0)))


def attach_disk_xml(op, fmt):
    """``<disk>`` XML for an attach operation (pool volume or path key)."""
    detail = dict(op.detail)
    disk = {'dev': op.target, 'bus': detail.get('bus'), 'readonly': detail.get('readonly') or None, 'serial': detail.get('serial'),
            'format': fmt}
    if op.volume.startswith('/'):
        disk['path'] = op.volume
    else:
        disk['pool'], disk['volume'] = storage_spec.split_key(op.volume)
    return domain_build.disk_device_xml(disk)


class VmTask:
    """The VM's task for one attach/detach (compare-and-swap in the domain metadata)."""

    def __init__(self, connection, view, action, owner, volume=None):
        self.volume = volume
        self.store = LibvirtTaskStore(connection.conn, view.dom, owner, inferred_vm_state=view.inferred_vm_state())
        self.action = action
        self.name = view.name
        self.task_id = os.urandom(8).hex()
        self.owner = owner

    def __enter__(self):
        record, _version = self.store.load()
        if record.stale(time.time()) and record.action in ('attach_volume', 'detach_volume'):
            # left by a killed volume run: vm_state is unchanged by these, and the operation was planned from the definitions as they are
            tasks.clear_stale_task(self.store, record.task_id, record.vm_state, name=self.name)
        tasks.take_task(self.store, self.action, self.task_id, time.time(), owner=self.owner, name=self.name)
        journal.append('begin', self.name, self.task_id, self.action, target=self.volume)
        return self

    def __exit__(self, exc_type, exc, _tb):
        journal.append('end', self.name, self.task_id, self.action, target=self.volume, outcome='failed' if exc_type else 'done')
        if exc_type is None:
            tasks.finish_task(self.store, self.task_id, name=self.name)
        else:
            try:
                tasks.abandon_task(self.store, self.task_id, name=self.name, rolled_back=True)
            except (ConvergeError, libvirt.libvirtError):
                pass
        return False


def _detach_live(connection, dom, op, timeout):
    elem = _disk_element(dom.XMLDesc(0), op.target)
    if elem is None:
        return {'already': True}
    xml = ET.tostring(elem, encoding='unicode')
    per_attempt = max(1.0, float(timeout) / DETACH_ATTEMPTS)
    for attempt in range(1, DETACH_ATTEMPTS + 1):
        if op.target not in _live_targets(dom):
            return {'attempts': attempt - 1}
        try:
            dom.detachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError:
            # a later request may be refused while the first one is still pending in the guest: keep waiting for it
            if attempt == 1:
                raise
        try:
            wait_for(lambda: _live_targets(dom), lambda targets: op.target not in targets, per_attempt,
                     'VM %s to release %s' % (op.vm, op.target), initial=0.05, cap=1.0)
            return {'attempts': attempt}
        except WaitTimeout:
            continue
    if op.target in _live_targets(dom):
        raise WaitTimeout('detach of %s (%s) from running VM %s not confirmed after %ss and %d requests: the guest did not release the device '
                          '(it needs a guest OS that handles hot-unplug); the persistent definition was not changed, re-run to retry'
                          % (op.target, op.volume, op.vm, timeout, DETACH_ATTEMPTS), vm=op.vm, target=op.target)
    return {'attempts': DETACH_ATTEMPTS}


def execute_attachment_operation(connection, view, op, fmt, detach_timeout=DETACH_TIMEOUT, owner=None):
    """Run one attach/detach operation under the VM's task; return extra result fields.

    A VM undefined by another run after this one observed it (its task record can no longer be read or taken) fails naming
    that, not as an unexpected error (chaos campaign seed 2614: a delete raced a volume attach)."""
    action = 'detach_volume' if op.kind in DETACH_KINDS else 'attach_volume'
    dom = view.dom
    what = '%s of %s at %s:%s failed' % (op.kind, op.volume, op.vm, op.target)
    try:
        with VmTask(connection, view, action, owner or owner_name(), volume=op.volume):
            if op.kind == phase.DETACH_LIVE:
                return _detach_live(connection, dom, op, detach_timeout)
            if op.kind == phase.DETACH_CONFIG:
                elem = _disk_element(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), op.target)
                if elem is None:
                    return {'already': True}
                dom.detachDeviceFlags(ET.tostring(elem, encoding='unicode'), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
                return {}
            flag = libvirt.VIR_DOMAIN_AFFECT_CONFIG if op.kind == phase.ATTACH_CONFIG else libvirt.VIR_DOMAIN_AFFECT_LIVE
            dom.attachDeviceFlags(attach_disk_xml(op, fmt), flag)
            return {}
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            what += ': VM %s was undefined (by another run?) after this run observed it; nothing was attached or detached' % op.vm
        raise connection.error(exc, what)


def _persistent_disks(dom):
    return domain_read.disks_in(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))


def _same_disk(elem, volume):
    """Whether ``<disk>`` element ``elem`` is the one an attach of ``volume`` (a pool key or a path) wrote."""
    source = elem.find('source')
    if source is None:
        return False
    if volume.startswith('/'):
        return volume in (source.get('file'), source.get('dev'))
    return storage_spec.volume_key(source.get('pool') or '', source.get('volume') or '') == volume


def rollback_attach_config(connection, view, op, before, owner=None):
    """Undo the ``attach_config`` of ``op`` (its live attach failed): detach the disk from the persistent definition.

    ``before``: the persistent definition's disks just before the attach. Returns None when the persistent disks are
    those again, else why the rollback failed (the disk is then left in the persistent definition; the next run
    sees it there and attaches it live).
    """
    try:
        with VmTask(connection, view, 'detach_volume', owner or owner_name()):
            elem = _disk_element(view.dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), op.target)
            if elem is not None and _same_disk(elem, op.volume):
                view.dom.detachDeviceFlags(ET.tostring(elem, encoding='unicode'), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        after = _persistent_disks(view.dom)
    except libvirt.libvirtError as exc:
        return connection.redact(str(exc))
    except ConvergeError as exc:
        return connection.redact(exc.message)
    if after != before:
        return 'the persistent disks differ from those before the attach'
    return None


def _live_attach_failed(connection, view, op, exc, config_item, before, owner):
    """The error of a failed ``attach_live``, after rolling back the ``attach_config`` this run made just before it.

    The result says which way it went: ``rolled_back`` true (the persistent definition is as before the task: nothing
    changed for this attachment), or false with the reason (the disk stays in the persistent definition only, and the
    next run attaches it live).
    """
    where = 'VM %s (%s)' % (op.vm, op.target)
    if config_item is None:
        return BackendError('%s; the persistent definition of %s already held %s before this run and is left as it was; '
                            'the next run retries the live attach' % (exc.message, where, op.volume), rolled_back=False, vm=op.vm, target=op.target)
    failure = rollback_attach_config(connection, view, op, before, owner)
    if failure is None:
        config_item['rolled_back'] = True
        return BackendError('%s; the persistent definition of %s was rolled back (its attach_config undone): nothing was changed for this '
                            'attachment' % (exc.message, where), rolled_back=True, vm=op.vm, target=op.target)
    return BackendError('%s; rolling back the persistent definition of %s failed (%s): %s stays in the persistent definition only, '
                        'and the next run attaches it live' % (exc.message, where, failure, op.volume), rolled_back=False, vm=op.vm,
                        target=op.target)


def execute_plan(connection, observer, views, operations, specs, attachments, formats, detach_timeout=DETACH_TIMEOUT, owner=None):
    """Execute ``operations`` in order; return ``(done, error)``: the operations run (with their results) and the first failure.

    An ``attach_live`` that fails right after this run's ``attach_config`` of the same disk rolls that back (see
    :func:`_live_attach_failed`): a failed live attach never leaves a half-changed definition behind.
    """
    done = []
    config_done = {}  # (vm, target, volume) -> (result item, persistent disks before) of this run's attach_config
    for op in operations:
        item = op.as_dict()
        view = None
        try:
            if op.kind in (phase.CREATE, phase.GROW, phase.DELETE):
                item.update(storage.execute_volume_operation(connection, observer, op, specs.get(op.volume), attachments))
                observer.volume(op.volume, refresh=True)
            else:
                view = views.get(op.vm)
                if view is None:
                    raise BackendError('VM %s vanished while its volumes were converged' % op.vm)
                fmt = formats.get(op.volume)
                if fmt is None and not op.volume.startswith('/'):
                    info = observer.volume(op.volume)
                    fmt = info['format'] if info else None
                before = None
                if op.kind == phase.ATTACH_CONFIG and view.running:
                    try:
                        before = _persistent_disks(view.dom)
                    except libvirt.libvirtError as exc:
                        raise connection.error(exc, 'cannot read the persistent definition of %s' % op.vm)
                item.update(execute_attachment_operation(connection, view, op, fmt, detach_timeout, owner))
                if op.kind == phase.ATTACH_CONFIG and before is not None and not item.get('already'):
                    config_done[(op.vm, op.target, op.volume)] = (item, before)
        except ConvergeError as exc:
            if op.kind == phase.ATTACH_LIVE and view is not None:
                config_item, before = config_done.get((op.vm, op.target, op.volume), (None, None))
                exc = _live_attach_failed(connection, view, op, exc, config_item, before, owner)
            item['failed'] = True
            item['msg'] = connection.redact(exc.message)
            done.append(item)
            return done, exc
        done.append(item)
    return done, None


# ---------------------------------------------------------------------------------------------------------------------
# The two entry points
# ---------------------------------------------------------------------------------------------------------------------

def _summary(vols, atts):
    out = {}
    for vol in vols:
        out[vol.key] = {'exists': True, 'capacity': vol.capacity, 'format': vol.fmt,
                        'attachments': sorted('%s:%s%s%s' % (a.vm, a.target, ' live' if a.live else '', ' config' if a.persistent else '')
                                              for a in atts if a.volume == vol.key)}
    return out


def converge_volumes(connection, specs, force=False, check_mode=False, detach_timeout=DETACH_TIMEOUT, owner=None):
    """Converge normalized volume declarations (:func:`storage_spec.normalize_volume`); return the result dict (see :class:`LibvirtVolumes`)."""
    return volume_driver.converge_volumes(LibvirtVolumes(connection, detach_timeout, owner), specs, force=force, check_mode=check_mode)


class LibvirtVolumes(volume_driver.VolumeBackend):
    """The volumes of one libvirt connection: the hooks of the shared volume driver (:mod:`.._common.volume_driver`).

    Observe pools, volumes and every domain's live and persistent XML; plan
    with :func:`plan_volumes`; drop every operation of a refused volume (so a
    refused volume is never half changed); execute the rest in order (or only
    report them in check mode).
    """

    def __init__(self, connection, detach_timeout=DETACH_TIMEOUT, owner=None):
        self.connection = connection
        self.detach_timeout = detach_timeout
        self.owner = owner
        self.observer = self.views = None
        self.all_atts, self.observed, self.by_key, self.formats = [], {}, {}, {}

    def plan(self, specs, force, check_mode):  # pylint: disable=too-many-locals,too-many-branches
        connection = self.connection
        observer = self.observer = storage.StorageObserver(connection)
        pool_ops = []
        missing_pools = set()
        pool_paths = {}
        for spec in specs:
            if spec['pool_path']:
                if pool_paths.setdefault(spec['pool'], spec['pool_path']) != spec['pool_path']:
                    raise InvalidDeclaration('pool_path', 'pool %s is declared with two paths' % spec['pool'])
        for pool in sorted(set(s['pool'] for s in specs)):
            # a missing pool is created only once the plan needs it (a refused declaration changes nothing);
            # an inactive one is started now, since its volumes must be observed
            note = storage.ensure_pool(connection, observer, pool, pool_paths.get(pool), True)
            if note and note['op'] == 'start_pool' and not check_mode:
                note = storage.ensure_pool(connection, observer, pool, pool_paths.get(pool), False)
            if note:
                pool_ops.append(note)
                if check_mode or note['op'] == 'create_pool':
                    missing_pools.add(pool)
        views = self.views = observe_domains(connection)
        all_atts = self.all_atts = actual_attachments(views, observer)
        users = users_of(all_atts)
        by_key = self.by_key = dict((s['key'], s) for s in specs)
        actual_vols, observed = [], self.observed
        refusals, recovered = [], []
        for spec in specs:
            info = None if spec['pool'] in missing_pools else observer.volume(spec['key'])
            if info is not None and info.get('partial') and spec['state'] == 'present':
                info = _partial_import(connection, observer, spec, users.get(spec['key']), check_mode, refusals, recovered)
            observed[spec['key']] = info
            if info is not None:
                actual_vols.append(ActualVolume(spec['key'], info['capacity'], info['format'], frozenset(users.get(spec['key'], ()))))
                if spec['format'] and spec['state'] == 'present' and info['format'] != spec['format']:
                    refusals.append({'volume': spec['key'], 'field': 'format', 'reason': 'volume %s exists as %s, declared %s; converting formats is not done'
                                     % (spec['key'], info['format'], spec['format'])})
        desired_vols, desired_atts = storage_spec.desired_world(specs)
        kept_atts = []
        for att in desired_atts:
            if att.vm not in views:
                refusals.append({'volume': att.volume, 'vm': att.vm, 'field': 'attachments', 'reason': 'VM %s does not exist on this connection' % att.vm})
            else:
                kept_atts.append(att)
        managed_keys = set(s['key'] for s in specs if s['attachments'] is not None)
        plan_atts = [a for a in all_atts if a.volume in managed_keys]
        managed_vms = set(a.vm for a in plan_atts) | set(a.vm for a in kept_atts)
        plan = phase.plan_volumes(desired_vols, actual_vols, kept_atts, plan_atts, force_detach=force, managed_vms=managed_vms,
                                  vms_running=dict((name, view.running) for name, view in views.items()))
        for op in plan.operations:
            spec = by_key.get(op.volume)
            if op.kind == phase.CREATE and spec and spec['capacity'] is None and not storage_spec.desired_source(spec):
                refusals.append({'volume': op.volume, 'field': 'capacity', 'reason': 'capacity is required to create volume %s' % op.volume})
            for field in ('clone_from', 'backing_volume'):
                source = spec[field] if op.kind == phase.CREATE and spec else None
                # a source declared present in the same task is made first
                if source and observer.volume(source) is None and not (source in by_key and by_key[source]['state'] == 'present'):
                    refusals.append({'volume': op.volume, 'field': field, 'reason': '%s: volume %s does not exist' % (field, source)})
        refusals.extend(plan.refusals)
        refused = set(r['volume'] for r in refusals)
        operations = [op for op in plan.operations if op.volume not in refused]
        needed_pools = set(by_key[op.volume]['pool'] for op in operations if op.volume in by_key)
        pool_ops = [note for note in pool_ops if note['op'] != 'create_pool' or note['pool'] in needed_pools]
        if not check_mode:
            created = set()
            for note in pool_ops:
                if note['op'] == 'create_pool':
                    storage.ensure_pool(connection, observer, note['pool'], note['path'], False)
                    created.add(note['pool'])
            # the directory of a pool made just now may hold files already, and libvirt lists them as the pool's
            # volumes: a declared one is there, so plan again with it observed (grown, kept or refused like any other)
            if any(observer.volume(s['key'], refresh=True) is not None for s in specs if s['pool'] in created):
                again = self.plan(specs, force, check_mode)
                return again._replace(pool_operations=[n for n in pool_ops if n['op'] == 'create_pool'] + list(again.pool_operations))
        self.formats = dict((k, (observed.get(k) or {}).get('format') or by_key[k]['format']) for k in by_key)
        return volume_driver.PlannedVolumes(actual_vols, [a for a in all_atts if a.volume in by_key], operations, refusals, plan.deferred,
                                            plan.uncertain, pool_ops, tuple(recovered))

    def summary(self, volumes, attachments):
        return _summary(volumes, attachments)

    def execute(self, operations, check_mode):
        del check_mode
        return execute_plan(self.connection, self.observer, self.views, operations, self.by_key, self.all_atts, self.formats, self.detach_timeout,
                            self.owner)

    def observe_after(self, specs, done):
        # the world after the run, observed again
        observer = self.observer = storage.StorageObserver(self.connection)
        if any(item['op'] in ATTACH_KINDS + DETACH_KINDS for item in done):
            self.views = observe_domains(self.connection)
        all_atts = self.all_atts = actual_attachments(self.views, observer)
        users = users_of(all_atts)
        after_vols = []
        for spec in specs:
            info = observer.volume(spec['key'])
            self.observed[spec['key']] = info
            if info is not None:
                after_vols.append(ActualVolume(spec['key'], info['capacity'], info['format'], frozenset(users.get(spec['key'], ()))))
        return after_vols, [a for a in all_atts if a.volume in self.by_key]

    def changed(self, done, planned):
        return bool(planned.pool_operations) or any(not (item.get('already') or item.get('rolled_back')) for item in done if not item.get('failed'))

    def public(self, specs):
        return [_public(self.observed.get(s['key']), s, self.all_atts) for s in specs]


def _partial_import(connection, observer, spec, users, check_mode, refusals, recovered):  # pylint: disable=too-many-arguments
    """A volume whose import never finished (a run killed during the upload): import it again, or refuse.

    Returns the observed volume to plan with: None once the partial volume is (or, in check mode, would be) removed.
    """
    key = spec['key']
    if users:
        refusals.append({'volume': key, 'field': 'import_from', 'reason': 'volume %s holds an unfinished import and is attached to %s; '
                         'detach it, then run again' % (key, ', '.join(sorted(users)))})
        return observer.volume(key)
    if not spec['import_from']:
        refusals.append({'volume': key, 'field': 'import_from', 'reason': 'volume %s holds an unfinished import (an earlier run stopped '
                         'during the upload); declare import_from to import it again, or state absent to delete it' % key})
        return observer.volume(key)
    if not check_mode:
        storage.remove_partial(connection, observer, key)
    recovered.append({'op': 'remove_partial', 'volume': key, 'reason': 'an earlier import into it did not finish'})
    return None


def _public(info, spec, all_atts):
    if info is None:
        return {'key': spec['key'], 'pool': spec['pool'], 'name': spec['name'], 'exists': False}
    out = storage.public_volume(info, set(a.vm for a in all_atts if a.volume == spec['key']), public_attachments(all_atts, spec['key']))
    out['exists'] = True
    return out


def reconcile_vm_disks(connection, vm_name, desired_disks, force=False, check_mode=False, detach_timeout=DETACH_TIMEOUT):
    """Make the disks of VM ``vm_name`` the declared ones, through :func:`plan_volumes`; return ``(changed, operations, refusals)``.

    ``desired_disks``: the vm module's ``disks`` items (``dev``, ``pool`` + ``volume`` or ``path``, ``bus``,
    ``readonly``, ``serial``, ``format``). CD-ROMs are left alone. A disk of the VM that is not declared is
    detached (never from a running guest unless ``force``); volumes are never created or deleted here.
    """
    views = observe_domains(connection, [vm_name])
    if vm_name not in views:
        raise InvalidDeclaration('name', 'VM %s does not exist on this connection' % vm_name)
    view = views[vm_name]
    observer = storage.StorageObserver(connection)
    desired, formats = [], {}
    for index, disk in enumerate(desired_disks or ()):
        field = 'disks[%d]' % index
        try:
            norm = domain_spec.normalize_disk(disk, field)
        except ValueError as exc:
            sub, _sep, reason = str(exc).partition(': ')
            raise InvalidDeclaration(sub, reason or str(exc)) from None
        if norm['device'] != 'disk':
            continue
        key = storage_spec.volume_key(norm['pool'], norm['volume']) if norm['type'] == 'volume' else (observer.key_of_path(norm['path']) or norm['path'])
        desired.append(Attachment(vm_name, norm['dev'], key, bool(norm['readonly']), norm['bus'], norm['serial']))
        if norm['format']:
            formats[key] = norm['format']
    actual_atts = actual_attachments(views, observer)
    keys = set(a.volume for a in actual_atts) | set(a.volume for a in desired)
    actual_vols = []
    for key in sorted(keys):
        if key.startswith('/'):
            actual_vols.append(ActualVolume(key))
            continue
        info = observer.volume(key)
        if info is not None:
            actual_vols.append(ActualVolume(key, info['capacity'], info['format']))
            formats.setdefault(key, info['format'])
    plan = phase.plan_volumes([], actual_vols, desired, actual_atts, force_detach=force, managed_vms={vm_name},
                              vms_running={vm_name: view.running})
    refused = set(r['volume'] for r in plan.refusals)
    operations = [op for op in plan.operations if op.volume not in refused]
    if check_mode:
        return bool(operations), [op.as_dict() for op in operations], plan.refusals
    done, error = execute_plan(connection, observer, views, operations, {}, actual_atts, formats, detach_timeout)
    if error is not None:
        error.details.setdefault('operations', done)
        raise error
    return bool(done), done, plan.refusals
