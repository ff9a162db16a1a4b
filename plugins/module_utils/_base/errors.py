# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's own exceptions.

Backends translate libvirt and Kubernetes exceptions into these, so that modules
fail the same way on every backend and never leak a backend's traceback.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional


class ConvergeError(Exception):
    """Base class of every error the collection raises on purpose."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_result(self) -> Dict[str, Any]:
        """The fields a module adds to its failure result."""
        result = {'msg': self.message}
        result.update(self.details)
        return result


class InvalidDeclaration(ConvergeError):
    """The user's declaration is invalid; nothing was changed."""

    def __init__(self, field: str, reason: str, **details: Any) -> None:
        super().__init__('%s: %s' % (field, reason), field=field, **details)
        self.field = field
        self.reason = reason


class TransitionRefused(ConvergeError):
    """An action is not accepted in the current vm_state / task_state (Nova's 409)."""

    def __init__(self, action: str, vm_state: Optional[str], task_state: Optional[str], reason: Optional[str] = None,
                 accepted: Optional[Iterable[str]] = None) -> None:
        text = 'action %r refused: vm_state is %s, task_state is %s' % (action, vm_state, task_state)
        if reason:
            text += ' (%s)' % reason
        super().__init__(text, action=action, vm_state=vm_state, task_state=task_state, accepted_vm_states=sorted(accepted or ()))
        self.action = action
        self.vm_state = vm_state
        self.task_state = task_state


class TaskConflict(ConvergeError):
    """Another task holds the VM (compare-and-swap on the task id lost)."""

    def __init__(self, name: str, held_by: Optional[str], task_state: Optional[str], **details: Any) -> None:
        super().__init__(
            'VM %r is busy: task %s (task_state %s) is in flight; only one task may act on a VM at a time' % (name, held_by, task_state),
            task_id=held_by, task_state=task_state, **details)
        self.held_by = held_by
        self.task_state = task_state


class DataSafetyRefusal(ConvergeError):
    """An operation would lose or expose data (shrink, delete or detach in use)."""


class WaitTimeout(ConvergeError):
    """A wait reached its deadline; carries the last observed state."""


class BackendError(ConvergeError):
    """The hypervisor or API server failed; the message is safe to show."""


_OUR_CODE = 'ansible_collections/converge/virt/plugins/'


def unexpected(exc: BaseException) -> str:
    """The message of an exception no code path expected: its type, where the collection's code met it (file:line and
    function of the innermost frame of this collection's plugins), and its text ("no message" for an empty one or a libvirt error
    whose text libvirt no longer had). Ansible shows the traceback only with -vvv; this line is what a user reports."""
    where = None
    frame = exc.__traceback__
    while frame is not None:
        path = frame.tb_frame.f_code.co_filename.replace('\\', '/')
        if _OUR_CODE in path:
            where = '%s:%d in %s' % (path.rsplit(_OUR_CODE, 1)[1], frame.tb_lineno, frame.tb_frame.f_code.co_name)
        frame = frame.tb_next
    text = str(exc)
    if text in ('', 'None'):
        text = 'no message'
    return 'unexpected error (%s%s): %s' % (type(exc).__name__, ' at ' + where if where else '', text)
