# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reconciling power_state against vm_state, and recovering stale tasks.

Sources: Nova ``compute/manager.py`` ``_sync_instance_power_state`` (the
periodic ``_sync_power_states``) and ``_init_instance`` (stale task_state after
a restart); seed 002 ("when power_state and vm_state disagree").

Both are tables of data: (vm_state, power_state) -> decision, and
task_state -> recovery. A decision names what should be done; the reconcile
role and the modules execute it (or only report it, the default).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Dict, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

# Decisions.
SKIP_TASK_IN_FLIGHT = 'skip: task in flight'
IN_SYNC = 'in sync'
RECORD_STOPPED = 'record STOPPED'          # the guest stopped itself (policy may restart instead)
STOP = 'stop'
REPORT_ONLY = 'report only'
FORCE_STOP = 'force stop'
REAP = 'finish delete'
LEAVE_ALONE = 'leave alone'

Decision = namedtuple('Decision', ['action', 'reason', 'reread', 'alternative'])

_ANY = '*'

# (vm_state, power_states) -> (action, needs a re-read first, policy alternative)
POWER_SYNC_TABLE = (
    (s.ACTIVE, (s.SHUTDOWN, s.CRASHED), RECORD_STOPPED, True, 'start'),
    (s.ACTIVE, (s.SUSPENDED,), STOP, False, None),
    (s.ACTIVE, (s.PAUSED, s.NOSTATE), REPORT_ONLY, False, None),
    (s.STOPPED, (s.RUNNING, s.PAUSED, s.SUSPENDED), FORCE_STOP, False, 'record ACTIVE'),
    (s.VM_PAUSED, (s.SHUTDOWN, s.CRASHED), FORCE_STOP, False, None),
    (s.DELETED, (s.RUNNING, s.PAUSED, s.SUSPENDED), REAP, False, None),
    (s.SOFT_DELETED, (s.RUNNING, s.PAUSED, s.SUSPENDED), REAP, False, None),
    (s.RESCUED, _ANY, LEAVE_ALONE, False, None),
    (s.RESIZED, _ANY, LEAVE_ALONE, False, None),
    (s.VM_SUSPENDED, _ANY, LEAVE_ALONE, False, None),
    (s.ERROR, _ANY, LEAVE_ALONE, False, None),
    (s.BUILDING, _ANY, LEAVE_ALONE, False, None),
)


def power_sync_decision(vm_state: str, power_state: str, task_state: Optional[str] = None) -> Decision:
    """What to do when vm_state and power_state are compared (Nova _sync_instance_power_state).

    A VM with a task in flight is skipped: during a task the two disagree by
    design. Returns a :class:`Decision`; ``reread`` asks the caller to observe
    again before acting (the guest may be rebooting), ``alternative`` is the
    action a policy may choose instead.
    """
    if task_state is not None:
        return Decision(SKIP_TASK_IN_FLIGHT, 'task_state is %s' % task_state, False, None)
    for row_vm_state, row_power, action, reread, alternative in POWER_SYNC_TABLE:
        if row_vm_state != vm_state:
            continue
        if row_power != _ANY and power_state not in row_power:
            continue
        return Decision(action, 'vm_state %s, power_state %s' % (vm_state, power_state), reread, alternative)
    return Decision(IN_SYNC, 'vm_state %s agrees with power_state %s' % (vm_state, power_state), False, None)


# Stale task recovery (Nova _init_instance), by task_state.
REDO = 'redo'
FINISH_DELETE = 'finish delete'
RESET_AFTER_LOCATING = 'reset after locating the guest'
SET_ERROR = 'set ERROR'
CLEAR = 'clear'

STALE_TASK_TABLE: Dict[Optional[str], str] = {
    'STARTING': REDO,
    'STOPPING': REDO,
    'REBOOTING': REDO,
    'REBOOTING_HARD': REDO,
    'PAUSING': REDO,
    'UNPAUSING': REDO,
    'SUSPENDING': REDO,
    'RESUMING': REDO,
    'UPDATING': REDO,
    'RESIZING': REDO,
    'DELETING': FINISH_DELETE,
    'MIGRATING': RESET_AFTER_LOCATING,
    'SPAWNING': SET_ERROR,
    'REBUILDING': SET_ERROR,
    'RESTORING': REDO,
    # Nova _init_instance clears an interrupted IMAGE_SNAPSHOT (vm_state unchanged); the next snapshot run re-plans from the
    # snapshots the hypervisor lists, and a restore or delete declared again simply runs again.
    'IMAGE_SNAPSHOT': CLEAR,
    'RESTORING_SNAPSHOT': CLEAR,
    'DELETING_SNAPSHOT': CLEAR,
}

