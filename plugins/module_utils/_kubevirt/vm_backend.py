# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt backend of the vm module: observe one VirtualMachine, execute one step.

The phase logic decides (``_phase.vm_plan``, the same planner as libvirt);
this file reads the objects and runs the action a step names (the VirtualMachine built from the simple options,
its differences and its update patch: :mod:`.vm_manifest`) through the API server and virt-api
subresources, under the task protocol of ``_phase.tasks`` (the record lives in
the VM's annotations, see :mod:`.taskstore`).

Differences from a plain "apply": only the fields the user declared are
compared (defaults and fields webhooks add are never changes); a 409 of virt-api
that refuses an action is an error naming the state; a start or stop KubeVirt
already carries out is waited for, not requested twice; a restart waits for a
new instance (new uid); a start that runs into an error status
(ErrorUnschedulable, ErrImagePull, CrashLoopBackOff, ...) fails at once with
that word and the condition's message instead of waiting for the deadline.
"""

from __future__ import annotations

import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, ConvergeError, TaskConflict, TransitionRefused, WaitTimeout)
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone, owner_id
from ansible_collections.converge.virt.plugins.module_utils._common import driver
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_change
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import cloud_init as kcloud_init, observe as kobserve, views as kubevirt_views
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import ApiUnavailable, CDI_API, Conflict, KUBEVIRT_API, NotFound
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore, annotations_from_record
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.vm_manifest import declared_differences, manifest_for_create, merged_for_patch
from ansible_collections.converge.virt.plugins.module_utils._phase import deviations, tasks, views
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord


STOPPED_STATUSES = ('Stopped',)
# KubeVirt's own word (the VM's status.printableStatus) is written by virt-controller after it sees the instance
# change: once our word shows the declared state, a wait gives it this long (at most) to say the same, so that a
# result never reads Running beside KubeVirt's Starting. The settled disagreements of docs/states-virt-controller.md
# (_phase/deviations.py settled_disagreement: KubeVirt's own rule gives its word for the same facts) never catch up: they
# are not waited for, and are reported as observed.
CONTROLLER_CATCH_UP = 10.0


class KubevirtOptions(driver.VmOptions):  # pylint: disable=too-few-public-methods
    """Execution options of the vm module on KubeVirt: the shared ones and ``delete_volumes``."""

    def __init__(self, wait=True, wait_timeout=300, shutdown_timeout=60, force_stop=True, lock_timeout=0, delete_volumes=False,
                 lease_seconds=None):  # pylint: disable=too-many-arguments
        super().__init__(wait=wait, wait_timeout=wait_timeout, shutdown_timeout=shutdown_timeout, force_stop=force_stop,
                         lock_timeout=lock_timeout, lease_seconds=lease_seconds)
        self.delete_volumes = delete_volumes


def _brief(obs):
    return dict((k, obs.get(k)) for k in ('vm_state', 'power_state', 'task_state', 'status', 'printable_status', 'phase', 'vmi_uid',
                                          'message'))


def _finalizing(obj):
    meta = (obj or {}).get('metadata') or {}
    return {'deleting': bool(meta.get('deletionTimestamp')), 'finalizers': list(meta.get('finalizers') or [])}


def _deletion_view(obs):
    """What a delete wait shows when it times out: the state words, and what holds the VM and its instance back."""
    view = _brief(obs)
    view['exists'] = obs.get('exists')
    view['vm_finalizing'] = _finalizing(obs.get('vm')) if obs.get('exists') else None
    view['vmi_finalizing'] = _finalizing(obs.get('vmi')) if obs.get('vmi') is not None else None
    return view


def deletion_blockers(view):
    """Why a deleted VM is still there, from :func:`_deletion_view`: the finalizers that hold the VirtualMachine or its
    instance (the garbage collector and Kubernetes remove an object only once its finalizers are empty; whoever set one
    - KubeVirt's virt-controller for kubevirt.io/*, another controller for its own - must remove it)."""
    parts = []
    for kind, key in (('VirtualMachine', 'vm_finalizing'), ('VirtualMachineInstance', 'vmi_finalizing')):
        state = view.get(key)
        if not state:
            continue
        if state['finalizers']:
            parts.append('the %s %s still carries the finalizer%s %s' % (
                kind, 'being deleted' if state['deleting'] else 'not yet deleted', 's' if len(state['finalizers']) > 1 else '',
                ', '.join(state['finalizers'])))
        else:
            parts.append('the %s still exists%s' % (kind, ' (being deleted)' if state['deleting'] else ''))
    if not parts:
        return 'the VM is gone, its instance too'
    holders = any((view.get(key) or {}).get('finalizers') for key in ('vm_finalizing', 'vmi_finalizing'))
    return '; '.join(parts) + ('; the controller that set a finalizer must remove it (is it running?)' if holders else '')


# ---------------------------------------------------------------- one VM
class KubevirtVm(driver.VmBackend):
    """One VirtualMachine in one namespace: the hooks of the shared converge driver (:mod:`.._common.driver`)."""

    def __init__(self, client, namespace, name):
        self.client = client
        self.namespace = namespace
        self.name = name
        self.owner = owner_id()

    def observe(self, spec=None, snapshot=None):
        """The observation dict (with ``diff`` against the declared manifest ``spec`` when given)."""
        declared = spec
        obs = snapshot.observe(self.name) if snapshot is not None else kobserve.observe_vm(self.client, self.namespace, self.name)
        if declared is not None and obs['exists']:
            obs['diff'] = declared_differences(declared['spec'], obs['vm'].get('spec'))
            labels = (declared.get('metadata') or {}).get('labels')
            if labels:
                obs['diff'] += declared_differences(labels, (obs['vm'].get('metadata') or {}).get('labels'), 'metadata.labels')
        return obs

    def store(self, obs):
        """The task store of the observed VM."""
        return KubevirtTaskStore(self.client, self.namespace, self.name, inferred_vm_state=obs.get('effective_vm_state'), vm=obs.get('vm'))

    def refused(self, action, obs, exc):
        """A virt-api 409 for ``action``: an error naming the state (never "unchanged")."""
        return TransitionRefused(action, obs.get('effective_vm_state') or obs.get('vm_state'), obs.get('task_state'),
                                 reason='KubeVirt refused it: %s; status %s, run strategy %s'
                                 % (getattr(exc, 'details', {}).get('api_message') or exc, obs.get('status'), obs.get('run_strategy')))

    # -------------------------------------------------------- task control
    def recover_stale(self, obs, now):
        """Clear a task left behind by a killed run (lease over, or its owner on this host gone); return a note or None."""
        cleared = views.clear_stale(self.store(obs), intended_power(obs), now, owner_gone, name=self.name)
        return cleared.as_dict() if cleared else None

    def record_vm_state(self, obs, vm_state):
        """Write ``vm_state`` into an idle VM's record (compare-and-swap on the annotations)."""
        tasks.record_vm_state(self.store(obs), vm_state, name=self.name)

    def wait_idle(self, obs, options, spec=None):
        """Wait for another task in flight to end (``lock_timeout``), or fail naming it."""
        return driver.wait_until_idle(self.name, obs, options, lambda: self.observe(spec), lambda value: value.get('task_state') is None or
                                      not value.get('exists'), describe=_brief)

    # ------------------------------------------------- the driver's hooks
    def public_view(self, obs):
        return kobserve.public_view(obs)

    def diffable(self, view):
        return _diffable(view)

    def changes(self, obs):
        # the changes name declared fields and their values: cloud-init user data and import URLs are masked (never shown)
        return [redact_change(c) for c in obs.get('diff') or []] if obs['exists'] else []

    def recorded_drift(self, obs):
        return recorded_drift(obs)

    def plan_autostart(self, obs):
        return None

    def deleting(self, obs):
        return bool(obs['exists'] and ((obs.get('vm') or {}).get('metadata') or {}).get('deletionTimestamp'))

    def validate_steps(self, steps, spec, obs):
        if steps and steps[0].action == 'create':
            self.validate_create(spec)
        if any(s.action == 'update' for s in steps):
            self.validate_update(spec, obs['vm'])

    def settle(self, decl, obs, options):
        """The declared power is carried out by KubeVirt: wait until the status shows it (error words fail at once)."""
        targets = settle_targets(decl.state)
        if not options.wait or not targets:
            return None
        if obs.get('status') in targets:
            return self.controller_caught_up(obs, targets, options.wait_timeout)
        predicate = (lambda o: o.get('vmi') is None) if decl.state == 'stopped' else None
        return self.wait_status(targets, options.wait_timeout, '/'.join(targets), fail_fast=decl.state != 'stopped', predicate=predicate)

    def converge(self, decl, spec, options, check_mode, task_id=None, snapshot=None):  # pylint: disable=too-many-arguments
        """Plan and (unless ``check_mode``) execute; return (changed, result dict).

        A declared cloud-init seed (:mod:`.cloud_init`) is written into its Secret first (a new VM starts with it);
        its digest annotation in the template makes a changed seed a definition change that needs a restart. The
        Secret is owned by the VM (ownerReferences), so it goes with the VM.
        """
        declared, seed = kcloud_init.split(spec)
        if seed is None or decl.state == 'absent':
            return driver.converge_vm(self, decl, declared, options, check_mode, task_id, snapshot)
        return _converge_with_seed(self, decl, declared, seed, options, check_mode, task_id, snapshot)

    # ----------------------------------------------------------- execution
    def act(self, step, spec, obs, options):
        """One step other than create (``spec``: the declared manifest), by the method of its action (``_do_<action>``)."""
        handler = getattr(self, '_do_' + step.action, None)
        if handler is None:
            raise TransitionRefused(step.action, obs.get('effective_vm_state'), None, reason='not supported on KubeVirt')
        handler(spec, obs, options)

    def step_failed(self, error, step, obs, abandoned):
        """A subresource call virt-api never answered is named with the VM's status and whether its record is gone."""
        return self._virt_api_away(error, step, obs, abandoned) if isinstance(error, ApiUnavailable) else error

    def _virt_api_away(self, exc, step, obs, abandoned):
        """The error of a step whose subresource call virt-api never answered (503 until the wait deadline, or no API):
        the declared state that was not reached, the VM's status as last read, and whether its task record is gone."""
        try:
            status = self.observe().get('status')
        except ConvergeError:
            status = '%s (as read before the step)' % obs.get('status')
        tail = ('no task is left on it; run the task again once virt-api answers' if abandoned else
                'its task record could not be removed: the next run recovers it')
        return ApiUnavailable('%s/%s not brought to %s (step %s): %s; the VM is %s, %s' % (
            self.namespace, self.name, step.vm_state_after, step.action, exc, status, tail),
            code=exc.code, reason=exc.reason, **dict((k, v) for k, v in exc.details.items() if k not in ('status_code', 'status_reason')))

    def _put(self, plural, action, options, body=None, done=None):  # pylint: disable=too-many-arguments
        """A subresource call of this VM, a transient 503 retried until ``options.wait_timeout`` from now; ``done(observation)``:
        the action took effect all the same (nothing is sent again)."""
        return self.client.subresource(plural, self.namespace, self.name, action, body, deadline=time.monotonic() + options.wait_timeout,
                                       done=None if done is None else lambda: done(self.observe()))

    def _change(self, action, obs, options, done, body=None, refusal=None, benign=None):  # pylint: disable=too-many-arguments
        """The run-state subresource ``action`` (start, stop, restart) of the VirtualMachine (see :meth:`_put`). KubeVirt's 409
        Conflict (not in this state) is the refusal of ``refusal`` (default: ``action``), unless ``benign()`` says it changes nothing."""
        try:
            self._put('virtualmachines', action, options, body, done=done)
        except Conflict as exc:
            if benign is None or not benign():
                raise self.refused(refusal or action, obs, exc)

    def create(self, spec, obs, options, task_id):
        """Create the VirtualMachine from the declared manifest (``spec``), its idle STOPPED record in its annotations."""
        del obs, options, task_id
        declared = spec
        body = manifest_for_create(declared)
        record = TaskRecord(vm_state='STOPPED')
        annotations = dict((k, v) for k, v in annotations_from_record(record, last_action='create').items() if v is not None)
        body['metadata'].setdefault('annotations', {}).update(annotations)
        try:
            self.client.create(KUBEVIRT_API, self.namespace, 'virtualmachines', body)
        except Conflict as exc:
            raise TaskConflict(self.name, 'another run', 'SPAWNING', reason=str(exc))
        return self.observe(declared)

    def validate_create(self, declared):
        """Server-side dry run of the create (check mode): webhook and schema errors show up without a change."""
        body = manifest_for_create(declared)
        self.client.create(KUBEVIRT_API, self.namespace, 'virtualmachines', body, dry_run=True)

    @staticmethod
    def _update_patch(declared, current):
        patch = {'spec': merged_for_patch(declared['spec'], current.get('spec'))}
        labels = (declared.get('metadata') or {}).get('labels')
        if labels:
            patch['metadata'] = {'labels': labels}
        return patch

    def validate_update(self, declared, current):
        """Server-side dry run of the update (check mode)."""
        self.client.merge_patch(KUBEVIRT_API, self.namespace, 'virtualmachines', self.name, self._update_patch(declared, current), dry_run=True)

    def _do_update(self, declared, obs, options):
        del obs, options
        current = self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachines', self.name)
        if current is None:
            raise NotFound('VirtualMachine %s/%s disappeared' % (self.namespace, self.name), code=404)
        self.client.merge_patch(KUBEVIRT_API, self.namespace, 'virtualmachines', self.name, self._update_patch(declared, current))

    # waits --------------------------------------------------------------
    def wait_status(self, targets, timeout, what, fail_fast=True, predicate=None):
        """Observe until the status is one of ``targets`` (and ``predicate``); error statuses fail at once."""
        def done(obs):
            if obs.get('status') in targets and (predicate is None or predicate(obs)):
                return True
            if fail_fast and obs.get('status') in kobserve.ERROR_STATUSES:
                raise BackendError('VM %s/%s did not reach %s: status is %s%s' % (
                    self.namespace, self.name, what, obs.get('status'), ' (%s)' % obs['message'] if obs.get('message') else ''),
                    status=obs.get('status'), printable_status=obs.get('printable_status'), vm=kobserve.public_view(obs))
            return False
        started = time.monotonic()
        reached = wait_for(self.observe, done, timeout, '%s/%s to be %s' % (self.namespace, self.name, what), describe=_brief)
        return self.controller_caught_up(reached, targets, timeout - (time.monotonic() - started), predicate)

    def controller_caught_up(self, obs, targets, remaining, predicate=None):
        """``obs`` (our word in ``targets``), or a later observation where KubeVirt's printable status says the same
        word too, waited for ``CONTROLLER_CATCH_UP`` seconds at most (never past ``remaining``); ``obs`` when it does not."""
        def agree(o):
            return o.get('printable_status') in (None, o.get('status')) or settled_disagreement(o) is not None
        if agree(obs):
            return obs
        try:
            return wait_for(self.observe, lambda o: agree(o) and o.get('status') in targets and (predicate is None or predicate(o)),
                            min(CONTROLLER_CATCH_UP, max(0.0, remaining)), 'KubeVirt to report %s' % obs.get('status'))
        except WaitTimeout:
            return obs

    def _start_underway(self, obs):
        vm = obs['vm']
        strategy = kubevirt_views.kubevirt_run_strategy(vm)
        vmi = obs.get('vmi')
        live = vmi is not None and not (vmi.get('metadata') or {}).get('deletionTimestamp') and \
            ((vmi.get('status') or {}).get('phase') not in ('Succeeded', 'Failed'))
        requests = (vm.get('status') or {}).get('stateChangeRequests') or []
        if requests and requests[0].get('action') == 'Start':
            return True
        return strategy in ('Always', 'RerunOnFailure') and (live or vmi is None)

    def _do_start(self, declared, obs, options):
        del declared
        if not self._start_underway(obs):
            self._change('start', obs, options, self._start_underway)
        if options.wait:
            self.wait_status(('Running',), options.wait_timeout, 'Running')

    def _stop_underway(self, obs):
        return kubevirt_views.kubevirt_run_strategy(obs['vm']) == 'Halted'

    def _do_stop(self, declared, obs, options):
        del declared
        if not self._stop_underway(obs):
            # no instance under run strategy Manual: KubeVirt's 409 says it is stopped already
            self._change('stop', obs, options, self._stop_underway,
                         benign=lambda: obs.get('vmi') is None and kubevirt_views.kubevirt_run_strategy(obs['vm']) == 'Manual')
        if not options.wait:
            return
        graceful = options.shutdown_timeout if options.shutdown_timeout > 0 else 0
        try:
            self.wait_status(STOPPED_STATUSES, graceful, 'Stopped', fail_fast=False, predicate=lambda o: o.get('vmi') is None)
        except WaitTimeout as exc:
            if not options.force_stop:
                raise WaitTimeout('graceful stop of %s/%s did not complete within %ss and force_stop is false'
                                  % (self.namespace, self.name, options.shutdown_timeout), **exc.details)
            try:
                self._put('virtualmachines', 'stop', options, {'gracePeriod': 0}, done=lambda o: o.get('vmi') is None)
            except Conflict:
                pass    # already stopping with a shorter grace period, or already stopped
            self.wait_status(STOPPED_STATUSES, options.wait_timeout, 'Stopped', fail_fast=False, predicate=lambda o: o.get('vmi') is None)

    def _restart(self, obs, options, hard):
        vmi = obs.get('vmi')
        if vmi is None or (vmi.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
            return self._do_start(None, obs, options)
        old_uid = vmi['metadata']['uid']
        self._change('restart', obs, options, lambda o: o.get('vmi_uid') not in (None, old_uid), body={'gracePeriodSeconds': 0} if hard else {},
                     refusal='reboot_hard' if hard else 'reboot_soft')
        if options.wait:
            self.wait_status(('Running',), options.wait_timeout, 'Running with a new instance',
                             predicate=lambda o: o.get('vmi_uid') not in (None, old_uid))
        return None

    def _do_reboot_soft(self, declared, obs, options):
        del declared
        self._restart(obs, options, hard=False)

    def _do_reboot_hard(self, declared, obs, options):
        del declared
        self._restart(obs, options, hard=True)

    def _do_pause(self, declared, obs, options):
        del declared
        self._instance_call('pause', 'Paused', obs, options)

    def _do_unpause(self, declared, obs, options):
        del declared
        self._instance_call('unpause', 'Running', obs, options)

    def _instance_call(self, action, status, obs, options):
        """The instance's ``action`` subresource (a transient 503 retried, see _put; refused on Conflict/NotFound), then (with
        ``options.wait``) waits until its status is ``status``."""
        try:
            self._put('virtualmachineinstances', action, options, {}, done=lambda o: o.get('status') == status)
        except (Conflict, NotFound) as exc:
            raise self.refused(action, obs, exc)
        if options.wait:
            self.wait_status((status,), options.wait_timeout, status)

    def _do_delete(self, declared, obs, options):
        del declared
        vm = obs['vm']
        uid = (vm.get('metadata') or {}).get('uid')
        if not options.delete_volumes:
            # keep the DataVolumes the VM owns: the garbage collector would delete them with it
            for dvt in (vm.get('spec') or {}).get('dataVolumeTemplates') or []:
                dv_name = (dvt.get('metadata') or {}).get('name')
                dv = self.client.get(CDI_API, self.namespace, 'datavolumes', dv_name) if dv_name else None
                if dv is None:
                    continue
                refs = (dv.get('metadata') or {}).get('ownerReferences') or []
                kept = [r for r in refs if r.get('uid') != uid]
                if len(kept) != len(refs):
                    self.client.merge_patch(CDI_API, self.namespace, 'datavolumes', dv_name,
                                            {'metadata': {'ownerReferences': kept or None,
                                                          'resourceVersion': dv['metadata'].get('resourceVersion')}})
        self.client.delete(KUBEVIRT_API, self.namespace, 'virtualmachines', self.name, propagation='Background')
        if options.wait:
            self.wait_deleted(options)

    def wait_deleted(self, options):
        """Wait until the VM and its instance are gone; a timeout names what holds them back (their finalizers)."""
        try:
            return wait_for(lambda: kobserve.observe_vm(self.client, self.namespace, self.name),
                            lambda o: not o['exists'] and o.get('vmi') is None, options.wait_timeout,
                            '%s/%s to be deleted' % (self.namespace, self.name), describe=_deletion_view)
        except WaitTimeout as exc:
            raise WaitTimeout('timed out after %ss waiting for %s/%s to be deleted: %s' % (
                options.wait_timeout, self.namespace, self.name, deletion_blockers(exc.details.get('last_observed') or {})), **exc.details)


# ---------------------------------------------------------------- converge
def settled_disagreement(obs):
    """The key of the deviation (``_phase/deviations.py``) that explains KubeVirt's printable status beside ours in ``obs`` for
    good, or None (they agree, or KubeVirt may still catch up)."""
    if obs.get('vm') is None or obs.get('printable_status') in (None, obs.get('status')):
        return None
    inp = kubevirt_views.kubevirt_status_input(obs['vm'], obs.get('vmi'), obs.get('datavolumes'), obs.get('pvcs'))
    return deviations.settled_disagreement(obs.get('status'), obs.get('printable_status'), inp)


def settle_targets(state):
    """Status words a declared state means once reached (None: nothing to wait for)."""
    return {'running': ('Running',), 'restarted': ('Running',), 'paused': ('Paused',), 'stopped': STOPPED_STATUSES}.get(state)


# the power_state vm_state is reconciled against (kept here by that name: the reconcile module and tests use it)
intended_power = kobserve.intended_power


def recorded_drift(obs):
    """(recorded, effective) when an idle VM's record disagrees with what KubeVirt carries out, else None (pure)."""
    if not obs.get('exists') or obs.get('task_state'):
        return None
    recorded = kubevirt_views.kubevirt_metadata(obs.get('vm')).get('vm_state')
    effective = obs.get('effective_vm_state')
    if recorded and effective and recorded != effective:
        return recorded, effective
    return None


def _diffable(view):
    keys = ('exists', 'vm_state', 'power_state', 'status', 'run_strategy', 'vcpus', 'memory', 'pending_restart')
    return dict((k, view.get(k)) for k in keys if k in view)


def converge_vm(vm, decl, declared, options, check_mode, task_id=None, snapshot=None):  # pylint: disable=too-many-arguments
    """Plan and (unless ``check_mode``) execute on the :class:`KubevirtVm` ``vm``; return (changed, result dict) (see :meth:`KubevirtVm.converge`)."""
    return vm.converge(decl, declared, options, check_mode, task_id, snapshot)


def _converge_with_seed(vm, decl, declared, seed, options, check_mode, task_id, snapshot):  # pylint: disable=too-many-arguments
    seen = {}

    def bring_seed(obs):
        # after a task in flight ended (wait_idle), before the plan: a VM created or started now starts with the declared seed
        secret = seen['secret'] = kcloud_init.observed_secret(vm.client, vm.namespace, seed)
        if kcloud_init.secret_differs(secret, seed) and not check_mode:
            kcloud_init.write_secret(vm.client, vm.namespace, seed, secret, obs.get('vm') if obs.get('exists') else None)
        return False, obs
    changed, result = driver.converge_vm(vm, decl, declared, options, check_mode, task_id, snapshot, before_plan=bring_seed)
    secret = seen['secret']
    secret_changed = kcloud_init.secret_differs(secret, seed)
    owned = False
    if not check_mode and (result.get('vm') or {}).get('exists'):
        owned = kcloud_init.ensure_owner(vm.client, vm.namespace, seed, vm.client.get(KUBEVIRT_API, vm.namespace, 'virtualmachines', vm.name))
    before = (secret.get('metadata') or {}).get('annotations', {}).get(kcloud_init.DIGEST_ANNOTATION) if secret else None
    result['cloud_init'] = {'digest': seed.digest, 'secret': seed.secret, 'changed': secret_changed}
    result['diff']['before']['cloud_init_digest'] = before
    result['diff']['after']['cloud_init_digest'] = seed.digest
    return changed or secret_changed or owned, result


def converge_fleet(client, namespace, items, options, check_mode, parallel):
    """Converge every (VmDeclaration, declared manifest, name) of ``items``; one namespace snapshot for all; (changed, results)."""
    return driver.run_fleet(items, lambda name: KubevirtVm(client, namespace, name), options, check_mode, parallel,
                            snapshot=kobserve.NamespaceSnapshot(client, namespace), redact=client.redact)
