# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt backend of the migration modules and of the drain mark.

The phase machine of ``_phase.migration`` decides which phase a migration is
in and why it failed; this file only observes (destination connection, drain
mark, ``dom.jobStats()``, where the domain runs) and executes (the migrate
call, ``abortJob``, rollback of the destination's leftovers).

The migrate call blocks the connection it runs on until the migration ends,
so it runs in a thread with its own connections; progress is polled and the
job aborted through the caller's connection to the source.

Records:

* the task (``live_migrate`` / ``offline_migrate``, task_state MIGRATING) is
  the domain's converge record (:mod:`.taskstore`). ``VIR_MIGRATE_PERSIST_DEST``
  copies it to the destination, where the task is finished after success.
* a short history of the VM's recent migrations is a JSON list in a second
  metadata element (namespace :data:`MIGRATION_NS`), so it travels with the
  domain and never collides with the task record's compare-and-swap.
* the drain mark of a host is a persistent private libvirt secret on that host
  with usage :data:`DRAIN_USAGE` and a JSON description: every controller that
  connects to the host sees it, it survives daemon restarts, and creating it
  twice fails (the usage is unique).
"""

from __future__ import annotations

import json
import threading
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from typing import NamedTuple, Optional

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, InvalidDeclaration, TaskConflict, TransitionRefused, unexpected)
from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._common import migrate
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_text, redact_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt import departures, metadata
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import (
    Connection, ModuleSession, is_no_domain, libvirt, resolve_uri)
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore, metadata_flags
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, migration, tasks, views
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_phase
from ansible_collections.converge.virt.plugins.module_utils._libvirt import views as libvirt_views
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id

MIGRATION_NS = 'https://converge.virt/xmlns/migration/1'
MIGRATION_PREFIX = 'convergemig'
HISTORY_LENGTH = 5
DRAIN_USAGE = 'converge-virt-host-drain'
MIGRATE_ACTIONS = ('live_migrate', 'offline_migrate')
ACTIVE_STATES = (1, 2, 3)  # running, blocked, paused
LOOK_AGAIN = 3  # looks at both hosts when the VM leaves the source while this run reads it
PROGRESS_KEYS = ('time_elapsed', 'data_total', 'data_processed', 'data_remaining', 'memory_total', 'memory_processed', 'memory_remaining',
                 'memory_dirty_rate', 'memory_iteration', 'memory_bps', 'downtime', 'setup_time', 'disk_total', 'disk_processed')


class MigrationOptions(NamedTuple):  # pylint: disable=too-many-instance-attributes
    """How to migrate (validated by :func:`validate_options`)."""

    offline: bool = False
    persistent: bool = True
    undefine_source: bool = True
    bandwidth: Optional[int] = None          # MiB/s
    max_downtime: Optional[int] = None       # ms
    auto_converge: bool = False
    post_copy: bool = False
    completion_timeout: Optional[int] = None  # s
    completion_action: str = 'abort'
    copy_storage: bool = False
    peer_to_peer: bool = True
    wait_timeout: int = 600
    poll_interval: float = 0.05
    target_username: Optional[str] = None
    target_password: Optional[str] = None

    @property
    def action(self):
        """The action table row this migration takes."""
        return 'offline_migrate' if self.offline else 'live_migrate'


task_lease_seconds = migrate.task_lease_seconds


def validate_options(opts):
    """Raise :class:`InvalidDeclaration` naming the field of a bad option."""
    for field in ('bandwidth', 'max_downtime', 'completion_timeout'):
        value = getattr(opts, field)
        if value is not None and value <= 0:
            raise InvalidDeclaration(field, 'must be a positive number, got %r' % value)
    for field in ('wait_timeout', 'completion_timeout'):
        tasks.check_timeout(field, getattr(opts, field))
    if opts.offline:
        for field in ('post_copy', 'auto_converge', 'copy_storage'):
            if getattr(opts, field):
                raise InvalidDeclaration(field, 'is not possible with offline (a stopped VM has no memory to move; '
                                                'offline moves the definition only: its disks must be shared or absent)')
        if not opts.persistent:
            raise InvalidDeclaration('persistent', 'must be true with offline (libvirt needs a persistent destination)')
    if opts.completion_action == 'postcopy' and not opts.post_copy:
        raise InvalidDeclaration('completion_action', 'postcopy needs post_copy=true')
    return opts


# (option, VIR_MIGRATE_* flag it sets when true)
OPTION_FLAGS = (('persistent', 'VIR_MIGRATE_PERSIST_DEST'), ('undefine_source', 'VIR_MIGRATE_UNDEFINE_SOURCE'),
                ('auto_converge', 'VIR_MIGRATE_AUTO_CONVERGE'), ('post_copy', 'VIR_MIGRATE_POSTCOPY'),
                ('copy_storage', 'VIR_MIGRATE_NON_SHARED_DISK'), ('peer_to_peer', 'VIR_MIGRATE_PEER2PEER'))


def migration_flags(opts):
    """The VIR_MIGRATE_* flags for ``opts``."""
    flags = libvirt.VIR_MIGRATE_OFFLINE if opts.offline else libvirt.VIR_MIGRATE_LIVE
    for field, flag in OPTION_FLAGS:
        if getattr(opts, field):
            flags |= getattr(libvirt, flag)
    return flags


def migration_params(opts):
    """The typed parameters of ``migrate3`` / ``migrateToURI3``."""
    params = {}
    if opts.bandwidth:
        params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = int(opts.bandwidth)
    return params


# ------------------------------------------------------------------ history
def read_history(dom):
    """The recent migrations recorded on ``dom`` (newest last); [] when none."""
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG if dom.isPersistent() else libvirt.VIR_DOMAIN_AFFECT_LIVE
    try:
        fragment = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, MIGRATION_NS, flags)
        entries = json.loads(ET.fromstring(fragment).text or '[]')
    except (libvirt.libvirtError, ValueError, ET.ParseError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def write_history(dom, entries):
    """Store the last :data:`HISTORY_LENGTH` entries on ``dom`` (errors are ignored: history is informative)."""
    root = ET.Element('migrations')
    root.text = json.dumps(entries[-HISTORY_LENGTH:], sort_keys=True)
    try:
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, ET.tostring(root, encoding='unicode'), MIGRATION_PREFIX, MIGRATION_NS,
                        metadata_flags(dom))
    except libvirt.libvirtError:
        pass


def upsert_history(entries, entry):
    """``entries`` with ``entry`` replacing the one of the same id (or appended)."""
    out = [e for e in entries if e.get('id') != entry.get('id')]
    out.append(entry)
    return out[-HISTORY_LENGTH:]


# --------------------------------------------------------------- drain mark
def _drain_secret(conn):
    try:
        return conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_VOLUME, DRAIN_USAGE)
    except libvirt.libvirtError:
        return None


def drain_mark(conn):
    """The drain mark of the host of ``conn`` (a dict: reason, since, by) or None."""
    secret = _drain_secret(conn)
    if secret is None:
        return None
    try:
        desc = ET.fromstring(secret.XMLDesc(0)).findtext('description') or '{}'
        mark = json.loads(desc)
    except (libvirt.libvirtError, ValueError, ET.ParseError):
        mark = {}
    return mark if isinstance(mark, dict) else {}


def set_drain_mark(conn, reason, by):
    """Mark the host draining; return True when the mark was created."""
    if _drain_secret(conn) is not None:
        return False
    with journal.Interval(_host_name(conn), tasks.new_task_id(), 'drain', kind='host', target='draining'):
        return _define_drain_mark(conn, reason, by)


def _host_name(conn):
    try:
        return redact_uri(conn.getURI())
    except libvirt.libvirtError:
        return 'unknown'


def _define_drain_mark(conn, reason, by):
    root = ET.Element('secret', {'ephemeral': 'no', 'private': 'yes'})
    ET.SubElement(root, 'uuid').text = str(uuidlib.uuid4())
    ET.SubElement(root, 'description').text = json.dumps({'reason': reason or '', 'since': time.time(), 'by': by}, sort_keys=True)
    usage = ET.SubElement(root, 'usage', {'type': 'volume'})
    ET.SubElement(usage, 'volume').text = DRAIN_USAGE
    try:
        conn.secretDefineXML(ET.tostring(root, encoding='unicode'), 0)
    except libvirt.libvirtError:
        if _drain_secret(conn) is not None:  # somebody else marked it at the same time
            return False
        raise
    return True


def clear_drain_mark(conn):
    """Remove the drain mark; return True when there was one."""
    secret = _drain_secret(conn)
    if secret is None:
        return False
    with journal.Interval(_host_name(conn), tasks.new_task_id(), 'undrain', kind='host', target='schedulable'):
        secret.undefine()
    return True


# --------------------------------------------------------------- observation
def progress_of(stats):
    """The progress fields of a ``jobStats()`` dict (bytes, bytes/s, ms)."""
    out = dict((key, stats.get(key)) for key in PROGRESS_KEYS if key in stats)
    out['job_type'] = stats.get('type', 0)
    return out


def job_stats(dom, completed=False):
    """``dom.jobStats()`` or {} when it cannot be read."""
    try:
        return dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED if completed else 0) or {}
    except libvirt.libvirtError:
        return {}


def lookup(conn, name):
    """The virDomain called ``name`` on ``conn``, or None."""
    try:
        return conn.lookupByName(name)
    except libvirt.libvirtError as exc:
        if is_no_domain(exc):
            return None
        raise


def host_uuid(conn):
    """The host UUID of ``conn``'s daemon (from the capabilities)."""
    try:
        return ET.fromstring(conn.getCapabilities()).findtext('host/uuid')
    except (libvirt.libvirtError, ET.ParseError):
        return None


def vm_view(dom):
    """State words and record of ``dom`` (the same words vm and vm_info report)."""
    state, reason = dom.state()
    meta = metadata.read_converge_metadata('<vm/>')
    try:
        meta = metadata.read_converge_metadata(dom.metadata(
            libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.CONVERGE_NS,
            libvirt.VIR_DOMAIN_AFFECT_CONFIG if dom.isPersistent() else libvirt.VIR_DOMAIN_AFFECT_LIVE))
    except libvirt.libvirtError:
        pass
    job_active = state in ACTIVE_STATES and job_stats(dom).get('type', 0) in (migration_phase.LIBVIRT_JOB_BOUNDED, migration_phase.LIBVIRT_JOB_UNBOUNDED)
    view = libvirt_views.libvirt_vm_view(state, reason, meta, job_active=job_active)
    view.update(state_code=state, job_active=job_active, last_action=meta.get('last_action'), owner=meta.get('owner'),
                lease_until=meta.get('lease_until'))
    return view


def _running(dom):
    try:
        return dom is not None and dom.isActive() and dom.state()[0] in (1, 2, 3)
    except libvirt.libvirtError:
        return False


def _memory_kib(dom):
    try:
        return int(dom.info()[1])
    except libvirt.libvirtError:
        return 0


# ----------------------------------------------------------------- execution
class _MigrateThread(threading.Thread):
    """Runs the blocking migrate call on its own connections."""

    def __init__(self, source_args, target_uri, name, opts):
        super().__init__(daemon=True)
        self.source_args = source_args
        self.target_uri = target_uri
        self.name = name
        self.opts = opts
        self.error = None
        self.error_code = None
        self.started_call = threading.Event()

    def run(self):
        source = dest = None
        try:
            source = Connection(*self.source_args)
            dom = source.conn.lookupByName(self.name)
            flags, params = migration_flags(self.opts), migration_params(self.opts)
            if self.opts.peer_to_peer:
                self.started_call.set()
                dom.migrateToURI3(self.target_uri, params, flags)
            else:
                dest = Connection(self.target_uri, self.opts.target_username, self.opts.target_password)
                self.started_call.set()
                dom.migrate3(dest.conn, params, flags)
        except ConvergeError as exc:
            self.error = exc.message
        except libvirt.libvirtError as exc:
            self.error = str(exc)
            self.error_code = exc.get_error_code()
        except Exception as exc:  # pylint: disable=broad-except
            self.error = unexpected(exc)
        finally:
            self.started_call.set()
            for conn in (source, dest):
                if conn is not None:
                    conn.close()


class _FollowLibvirt(migrate.FollowHooks):
    """The libvirt hooks of the shared follow loop: one ``jobStats()`` per look, ``abortJob`` to abort.

    The lease is not renewed: a metadata write on the source waits for the migration job (libvirt's job lock),
    so the task is taken with a lease that covers the whole follow.
    """

    def __init__(self, run, src_dom, thread):
        self.run = run
        self.src_dom = src_dom
        self.thread = thread
        self.saw_job = False
        self.announced = False

    def look(self):
        run, thread = self.run, self.thread
        if thread is not None and not thread.is_alive():
            # the migrate call returned: the outcome is read after the loop (completed job stats), no extra poll
            return migrate.Look(run.phase, over=True)
        # one call per look: jobStats answers for a domain that stopped or left (type 0 / error -> {}),
        # and every extra call on the source competes with the migration job for the domain
        stats = job_stats(self.src_dom)
        job_type = stats.get('type', 0)
        if job_type in (migration_phase.LIBVIRT_JOB_BOUNDED, migration_phase.LIBVIRT_JOB_UNBOUNDED):
            self.saw_job = True
            run.progress = progress_of(stats)
            if run.phase != migration.RUNNING:
                run._observe(dest_connected=True, dest_checked=True, dest_accepts=True)  # pylint: disable=protected-access
                if stats.get('data_processed') or stats.get('memory_processed') or run.phase == migration.TARGET_READY:
                    run._observe(dest_connected=True, dest_checked=True, dest_accepts=True, job_type=job_type)  # pylint: disable=protected-access
        return migrate.Look(run.phase, over=thread is None and job_type == 0)

    def on_running(self):
        if self.run.on_started is not None:
            self.run.on_started(self.run._result(changed=True, msg='migration started'))  # pylint: disable=protected-access

    def on_completion_timeout(self):
        return self.run._switch_to_post_copy(self.src_dom)  # pylint: disable=protected-access

    def abort(self):
        try:
            self.src_dom.abortJob()
        except libvirt.libvirtError as exc:
            if job_stats(self.src_dom).get('type', 0) in (migration_phase.LIBVIRT_JOB_BOUNDED, migration_phase.LIBVIRT_JOB_UNBOUNDED):
                raise BackendError(self.run._redact('abortJob: %s' % exc)) from exc  # pylint: disable=protected-access
            # the job ended before the abort: nothing left to stop

    def pause(self, seconds):
        if self.thread is not None:
            self.thread.join(seconds)  # wakes as soon as the migrate call returns
        else:
            time.sleep(seconds)


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
            why = lost_connection(str(exc), _alive(self.source), None if self.dest is None else _alive(self.dest))
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
        if dest_dom is not None and (not src_active or self.opts.offline) and (_running(dest_dom) or self.opts.offline):
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
        return self._run(src_dom)

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

    def _run(self, src_dom):
        task_id = tasks.new_task_id()
        view = vm_view(src_dom)
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
        thread = _MigrateThread(self.source_args, self.target_uri, self.name, self.opts)
        thread.start()
        thread.started_call.wait(30)
        return self._follow(src_dom, task_id, thread, started_at)

    def _follow(self, src_dom, task_id, thread, started_at):
        """Follow the source's job with the shared loop (:mod:`.._common.migrate`); then finish or roll back."""
        hooks = _FollowLibvirt(self, src_dom, thread)
        outcome = migrate.follow(hooks, migrate.Timeouts(wait_timeout=self.opts.wait_timeout, completion_timeout=self.opts.completion_timeout,
                                                         poll_interval=self.opts.poll_interval))
        self.notes.extend(outcome.notes)
        self.stopped_by = outcome.stopped_by
        error = thread.error if thread is not None else None
        dest_dom = self._dest_domain()
        on_dest = _running(dest_dom) or (self.opts.offline and dest_dom is not None and error is None)
        src_active = _running(src_dom)
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
        if src_left is not None and not _running(src_left):
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
        dest_failed = not aborted and bool(error) and (self.dest is None or _dest_error(error))
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
                if _running(lookup(self.source.conn, self.name)) and job_stats(src_dom).get('type', 0):
                    raise
                self.notes.append('the job ended before the abort: %s' % self._redact(exc))
        self._advance(migration_phase.libvirt_observation(self.phase, dest_connected=True, dest_checked=True, dest_accepts=True)
                      ._replace(abort_requested=True))
        if wait:
            migrate.wait_cancelled(lambda: self._cancel_over(record), self.opts.wait_timeout, 0.1)
        current = lookup(self.source.conn, self.name)
        return self._result(changed=True, vm=self._public_vm(current) if current is not None else None,
                            on_target=not _running(current))

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


def _dest_error(error):
    text = error.lower()
    return any(word in text for word in ('end of file', 'connection', 'unable to connect', 'broken pipe', 'reset by peer', 'remote', 'cannot recv',
                                         'cannot send', 'no route', 'refused', 'closed'))


def _alive(connection):
    """False when the libvirt connection of ``connection`` (a :class:`Connection`) is known to be lost, else True."""
    try:
        return bool(connection.conn.isAlive())
    except (AttributeError, libvirt.libvirtError):
        return False


def lost_connection(error, source_alive, dest_alive):
    """Which daemon went away when ``error`` (the text of a libvirt error raised outside the transfer) is a lost connection.

    The transfer's own failures get their reason in :meth:`Migration._failed`; an error raised while this run read or
    prepared the VM (e.g. ``internal error: client socket is closed`` when a libvirtd dies under a call) used to reach
    the user bare. ``dest_alive`` None: the target was not connected. Returns None when ``error`` is no lost connection.
    """
    if not _dest_error(error):
        return None
    if dest_alive is False:
        return '%s: its libvirtd closed the connection' % migration.TARGET_FAILED
    if not source_alive:
        return "the source's libvirtd died or restarted: it closed the connection; the guest stays where libvirt left it"
    return 'a libvirtd connection was lost (the source or the target died or restarted)'


# -------------------------------------------------------------------- info
def migrations_on(connection, names=None):
    """In-flight and recent migrations of the VMs of ``connection`` (a :class:`Connection`)."""
    out = []
    for dom in connection.conn.listAllDomains(0):
        name = dom.name()
        if names and name not in names:
            continue
        try:
            view = vm_view(dom)
            history = read_history(dom)
        except libvirt.libvirtError:
            continue
        in_flight = None
        if view['task_state'] == 'MIGRATING':
            stats = job_stats(dom)
            last = history[-1] if history else {}
            phase = migration.RUNNING if view['job_active'] else (last.get('phase') or migration.PENDING)
            in_flight = {'id': view.get('task_id'), 'phase': phase, 'target': last.get('target'), 'started_at': last.get('started_at'),
                         'owner': view.get('owner'), 'progress': progress_of(stats) if stats else {},
                         'owner_gone': owner_gone(view.get('owner'))}
        if in_flight is None and not history:
            continue
        out.append({'name': name, 'host': connection.display_uri, 'vm_state': view['vm_state'], 'task_state': view['task_state'],
                    'power_state': view['power_state'], 'status': view['status'], 'in_flight': in_flight, 'recent': history,
                    'last': history[-1] if history else None})
    return out


def host_summary(connection):
    """Free memory, drain mark and VMs of one host (for the host module and placement)."""
    conn = connection.conn
    vms = []
    for dom in conn.listAllDomains(0):
        view = vm_view(dom)
        vms.append({'name': dom.name(), 'vm_state': view['vm_state'], 'power_state': view['power_state'], 'task_state': view['task_state'],
                    'running': view['state_code'] in ACTIVE_STATES, 'persistent': bool(dom.isPersistent()), 'memory_kib': _memory_kib(dom)})
    mark = drain_mark(conn)
    return {'uri': connection.display_uri, 'hostname': conn.getHostname(), 'host_uuid': host_uuid(conn), 'free_memory': conn.getFreeMemory(),
            'draining': mark is not None, 'drain': mark, 'vms': sorted(vms, key=lambda v: v['name']),
            'running_vms': sorted(v['name'] for v in vms if v['running']),
            'stopped_vms': sorted(v['name'] for v in vms if not v['running'] and v['persistent'])}


def place(memory_kib_by_vm, candidates):
    """Choose a target per VM by free memory.

    ``candidates``: list of dicts (uri, free_memory bytes, draining). Draining
    hosts are never chosen. Each VM goes to the candidate with the most free
    memory left (after the VMs placed before it) that fits it; None when none fits.
    """
    free = dict((c['uri'], int(c['free_memory'])) for c in candidates if not c.get('draining'))
    order = [c['uri'] for c in candidates if c['uri'] in free]
    out = {}
    for name in sorted(memory_kib_by_vm, key=lambda n: (-memory_kib_by_vm[n], n)):
        need = int(memory_kib_by_vm[name]) * 1024
        fits = [uri for uri in order if free[uri] >= need]
        if not fits:
            out[name] = None
            continue
        best = max(fits, key=lambda uri: (free[uri], -order.index(uri)))
        free[best] -= need
        out[name] = best
    return out


def choose_targets(source_args, names, candidates, target_username=None, target_password=None):
    """The target URI of every VM of ``names`` (None: no candidate fits it).

    A VM already on a candidate goes there (the run converges it: nothing to move); a VM the source does not have goes to the
    first candidate (its migration then says so); the others are placed by free memory (:func:`place`). An unreachable
    candidate is passed over.
    """
    with Connection(*source_args) as source:
        memory = {}
        for name in names:
            dom = lookup(source.conn, name)
            memory[name] = int(dom.info()[1]) if dom is not None else None
    hosts = []
    for uri in candidates:
        try:
            with Connection(uri, target_username, target_password) as conn:
                hosts.append({'uri': uri, 'free_memory': conn.conn.getFreeMemory(), 'draining': drain_mark(conn.conn) is not None,
                              'vms': set(d.name() for d in conn.conn.listAllDomains(1))})
        except ConvergeError:
            continue
    placed = place(dict((n, m) for n, m in memory.items() if m is not None), hosts)
    targets = {}
    for name in names:
        found = [h['uri'] for h in hosts if name in h['vms']]
        if memory[name] is None or found:
            targets[name] = found[0] if found else candidates[0]
        else:
            targets[name] = placed.get(name)
    return targets


def migrate_many(source_args, names, candidates, opts, check_mode, parallel):
    """Place every VM of ``names`` on one of ``candidates`` and migrate them, ``parallel`` at a time; one result per VM."""
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        raise InvalidDeclaration('names', 'a VM is named more than once: %s' % ', '.join(duplicates))
    targets = choose_targets(source_args, names, candidates, opts.target_username, opts.target_password)

    def one(name):
        target = targets[name]
        if target is None:
            return {'name': name, 'changed': False, 'failed': True, 'phase': None, 'phases': [], 'reason': None,
                    'msg': 'no target host fits VM %r (all draining, unreachable or without enough free memory)' % name}
        return Migration(source_args, target, name, opts, check_mode=check_mode).converge()

    def failed(name, fields):
        return dict(fields, name=name, changed=False, failed=True, target_uri=redact_uri(targets[name]))
    return migrate.migrate_each(names, one, failed, parallel)


class MigrationSession(ModuleSession):
    """The libvirt module session of migration, migration_info and host: the source's secrets and the target's password redacted."""

    def source_args(self):
        """(uri, username, password) of the source host (the module's uri, or the default: :func:`.connection.resolve_uri`)."""
        params = self.module.params
        return (resolve_uri(params.get('uri')), params.get('username'), params.get('password'))

    def redact_text(self, text):
        return redact_text(super().redact_text(text), [self.module.params.get('target_password')])

    def redact_result(self, result):
        """``result`` with every string redacted, also inside its lists and dicts (results, notes, history)."""
        def clean(value):
            if isinstance(value, list):
                return [clean(v) for v in value]
            if isinstance(value, dict):
                return dict((k, clean(v)) for k, v in value.items())
            return self.redact(value)
        return clean(result)
