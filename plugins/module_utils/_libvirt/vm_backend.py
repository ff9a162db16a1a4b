# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt backend of the vm module: observe one VM, execute one step.

The phase logic decides (``_phase.vm_plan``); this file only reads the world
and runs the action a step names, under the task protocol of ``_phase.tasks``
(taken per step, with the record in the domain's metadata, see
:mod:`.taskstore`). Waiting is polling with backoff and a deadline.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, DataSafetyRefusal, InvalidDeclaration, TaskConflict, WaitTimeout)
from ansible_collections.converge.virt.plugins.module_utils._common import driver, journal
from ansible_collections.converge.virt.plugins.module_utils._common.driver import VmOptions  # pylint: disable=unused-import  # the module's options
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._libvirt import departures, domain_diff, domain_read, domain_spec, metadata, views as libvirt_views
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import daemon_gone, is_no_domain, libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore, metadata_from_record, read_metadata
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks, views
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id

# dom.state() words for "running" checks
RUNNING_STATES = (1, 2)       # running, blocked
PAUSED_STATE = 3
SHUTOFF_STATES = (0, 5, 6)    # nostate, shutoff, crashed (treated as off)


class LibvirtVm(driver.VmBackend):
    """One VM on one libvirt connection: the hooks of the shared converge driver (:mod:`.._common.driver`)."""

    def __init__(self, connection, name):
        self.connection = connection
        self.conn = connection.conn
        self.name = name
        self.owner = owner_id()

    # ------------------------------------------------------------ observation
    def lookup(self):
        """The virDomain, or None when it does not exist."""
        try:
            return self.conn.lookupByName(self.name)
        except libvirt.libvirtError as exc:
            if is_no_domain(exc):
                return None
            raise self.connection.error(exc, 'cannot look up VM %r' % self.name)

    def observe(self, spec=None, snapshot=None):
        """Everything the planner and the result need, as a dict.

        ``snapshot`` (from :func:`bulk_snapshot`) carries what one bulk call read for
        every domain of the connection, so a fleet needs one XML read per VM.
        """
        try:
            return self._observe(spec, snapshot)
        except libvirt.libvirtError as exc:
            raise self.connection.error(exc, 'cannot read VM %r' % self.name)

    def _observe(self, spec, bulk):
        if bulk is not None:
            known = bulk.get(self.name)
            dom = known['dom'] if known else None
        else:
            known = None
            dom = self.lookup()
        if dom is None:
            result = {'exists': False, 'name': self.name}
            result.update(views.absent_view())
            return result
        if known:
            state, reason = known['state'], known['reason']
            persistent, managed, autostart = known['persistent'], known['managed_save'], known['autostart']
        else:
            state, reason = dom.state()
            persistent = bool(dom.isPersistent())
            managed = bool(dom.hasManagedSaveImage(0)) if persistent else False
            autostart = bool(dom.autostart()) if persistent else False
        inactive_xml = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE) if persistent else dom.XMLDesc(0)
        # the record is part of the persistent definition: no separate metadata call
        meta = metadata.read_converge_metadata(inactive_xml)
        root = ET.fromstring(inactive_xml)
        acpi = root.find('features/acpi') is not None
        job_active = False
        if state in RUNNING_STATES + (PAUSED_STATE,):
            try:
                job_active = dom.jobInfo()[0] in (1, 2)
            except libvirt.libvirtError:
                job_active = False
        view = libvirt_views.libvirt_vm_view(state, reason, meta, acpi=acpi, managed_save=managed, autostart=autostart, job_active=job_active)
        result = {
            'exists': True, 'name': self.name, 'uuid': root.findtext('uuid'), 'persistent': persistent,
            'autostart': autostart, 'managed_save': managed, 'lease_until': meta.get('lease_until'),
            'recorded_vm_state': meta.get('vm_state') or None,
            'task_owner': meta.get('owner'), 'last_action': meta.get('last_action'),
            'pending_restart': bool(meta.get('pending_restart')) and state not in SHUTOFF_STATES,
            'vcpus': int(root.findtext('vcpu') or 0), 'memory_kib': int(root.findtext('memory') or 0),
            'title': root.findtext('title'), 'inactive_xml': inactive_xml, 'dom': dom,
        }
        result.update(view)
        if spec is not None:
            result['diff'] = domain_diff.desired_vs_actual(spec, inactive_xml)
        return result

    # ----------------------------------------------------------- task control
    def store(self, obs):
        """The task store of the observed domain."""
        return LibvirtTaskStore(self.conn, obs['dom'], self.owner, inferred_vm_state=obs['effective_vm_state'])

    def recover_stale(self, obs, now):
        """Clear a task left by a killed run (Nova _init_instance); return a note or None.

        The declaration is then re-planned from what the hypervisor shows, so a
        "redo" is whatever the plan asks for.
        """
        cleared = views.clear_stale(self.store(obs), obs['power_state'], now, owner_gone, name=self.name, managed_save=obs['managed_save'])
        return cleared.as_dict() if cleared else None

    def record_vm_state(self, obs, vm_state):
        """Write ``vm_state`` into an idle VM's record (compare-and-swap)."""
        tasks.record_vm_state(self.store(obs), vm_state, name=self.name)

    def wait_idle(self, obs, options, spec=None):
        """Wait for another task in flight to end (``lock_timeout``; a lease run out or a run gone ends it too), or fail naming it."""
        del spec

        def idle_or_stale(value):
            return value.get('task_state') is None or not value.get('exists') or tasks.lease_expired(value.get('lease_until'), time.time()) \
                or owner_gone(value.get('task_owner'))
        return driver.wait_until_idle(self.name, obs, options, self.observe, idle_or_stale, describe=_brief)

    # ------------------------------------------------------ the driver's hooks
    def public_view(self, obs):
        return public_view(obs)

    def diffable(self, view):
        return _diffable(view)

    def changes(self, obs):
        diff = obs.get('diff')
        return diff.as_list() if diff else []

    def recorded_drift(self, obs):
        return _recorded_drift(obs)

    def without_steps(self, decl, spec, obs, check_mode, result, view):  # pylint: disable=too-many-arguments
        disks_changed = _live_disks(self, spec, obs, check_mode, result, view) if decl.state != 'absent' else False
        if disks_changed and not check_mode:
            view = public_view(self.observe(spec))
            if result.get('disk_refusals'):
                view['pending_restart'] = True
        return disks_changed, view

    def after_steps(self, decl, spec, obs, result, view):  # pylint: disable=too-many-arguments
        if obs.get('exists') and obs.get('diff') and obs['diff'].needs_restart and obs.get('power_state') != 'SHUTDOWN':
            view['pending_restart'] = True
        if decl.state != 'absent' and _live_disks(self, spec, obs, False, result, view):
            view = dict(public_view(self.observe(spec)), pending_restart=view.get('pending_restart') or bool(result.get('disk_refusals')))
        return view

    def converge(self, decl, spec, options, check_mode, task_id=None, snapshot=None):  # pylint: disable=too-many-arguments
        """Plan and (unless ``check_mode``) execute; return (changed, result dict).

        ``snapshot``: what :func:`bulk_snapshot` read for a fleet. A declared cloud-init seed (``spec['cloud_init']``,
        a :class:`cloud_init.Seed`) is brought in place first: its volume is compared with the declared files (read back
        through libvirt), and a changed seed is written before any step (a new VM boots with it) and is a change that needs
        a restart of a running guest. With ``state: absent`` the seed volume the domain carries goes with the VM (only the
        seed, never other volumes).
        """
        departed = self.departure(snapshot)
        if decl.state == 'absent':
            changed, result = _converge_absent(self, decl, spec, options, check_mode, task_id, snapshot)
            if departed is not None:
                # the user declares no VM of that name here: the departure is forgotten (the VM elsewhere is not touched)
                if not check_mode:
                    self._forget_departure()
                result['departure_forgotten'] = dict(departed)
            return changed or departed is not None, result
        if departed is not None:
            if getattr(options, 'if_moved', None) == 'skip':
                return False, self._moved_result(spec, departed)
            raise DataSafetyRefusal(departures.refusal(self.name, departed), moved_to=departed.get('target'), departure=dict(departed))
        seed = spec.get(domain_spec.SEED_KEY) if isinstance(spec, dict) else None
        if seed is None:
            return _converge_without_seed(self, decl, spec, options, check_mode, task_id, snapshot)
        return _converge_with_seed(self, decl, spec, seed, options, check_mode, task_id, snapshot)

    # ------------------------------------------------------------ departures
    def departure(self, snapshot=None):
        """The departure record of this VM when it left this host and its guest does not run here, else None.

        One lookup per VM (a fleet lists the host's records once, with its bulk snapshot); the domain is read only when
        a record exists.
        """
        try:
            if snapshot is not None and departures.SNAPSHOT_KEY in snapshot:
                record = snapshot[departures.SNAPSHOT_KEY].get(self.name)
            else:
                record = departures.departure(self.conn, self.name)
            if record is None:
                return None
            dom = self.lookup()
            if dom is not None and departures.runs_here(dom.state()[0]):
                return None
            return record
        except libvirt.libvirtError as exc:
            raise self.connection.error(exc, 'cannot read the departure record of VM %r' % self.name)

    def _forget_departure(self):
        try:
            departures.clear(self.conn, self.name)
        except libvirt.libvirtError as exc:
            raise self.connection.error(exc, 'cannot remove the departure record of VM %r' % self.name)

    def _moved_result(self, spec, departed):
        """if_moved: skip: the VM left this host; nothing is done here and the result says where it went."""
        view = public_view(self.observe(spec))
        return {'steps': [], 'changes': [], 'vm': view, 'diff': {'before': _diffable(view), 'after': _diffable(view)},
                'moved_to': departed.get('target'), 'departure': dict(departed),
                'msg': departures.refusal(self.name, departed).split('. Declaring', 1)[0] + '; left alone here (if_moved: skip)'}

    # -------------------------------------------------------------- execution
    @property
    def step_errors(self):
        """A libvirt error also rolls a step back (a property: libvirt-python may be missing when this module is imported)."""
        return (ConvergeError, libvirt.libvirtError)

    def act(self, step, spec, obs, options):
        """One step other than create, by the method of its action (``_do_<action>``) on the observed domain."""
        getattr(self, '_do_' + step.action)(obs['dom'], spec, obs, options)

    def step_failed(self, error, step, obs, abandoned):
        """A libvirt error in the collection's words; a daemon that went away during the step named with the VM's last state."""
        del abandoned
        if isinstance(error, ConvergeError):
            return self._daemon_gone(error, step, obs) if error.details.get('daemon_gone') else error  # a read inside the step (a wait)
        if daemon_gone(error):
            return self._daemon_gone(self.connection.error(error, '%s of VM %r failed' % (step.action, self.name),
                                                           during='the %s of VM %r' % (step.action, self.name)), step, obs)
        return self.connection.error(error, '%s of VM %r failed' % (step.action, self.name))

    def _daemon_gone(self, error, step, obs):
        """``error`` (a :class:`BackendError` saying the libvirt daemon went away) of a step, completed with the VM's state as
        last read (before the step: the daemon can no longer be asked) and why running the task again converges."""
        vm_state = obs.get('effective_vm_state') or obs.get('vm_state')
        text = ('%s; VM %r was %s (vm_state %s) when last read, before the %s; run the task again once the daemon is back: '
                'it re-plans from what libvirt then shows, and the task record this run may have left is cleared at once '
                'by a run on this host (its owner process is gone), else when its lease runs out'
                % (error.message, self.name, obs.get('status'), vm_state, step.action))
        return BackendError(self.connection.redact(text), vm_state_last_read=vm_state, status_last_read=obs.get('status'), **error.details)

    def abandon(self, store, task_id, obs):
        """A failed action is rolled back while the domain still exists (its vm_state still describes it); the next
        run re-plans from the hypervisor. Whether the record is gone."""
        try:
            if obs.get('dom') is not None and self.lookup() is not None:
                tasks.abandon_task(store, task_id, name=self.name, rolled_back=True)
                return True
        except (ConvergeError, libvirt.libvirtError):
            pass
        return False

    def create(self, spec, obs, options, task_id):
        """Define the domain with a SPAWNING record in its metadata, then finish the record STOPPED."""
        record = tasks.TaskRecord(vm_state='DELETED', task_state='SPAWNING', task_id=task_id, action='create', started_at=time.time(),
                                  lease_until=time.time() + options.lease_seconds, owner=self.owner)
        try:
            from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_build  # pylint: disable=import-outside-toplevel
            xml = domain_build.build_domain_xml(spec, metadata=metadata_from_record(record, 1))
        except ValueError as exc:
            raise InvalidDeclaration(str(exc).split(':', 1)[0], str(exc).split(':', 1)[-1].strip())
        try:
            dom = self.conn.defineXML(xml)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() in (libvirt.VIR_ERR_OPERATION_FAILED, libvirt.VIR_ERR_DOM_EXIST):
                raise TaskConflict(self.name, 'another run', 'SPAWNING', reason=self.connection.redact(str(exc)))
            raise self.connection.error(exc, 'cannot define VM %r' % self.name)
        with journal.Interval(self.name, task_id, 'create', target='STOPPED'):
            autostart = domain_spec.spec_autostart(spec)
            if autostart is not None:
                dom.setAutostart(1 if autostart else 0)
            obs = self.observe(spec)
        tasks.finish_task(self.store(obs), task_id, name=self.name, vm_state='STOPPED')
        return self.observe(spec)

    # one method per action of the action table
    def _do_update(self, dom, spec, obs, options):
        del options
        diff = obs.get('diff')
        if diff:
            try:
                # re-read: the definition now carries our task record, which a
                # redefine from the earlier observation would overwrite
                from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_merge  # pylint: disable=import-outside-toplevel
                new_xml = domain_merge.merge_into_inactive(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), spec)
            except ValueError as exc:
                raise InvalidDeclaration(str(exc).split(':', 1)[0], str(exc).split(':', 1)[-1].strip())
            self.conn.defineXML(new_xml)
            if dom.isActive():
                self._apply_live(dom, diff)
        autostart = domain_spec.spec_autostart(spec)
        if autostart is not None and bool(dom.autostart()) != autostart:
            dom.setAutostart(1 if autostart else 0)
        if dom.isActive() and diff and diff.needs_restart:
            self.store(self.observe()).set_pending_restart(True)

    def _apply_live(self, dom, diff):
        for change in diff.live:
            if change.path == 'title':
                dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_TITLE, change.after or None, None, None, libvirt.VIR_DOMAIN_AFFECT_LIVE)
            elif change.path == 'description':
                dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_DESCRIPTION, change.after or None, None, None, libvirt.VIR_DOMAIN_AFFECT_LIVE)

    def _wait_state(self, dom, done, what, timeout):
        def observe():
            try:
                return dom.state()
            except libvirt.libvirtError as exc:
                if is_no_domain(exc):
                    return (0, 0)
                raise
        return wait_for(observe, lambda st: done(st[0]), timeout, '%s to be %s' % (self.name, what),
                        describe=lambda st: libvirt_views.libvirt_vm_view(st[0], st[1]))

    def _boot(self, dom, options):
        # the record read once (this run holds the task: no other run writes it): the mutex only for a field to clear
        meta = read_metadata(dom)
        if meta.get('stop_grace_period') is not None:
            # a new boot: how an earlier stop powered the guest off no longer says anything
            LibvirtTaskStore(self.conn, dom, self.owner).set_stop_grace_period(None)
        dom.create()
        if options.wait:
            self._wait_state(dom, lambda st: st in RUNNING_STATES, 'running', options.wait_timeout)
        # the guest runs the stored definition now (on a guest off again the flag is masked, as observe() does)
        if meta.get('pending_restart') and dom.state()[0] not in SHUTOFF_STATES:
            LibvirtTaskStore(self.conn, dom, self.owner).set_pending_restart(False)

    def _do_start(self, dom, spec, obs, options):
        del spec, obs
        self._boot(dom, options)

    def _do_stop(self, dom, spec, obs, options):
        del spec, obs
        self._shutdown(dom, options, graceful=True)

    def _shutdown(self, dom, options, graceful):
        if dom.state()[0] in SHUTOFF_STATES:
            return
        if graceful and options.shutdown_timeout > 0:
            if dom.state()[0] == PAUSED_STATE:
                dom.resume()
            try:
                dom.shutdown()
                self._wait_state(dom, lambda st: st in SHUTOFF_STATES, 'shut off', options.shutdown_timeout)
                return
            except WaitTimeout as exc:
                if not options.force_stop:
                    raise WaitTimeout('graceful shutdown of %s did not complete within %ss and force_stop is false'
                                      % (self.name, options.shutdown_timeout), **exc.details)
        elif not options.force_stop:
            raise BackendError('stopping %s needs a graceful shutdown (shutdown_timeout > 0) or force_stop' % self.name)
        # what the destroy follows, for the phase it leaves (Failed after a graceful shutdown ran out of time,
        # Succeeded after an immediate power-off: libvirt_views.libvirt_vm_view, KubeVirt isACPIEnabled)
        LibvirtTaskStore(self.conn, dom, self.owner).set_stop_grace_period(options.shutdown_timeout if graceful else 0)
        try:
            dom.destroy()
        except libvirt.libvirtError as exc:
            if dom.state()[0] not in SHUTOFF_STATES:
                raise exc
        self._wait_state(dom, lambda st: st in SHUTOFF_STATES, 'shut off', 30)

    def _restart(self, dom, options, graceful):
        old_id = dom.ID() if dom.isActive() else -1
        if dom.isPersistent() and dom.hasManagedSaveImage(0):
            dom.managedSaveRemove(0)
        self._shutdown(dom, options, graceful=graceful)
        self._boot(dom, options)
        if options.wait and dom.ID() == old_id:
            raise BackendError('restart of %s did not produce a new boot' % self.name)

    def _do_reboot_soft(self, dom, spec, obs, options):
        del spec, obs
        self._restart(dom, options, graceful=True)

    def _do_reboot_hard(self, dom, spec, obs, options):
        del spec, obs
        self._restart(dom, options, graceful=False)

    def _do_pause(self, dom, spec, obs, options):
        del spec, obs
        dom.suspend()
        if options.wait:
            self._wait_state(dom, lambda st: st == PAUSED_STATE, 'paused', options.wait_timeout)

    def _do_unpause(self, dom, spec, obs, options):
        del spec, obs
        dom.resume()
        if options.wait:
            self._wait_state(dom, lambda st: st in RUNNING_STATES, 'running', options.wait_timeout)

    def _do_suspend(self, dom, spec, obs, options):
        del spec, obs, options
        dom.managedSave(0)

    def _do_resume(self, dom, spec, obs, options):
        del spec, obs
        self._boot(dom, options)

    def _do_delete(self, dom, spec, obs, options):
        del spec, obs, options
        if dom.isActive():
            try:
                dom.destroy()
            except libvirt.libvirtError:
                if dom.isActive():
                    raise
        if dom.isPersistent():
            flags = libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
            flags |= getattr(libvirt, 'VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA', 0)
            try:
                dom.undefineFlags(flags | libvirt.VIR_DOMAIN_UNDEFINE_KEEP_NVRAM)
            except libvirt.libvirtError:
                dom.undefineFlags(flags)


