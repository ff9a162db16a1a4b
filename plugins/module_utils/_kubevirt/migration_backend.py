# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt backend of the migration modules: the run of one migration (:class:`KubevirtMigration`) and of a fleet
(:func:`migrate_many`).

KubeVirt moves a VirtualMachineInstance when a VirtualMachineInstanceMigration
(VMIM) object names it; its controller reports the phases. This file observes
the VMIM and the VMI, maps what it sees to a
:class:`~.._phase.migration.MigrationObservation`, and lets the shared phase
machine (``_phase.migration.next_phase``) decide the phase and the reason of a
failure, so the words are the same as on libvirt. It executes the few writes
a migration needs: create the VMIM (one per VM: one in flight is attached to),
delete it (KubeVirt's abort), and the task record (task_state MIGRATING,
vm_state unchanged afterwards) in the VM's annotations (:mod:`.taskstore`).

Beside the run: the options (:mod:`.migration_options`), what it reads and reports (:mod:`.migration_observe`) and
the node drain mark (:mod:`.node_drain`: ``spec.unschedulable``, an optional ``NoSchedule`` taint and an annotation
with the reason; the scheduler never places a pod, a VM's or a migration target's, on such a node).
"""

from __future__ import annotations

import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, InvalidDeclaration, TaskConflict, TransitionRefused)
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id
from ansible_collections.converge.virt.plugins.module_utils._common import journal, migrate
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_fields
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.api_errors import Forbidden
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_API
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.migration_pin import check_placement, unschedulable_target
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.migration_observe import (
    TASK_LABEL, VMIM, condition_of, failure_message, in_flight, kubevirt_phase, migrations_of, observation, progress_of)
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.migration_options import split_name
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.node_drain import HOSTNAME_LABEL, node_blockers, read_node
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, migration, tasks, views

UNSCHEDULABLE_TIMEOUT_ANNOTATION = 'kubevirt.io/migrationUnschedulablePodTimeoutSeconds'
CANCEL_GRACE = 5.0


task_lease_seconds = migrate.task_lease_seconds


class _FollowKubevirt(migrate.FollowHooks):
    """The KubeVirt hooks of the shared follow loop: read the VMIM and the VMI, delete the VMIM to abort, renew by annotation."""

    API_ERROR_BUDGET = 30.0     # seconds of failed reads (an error answer, or none in time) before the follow gives up
    POD_READ_INTERVAL = 2.0     # seconds between two reads of the target pod while the migration waits for it

    def __init__(self, run, uid, task_id, attached):
        super().__init__(run)
        self.uid = uid
        self.task_id = task_id
        self.attached = attached
        self.vmim = None
        self.vmi = None             # the instance as last read (its migrationState may say why before the VMIM's copy does)
        self.api_errors_since = None
        self.pod_read_at = None
        self.pod_reads = True       # False once the token may not list pods (noted once)
        self.unschedulable = None   # the scheduler's word on the target pod, once seen: the failure's message

    def _target_unschedulable(self, vmim):
        """``(pod, message)`` when the target pod waits unschedulable and the run should not wait for it (no
        pending_timeout: the user did not ask KubeVirt to wait for a node); read every POD_READ_INTERVAL at most."""
        run = self.run
        if vmim is None or run.opts.pending_timeout or not self.pod_reads or kubevirt_phase(vmim) not in ('', migration.PENDING, migration.SCHEDULING):
            return None
        now = time.monotonic()
        if self.pod_read_at is not None and now - self.pod_read_at < self.POD_READ_INTERVAL:
            return None
        self.pod_read_at = now
        try:
            return unschedulable_target(run.client, run.namespace, self.uid)
        except Forbidden as exc:
            self.pod_reads = False
            run.notes.append('the target pod cannot be read (%s): an unschedulable target waits for KubeVirt\'s pending timeout' % exc.message)
        except BackendError:
            pass        # read again at the next interval
        return None

    def look(self):
        run = self.run
        try:
            vmim = run.client.get(KUBEVIRT_API, run.namespace, VMIM, run.vmim_name)
            vmi = run._vmi()  # pylint: disable=protected-access
            self.api_errors_since = None
        except BackendError:    # a read is safe to repeat
            self.api_errors_since = self.api_errors_since or time.monotonic()
            if time.monotonic() - self.api_errors_since > self.API_ERROR_BUDGET:
                raise
            time.sleep(1.0)
            return None
        self.vmim, self.vmi = vmim, vmi
        if vmim is not None:
            run.kphase = kubevirt_phase(vmim) or None
        seen = observation(run.phase, vmim, vmi, uid=self.uid, vmim_gone=vmim is None)
        unschedulable = self._target_unschedulable(vmim) if run.phase not in migration.FINAL else None
        if unschedulable is not None:
            # the target pod cannot be placed now: failed at once (KubeVirt would wait its unschedulable timeout, 300 s)
            seen = seen._replace(target_unschedulable=True, pending_seconds=1.0, unschedulable_timeout=0.0)
        run._advance(seen)  # pylint: disable=protected-access
        if unschedulable is not None and run.phase not in migration.FINAL:
            run._advance(seen._replace(phase=run.phase))  # pylint: disable=protected-access  # the timeouts count from Pending on
        if unschedulable is not None and run.phase == migration.FAILED and self.unschedulable is None:
            self.unschedulable = 'the target pod %s is Unschedulable: %s' % unschedulable
            try:
                self.abort()
                run.notes.append('the migration %s was aborted: its target pod could not be scheduled (pending_timeout lets KubeVirt '
                                 'wait for a node)' % run.vmim_name)
            except ConvergeError as exc:
                run.notes.append('aborting the migration %s failed: %s' % (run.vmim_name, exc.message))
        run.progress = progress_of(vmim, vmi) if vmim is not None else run.progress
        run.source_node = run.source_node or run.progress.get('source_node')
        if run.progress.get('target_node') and not run.opts.target_node:
            run.target_node = run.progress['target_node']
        if run.on_started is not None:
            announce, run.on_started = run.on_started, None
            what = 'migration %s %s' % (run.vmim_name, 'attached' if self.attached else 'started')
            announce(run._result(changed=True, msg=what, obs=run._observe()))  # pylint: disable=protected-access
        # over when KubeVirt reached its final phase too (an abort is over only when KubeVirt says so)
        return migrate.Look(run.phase, over=run.phase in migration.FINAL and (vmim is None or kubevirt_phase(vmim) in migration.FINAL))

    def abort(self):
        self.run.client.delete(KUBEVIRT_API, self.run.namespace, VMIM, self.run.vmim_name)     # KubeVirt's abort

    def renew(self, seconds):
        if self.task_id is None:
            return False
        run = self.run
        try:
            store = run._store(run._observe())  # pylint: disable=protected-access
            tasks.renew_task(store, self.task_id, time.time(), lease_seconds=min(seconds, tasks.MAX_LEASE_SECONDS), name=run.name)
            return True
        except ConvergeError:
            return False


# ------------------------------------------------------------ migration
class KubevirtMigration(migrate.MigrationRun):  # pylint: disable=too-many-instance-attributes
    """One VM of a namespace to move to another node (see the module docstring)."""

    def __init__(self, client, namespace, name, opts, check_mode=False, on_started=None):
        super().__init__(name, opts, owner_id(), check_mode=check_mode, on_started=on_started)
        self.client = client
        self.namespace = namespace
        self.kphase = None
        self.vmim_name = None
        self.source_node = None
        self.target_node = opts.target_node
        self.message = None
        self.closed_leftover = False
        self.journaled = None   # the task id whose begin this run wrote to the audit journal

    # ---------------------------------------------------------- plumbing
    def _observe(self):
        return kobserve.observe_vm(self.client, self.namespace, self.name)

    def _store(self, obs):
        return KubevirtTaskStore(self.client, self.namespace, self.name, inferred_vm_state=obs.get('effective_vm_state'))

    def _vmi(self):
        return self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachineinstances', self.name)

    def _result(self, changed, failed=False, msg=None, obs=None):
        result = {'name': self.name, 'namespace': self.namespace, 'changed': changed, 'failed': failed, 'phase': self.phase or None,
                  'phases': list(self.phases), 'reason': self.reason, 'kubevirt_phase': self.kphase, 'migration': self.vmim_name,
                  'source_node': self.source_node, 'target_node': self.target_node, 'progress': self.progress}
        if obs is not None:
            result['vm'] = kobserve.public_view(obs)
            result['node'] = obs.get('node')
            if self.target_node:
                result['on_target'] = obs.get('node') == self.target_node
            elif self.source_node:
                result['on_target'] = obs.get('node') not in (None, self.source_node)
        if msg:
            result['msg'] = self.client.redact(msg)
        if self.notes:
            result['notes'] = list(self.notes)
        return result

    # ---------------------------------------------------------- task record
    def _journal(self, event, task_id, succeeded=None):
        """The VM's interval in the audit journal (action live_migrate; target: the declared node, '' when KubeVirt chooses)."""
        extra = {'target': self.opts.target_node or ''}
        if event == 'begin':
            self.journaled = task_id
        else:
            extra.update(phase=self.phase or None, outcome='done' if succeeded else 'failed')
        journal.append(event, self.name, task_id, 'live_migrate', **extra)

    def _close_task(self, task_id, succeeded):
        """Finish (success) or abandon (vm_state unchanged) our task; another run may have closed it already.

        The journal's end record is written by the run that wrote the begin, or, for a task adopted from a run that is
        gone (its owner's process is dead), by the run that closes it: one end per begin.
        """
        if task_id is None:
            return
        began = self.journaled == task_id
        if began:
            self._journal('end', task_id, succeeded)
        obs = self._observe()
        if not obs['exists']:
            return
        store = self._store(obs)
        try:
            record, _version = store.load()
            if record.task_id != task_id:
                return
            adopted_from_gone = not began and owner_gone(record.owner)
            if succeeded:
                tasks.finish_task(store, task_id, name=self.name)
            else:
                tasks.abandon_task(store, task_id, name=self.name, rolled_back=True)
            if adopted_from_gone:
                self._journal('end', task_id, succeeded)
        except TaskConflict:
            self.notes.append('the task %s was closed by another run' % task_id)

    def _close_leftover_task(self, obs, vmims):
        """A MIGRATING record whose migration is over (its run was interrupted): close it as its VMIM ended."""
        store = self._store(obs)
        record, _version = store.load()
        if record.task_state != 'MIGRATING' or record.action != 'live_migrate':
            return obs
        mine = [m for m in vmims if (_get(m, 'metadata', 'labels') or {}).get(TASK_LABEL) == record.task_id]
        if in_flight(mine):
            return obs
        if not mine and not (owner_gone(record.owner) or record.stale(time.time())):
            return obs      # its VMIM is not created yet: the other run is still starting it
        if self.check_mode:
            self.closed_leftover = True
            self.notes.append('would close the task %s left by an interrupted run' % record.task_id)
            return obs
        succeeded = bool(mine) and kubevirt_phase(mine[-1]) == migration.SUCCEEDED
        try:
            if succeeded:
                tasks.finish_task(store, record.task_id, name=self.name)
            else:
                tasks.abandon_task(store, record.task_id, name=self.name, rolled_back=True)
            self.closed_leftover = True
            self.notes.append('closed the task %s left by an interrupted run (its migration %s)' % (
                record.task_id, 'succeeded' if succeeded else 'ended without success'))
        except TaskConflict:
            pass
        return self._observe()

    def _recover_stale(self, obs):
        """A task of another kind whose run is gone, or whose lease no task can have written: recovered as the vm module does.

        Returns the observation to plan from (the task cleared; in check mode as it would be). A live task is
        left alone (refused next, naming it).
        """
        cleared = views.clear_stale(self._store(obs), kobserve.intended_power(obs), time.time(), owner_gone, name=self.name, dry_run=self.check_mode)
        if cleared is None:
            return obs
        self.notes.append(cleared.note(dry_run=self.check_mode))
        if self.check_mode:
            return dict(obs, task_state=None, task_id=None, effective_vm_state=cleared.vm_state)
        return self._observe()

    # ---------------------------------------------------------- converge
    def converge(self):
        """Run the migration (state finished / started); return the result dict."""
        obs = self._observe()
        if not obs['exists']:
            raise BackendError('VirtualMachine %s/%s does not exist' % (self.namespace, self.name))
        vmi = obs.get('vmi')
        self.source_node = obs.get('node')
        vmims = migrations_of(self.client, self.namespace, self.name)
        flying = in_flight(vmims)
        if flying:
            return self._attach(obs, flying[-1])
        obs = self._close_leftover_task(obs, vmims)
        if obs.get('task_state') is not None and not self.closed_leftover:
            obs = self._recover_stale(obs)
        running = vmi is not None and _get(vmi, 'status', 'phase') == 'Running' and not _get(vmi, 'metadata', 'deletionTimestamp')
        if running and self.opts.target_node and obs.get('node') == self.opts.target_node:
            return self._result(changed=self.closed_leftover, obs=obs,
                                msg='VM %s/%s already runs on node %s' % (self.namespace, self.name, self.opts.target_node))
        if running and self.opts.source_node and obs.get('node') != self.opts.source_node:
            return self._result(changed=self.closed_leftover, msg='VM %s/%s does not run on node %s (it runs on %s)' % (
                self.namespace, self.name, self.opts.source_node, obs.get('node')), obs=obs)
        if not running:
            raise TransitionRefused('live_migrate', obs.get('effective_vm_state'), obs.get('task_state'),
                                    reason='the VM has no running instance (status %s): KubeVirt migrates running instances only'
                                    % obs.get('status'))
        actions.check_action('live_migrate', obs.get('effective_vm_state'), obs.get('task_state'))
        if obs.get('task_state') is not None:
            raise TaskConflict(self.name, obs.get('task_id'), obs.get('task_state'), owner=obs.get('task_owner'))
        migratable = condition_of(vmi, 'LiveMigratable')
        if migratable is None or migratable.get('status') != 'True':
            detail = '%s: %s' % ((migratable or {}).get('reason') or 'no LiveMigratable condition', (migratable or {}).get('message') or '')
            raise TransitionRefused('live_migrate', obs.get('effective_vm_state'), obs.get('task_state'),
                                    reason='the instance is not LiveMigratable (%s)' % detail.strip().rstrip(':'))
        refused = self._check_target(vmi)
        if refused is not None:
            return refused
        if self.check_mode:
            self._advance(migration.MigrationObservation(target_exists=True, target_ready=True, target_node_known=True,
                                                         target_address_known=True, transfer_started=True, transfer_completed=True))
            return self._result(changed=True, msg='check mode: the VM would be migrated', obs=obs)
        return self._start(obs)

    def _check_target(self, vmi):
        """Refuse a target node that does not exist, that the instance's own placement excludes (a nodeSelector or a
        required node affinity: KubeVirt keeps them in the target pod), or that takes no new pods (cordoned, tainted,
        not Ready)."""
        if not self.opts.target_node:
            return None
        node = read_node(self.client, self.opts.target_node)
        if node is None:
            raise InvalidDeclaration('target_node', 'no node called %r in the cluster' % self.opts.target_node)
        check_placement(vmi, node, self.opts.target_node, _get(vmi, 'status', 'nodeName'))
        blockers = node_blockers(node, _get(vmi, 'spec', 'tolerations') or [])
        if not blockers:
            return None
        self._advance(migration.MigrationObservation())
        self._advance(migration.MigrationObservation(phase=self.phase, target_draining=True))
        return self._result(changed=False, failed=True, obs=self._observe(),
                            msg='target node %s takes no new VM (%s); no migration was created' % (self.opts.target_node, ', '.join(blockers)))

    def _body(self, task_id):
        body = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstanceMigration',
                'metadata': {'generateName': '%s-converge-' % self.name[:40], 'namespace': self.namespace,
                             'labels': {TASK_LABEL: task_id}},
                'spec': {'vmiName': self.name}}
        if self.opts.target_node:
            body['spec']['addedNodeSelector'] = {HOSTNAME_LABEL: self.opts.target_node}
        if self.opts.pending_timeout:
            body['metadata']['annotations'] = {UNSCHEDULABLE_TIMEOUT_ANNOTATION: str(int(self.opts.pending_timeout))}
        return body

    def _start(self, obs):
        task_id = tasks.new_task_id()
        lease = task_lease_seconds(self.opts)
        store = self._store(obs)
        taken = tasks.take_task(store, 'live_migrate', task_id, time.time(), lease_seconds=lease, owner=self.owner, name=self.name)
        self._journal('begin', task_id)
        try:
            vmim = self.client.create(KUBEVIRT_API, self.namespace, VMIM, self._body(task_id))
        except ConvergeError as exc:
            self._close_task(task_id, succeeded=False)
            raise BackendError('creating the migration of VM %s/%s failed: %s' % (self.namespace, self.name, exc.message))
        self.vmim_name = vmim['metadata']['name']
        return self._follow(vmim['metadata']['uid'], task_id, lease_until=taken.lease_until)

    def _attach(self, obs, vmim):
        """A migration of this VM is in flight: follow it (one per VM), under our task when the VM is idle."""
        self.vmim_name = vmim['metadata']['name']
        self.kphase = kubevirt_phase(vmim) or None
        label = (_get(vmim, 'metadata', 'labels') or {}).get(TASK_LABEL)
        self.notes.append('attached to the migration in flight %s (phase %s)' % (self.vmim_name, self.kphase or migration.PENDING))
        if self.check_mode:
            self._advance(observation(migration.UNSET, vmim, obs.get('vmi')))
            return self._result(changed=True, msg='check mode: would follow the migration in flight %s' % self.vmim_name, obs=obs)
        task_id = lease_until = None
        record, _version = self._store(obs).load()
        if record.task_state == 'MIGRATING' and record.task_id == label:
            task_id = label             # the run that started it is gone or still following: either closes it
            lease_until = record.lease_until
        elif record.idle() and obs.get('effective_vm_state') in ('ACTIVE', 'PAUSED'):
            task_id = label or tasks.new_task_id()
            try:
                lease_until = tasks.take_task(self._store(obs), 'live_migrate', task_id, time.time(), lease_seconds=task_lease_seconds(self.opts),
                                              owner=self.owner, name=self.name).lease_until
                self._journal('begin', task_id)
            except ConvergeError:
                task_id = None
        return self._follow(vmim['metadata']['uid'], task_id, attached=True, lease_until=lease_until)

    def _follow(self, uid, task_id, attached=False, lease_until=None):
        """Follow the VMIM ``self.vmim_name`` and the VMI with the shared loop (:mod:`.._common.migrate`); then close the task."""
        hooks = _FollowKubevirt(self, uid, task_id, attached)
        outcome = migrate.follow(hooks, migrate.Timeouts(wait_timeout=self.opts.wait_timeout, poll_interval=self.opts.poll_interval),
                                 lease_until=lease_until)
        self.notes.extend(outcome.notes)
        vmim = hooks.vmim
        if self.phase == migration.FAILED:
            self.message = hooks.unschedulable or failure_message(vmim, hooks.vmi, uid)
        succeeded = self.phase == migration.SUCCEEDED
        self._close_task(task_id, succeeded)
        obs = self._observe()
        if succeeded and self.opts.target_node and obs.get('node') != self.opts.target_node:
            text = ('migration %s of VM %s/%s succeeded but the VM runs on node %s, not on target_node %s (a KubeVirt without '
                    'spec.addedNodeSelector, before 1.5, lets its scheduler choose)')
            return self._result(changed=True, failed=True, obs=obs,
                                msg=text % (self.vmim_name, self.namespace, self.name, obs.get('node'), self.opts.target_node))
        if succeeded:
            return self._result(changed=True, obs=obs)
        where = obs.get('node')
        msg = 'migration %s of VM %s/%s %s (%s)%s; the VM %s' % (
            self.vmim_name, self.namespace, self.name, 'failed' if self.phase == migration.FAILED else 'did not end in time',
            self.reason or 'no reason reported', ': %s' % self.message if self.message else '',
            'keeps running on node %s' % where if where else 'has no running instance')
        return self._result(changed=True, failed=True, msg=msg, obs=obs)

    # ---------------------------------------------------------- cancel
    def cancel(self):
        """Abort the migration in flight by deleting its VMIM (KubeVirt's abort); return the result dict."""
        obs = self._observe()
        if not obs['exists']:
            raise BackendError('VirtualMachine %s/%s does not exist' % (self.namespace, self.name))
        vmims = migrations_of(self.client, self.namespace, self.name)
        flying = in_flight(vmims)
        if not flying:
            obs = self._close_leftover_task(obs, vmims)
            return self._result(changed=self.closed_leftover, msg='no migration of VM %s/%s is in flight' % (self.namespace, self.name),
                                obs=obs)
        vmim = flying[-1]
        self.vmim_name = vmim['metadata']['name']
        self.kphase = kubevirt_phase(vmim) or migration.PENDING
        self.source_node = obs.get('node')
        self._advance(observation(migration.UNSET, vmim, obs.get('vmi')))
        plan = migration.abort_plan(self.phase)
        if self.check_mode:
            return self._result(changed=True, msg='check mode: would delete %s (%s)' % (self.vmim_name, plan), obs=obs)
        for other in flying:
            self.client.delete(KUBEVIRT_API, self.namespace, VMIM, other['metadata']['name'])
        uid = vmim['metadata']['uid']

        def over():
            current = self.client.get(KUBEVIRT_API, self.namespace, VMIM, self.vmim_name)
            vmi = self._vmi()
            if current is not None:
                self.kphase = kubevirt_phase(current) or self.kphase
            self._advance(observation(self.phase, current, vmi, uid=uid, vmim_gone=current is None))
            if current is None or kubevirt_phase(current) in migration.FINAL:
                self.progress = progress_of(current, vmi) if current is not None else self.progress
                return True
            return False
        migrate.wait_cancelled(over, self.opts.wait_timeout, self.opts.poll_interval)
        self._wait_task_closed(vmims)
        return self._result(changed=True, msg='migration %s aborted (%s)' % (self.vmim_name, plan), obs=self._observe())

    def _wait_task_closed(self, vmims):
        """The run that follows the migration closes its task; when it is gone (or does not close it), close it here."""
        end = time.monotonic() + CANCEL_GRACE
        while True:
            obs = self._observe()
            record, _version = self._store(obs).load()
            if record.task_state != 'MIGRATING':
                return
            if owner_gone(record.owner) or record.stale(time.time()) or time.monotonic() > end:
                labels = [(_get(m, 'metadata', 'labels') or {}).get(TASK_LABEL) for m in vmims]
                if record.task_id in labels or owner_gone(record.owner) or record.stale(time.time()):
                    try:
                        tasks.abandon_task(self._store(obs), record.task_id, name=self.name, rolled_back=True)
                        self.notes.append('closed the task %s of the aborted migration' % record.task_id)
                    except TaskConflict:
                        pass
                return
            time.sleep(0.2)


class KubevirtFleet(migrate.FleetMigration):
    """A fleet migration in one namespace (an entry may name another: ``namespace/name``); KubeVirt places each VM."""

    def __init__(self, client, namespace, opts, check_mode):
        super().__init__(opts, check_mode)
        self.client = client
        self.namespace = namespace

    def keys(self, entries):
        return [split_name(e, self.namespace, 'names[%d]' % index) for index, e in enumerate(entries)]

    def label(self, key):
        return '%s/%s' % key

    def migration(self, key, target):
        del target  # the scheduler places it (target_node, if any, is one of the options)
        return KubevirtMigration(self.client, key[0], key[1], self.opts, check_mode=self.check_mode)

    def failed(self, key, target, fields):
        del target
        return dict(redact_fields(fields, self.client.redact), name=key[1], namespace=key[0], changed=False, failed=True)


def migrate_many(client, namespace, entries, opts, check_mode, parallel):
    """Migrate every VM of ``entries`` (name or namespace/name), ``parallel`` at a time; one result per VM."""
    return migrate.migrate_fleet(KubevirtFleet(client, namespace, opts, check_mode), entries, parallel)
