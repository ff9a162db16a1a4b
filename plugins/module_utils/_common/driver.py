# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converge driver of the vm module, written once for every backend, and the fleet runner.

A backend implements :class:`VmBackend` (the hooks: observe, recover a stale
task, wait until idle, run one step, record a vm_state, settle, the public
view) beside its :class:`.._phase.tasks.TaskStore`; :func:`converge_vm` is
the one loop that plans with ``_phase.vm_plan`` and calls those hooks.
:func:`run_fleet` converges the items of ``vms:`` on a thread pool and
:func:`finish_fleet` gives the one failure summary ("N of M VMs failed").

The protocol is proven complete by the in-memory backend of the unit tests
(``tests/unit/plugins/module_utils/_common/inmemory_backend.py``).
"""

from __future__ import annotations

import abc
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, TypedDict

from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, TaskConflict, WaitTimeout
from ansible_collections.converge.virt.plugins.module_utils._common.fleet import fleet_failure  # noqa: F401  # the one summary, re-exported
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_fields
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._phase import prediction, tasks, vm_plan


def default_lease_seconds(wait_timeout: float, shutdown_timeout: float) -> float:
    """The lease of a vm task: long enough for the longest wait of one step, at least two minutes."""
    return max(120.0, float(wait_timeout) + float(shutdown_timeout) + 30.0)


class VmOptions:  # pylint: disable=too-few-public-methods
    """Execution options of the vm module (not part of the declaration's identity), the same on every backend.

    A backend with options of its own subclasses it (KubeVirt: ``delete_volumes``).
    """

    def __init__(self, wait: bool = True, wait_timeout: float = 300, shutdown_timeout: float = 60,  # pylint: disable=too-many-arguments
                 force_stop: bool = True, lock_timeout: float = 0, lease_seconds: Optional[float] = None, if_moved: str = 'fail') -> None:
        self.wait = wait
        self.if_moved = if_moved  # a VM that migrated away from a libvirt host: fail, or skip (see the vm module)
        self.wait_timeout = wait_timeout
        self.shutdown_timeout = shutdown_timeout
        self.force_stop = force_stop
        self.lock_timeout = lock_timeout
        self.lease_seconds = lease_seconds or default_lease_seconds(wait_timeout, shutdown_timeout)


class BackendObservation(TypedDict, total=False):
    """What the driver reads of a backend's observation of one VM (a backend's dict carries more keys: the driver passes
    them through to the backend's own hooks and never reads them)."""

    exists: bool
    effective_vm_state: Optional[str]     # the vm_state a new task starts from (_phase/views.effective_vm_state)
    task_state: Optional[str]             # None: idle
    task_id: Optional[str]
    task_owner: Optional[str]
    pending_restart: bool                 # the running guest does not run the stored definition yet
    diff: Any                             # truthy when the declared definition differs from the stored one
    status: Optional[str]
    autostart: Optional[bool]


class VmBackend(abc.ABC):
    """One VM on one backend: the hooks :func:`converge_vm` calls.

    ``obs`` is the backend's observation (a dict); the driver reads only these
    keys of it: ``exists``, ``effective_vm_state``, ``task_state``,
    ``pending_restart``, ``diff`` (truthy when the definition differs) and
    ``status``.
    """

    name: Any = None  # the VM's name (every backend sets it)
    owner: Optional[str] = None  # this run's owner id (_base/owner.owner_id), written into every task record it takes

    # ------------------------------------------------------------ observation
    @abc.abstractmethod
    def observe(self, spec: Any = None, snapshot: Any = None) -> BackendObservation:
        """The VM now (``spec``: compare the definition with it; ``snapshot``: what a fleet read in bulk)."""

    @abc.abstractmethod
    def public_view(self, obs: BackendObservation) -> Dict[str, Any]:
        """The VM as a module returns it: no handles, no raw objects."""

    @abc.abstractmethod
    def diffable(self, view: Dict[str, Any]) -> Dict[str, Any]:
        """The keys of a view that the result's ``diff`` shows."""

    @abc.abstractmethod
    def changes(self, obs: BackendObservation) -> List[Any]:
        """The definition changes of ``obs`` as the result's ``changes`` list (secrets masked)."""

    @abc.abstractmethod
    def recorded_drift(self, obs: BackendObservation) -> Optional[Tuple[str, str]]:
        """(recorded, effective) when an idle VM's record disagrees with the backend, else None."""

    def plan_autostart(self, obs: BackendObservation) -> Optional[bool]:
        """The autostart flag the planner compares with the declared one (None: the backend has none)."""
        return obs.get('autostart')

    def deleting(self, obs: BackendObservation) -> bool:
        """True when the VM's deletion was already requested and the backend finishes it."""
        del obs
        return False

    # ----------------------------------------------------------- task control
    @abc.abstractmethod
    def recover_stale(self, obs: BackendObservation, now: float) -> Optional[Dict[str, Any]]:
        """Clear a task left by a killed run; return the ``recovered`` note or None."""

    @abc.abstractmethod
    def wait_idle(self, obs: BackendObservation, options: VmOptions, spec: Any = None) -> BackendObservation:
        """Wait for another task in flight to end (``lock_timeout``), or raise TaskConflict naming it; return the new observation."""

    @abc.abstractmethod
    def record_vm_state(self, obs: BackendObservation, vm_state: str) -> None:
        """Write ``vm_state`` into an idle VM's record (compare-and-swap)."""

    # -------------------------------------------------------------- execution
    #: the exceptions of a failed step that :meth:`run_step` rolls the task record back for (anything else is a bug: the
    #: record stays and the next run recovers it)
    step_errors: Tuple[Type[BaseException], ...] = (ConvergeError,)

    @abc.abstractmethod
    def store(self, obs: BackendObservation) -> tasks.TaskStore:
        """The :class:`.._phase.tasks.TaskStore` of the observed VM (``self.owner`` names this run in the records)."""

    @abc.abstractmethod
    def create(self, spec: Any, obs: BackendObservation, options: VmOptions, task_id: str) -> BackendObservation:
        """Create the VM with a SPAWNING record and finish it STOPPED; return the new observation."""

    @abc.abstractmethod
    def act(self, step: vm_plan.Step, spec: Any, obs: BackendObservation, options: VmOptions) -> None:
        """Carry out one step other than create while :meth:`run_step` holds its task (raise one of :attr:`step_errors`)."""

    def abandon(self, store: tasks.TaskStore, task_id: str, obs: BackendObservation) -> bool:
        """Roll the task record of a failed step back (the next run re-plans from the backend); whether the record is gone."""
        del obs
        try:
            tasks.abandon_task(store, task_id, name=self.name, rolled_back=True)
        except ConvergeError:
            return False
        return True

    def step_failed(self, error: BaseException, step: vm_plan.Step, obs: BackendObservation, abandoned: bool) -> BaseException:
        """The exception to raise for ``error`` of ``step`` (``abandoned``: whether its record is gone); default ``error``."""
        del step, obs, abandoned
        return error

    def run_step(self, step: vm_plan.Step, spec: Any, obs: BackendObservation, options: VmOptions, task_id: str) -> BackendObservation:
        """Execute one planned step under the task protocol, the same on every backend; return the new observation.

        Take the task (``tasks.take_task``: the action table, delete preemption, compare-and-swap, a lease of
        ``options.lease_seconds``), act inside a journaled interval, then finish the record with the step's vm_state
        (a delete leaves none); a step that fails with one of :attr:`step_errors` has its record abandoned and is
        raised as :meth:`step_failed` words it.
        """
        if step.action == 'create':
            return self.create(spec, obs, options, task_id)
        store = self.store(obs)
        tasks.take_task(store, step.action, task_id, time.time(), lease_seconds=options.lease_seconds, owner=self.owner, name=self.name)
        try:
            with journal.Interval(self.name, task_id, step.action, target=step.vm_state_after):
                self.act(step, spec, obs, options)
        except self.step_errors as exc:
            error = self.step_failed(exc, step, obs, self.abandon(store, task_id, obs))
            if error is exc:
                raise
            raise error
        if step.action != 'delete':
            tasks.finish_task(store, task_id, name=self.name, vm_state=step.vm_state_after)
        return self.observe(spec)

    def validate_steps(self, steps: List[vm_plan.Step], spec: Any, obs: BackendObservation) -> None:
        """Check mode: refuse a plan the backend would refuse (nothing is written)."""

    def settle(self, decl: vm_plan.VmDeclaration, obs: BackendObservation, options: VmOptions) -> Optional[BackendObservation]:
        """Wait until the backend carries out the declared power; the new observation, or None when there is nothing to wait for."""
        del decl, obs, options
        return None

    def wait_deleted(self, options: VmOptions) -> BackendObservation:
        """Wait until a deletion requested earlier is finished (only called when :meth:`deleting` says so)."""
        del options
        return self.observe()

    def without_steps(self, decl: vm_plan.VmDeclaration, spec: Any, obs: BackendObservation, check_mode: bool,  # pylint: disable=too-many-arguments
                      result: Dict[str, Any], view: Dict[str, Any]) -> Tuple[bool, Dict[str, Any]]:
        """What the backend brings in place besides the plan when it has no steps (or in check mode): (changed, view)."""
        del decl, spec, obs, check_mode, result
        return False, view

    def after_steps(self, decl: vm_plan.VmDeclaration, spec: Any, obs: BackendObservation, result: Dict[str, Any],  # pylint: disable=too-many-arguments
                    view: Dict[str, Any]) -> Dict[str, Any]:
        """The returned view once the steps ran (the backend adds what it knows more); ``view`` is ``public_view(obs)``."""
        del decl, spec, obs, result
        return view

    def converge(self, decl: vm_plan.VmDeclaration, spec: Any, options: VmOptions, check_mode: bool,  # pylint: disable=too-many-arguments
                 task_id: Optional[str] = None, snapshot: Any = None) -> Tuple[bool, Dict[str, Any]]:
        """Plan and (unless ``check_mode``) execute; (changed, result). A backend wraps :func:`converge_vm` here (cloud-init seeds)."""
        return converge_vm(self, decl, spec, options, check_mode, task_id, snapshot)


def wait_until_idle(name: str, obs: BackendObservation, options: VmOptions, observe: Callable[[], BackendObservation],  # pylint: disable=too-many-arguments
                    idle: Callable[[BackendObservation], bool], describe: Optional[Callable[[BackendObservation], str]] = None,
                    **wait: Any) -> BackendObservation:
    """The task in flight of ``obs`` ended (``idle(observation)``), within ``options.lock_timeout``: the new observation.

    No task in flight: ``obs``. ``lock_timeout`` 0, or still busy at its end: :class:`TaskConflict` naming the task and
    its owner (with ``waited`` after a wait). ``wait``: :func:`wait_for`'s clock and sleep (tests).
    """
    if obs.get('task_state') is None:
        return obs
    if options.lock_timeout <= 0:
        raise TaskConflict(name, obs.get('task_id'), obs.get('task_state'), owner=obs.get('task_owner'))
    try:
        return wait_for(observe, idle, options.lock_timeout, 'the task in flight on %s to end' % name, describe=describe, **wait)
    except WaitTimeout:
        raise TaskConflict(name, obs.get('task_id'), obs.get('task_state'), owner=obs.get('task_owner'), waited=options.lock_timeout)


def converge_vm(vm: VmBackend, decl: vm_plan.VmDeclaration, spec: Any, options: VmOptions,  # pylint: disable=too-many-arguments,too-many-locals
                check_mode: bool, task_id: Optional[str] = None, snapshot: Any = None,
                before_plan: Optional[Callable[[BackendObservation], Tuple[bool, BackendObservation]]] = None) -> Tuple[bool, Dict[str, Any]]:
    """Plan and (unless ``check_mode``) execute the declaration on ``vm`` (a :class:`VmBackend`); return (changed, result dict).

    ``before_plan(obs) -> (restart_needed, obs)`` runs once a task in flight ended, before the plan (a backend brings a
    cloud-init seed in place there).
    """
    present = decl.state != 'absent'
    obs = vm.observe(spec if present else None, snapshot)
    notes: Dict[str, Any] = {}
    if obs['exists'] and obs.get('task_state') and not check_mode:
        recovered = vm.recover_stale(obs, time.time())
        if recovered:
            notes['recovered'] = recovered
        obs = vm.observe(spec if present else None)
        if present:
            holder, since = obs, time.monotonic()
            obs = vm.wait_idle(obs, options, spec)
            if holder.get('task_state') is not None:
                # another run's task held the VM and this run waited it out (lock_timeout): say which, and for how long
                notes['waited_for'] = {'task_id': holder.get('task_id'), 'task_state': holder.get('task_state'),
                                       'owner': holder.get('task_owner'), 'seconds': round(time.monotonic() - since, 1)}
            if obs['exists'] and obs.get('task_state'):
                # the wait ended by the task's lease, not by its run (a run on another host or in another container,
                # whose process cannot be judged from here, that died): the task is stale now and is recovered as above
                recovered = vm.recover_stale(obs, time.time())
                if recovered:
                    notes['recovered'] = recovered
                    obs = vm.observe(spec)
    before = vm.public_view(obs)
    restart_needed = False
    if before_plan is not None:
        restart_needed, obs = before_plan(obs)
    plan_obs = vm_plan.VmObservation(
        exists=obs['exists'], vm_state=obs.get('effective_vm_state') or 'DELETED', task_state=obs.get('task_state'),
        definition_differs=bool(obs.get('diff')), restart_needed=bool(obs.get('pending_restart')) or restart_needed,
        autostart=vm.plan_autostart(obs), deleting=vm.deleting(obs))
    steps = vm_plan.plan_vm(decl, plan_obs)
    result: Dict[str, Any] = {'steps': [s.as_dict() for s in steps], 'changes': vm.changes(obs)}
    result.update(notes)
    drift = vm.recorded_drift(obs) if present else None
    if drift:
        # the backend contradicts the idle VM's record (the guest stopped itself, or was started behind our back):
        # record what it says first (Nova _sync_power_states), so every action is checked against it
        result['steps'] = [{'action': 'record', 'task_state': None, 'vm_state_before': drift[0], 'vm_state_after': drift[1]}] + result['steps']
        if not check_mode:
            vm.record_vm_state(obs, drift[1])
            obs = vm.observe(spec if present else None)
            if not steps:
                after = vm.public_view(obs)
                settled = vm.settle(decl, obs, options)
                if settled is not None:
                    after = vm.public_view(settled)
                result['vm'] = after
                result['diff'] = {'before': vm.diffable(before), 'after': vm.diffable(after)}
                return True, result
    if check_mode or not steps:
        if check_mode:
            vm.validate_steps(steps, spec, obs)
        predicted = dict(before)
        if check_mode:
            # every word predicted from the plan (none left over from the observation); what was observed is returned apart
            predicted = prediction.predict_view(before, steps, drift[1] if drift and not steps else None)
            result['observed'] = before
        extra_changed, predicted = vm.without_steps(decl, spec, obs, check_mode, result, predicted)
        if not check_mode and obs['exists']:
            settled = vm.settle(decl, obs, options)
            if settled is not None:
                predicted = vm.public_view(settled)
        if not check_mode and options.wait and plan_obs.deleting and not present:
            # an earlier run's delete is still being finished (a finalizer holds the VM): wait for it, do not repeat it
            predicted = vm.public_view(vm.wait_deleted(options))
        result['vm'] = predicted
        result['diff'] = {'before': vm.diffable(before), 'after': vm.diffable(predicted)}
        return bool(steps) or bool(drift) or extra_changed, result
    task_id = task_id or tasks.new_task_id()
    for step in steps:
        obs = vm.run_step(step, spec, obs, options, task_id + '-' + step.action)
    if obs.get('exists'):
        settled = vm.settle(decl, obs, options)
        if settled is not None:
            obs = settled
    after = vm.after_steps(decl, spec, obs, result, vm.public_view(obs))
    result['vm'] = after
    result['diff'] = {'before': vm.diffable(before), 'after': vm.diffable(after)}
    return True, result


# ------------------------------------------------------------------- fleets
def run_fleet(items: Sequence[Tuple[vm_plan.VmDeclaration, Any, str]], make_vm: Callable[[str], VmBackend],  # pylint: disable=too-many-arguments
              options: VmOptions, check_mode: bool, parallel: int, snapshot: Any = None,
              redact: Optional[Callable[[Any], Any]] = None) -> Tuple[bool, List[Dict[str, Any]]]:
    """Converge every (VmDeclaration, spec, name) of ``items`` on ``make_vm(name)``, ``parallel`` at a time; (changed, results).

    A VM that fails is a result with ``failed`` and the error's fields (redacted with ``redact``); the others still run.
    """
    def one(item: Tuple[vm_plan.VmDeclaration, Any, str]) -> Dict[str, Any]:
        decl, spec, name = item
        try:
            changed, result = make_vm(name).converge(decl, spec, options, check_mode, tasks.new_task_id(), snapshot)
            result.update(name=name, changed=changed, failed=False)
        except ConvergeError as exc:
            result = dict(name=name, changed=False, failed=True)
            result.update(redact_fields(exc.to_result(), redact) if redact is not None else exc.to_result())
        return result

    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel  # fleets only
    with ThreadPoolExecutor(max_workers=min(parallel, max(1, len(items)))) as pool:
        results = list(pool.map(one, items))
    return any(r['changed'] for r in results), results


def finish_fleet(module: Any, changed: bool, results: List[Dict[str, Any]], noun: str = 'VMs') -> None:
    """exit_json / fail_json of a module that converged a fleet."""
    failure = fleet_failure(results, noun)
    if failure:
        module.fail_json(msg=failure, changed=changed, results=results)
    module.exit_json(changed=changed, results=results, steps=[], changes=[])