def _brief(obs):
    return {k: obs.get(k) for k in ('vm_state', 'power_state', 'task_state', 'task_id', 'status')}


def public_view(obs):
    """The VM as a module returns it: no handles, no raw XML."""
    keep = ('name', 'exists', 'uuid', 'vm_state', 'power_state', 'task_state', 'task_id', 'status', 'phase', 'phase_reason', 'state', 'state_reason',
            'persistent', 'autostart', 'managed_save', 'pending_restart', 'vcpus', 'memory_kib', 'title')
    return {k: obs.get(k) for k in keep if k in obs}


def bulk_snapshot(connection):
    """What one round of bulk calls tells about every domain: name -> dict (for fleets)."""
    conn = connection.conn
    try:
        flags = {
            'autostart': libvirt.VIR_CONNECT_LIST_DOMAINS_AUTOSTART,
            'managed_save': libvirt.VIR_CONNECT_LIST_DOMAINS_MANAGEDSAVE,
            'persistent': libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT,
        }
        sets = dict((key, set(d.name() for d in conn.listAllDomains(flag))) for key, flag in flags.items())
        snapshot = {}
        for dom, stats in conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_STATE, 0):
            name = dom.name()
            snapshot[name] = {'dom': dom, 'state': stats.get('state.state', 0), 'reason': stats.get('state.reason', 0),
                              'autostart': name in sets['autostart'], 'managed_save': name in sets['managed_save'],
                              'persistent': name in sets['persistent']}
        snapshot[departures.SNAPSHOT_KEY] = departures.departures(conn)
        return snapshot
    except libvirt.libvirtError as exc:
        raise connection.error(exc, 'cannot list the VMs')


