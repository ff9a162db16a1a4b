# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt backend of the migration modules: the run of one migration (:class:`Migration`) and of a fleet
(:func:`migrate_many`).

The phase machine of ``_phase.migration`` decides which phase a migration is
in and why it failed; this file only observes (destination connection, drain
mark, ``dom.jobStats()``, where the domain runs) and executes (the migrate
call, ``abortJob``, rollback of the destination's leftovers).

Beside the run: the options and the session (:mod:`.migration_options`), the transfer thread and the follow hooks
(:mod:`.migration_follow`), what it reads and reports (:mod:`.migration_observe`), the VM's migration history
(:mod:`.migration_history`), the host drain mark (:mod:`.drain`) and the placement of a fleet (:mod:`.placement`).

Records:

* the task (``live_migrate`` / ``offline_migrate``, task_state MIGRATING) is
  the domain's converge record (:mod:`.taskstore`). ``VIR_MIGRATE_PERSIST_DEST``
  copies it to the destination, where the task is finished after success.
* a short history of the VM's recent migrations is a JSON list in a second
  metadata element (:mod:`.migration_history`), so it travels with the
  domain and never collides with the task record's compare-and-swap.
* the drain mark of a host is a persistent private libvirt secret on that host
  (:mod:`.drain`): every controller that connects to the host sees it, it
  survives daemon restarts, and creating it twice fails (the usage is unique).
"""

from __future__ import annotations

import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, InvalidDeclaration, TaskConflict, TransitionRefused)
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id
from ansible_collections.converge.virt.plugins.module_utils._common import journal, migrate
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt import departures, metadata, migration_phase
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import Connection, is_no_domain, libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.drain import drain_mark
from ansible_collections.converge.virt.plugins.module_utils._libvirt.migration_follow import FollowLibvirt, MigrateThread
from ansible_collections.converge.virt.plugins.module_utils._libvirt.migration_history import read_history, upsert_history, write_history
from ansible_collections.converge.virt.plugins.module_utils._libvirt.migration_observe import (
    ACTIVE_STATES, PROGRESS_KEYS, connection_alive, domain_running, host_uuid, is_connection_error, job_stats, lookup, lost_connection,
    progress_of, vm_view)
from ansible_collections.converge.virt.plugins.module_utils._libvirt.placement import choose_targets
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, migration, tasks, views

MIGRATE_ACTIONS = ('live_migrate', 'offline_migrate')
LOOK_AGAIN = 3  # looks at both hosts when the VM leaves the source while this run reads it


task_lease_seconds = migrate.task_lease_seconds


class Migration(migrate.MigrationRun):  # pylint: disable=too-many-instance-attributes
    """One VM to converge onto a target host (see the module docstring)."""

    def __init__(self, source_args, target_uri, name, opts, check_mode=False, on_started=None):
        super().__init__(name, opts, owner_id(), check_mode=check_mode, on_started=on_started)
        self.source_args = tuple(source_args)          # (uri, username, password)
        self.target_uri = target_uri
        self.source = None
        self.dest = None
        self.history_entry = None
        self.stopped_by = None      # the timeout that made this run abort the migration (named in the failure message)
        self.started = False        # this run took the task: from then on an error is reported, never retried

    # ---------------------------------------------------------- plumbing
    def _redact(self, text):
        text = str(text)
        for conn in (self.source, self.dest):
            if conn is not None:
                text = conn.redact(text)
        if self.opts.target_password:
            text = text.replace(self.opts.target_password, '********')
        return text

    def _observe(self, **kwargs):
        return self._advance(migration_phase.libvirt_observation(self.phase, **kwargs))

    def _result(self, changed, failed=False, msg=None, vm=None, on_target=None):
        result = {'name': self.name, 'changed': changed, 'failed': failed, 'phase': self.phase or None, 'phases': list(self.phases),
                  'reason': self.reason, 'progress': self.progress, 'target_uri': redact_uri(self.target_uri),
                  'source_uri': redact_uri(self.source_args[0])}
        if msg:
            result['msg'] = self._redact(msg)
        if vm is not None:
            result['vm'] = vm
        if on_target is not None:
            result['on_target'] = on_target
        if self.notes:
            result['notes'] = self.notes
        return result

    def _public_vm(self, dom):
        """The VM's state words; ``host`` is the name of the host it is on (as vm_info reports it)."""
        view = vm_view(dom)
        out = dict((k, view.get(k)) for k in ('vm_state', 'task_state', 'power_state', 'status', 'phase', 'state_reason'))
        try:
            out['host'] = dom.connect().getHostname()
        except libvirt.libvirtError:
            out['host'] = None
        return out

    def close(self):
        """Close the connections."""
        for conn in (self.source, self.dest):
            if conn is not None:
                conn.close()

    # ---------------------------------------------------------- entry points
    def converge(self):
        """Run the migration to its end (state finished / started); return the result dict."""
        try:
            looks = 1
            while True:
                try:
                    return self._converge()
                except libvirt.libvirtError as exc:
                    # The VM left the source while this run was reading it (a migration started by a run that
                    # was killed, or by someone else, finished meanwhile): nothing was started by this run,
                    # so look at both hosts again instead of failing on a domain that has just moved.
                    if not is_no_domain(exc) or self.started or looks == LOOK_AGAIN:
                        raise
                    self._forget()
                    self.notes.append('the VM left the source while this run read it; looked at both hosts again')
                    time.sleep(0.2 * looks)
                    looks += 1
        except TransitionRefused as exc:
            raise exc
        except libvirt.libvirtError as exc:
            why = lost_connection(str(exc), connection_alive(self.source), None if self.dest is None else connection_alive(self.dest))
            if why is None:
                raise BackendError(self._redact('migration of VM %r: %s' % (self.name, exc))) from exc
            raise BackendError(self._redact('migration of VM %r to %s failed (%s): %s' % (self.name, redact_uri(self.target_uri), why, exc))) from exc
        finally:
            self.close()

    def _forget(self):
        """Drop what one look at the hosts learnt (phases, progress, connections) before looking again."""
        self.close()
        self.source = self.dest = None
        self.forget_phases()
        self.history_entry = None

    def cancel(self, wait=True):
        """Abort the migration of the VM in flight (state cancelled); return the result dict."""
        try:
            return self._cancel(wait)
        except libvirt.libvirtError as exc:
            raise BackendError(self._redact('cancelling the migration of VM %r: %s' % (self.name, exc))) from exc
        finally:
            self.close()

    # ---------------------------------------------------------- converge
    def _open_dest(self):
        try:
            self.dest = Connection(self.target_uri, self.opts.target_username, self.opts.target_password)
            return None
        except ConvergeError as exc:
            return exc.message

    def _converge(self):  # pylint: disable=too-many-return-statements,too-many-branches
        self.source = Connection(*self.source_args)
        src_dom = lookup(self.source.conn, self.name)
        dest_error = self._open_dest()
        dest_dom = lookup(self.dest.conn, self.name) if self.dest else None
        if src_dom is not None and dest_dom is not None and dest_dom.UUIDString() == src_dom.UUIDString() \
                and host_uuid(self.dest.conn) == host_uuid(self.source.conn):
            # the same host finds the same VM on both connections; only then are the host UUIDs read (the first
            # getCapabilities of a daemon probes every emulator: seconds)
            raise InvalidDeclaration('target_uri', 'names the same host as uri (host UUID %s)' % host_uuid(self.source.conn))
        if src_dom is None:
            if dest_dom is not None:
                return self._already_on_target(None, dest_dom)
            if dest_error:
                raise BackendError(self._redact('VM %r not found on %s, and the target is unreachable: %s'
                                                % (self.name, redact_uri(self.source_args[0]), dest_error)))
            raise BackendError('VM %r not found on %s nor on %s' % (self.name, redact_uri(self.source_args[0]), redact_uri(self.target_uri)))
        view = vm_view(src_dom)
        src_active = view['state_code'] in ACTIVE_STATES
        if dest_dom is not None and (not src_active or self.opts.offline) and (domain_running(dest_dom) or self.opts.offline):
            if not (self.opts.offline and src_dom.isPersistent() and dest_dom.UUIDString() != src_dom.UUIDString()):
                return self._already_on_target(src_dom, dest_dom)
        if view['task_state'] == 'MIGRATING' and view.get('last_action') in MIGRATE_ACTIONS:
            attached = self._pick_up(src_dom, view)
            if attached is not None:
                return attached
            view = vm_view(src_dom)
        if view['task_state'] is not None:
            view = self._recover_stale(src_dom, view)
        # refused from the wrong state: nothing changed, the error names the state
        actions.check_action(self.opts.action, view['effective_vm_state'], view['task_state'])
        if not migration.may_start(view['effective_vm_state'], view['task_state']) and not self.opts.offline:
            raise TransitionRefused(self.opts.action, view['effective_vm_state'], view['task_state'])
        if dest_dom is not None and dest_dom.UUIDString() != src_dom.UUIDString():
            raise InvalidDeclaration('name', 'a different VM called %r (UUID %s) exists on the target' % (self.name, dest_dom.UUIDString()))
        if self.check_mode:
            return self._predicted()
        self._advance(migration.MigrationObservation(phase=migration.UNSET, target_exists=False))
        if dest_error:
            self._observe(dest_failed=True)
            self.reason = migrate.TARGET_UNREACHABLE     # never reached: not "died or vanished"
            return self._refused_attempt(src_dom, 'cannot reach the target: %s' % dest_error, dest_error)
        self._observe(dest_connected=True)
        mark = drain_mark(self.dest.conn)
        if mark is not None:
            self._advance(migration_phase.libvirt_observation(self.phase, dest_connected=True)._replace(target_draining=True))
            why = mark.get('reason') or 'no reason given'
            return self._refused_attempt(src_dom, 'target %s is being drained (%s); no VM is placed on it' % (redact_uri(self.target_uri), why))
        self._observe(dest_connected=True, dest_checked=True)
        return self._run(src_dom, view)

    def _refused_attempt(self, src_dom, msg, error=None):
        """An attempt that failed before this run took the task: nothing in the world changed (``changed: false``).

        The attempt is recorded in the VM's migration history, so migration_info lists it; that history is a log of
        attempts, not state of the VM, and writing it is no change.
        """
        self._finish_history(src_dom, migration.FAILED, self.reason, [], task_id=tasks.new_task_id(), started_at=time.time(),
                             error=self._redact(error) if error else None)
        return self._result(changed=False, failed=True, msg=msg)

    def _predicted(self):
        obs = migration.MigrationObservation(target_exists=True, target_ready=True, target_node_known=True, target_address_known=True,
                                             transfer_started=True, transfer_completed=True)
        self._advance(obs)
        return self._result(changed=True, msg='check mode: the VM would be migrated')

    def _already_on_target(self, src_dom, dest_dom):
        changed = False
        for dom, vm_state in ((dest_dom, None), (src_dom, 'STOPPED')):
            if dom is None:
                continue
            view = vm_view(dom)
            if view['task_state'] == 'MIGRATING' and view.get('last_action') in MIGRATE_ACTIONS and not view['job_active']:
                if self.check_mode:
                    changed = True
                    continue
                # a run that died after the move: finish its task where the VM is now
                store = LibvirtTaskStore((self.dest if dom is dest_dom else self.source).conn, dom, self.owner)
                record, _version = store.load()
                tasks.finish_task(store, record.task_id, name=self.name, vm_state=vm_state)
                side = 'target' if dom is dest_dom else 'source'
                self.notes.append('finished the task %s left by an interrupted run on the %s' % (record.task_id, side))
                changed = True
                if dom is dest_dom:
                    self._finish_history(dom, migration.SUCCEEDED, None, [], task_id=record.task_id)
        if changed:
            self.phase = migration.SUCCEEDED
        if not self.check_mode:
            changed = self._departed(None) or changed
        return self._result(changed=changed, vm=self._public_vm(dest_dom), on_target=True,
                            msg=None if changed else 'the VM already runs on the target')

    def _pick_up(self, src_dom, view):
        """A migration recorded on the source: attach to it, or clear what a dead run left. None = start anew."""
        store = LibvirtTaskStore(self.source.conn, src_dom, self.owner, inferred_vm_state=view['effective_vm_state'])
        record, _version = store.load()
        if view['job_active']:
            if self.check_mode:
                self.phase = migration.RUNNING
                return self._result(changed=True, msg='check mode: would attach to the migration in flight')
            self.notes.append('attached to the migration in flight (task %s)' % record.task_id)
            self.phases.extend([migration.RUNNING])
            self.phase = migration.RUNNING
            if self.opts.bandwidth:
                try:
                    src_dom.migrateSetMaxSpeed(int(self.opts.bandwidth), 0)
                except libvirt.libvirtError:
                    pass
            return self._follow(src_dom, record.task_id, thread=None, started_at=record.started_at)
        reason = record.stale_reason(time.time(), run_gone=owner_gone(record.owner))
        if reason is not None:
            if self.check_mode:
                return None
            tasks.abandon_task(store, record.task_id, name=self.name, rolled_back=True)
            self._stayed(record.task_id)
            self.notes.append('cleared the task %s left by an interrupted run (the guest stayed on the source): %s' % (record.task_id, reason))
            return None
        raise TaskConflict(self.name, record.task_id, record.task_state, owner=record.owner)

    def _recover_stale(self, src_dom, view):
        """A task of another kind whose run is gone, or whose lease no task can have written: recovered as the vm module does.

        Returns the view to plan from (the task cleared; in check mode as it would be). A live task is left alone
        (the action check that follows refuses it, naming it).
        """
        store = LibvirtTaskStore(self.source.conn, src_dom, self.owner, inferred_vm_state=view['effective_vm_state'])
        cleared = views.clear_stale(store, view['power_state'], time.time(), owner_gone, name=self.name, dry_run=self.check_mode)
        if cleared is None:
            return view
        self.notes.append(cleared.note(dry_run=self.check_mode))
        if self.check_mode:
            return dict(view, task_state=None, task_id=None, effective_vm_state=cleared.vm_state)
        return vm_view(src_dom)

    def _run(self, src_dom, view=None):
        """Take the task and migrate. ``view``: the source's state words this run has just read (not read again: the take
        is a compare-and-swap on the record all the same); None: read them."""
        task_id = tasks.new_task_id()
        view = vm_view(src_dom) if view is None else view
        lease = task_lease_seconds(self.opts)
        store = LibvirtTaskStore(self.source.conn, src_dom, self.owner, inferred_vm_state=view['effective_vm_state'])
        record = tasks.take_task(store, self.opts.action, task_id, time.time(), lease_seconds=lease, owner=self.owner, name=self.name)
        self.started = True
        target = redact_uri(self.target_uri)
        journal.append('begin', self.name, task_id, self.opts.action, target=target)
        ended = False
        try:
            result = self._run_held(src_dom, store, task_id, record)
            ended = self.phase == migration.SUCCEEDED
        finally:
            journal.append('end', self.name, task_id, self.opts.action, target=target, phase=self.phase, outcome='done' if ended else 'failed')
        return result

    def _run_held(self, src_dom, store, task_id, record):
        """The migration once its task is held: record it in the history, start it and follow it."""
        started_at = record.started_at
        self.history_entry = {'id': task_id, 'source': redact_uri(self.source_args[0]), 'target': redact_uri(self.target_uri),
                              'mode': 'offline' if self.opts.offline else 'live', 'started_at': started_at, 'phase': self.phase,
                              'owner': self.owner}
        write_history(src_dom, upsert_history(read_history(src_dom), self.history_entry))
        try:
            # before the guest can move: a vm task on this host must not define or start a second copy meanwhile
            if not departures.mark(self.source.conn, self.name, departures.LEAVING, redact_uri(self.target_uri), task_id, src_dom.UUIDString()):
                self.notes.append('the source keeps no departure record (its libvirt has no secret driver)')
        except libvirt.libvirtError as exc:
            tasks.abandon_task(store, task_id, name=self.name, rolled_back=True)
            raise BackendError(self._redact('cannot record the departure on the source: %s' % exc)) from exc
        try:
            if not self.opts.offline and self.opts.max_downtime:
                src_dom.migrateSetMaxDowntime(int(self.opts.max_downtime), 0)
        except libvirt.libvirtError as exc:
            tasks.abandon_task(store, task_id, name=self.name, rolled_back=True)
            raise BackendError(self._redact('cannot set max_downtime: %s' % exc)) from exc
        thread = MigrateThread(self.source_args, self.target_uri, self.name, self.opts)
        thread.start()
        thread.started_call.wait(30)
        return self._follow(src_dom, task_id, thread, started_at)

    def _follow(self, src_dom, task_id, thread, started_at):
        """Follow the source's job with the shared loop (:mod:`.._common.migrate`); then finish or roll back."""
        hooks = FollowLibvirt(self, src_dom, thread)
        outcome = migrate.follow(hooks, migrate.Timeouts(wait_timeout=self.opts.wait_timeout, completion_timeout=self.opts.completion_timeout,
                                                         poll_interval=self.opts.poll_interval))
        self.notes.extend(outcome.notes)
        self.stopped_by = outcome.stopped_by
        error = thread.error if thread is not None else None
        dest_dom = self._dest_domain()
        on_dest = domain_running(dest_dom) or (self.opts.offline and dest_dom is not None and error is None)
        src_active = domain_running(src_dom)
        if on_dest and not (src_active and not self.opts.offline):
            return self._succeeded(dest_dom, task_id, started_at, hooks.saw_job)
        return self._failed(src_dom, dest_dom, task_id, started_at, error, src_active, thread)

    def _switch_to_post_copy(self, src_dom):
        """The completion-timeout action: True when switched to post-copy, False to let the loop abort."""
        if self.opts.completion_action != 'postcopy':
            return False
        try:
            src_dom.migrateStartPostCopy(0)
            return True
        except libvirt.libvirtError as exc:
            self.notes.append('completion_timeout reached: switching to post-copy failed (%s); aborting' % self._redact(exc))
            return False

    def _dest_domain(self):
        for attempt in range(2):
            try:
                if self.dest is None or attempt:
                    if self.dest is not None:
                        self.dest.close()
                    self.dest = Connection(self.target_uri, self.opts.target_username, self.opts.target_password)
                return lookup(self.dest.conn, self.name)
            except (ConvergeError, libvirt.libvirtError):
                self.dest = None if attempt else self.dest
        return None

    def _succeeded(self, dest_dom, task_id, started_at, saw_job):
        completed = job_stats(dest_dom, completed=True) if not self.opts.offline else {}
        if any(key in completed for key in PROGRESS_KEYS):
            # after post-copy the target has no completed statistics ({'type': 0}): keep the last polled progress
            self.progress = progress_of(completed)
        self._observe(dest_connected=True, dest_checked=True, dest_accepts=True,
                      job_type=migration_phase.LIBVIRT_JOB_COMPLETED, on_destination=True)
        del saw_job
        store = LibvirtTaskStore(self.dest.conn, dest_dom, self.owner)
        record, _version = store.load()
        if record.task_id == task_id:
            tasks.finish_task(store, task_id, name=self.name)
        src_left = None
        try:
            src_left = lookup(self.source.conn, self.name)
        except libvirt.libvirtError:
            src_left = None
        if src_left is not None and not domain_running(src_left):
            src_store = LibvirtTaskStore(self.source.conn, src_left, self.owner)
            src_record, _version = src_store.load()
            if src_record.task_id == task_id:
                tasks.finish_task(src_store, task_id, name=self.name, vm_state='STOPPED')
            self.notes.append('the source keeps a stopped definition (undefine_source=false)')
        self._departed(task_id)
        history = read_history(src_left) if src_left is not None else []
        history = history or read_history(dest_dom)
        self._finish_history(dest_dom, migration.SUCCEEDED, None, history, task_id=task_id, started_at=started_at)
        if src_left is not None:
            write_history(src_left, upsert_history(read_history(src_left), self.history_entry))
        return self._result(changed=True, vm=self._public_vm(dest_dom), on_target=True)

    def _finish_history(self, dom, phase, reason, history, task_id, started_at=None, error=None):  # pylint: disable=too-many-arguments
        entry = dict(self.history_entry or {'id': task_id, 'source': redact_uri(self.source_args[0]), 'target': redact_uri(self.target_uri),
                                            'started_at': started_at})
        entry.update(phase=phase, reason=reason, finished_at=time.time(), phases=list(self.phases),
                     data_total=self.progress.get('data_total'), downtime=self.progress.get('downtime'))
        if error:
            entry['error'] = error
        entry.pop('owner', None)
        self.history_entry = entry
        write_history(dom, upsert_history(history or read_history(dom), entry))

    def _failed(self, src_dom, dest_dom, task_id, started_at, error, src_active, thread):  # pylint: disable=too-many-arguments
        code = thread.error_code if thread is not None else None
        last_job = job_stats(src_dom, completed=True).get('type', 0)
        aborted = (code == getattr(libvirt, 'VIR_ERR_OPERATION_ABORTED', -1) or last_job == migration_phase.LIBVIRT_JOB_CANCELLED
                   or (bool(error) and ('abort' in error.lower() or 'cancel' in error.lower())))
        dest_failed = not aborted and bool(error) and (self.dest is None or is_connection_error(error))
        if aborted:
            self._observe(dest_connected=True, dest_checked=True, dest_accepts=True, job_type=migration_phase.LIBVIRT_JOB_CANCELLED,
                          vm_running=src_active, aborted=True)
        else:
            self._observe(dest_connected=True, dest_checked=True, dest_accepts=True, job_type=migration_phase.LIBVIRT_JOB_FAILED,
                          vm_running=src_active, dest_failed=bool(dest_failed), error=error or 'the migration did not finish')
        if self.phase != migration.FAILED:
            self.phases.append(migration.FAILED)
            self.phase = migration.FAILED
            self.reason = self.reason or migration.SOURCE_FAILED
        # the guest keeps running on the source; remove what the target kept of it
        if dest_dom is not None and src_active:
            self._remove_leftover(dest_dom, src_dom, task_id)
        store = LibvirtTaskStore(self.source.conn, src_dom, self.owner)
        try:
            record, _version = store.load()
            if record.task_id == task_id:
                tasks.abandon_task(store, task_id, name=self.name, rolled_back=src_active or self.opts.offline)
        except (ConvergeError, libvirt.libvirtError) as exc:
            self.notes.append('could not clear the task on the source: %s' % self._redact(exc))
        self._finish_history(src_dom, migration.FAILED, self.reason, [], task_id=task_id, started_at=started_at,
                             error=self._redact(error) if error else None)
        self._stayed(task_id)
        where = 'the guest keeps running on the source' if src_active else 'the guest is not running on the source'
        why = self.reason if not (aborted and self.stopped_by) else '%s: %s' % (self.reason, self.stopped_by)
        return self._result(changed=False, failed=True, vm=self._public_vm(src_dom), on_target=False,
                            msg='migration of VM %r to %s failed (%s): %s; %s' % (self.name, redact_uri(self.target_uri), why,
                                                                                  error or 'no error reported', where))

    def _departed(self, task_id):
        """The VM runs on the target: the source records that it left, the target forgets an older departure of it; True when
        a record changed. ``task_id`` None (a re-run that finds the VM on the target): only a departure an interrupted run
        recorded (``leaving``) becomes ``left`` - a VM that never ran on the source gets no record there. Errors are notes:
        the migration is done."""
        changed = False
        try:
            before = departures.departure(self.source.conn, self.name)
            if (task_id is not None or before is not None) and (before is None or before.get('phase') != departures.LEFT):
                task = task_id or (before or {}).get('task_id')
                departures.mark(self.source.conn, self.name, departures.LEFT, redact_uri(self.target_uri), task,
                                (before or {}).get('uuid'))
                changed = True
        except (ConvergeError, libvirt.libvirtError) as exc:
            self.notes.append('could not record the departure on the source: %s' % self._redact(exc))
        try:
            if self.dest is not None and departures.clear(self.dest.conn, self.name):
                self.notes.append('the target had a departure record of this VM from an earlier move: removed')
                changed = True
        except libvirt.libvirtError as exc:
            self.notes.append('could not remove the departure record on the target: %s' % self._redact(exc))
        return changed

    def _stayed(self, task_id):
        """The guest stays on the source: remove the departure record of the migration ``task_id`` (another's is kept)."""
        try:
            record = departures.departure(self.source.conn, self.name)
            if record is not None and record.get('task_id') == task_id:
                departures.clear(self.source.conn, self.name)
        except libvirt.libvirtError as exc:
            self.notes.append('could not remove the departure record on the source: %s' % self._redact(exc))

    def _remove_leftover(self, dest_dom, src_dom, task_id):
        try:
            if dest_dom.UUIDString() != src_dom.UUIDString():
                return
            if dest_dom.isActive() and dest_dom.state()[0] != 1:
                dest_dom.destroy()
                self.notes.append('removed the paused leftover on the target')
            if dest_dom.isPersistent() and not dest_dom.isActive():
                meta = metadata.read_converge_metadata(dest_dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
                if meta.get('task_id') == task_id:
                    dest_dom.undefine()
                    self.notes.append('removed the definition the migration left on the target')
        except libvirt.libvirtError as exc:
            self.notes.append('could not clean the target: %s' % self._redact(exc))

    # ---------------------------------------------------------- cancel
    def _cancel(self, wait):
        self.source = Connection(*self.source_args)
        src_dom = lookup(self.source.conn, self.name)
        if src_dom is None:
            return self._result(changed=False, msg='VM %r is not on the source: no migration to cancel' % self.name)
        view = vm_view(src_dom)
        if view['task_state'] != 'MIGRATING':
            return self._result(changed=False, msg='no migration of VM %r is in flight' % self.name)
        actions.check_action('migrate_abort', view['effective_vm_state'], view['task_state'])
        store = LibvirtTaskStore(self.source.conn, src_dom, self.owner, inferred_vm_state=view['effective_vm_state'])
        record, _version = store.load()
        self.phase = migration.RUNNING if view['job_active'] else migration.TARGET_READY
        self.phases.append(self.phase)
        self.progress = progress_of(job_stats(src_dom))
        plan = migration.abort_plan(self.phase)
        if self.check_mode:
            return self._result(changed=True, msg='check mode: would %s' % plan)
        if plan == 'ask source to abort':
            try:
                src_dom.abortJob()
            except libvirt.libvirtError as exc:
                if domain_running(lookup(self.source.conn, self.name)) and job_stats(src_dom).get('type', 0):
                    raise
                self.notes.append('the job ended before the abort: %s' % self._redact(exc))
        self._advance(migration_phase.libvirt_observation(self.phase, dest_connected=True, dest_checked=True, dest_accepts=True)
                      ._replace(abort_requested=True))
        if wait:
            migrate.wait_cancelled(lambda: self._cancel_over(record), self.opts.wait_timeout, 0.1)
        current = lookup(self.source.conn, self.name)
        return self._result(changed=True, vm=self._public_vm(current) if current is not None else None,
                            on_target=not domain_running(current))

    def _cancel_over(self, record):
        """True when the cancelled migration's task is closed (by its run, or here when that run is gone)."""
        current = lookup(self.source.conn, self.name)
        if current is None or vm_view(current)['task_state'] != 'MIGRATING':
            return True
        if not vm_view(current)['job_active'] and (owner_gone(record.owner) or record.stale(time.time())):
            try:
                tasks.abandon_task(LibvirtTaskStore(self.source.conn, current, self.owner), record.task_id, name=self.name)
                self._stayed(record.task_id)
                self.notes.append('cleared the task of the run that is gone')
            except TaskConflict:
                pass  # that run ended its task itself meanwhile
            return True
        return False


class LibvirtFleet(migrate.FleetMigration):
    """A fleet migration from one libvirt host: each VM placed on one of ``candidates`` by free memory (:mod:`.placement`)."""

    def __init__(self, source_args, candidates, opts, check_mode):
        super().__init__(opts, check_mode)
        self.source_args = source_args
        self.candidates = candidates

    def keys(self, entries):
        return list(entries)

    def label(self, key):
        return key

    def targets(self, keys):
        return choose_targets(self.source_args, keys, self.candidates, self.opts.target_username, self.opts.target_password)

    def migration(self, key, target):
        return Migration(self.source_args, target, key, self.opts, check_mode=self.check_mode)

    def failed(self, key, target, fields):
        return dict(fields, name=key, changed=False, failed=True, target_uri=redact_uri(target))


def migrate_many(source_args, names, candidates, opts, check_mode, parallel):
    """Place every VM of ``names`` on one of ``candidates`` and migrate them, ``parallel`` at a time; one result per VM."""
    return migrate.migrate_fleet(LibvirtFleet(source_args, candidates, opts, check_mode), names, parallel)