Recovery = namedtuple('Recovery', ['action', 'vm_state', 'redo'])


def recover_stale_task(task_state: Optional[str], vm_state: str, action: Optional[str] = None, power_state: Optional[str] = None) -> Recovery:
    """How to recover a task left behind by an interrupted run.

    Returns a :class:`Recovery`: the recovery kind, the vm_state to record
    once the task is cleared, and the action to redo (or None).

    - starting / stopping / rebooting / pausing ...: redone (the interrupted
      action is retried from the recorded vm_state).
    - deleting: Nova finishes the delete; here only a declaration does (converge.virt.vm state=absent):
      the record alone never deletes a VM (see :data:`FIX_DECLARATIONS`).
    - migrating: reset after checking where the guest really runs; vm_state
      is unchanged (a migration never changes it).
    - spawning / building: ERROR (Nova sets ERROR for an interrupted build),
      unless the guest is plainly there and stopped, in which case STOPPED.
    """
    kind = STALE_TASK_TABLE.get(task_state, CLEAR)
    if kind == REDO:
        return Recovery(REDO, vm_state, action)
    if kind == FINISH_DELETE:
        return Recovery(FINISH_DELETE, s.DELETED, 'delete')
    if kind == RESET_AFTER_LOCATING:
        return Recovery(RESET_AFTER_LOCATING, vm_state, None)
    if kind == SET_ERROR:
        if power_state == s.SHUTDOWN:
            return Recovery(SET_ERROR, s.STOPPED, None)
        return Recovery(SET_ERROR, s.ERROR, None)
    return Recovery(CLEAR, vm_state, None)


# What fixing a disagreement means, as a declaration the vm planner reaches:
# decision -> (declared state, options). Policy alternatives replace the first.
#
# REAP (recorded DELETED or SOFT_DELETED while the guest runs) has no fix, and a stale DELETING task is only
# cleared, never finished: the record lives with the VM, and whoever may write the VM's metadata or annotations
# may write any record, so a record alone never makes reconcile delete a VM. Deleting is for a declaration
# (converge.virt.vm state=absent), which re-plans from the hypervisor and finishes an interrupted delete.
FIX_DECLARATIONS = {
    RECORD_STOPPED: ('stopped', {}),
    STOP: ('stopped', {}),
    FORCE_STOP: ('stopped', {'shutdown_timeout': 0}),
}
ALTERNATIVE_DECLARATIONS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    'start': ('running', {}),
    'record ACTIVE': ('running', {}),
}


# power_states of a guest that a declared 'stopped' no longer turns off
_ALREADY_OFF = (s.SHUTDOWN,)


def destructive_fix(declared: str, power_state: str) -> bool:
    """True when a fix declaring ``declared`` loses a guest's running state or the VM itself.

    Turning a guest off (``stopped`` while it runs, is paused, suspended or crashed) and ``absent`` are
    destructive; recording a state, starting a guest and clearing a stale task are not. The reconcile module
    reads a VM again before a destructive fix and acts only when both reads agree.
    """
    return declared == 'absent' or (declared == 'stopped' and power_state not in _ALREADY_OFF)


def fix_declaration(decision: Decision, use_alternative: bool = False) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(declared state, options) that fixes ``decision``, or None when it is report-only.

    ``use_alternative`` takes the policy alternative of the decision (restart a
    guest that stopped itself, or accept a guest that runs while recorded
    STOPPED) instead of the default.
    """
    if use_alternative and decision.alternative in ALTERNATIVE_DECLARATIONS:
        return ALTERNATIVE_DECLARATIONS[decision.alternative]
    return FIX_DECLARATIONS.get(decision.action)