def converge_vm(vm, decl, spec, options, check_mode, task_id=None, bulk=None):  # pylint: disable=too-many-arguments
    """Plan and (unless ``check_mode``) execute on the :class:`LibvirtVm` ``vm``; return (changed, result dict) (see :meth:`LibvirtVm.converge`)."""
    return vm.converge(decl, spec, options, check_mode, task_id, bulk)


def _converge_with_seed(vm, decl, spec, seed, options, check_mode, task_id, bulk):  # pylint: disable=too-many-arguments
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import cloud_init  # pylint: disable=import-outside-toplevel  # declared: loaded
    seen = {}

    def bring_seed(obs):
        # after a task in flight ended (wait_idle), before the plan: the steps start the guest with the declared seed
        try:
            actual = seen['actual'] = cloud_init.observed_digest(vm.conn, seed)
            runs = seen['runs'] = bool(obs.get('exists')) and obs.get('power_state') in ('RUNNING', 'PAUSED')
            if actual != seed.digest and not check_mode:
                # under the VM's task: a run another run's task refuses writes nothing
                cloud_init.write_seed_under_task(vm, obs, seed, task_id, options.lease_seconds, runs)
                if runs:
                    return True, vm.observe(spec)
            return actual != seed.digest and runs, obs
        except libvirt.libvirtError as exc:
            raise vm.connection.error(exc, 'cannot bring the cloud-init seed %s of VM %r in place' % (seed.volume, vm.name))
    changed, result = driver.converge_vm(vm, decl, spec, options, check_mode, task_id, bulk, before_plan=bring_seed)
    actual, runs = seen['actual'], seen['runs']
    seed_changed = actual != seed.digest
    result['cloud_init'] = {'digest': seed.digest, 'pool': seed.pool, 'volume': seed.volume, 'changed': seed_changed,
                            'restart_needed': bool(seed_changed and runs)}
    result['diff']['before']['cloud_init_digest'] = actual
    result['diff']['after']['cloud_init_digest'] = seed.digest
    if seed_changed and runs and result['vm'].get('power_state') in ('RUNNING', 'PAUSED') and \
            not any(step['action'] in ('reboot_soft', 'reboot_hard', 'stop', 'restart') for step in result['steps']):
        result['vm']['pending_restart'] = True
        result['diff']['after']['pending_restart'] = True
    return changed or seed_changed, result


