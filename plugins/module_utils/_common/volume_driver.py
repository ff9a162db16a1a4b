# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converge driver of the volume module, written once for every backend.

A backend implements :class:`VolumeBackend`: observe and plan (with the shared
planner ``_phase.volumes``), execute the operations (stopping at the first
failure), settle, observe again, the diff summary and the public view.
:func:`converge_volumes` is the one loop that calls them and builds the result
(operations, pool_operations, refusals, deferred, uncertain, volumes, diff,
changed and error: the first failure, after which nothing else runs).

The in-memory backend of the unit tests (``tests/unit/plugins/module_utils/_common/inmemory_backend.py``) proves the
protocol complete.
"""

from __future__ import annotations

import abc
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._base.errors import WaitTimeout
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase


class PlannedVolumes(NamedTuple):
    """What a backend observed and planned: the declared volumes and their attachments now, and the plan."""

    volumes: List[phase.ActualVolume]   # ActualVolume of each declared volume that exists
    attachments: List[phase.Attachment]  # Attachment of the declared volumes
    operations: List[phase.Operation]   # the Operations to run (those of refused volumes dropped)
    refusals: List[Dict[str, Any]]
    deferred: List[Dict[str, Any]]
    uncertain: List[str]
    pool_operations: List[Dict[str, Any]] = []  # pools started or created (libvirt)
    recovered: Tuple[Dict[str, Any], ...] = ()  # operation items done while observing (an unfinished import removed)


class VolumeBackend(abc.ABC):
    """The hooks :func:`converge_volumes` calls, on one connection (libvirt) or namespace (KubeVirt)."""

    #: the executor runs in check mode too, without writing (its dry-run answers are the returned operations)
    executes_in_check_mode = False

    @abc.abstractmethod
    def plan(self, specs: List[Dict[str, Any]], force: bool, check_mode: bool) -> PlannedVolumes:
        """Observe the declared volumes (and what they are attached to) and plan; a :class:`PlannedVolumes`."""

    @abc.abstractmethod
    def summary(self, volumes: List[phase.ActualVolume], attachments: List[phase.Attachment]) -> Dict[str, Any]:
        """The diff view of volumes and attachments: key -> exists, capacity, attachments."""

    @abc.abstractmethod
    def execute(self, operations: List[phase.Operation], check_mode: bool) -> Tuple[List[Dict[str, Any]], Optional[Exception]]:
        """Run ``operations`` in order; ``(done, error)``: their result items and the first failure (None when all ran)."""

    def settle(self) -> Optional[Exception]:
        """After every operation ran: wait for what the backend carries out later; the error, or None."""
        return None

    @abc.abstractmethod
    def observe_after(self, specs: List[Dict[str, Any]], done: List[Dict[str, Any]]) -> Tuple[List[phase.ActualVolume], List[phase.Attachment]]:
        """The declared volumes and their attachments after the run, read again: ``(volumes, attachments)``."""

    @abc.abstractmethod
    def changed(self, done: List[Dict[str, Any]], planned: PlannedVolumes) -> bool:
        """True when the run wrote anything."""

    @abc.abstractmethod
    def public(self, specs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The result's ``volumes``: each declared volume as last observed."""


# the operations that act on a volume itself (attach and detach are journaled by the VM's task, which they hold)
JOURNALED_KINDS = (phase.CREATE, phase.GROW, phase.DELETE)


def _journal_target(op: phase.Operation) -> str:
    detail = dict(op.detail)
    if op.kind == phase.DELETE:
        return 'absent'
    size = detail.get('to', detail.get('capacity'))
    return str(size) if size is not None else 'present'


def _execute_journaled(backend: VolumeBackend, operations: List[phase.Operation], check_mode: bool) -> Tuple[List[Dict[str, Any]], Optional[Exception]]:
    """``backend.execute`` with a begin record for each create / grow / delete before the batch and an end record after.

    An operation the batch never reached (an earlier one failed) ends ``not_run``; a process killed inside the batch
    leaves begin records without their end.
    """
    if check_mode:
        return backend.execute(operations, check_mode)
    journaled = [(op, os.urandom(8).hex()) for op in operations if op.kind in JOURNALED_KINDS]
    for op, task_id in journaled:
        journal.append('begin', op.volume, task_id, op.kind, kind='volume', target=_journal_target(op))
    done: List[Dict[str, Any]] = []
    error: Optional[Exception] = None
    try:
        done, error = backend.execute(operations, check_mode)
    finally:
        outcomes = {}
        for op, item in zip(operations, done):
            outcomes[id(op)] = 'failed' if item.get('failed') else 'done'
        for op, task_id in journaled:
            outcome = outcomes.get(id(op), 'failed' if error is None and not done else 'not_run')
            journal.append('end', op.volume, task_id, op.kind, kind='volume', target=_journal_target(op), outcome=outcome)
    return done, error


def converge_volumes(backend: VolumeBackend, specs: List[Dict[str, Any]], force: bool = False, check_mode: bool = False) -> Dict[str, Any]:
    """Converge normalized declarations on ``backend`` (a :class:`VolumeBackend`); return the result dict."""
    planned = backend.plan(specs, force, check_mode)
    before = backend.summary(planned.volumes, planned.attachments)
    result: Dict[str, Any] = {'pool_operations': planned.pool_operations, 'refusals': planned.refusals, 'deferred': planned.deferred,
                              'uncertain': list(planned.uncertain)}
    if check_mode and not backend.executes_in_check_mode:
        done, error = [op.as_dict() for op in planned.operations], None
    else:
        done, error = _execute_journaled(backend, planned.operations, check_mode)
        if error is None and not check_mode:
            error = backend.settle()
    if isinstance(error, WaitTimeout) and error.details.get('vm'):
        # a hot-plug that did not finish in time: that attachment may or may not be there now
        result['uncertain'].append('%s:%s' % (error.details['vm'], error.details['target']))
    done = list(planned.recovered) + done
    if check_mode:
        volumes, attachments = planned.volumes, planned.attachments
        for op in planned.operations:
            volumes, attachments = phase.apply_operation(volumes, attachments, op)
        changed = bool(planned.operations or planned.pool_operations or planned.recovered)
    else:
        volumes, attachments = backend.observe_after(specs, done)
        changed = backend.changed(done, planned)
    result.update(operations=done, changed=changed, error=error, diff={'before': before, 'after': backend.summary(volumes, attachments)})
    result['volumes'] = backend.public(specs)
    return result
