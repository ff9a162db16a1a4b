# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The transfer of a libvirt migration and how the shared follow loop (``_common/migrate.follow``) sees it.

The migrate call blocks the connection it runs on until the migration ends, so :class:`MigrateThread` runs it with
its own connections; :class:`FollowLibvirt` polls the job's progress and aborts it through the caller's connection to
the source.
"""

from __future__ import annotations

import threading
import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, unexpected
from ansible_collections.converge.virt.plugins.module_utils._common import migrate
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_phase
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import Connection, libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.migration_observe import job_stats, progress_of
from ansible_collections.converge.virt.plugins.module_utils._libvirt.migration_options import migration_flags, migration_params
from ansible_collections.converge.virt.plugins.module_utils._phase import migration


class MigrateThread(threading.Thread):
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


class FollowLibvirt(migrate.FollowHooks):
    """The libvirt hooks of the shared follow loop: one ``jobStats()`` per look, ``abortJob`` to abort.

    The lease is not renewed: a metadata write on the source waits for the migration job (libvirt's job lock),
    so the task is taken with a lease that covers the whole follow.
    """

    def __init__(self, run, src_dom, thread):
        super().__init__(run)
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