def _seed_dropped(spec, where):
    """Whether a declaration without cloud_init takes the seed cdrom ``where`` (pool, volume) out of the definition.

    Only a declaration that gives ``disks`` does (without it the disks are left alone, the cdrom with them); a declared
    disk on the seed volume keeps it (the user took it over).
    """
    disks = spec.get('disks') if isinstance(spec, dict) else None
    if disks is None:
        return False
    return not any(isinstance(d, dict) and d.get('volume') == where[1] for d in disks)


def _converge_without_seed(vm, decl, spec, options, check_mode, task_id, bulk):  # pylint: disable=too-many-arguments
    """A declaration without cloud_init: a seed cdrom the domain still carries goes, with its volume.

    The definition loses the cdrom through the declared ``disks`` (a restart-needing change for a running guest: it keeps
    reading its open seed until it restarts); the seed volume is deleted once the persistent definition no longer names it.
    """
    seen = {}

    def find_seed(obs):
        xml = obs.get('inactive_xml') if obs.get('exists') else None
        where = domain_read.seed_in_domain(xml, vm.name) if xml else None
        if where is not None and _seed_dropped(spec, where):
            seen['where'] = where
        return False, obs
    changed, result = driver.converge_vm(vm, decl, spec, options, check_mode, task_id, bulk, before_plan=find_seed)
    where = seen.get('where')
    if where is None:
        return changed, result
    removed = True
    if not check_mode:
        from ansible_collections.converge.virt.plugins.module_utils._libvirt import cloud_init  # pylint: disable=import-outside-toplevel
        try:
            dom = vm.lookup()
            still = dom is not None and domain_read.seed_in_domain(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), vm.name) is not None
            removed = False if still else cloud_init.delete_seed(vm.conn, where[0], where[1])
        except libvirt.libvirtError as exc:
            raise vm.connection.error(exc, 'cannot remove the cloud-init seed %s of VM %r (cloud_init is no longer declared)' % (where[1], vm.name))
    result['cloud_init'] = {'pool': where[0], 'volume': where[1], 'removed': removed}
    return changed or removed, result


