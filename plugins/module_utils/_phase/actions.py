# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action table: which vm_state accepts which action (Nova ``compute/api.py``).

Each row says which vm_states (and task_states) accept an action, the
task_state held while it runs, and the vm_state after it succeeds. Nova
expresses the same with ``@check_instance_state(vm_state=[...], task_state=[...])``
on each API method; here it is one table so that every module, role and the
documentation read the same rows.

Rows marked "extension" are not in Nova: they are the collection's declarative
operations (create a definition, redefine it) written in the same form.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._base.errors import TransitionRefused
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

ANY = '*'
PREVIOUS = 'previous'
UNCHANGED = 'unchanged'

Action = namedtuple('Action', ['name', 'vm_states', 'task_states', 'task_state', 'vm_state_after', 'source'])

_ALL = ANY
_IDLE = (None,)
# Nova task_states.ALLOW_REBOOT: a hard reboot may interrupt these (a stuck soft reboot among them). Nova's
# REBOOT_PENDING / REBOOT_STARTED sub-steps of a soft reboot are REBOOTING here (one task, no RPC hop).
ALLOW_HARD_REBOOT_TASKS = (None, 'REBOOTING', 'REBOOTING_HARD', 'RESUMING', 'UNPAUSING', 'PAUSING', 'SUSPENDING')
# Nova attach_volume / detach_volume (SHELVED and SHELVED_OFFLOADED have no counterpart here).
VOLUME_VM_STATES = (s.ACTIVE, s.VM_PAUSED, s.STOPPED, s.RESIZED, s.SOFT_DELETED)
# Nova snapshot: ACTIVE, STOPPED, PAUSED, SUSPENDED. SUSPENDED is left out: here it is a libvirt managed save, and libvirt
# refuses to snapshot a domain with a managed save image.
SNAPSHOT_VM_STATES = (s.ACTIVE, s.STOPPED, s.VM_PAUSED)

ACTIONS = {
    a.name: a for a in (
        Action('create', (s.DELETED,), _IDLE, 'SPAWNING', s.STOPPED, 'extension: define a new VM (Nova build, without the boot)'),
        Action('update', (s.ACTIVE, s.STOPPED, s.VM_PAUSED, s.VM_SUSPENDED, s.ERROR), _IDLE, 'UPDATING', UNCHANGED,
               'extension: redefine the persistent config'),
        Action('start', (s.STOPPED,), _IDLE, 'STARTING', s.ACTIVE, 'nova start: STOPPED'),
        Action('stop', (s.ACTIVE, s.ERROR), _IDLE, 'STOPPING', s.STOPPED, 'nova stop: ACTIVE, ERROR'),
        Action('reboot_soft', (s.ACTIVE,), _IDLE, 'REBOOTING', s.ACTIVE, 'nova reboot SOFT'),
        Action('reboot_hard', (s.ACTIVE, s.STOPPED, s.VM_PAUSED, s.VM_SUSPENDED, s.ERROR), ALLOW_HARD_REBOOT_TASKS, 'REBOOTING_HARD',
               s.ACTIVE, 'nova reboot HARD: task_state in ALLOW_REBOOT'),
        Action('pause', (s.ACTIVE,), _IDLE, 'PAUSING', s.VM_PAUSED, 'nova pause'),
        Action('unpause', (s.VM_PAUSED,), _IDLE, 'UNPAUSING', s.ACTIVE, 'nova unpause'),
        Action('suspend', (s.ACTIVE,), _IDLE, 'SUSPENDING', s.VM_SUSPENDED, 'nova suspend'),
        Action('resume', (s.VM_SUSPENDED,), _IDLE, 'RESUMING', PREVIOUS, 'nova resume: back to the state before suspend (ACTIVE)'),
        Action('live_migrate', (s.ACTIVE, s.VM_PAUSED), _IDLE, 'MIGRATING', UNCHANGED, 'nova live_migrate'),
        Action('offline_migrate', (s.STOPPED,), _IDLE, 'MIGRATING', UNCHANGED,
               'extension: move a stopped VM definition to another host (nova migrate of a stopped instance, without resize)'),
        Action('migrate_abort', _ALL, ('MIGRATING',), 'MIGRATING', UNCHANGED,
               'nova live_migrate_abort: only while task_state is MIGRATING (any vm_state)'),
        Action('resize', (s.ACTIVE, s.STOPPED), _IDLE, 'RESIZING', s.RESIZED, 'nova resize'),
        Action('confirm_resize', (s.RESIZED,), _IDLE, None, PREVIOUS, 'nova confirm_resize'),
        Action('attach_volume', VOLUME_VM_STATES, _IDLE, None, UNCHANGED, 'nova attach_volume'),
        Action('detach_volume', VOLUME_VM_STATES, _IDLE, None, UNCHANGED, 'nova detach_volume'),
        Action('snapshot', SNAPSHOT_VM_STATES, _IDLE, 'IMAGE_SNAPSHOT', UNCHANGED, 'nova snapshot (IMAGE_SNAPSHOT); SUSPENDED left out'),
        Action('restore_snapshot', SNAPSHOT_VM_STATES + (s.ERROR,), _IDLE, 'RESTORING_SNAPSHOT', UNCHANGED,
               'extension: revert to a snapshot (the backend records the vm_state of the snapshot: running, paused or stopped)'),
        Action('delete_snapshot', SNAPSHOT_VM_STATES + (s.ERROR,), _IDLE, 'DELETING_SNAPSHOT', UNCHANGED,
               'extension: delete a snapshot (current data unchanged)'),
        Action('soft_delete', _ALL, _ALL, 'DELETING', s.SOFT_DELETED, 'nova soft_delete: any vm_state, any task_state'),
        Action('restore', (s.SOFT_DELETED,), _IDLE, 'RESTORING', s.ACTIVE, 'nova restore'),
        Action('delete', _ALL, _ALL, 'DELETING', s.DELETED, 'nova delete: preempts any task'),
    )
}


def _accepts(allowed: Any, value: Optional[str]) -> bool:
    return allowed == ANY or value in allowed


def check_action(action: str, vm_state: str, task_state: Optional[str] = None) -> Action:
    """Return the :class:`Action` row if ``action`` is accepted now, else raise.

    Raises :class:`TransitionRefused` whose message names the action, the
    current vm_state and task_state, and changes nothing.
    """
    row = ACTIONS.get(action)
    if row is None:
        raise TransitionRefused(action, vm_state, task_state, reason='unknown action')
    if not _accepts(row.task_states, task_state):
        raise TransitionRefused(action, vm_state, task_state, reason='another task is in flight', accepted=_named(row.vm_states))
    if not _accepts(row.vm_states, vm_state):
        raise TransitionRefused(action, vm_state, task_state, accepted=_named(row.vm_states))
    return row


def accepts(action: str, vm_state: str, task_state: Optional[str] = None) -> bool:
    """True when :func:`check_action` would accept (never raises)."""
    try:
        check_action(action, vm_state, task_state)
    except TransitionRefused:
        return False
    return True


def vm_state_after(action: str, vm_state: str, previous: Optional[str] = None) -> str:
    """vm_state once ``action`` succeeded from ``vm_state``.

    ``previous`` is the vm_state recorded before a suspend or resize (resume and
    confirm_resize return to it; ACTIVE when unknown).
    """
    after = ACTIONS[action].vm_state_after
    if after == UNCHANGED:
        return vm_state
    if after == PREVIOUS:
        return previous or s.ACTIVE
    return after


def _named(vm_states: Any) -> Tuple[str, ...]:
    return s.VM_STATES if vm_states == ANY else vm_states
