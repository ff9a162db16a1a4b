# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VM planner: from (declaration, observation) to the ordered steps that reach it.

A declared state is reached by a chain of actions of the action table where
one action cannot do it (declared stopped while PAUSED: unpause, then stop).
Each action of the chain is checked against its own row with the vm_state the
chain has reached, so a chain can never take a path the table forbids. Some
declared states are refused rather than chained: ``paused`` or ``suspended``
for a STOPPED VM (starting a guest only to freeze it surprises users).

The plan is empty when nothing needs doing: that is what makes every module
idempotent, and :func:`apply_step` is the model of the world the fixpoint
property test runs plans against.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._phase import actions
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

DECLARED_STATES = ('present', 'running', 'stopped', 'paused', 'suspended', 'absent', 'restarted')

# Power chains: (declared state, current vm_state) -> actions. A missing pair
# with a declared state means "refused in this vm_state".
POWER_CHAINS = {
    ('running', s.ACTIVE): (),
    ('running', s.STOPPED): ('start',),
    ('running', s.VM_PAUSED): ('unpause',),
    ('running', s.VM_SUSPENDED): ('resume',),
    ('running', s.ERROR): ('reboot_hard',),
    ('stopped', s.STOPPED): (),
    ('stopped', s.ACTIVE): ('stop',),
    ('stopped', s.VM_PAUSED): ('unpause', 'stop'),
    ('stopped', s.VM_SUSPENDED): ('resume', 'stop'),
    ('stopped', s.ERROR): ('stop',),
    ('paused', s.VM_PAUSED): (),
    ('paused', s.ACTIVE): ('pause',),
    ('paused', s.VM_SUSPENDED): ('resume', 'pause'),
    ('paused', s.ERROR): ('reboot_hard', 'pause'),
    ('suspended', s.VM_SUSPENDED): (),
    ('suspended', s.ACTIVE): ('suspend',),
    ('suspended', s.VM_PAUSED): ('unpause', 'suspend'),
    ('suspended', s.ERROR): ('reboot_hard', 'suspend'),
    ('restarted', s.ACTIVE): ('reboot_soft',),
    ('restarted', s.STOPPED): ('start',),
    ('restarted', s.VM_PAUSED): ('reboot_hard',),
    ('restarted', s.VM_SUSPENDED): ('reboot_hard',),
    ('restarted', s.ERROR): ('reboot_hard',),
}

# Declared states refused outright in a vm_state, with the reason shown.
REFUSED = {
    ('paused', s.STOPPED): 'a stopped VM is not started only to be paused; declare running first',
    ('suspended', s.STOPPED): 'a stopped VM is not started only to be suspended; declare running first',
}

# Actions that start a new guest process, and so apply a changed definition.
COLD_ACTIONS = ('start', 'stop', 'reboot_soft', 'reboot_hard')

# vm_states from which the running power of the guest is expected.
RUNS_IN = (s.ACTIVE, s.VM_PAUSED, s.RESCUED)


class VmObservation(NamedTuple):
    """What the planner needs to know of a VM now."""

    exists: bool = False
    vm_state: str = s.DELETED
    task_state: Optional[str] = None
    definition_differs: bool = False      # the persistent definition differs from the declared one
    restart_needed: bool = False          # the running guest runs an older definition
    autostart: Optional[bool] = None
    deleting: bool = False                # its deletion was already requested (e.g. held by a finalizer): the world finishes it


class VmDeclaration(NamedTuple):
    """What the user declared."""

    state: str = 'present'
    autostart: Optional[bool] = None
    restart_on_change: bool = False        # apply definition changes that need a restart by restarting


class Step(NamedTuple):
    """One action of the plan, with the states around it."""

    action: str
    task_state: Optional[str]
    vm_state_before: str
    vm_state_after: str
    detail: Tuple[Tuple[str, object], ...] = ()

    def as_dict(self) -> Dict[str, Any]:
        """Plain dict for module results."""
        result: Dict[str, Any] = {'action': self.action, 'task_state': self.task_state, 'vm_state_before': self.vm_state_before,
                                  'vm_state_after': self.vm_state_after}
        result.update(dict(self.detail))
        return result


def _step(action: str, vm_state: str, **detail: Any) -> Step:
    row = actions.check_action(action, vm_state, None)
    after = actions.vm_state_after(action, vm_state, s.ACTIVE)
    return Step(action, row.task_state, vm_state, after, tuple(sorted(detail.items())))