def _converge_absent(vm, decl, spec, options, check_mode, task_id, bulk):  # pylint: disable=too-many-arguments
    try:
        dom = vm.lookup()
        where = domain_read.seed_in_domain(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), vm.name) if dom is not None else None
    except libvirt.libvirtError as exc:
        raise vm.connection.error(exc, 'cannot read VM %r' % vm.name)
    changed, result = driver.converge_vm(vm, decl, spec, options, check_mode, task_id, bulk)
    if where is None:
        return changed, result
    removed = True
    if not check_mode and not result['vm'].get('exists'):
        from ansible_collections.converge.virt.plugins.module_utils._libvirt import cloud_init  # pylint: disable=import-outside-toplevel
        try:
            removed = cloud_init.delete_seed(vm.conn, where[0], where[1])
        except libvirt.libvirtError as exc:
            raise vm.connection.error(exc, 'VM %r was undefined but its cloud-init seed %s could not be deleted' % (vm.name, where[1]))
    result['cloud_init'] = {'pool': where[0], 'volume': where[1], 'removed': removed}
    return changed or removed, result


def _live_disks(vm, spec, obs, check_mode, result, view):
    """Bring a running guest's disks to the declared ones through the shared volume planner.

    The persistent definition already carries the declared disks (create or
    update steps); what is left is the live side: hot-plug what was added,
    and unplug what was removed - which the planner refuses for a running
    guest, so such a disk stays until the next restart (pending_restart).
    Returns True when disks were (or, in check mode, would be) changed.
    """
    if not spec or 'xml' in spec or spec.get('disks') is None or not obs.get('exists') or obs.get('power_state') not in ('RUNNING', 'PAUSED'):
        return False
    from ansible_collections.converge.virt.plugins.module_utils._libvirt.attachments import reconcile_vm_disks  # pylint: disable=import-outside-toplevel
    changed, operations, refusals = reconcile_vm_disks(vm.connection, vm.name, spec['disks'], force=False, check_mode=check_mode)
    if operations:
        result['disk_operations'] = operations
    if refusals:
        result['disk_refusals'] = refusals
        view['pending_restart'] = True
        if not check_mode and not obs.get('pending_restart'):
            # remembered in the record, so that restart_on_change applies it later
            vm.store(vm.observe()).set_pending_restart(True)
            changed = True
    return bool(changed)


def _recorded_drift(obs):
    """(recorded, effective) when an idle VM's record disagrees with the hypervisor, else None."""
    if not obs.get('exists') or obs.get('task_state'):
        return None
    recorded = obs.get('recorded_vm_state')
    effective = obs.get('effective_vm_state')
    if recorded and effective and recorded != effective:
        return recorded, effective
    return None


def _diffable(view):
    return {k: view.get(k) for k in ('exists', 'vm_state', 'power_state', 'status', 'autostart', 'vcpus', 'memory_kib', 'title',
                                     'pending_restart') if k in view}