def _chain(declared: str, vm_state: str, task_state: Optional[str]) -> Tuple[str, ...]:
    key = (declared, vm_state)
    if key in REFUSED:
        raise TransitionRefused('converge to %s' % declared, vm_state, task_state, reason=REFUSED[key])
    if key not in POWER_CHAINS:
        raise TransitionRefused('converge to %s' % declared, vm_state, task_state,
                                reason='no chain of actions reaches %s from %s' % (declared, vm_state))
    return POWER_CHAINS[key]


def plan_vm(decl: VmDeclaration, obs: VmObservation) -> List[Step]:
    """Ordered :class:`Step` list that brings ``obs`` to ``decl``; empty when nothing needs doing.

    Raises :class:`TransitionRefused` (naming the current vm_state and
    task_state) when the declaration cannot be reached from here, including
    when another task is in flight; nothing has been changed then.
    """
    if decl.state not in DECLARED_STATES:
        raise ValueError('state must be one of %s, got %r' % (', '.join(DECLARED_STATES), decl.state))
    if decl.state == 'absent':
        if not obs.exists or obs.deleting:
            return []   # gone, or going: a second delete would change nothing
        row = actions.check_action('delete', obs.vm_state, obs.task_state)
        return [Step('delete', row.task_state, obs.vm_state, s.DELETED)]
    if obs.exists and obs.deleting:
        raise TransitionRefused('converge to %s' % decl.state, obs.vm_state, obs.task_state,
                                reason='the VM is being deleted; declare it again once it is gone')
    if obs.task_state is not None:
        raise TransitionRefused('converge to %s' % decl.state, obs.vm_state, obs.task_state, reason='another task is in flight')

    steps = []
    vm_state = obs.vm_state if obs.exists else s.DELETED
    if not obs.exists:
        steps.append(_step('create', vm_state))
        vm_state = steps[-1].vm_state_after
    elif obs.definition_differs or (decl.autostart is not None and decl.autostart != obs.autostart):
        steps.append(_step('update', vm_state))

    if decl.state == 'present':
        return steps
    # Walk the chain one action at a time, re-reading the chain from the
    # vm_state reached (each chain is consistent with its own tail). A guest
    # running an older definition is restarted (when asked) at the first point
    # where it runs, unless the chain itself restarts or stops it.
    restart_wanted = (decl.restart_on_change and obs.exists and (obs.restart_needed or obs.definition_differs)
                      and decl.state not in ('stopped', 'restarted'))
    for _guard in range(8):
        if restart_wanted and vm_state in RUNS_IN:
            steps.append(_step('reboot_soft' if vm_state == s.ACTIVE else 'reboot_hard', vm_state, reason='apply definition changes'))
            vm_state = steps[-1].vm_state_after
            restart_wanted = False
        chain = _chain(decl.state, vm_state, obs.task_state)
        if not chain:
            break
        if decl.state == 'restarted':
            for action in chain:
                steps.append(_step(action, vm_state))
                vm_state = steps[-1].vm_state_after
            break
        steps.append(_step(chain[0], vm_state))
        vm_state = steps[-1].vm_state_after
        restart_wanted = restart_wanted and chain[0] not in COLD_ACTIONS
    return steps


def apply_step(obs: VmObservation, step: Step) -> VmObservation:
    """Model of the world: the observation after ``step`` succeeds (for tests and check mode)."""
    if step.action == 'delete':
        return VmObservation()
    if step.action == 'create':
        return obs._replace(exists=True, vm_state=step.vm_state_after, definition_differs=False, restart_needed=False)
    if step.action == 'update':
        return obs._replace(vm_state=step.vm_state_after, definition_differs=False,
                            restart_needed=obs.restart_needed or (obs.definition_differs and step.vm_state_before in RUNS_IN))
    cold = step.action in COLD_ACTIONS
    return obs._replace(vm_state=step.vm_state_after, restart_needed=False if cold else obs.restart_needed)


def converge_model(decl: VmDeclaration, obs: VmObservation) -> Tuple[List[Step], VmObservation]:
    """Run :func:`plan_vm` and apply every step to the model; return (steps, final observation)."""
    steps = plan_vm(decl, obs)
    for step in steps:
        obs = apply_step(obs, step)
    if decl.autostart is not None and steps:
        obs = obs._replace(autostart=decl.autostart)
    return steps, obs
