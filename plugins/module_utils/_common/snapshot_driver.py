# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snapshot protocol: what one VM's snapshots offer (:class:`SnapshotBackend`) and the loop that converges them.

Like the vm, volume, migration and host drivers, the loop is written once (:func:`converge_snapshot`): refuse when
another run holds the VM, plan with ``_phase.snapshots`` (plus ``older_than``), clear the task a killed snapshot run
left when there is nothing to do, run the steps under one VM task (or report them in check mode), read the snapshots
again and build the result. A backend implements the hooks only (``_libvirt/snapshot_runs.LibvirtSnapshots``,
``_kubevirt/snapshot_runs.KubevirtSnapshots``, the in-memory one of the unit tests); its module gives
``snapshots(connection, params)`` (one VM's :class:`SnapshotBackend`, its names checked) and ``info(connection,
params)``, which ``_common/snapshot_run.py``'s runners call. Imports no backend.
"""

from __future__ import annotations

import abc
import re
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase
from ansible_collections.converge.virt.plugins.module_utils._phase.snapshots import ActualSnapshot, SnapshotStep

DURATION = re.compile(r'^\s*(\d+)\s*([smhdw]?)\s*$')
UNIT_SECONDS = {'': 1, 's': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 604800}


def parse_older_than(value: Any, field: str = 'older_than') -> Optional[int]:
    """Seconds of an ``older_than`` duration (``7d``, ``12h``, ``30m``, ``90s``, ``2w``, a bare number of seconds); None when unset."""
    if value is None:
        return None
    match = DURATION.match(str(value))
    if not match or int(match.group(1)) < 1:
        raise InvalidDeclaration(field, 'must be a duration of 1 or more with unit s, m, h, d or w (such as 7d or 12h), got %r' % value)
    return int(match.group(1)) * UNIT_SECONDS[match.group(2)]


def add_older_than(steps: Sequence[SnapshotStep], snapshots: Iterable[ActualSnapshot], declared: Dict[str, Any],
                   now: Optional[float] = None) -> List[SnapshotStep]:
    """``steps`` plus a delete step for each other snapshot taken more than ``older_than`` ago, oldest first (pure).

    Only snapshots observed now are named (each in the plan before anything is deleted); the declared one and those the
    plan deletes already are skipped."""
    seconds = parse_older_than(declared.get('older_than'))
    if seconds is None:
        return list(steps)
    if declared['state'] != 'present':
        raise InvalidDeclaration('older_than', 'applies with state=present only')
    now = time.time() if now is None else now
    deleting = set(step.name for step in steps if step.op == phase.DELETE)
    reason = 'older_than %s' % declared['older_than']
    extra = [phase.SnapshotStep(phase.DELETE, snap.name, (('children', False), ('reason', reason)))
             for snap in phase.age_order(snapshots)
             if snap.name != declared['name'] and snap.name not in deleting and snap.created is not None and now - snap.created > seconds]
    return list(steps) + extra


def predicted_names(names: Iterable[str], steps: Iterable[SnapshotStep]) -> List[str]:
    """Snapshot names once ``steps`` ran (for check mode and the diff)."""
    result = set(names)
    for step in steps:
        if step.op == phase.CREATE:
            result.add(step.name)
        elif step.op == phase.DELETE:
            result.discard(step.name)
    return sorted(result)


def operations_of(steps: Iterable[SnapshotStep]) -> List[Dict[str, Any]]:
    """The planned operations of ``steps`` (what check mode reports)."""
    return [dict([('op', step.op), ('snapshot', step.name)] + list(step.detail)) for step in steps]


class SnapshotBackend(abc.ABC):
    """The snapshots of one VM on one backend: the hooks :func:`converge_snapshot` calls, in its order."""

    vm: str = ''  # the VM's name

    @abc.abstractmethod
    def check_task_free(self) -> None:
        """Raise :class:`~._base.errors.TaskConflict` when another live task holds the VM (before any step, check mode too)."""

    @abc.abstractmethod
    def declared(self, params: Dict[str, Any]) -> Dict[str, Any]:
        """The declaration the plan reaches: ``params`` with what the backend decides (libvirt: ``memory`` from the power state)."""

    @abc.abstractmethod
    def safety_name(self, declared: Dict[str, Any]) -> Optional[str]:
        """The name of the safety snapshot a restore takes first, or None (not a restore, declined, or none on this backend)."""

    @abc.abstractmethod
    def plan(self, declared: Dict[str, Any], safety: Optional[str]) -> Tuple[List[SnapshotStep], List[ActualSnapshot]]:
        """``(steps, snapshots observed now)``; raises before anything changes when a step cannot be done."""

    @abc.abstractmethod
    def clear_stale_task(self, check_mode: bool) -> Optional[Dict[str, Any]]:
        """Clear the task a killed snapshot run left (this run has no step); the operation to report, or None."""

    @abc.abstractmethod
    def execute(self, steps: List[SnapshotStep], declared: Dict[str, Any], names_before: List[str]) -> List[Dict[str, Any]]:
        """Run ``steps`` in order under one VM task (nothing when empty); what was done (dicts)."""

    @abc.abstractmethod
    def after(self, name: str) -> Tuple[List[str], Optional[Dict[str, Any]]]:
        """The VM's snapshot names now (sorted) and snapshot ``name`` as the module reports it (None when absent)."""

    @abc.abstractmethod
    def pending(self, declared: Dict[str, Any]) -> Dict[str, Any]:
        """Snapshot ``declared['name']`` as check mode reports it before it is taken (phase Pending)."""

    def shows_restored(self, check_mode: bool, steps: List[SnapshotStep]) -> bool:
        """True when a restored snapshot's phase is reported as Restored (default: the restore ran)."""
        del steps
        return not check_mode

    def result_extra(self) -> Dict[str, Any]:
        """Keys the backend adds to the result (KubeVirt: ``target_vm``)."""
        return {}


def converge_snapshot(backend: SnapshotBackend, params: Dict[str, Any], check_mode: bool) -> Dict[str, Any]:
    """One VM of the snapshot module: refuse, plan, clear a stale task, execute (not in check mode); the result dict."""
    backend.check_task_free()
    declared = backend.declared(params)
    safety = backend.safety_name(declared)
    steps, before = backend.plan(declared, safety)
    steps = add_older_than(steps, before, declared)
    names_before = sorted(snap.name for snap in before)
    operations = operations_of(steps)
    # a killed run's step had finished on the hypervisor: nothing to do but the task it left on the VM
    cleared = None if steps else backend.clear_stale_task(check_mode)
    if not check_mode:
        operations = backend.execute(steps, declared, names_before)
    if cleared:
        operations.append(cleared)
    names_now, found = backend.after(params['name'])
    names_after = predicted_names(names_before, steps) if check_mode else names_now
    snapshot: Dict[str, Any] = {'phase': phase.ABSENT}
    if found is not None and not (check_mode and params['state'] == 'absent'):
        snapshot = found
        if params['state'] == 'restored' and backend.shows_restored(check_mode, steps):
            snapshot['phase'] = phase.RESTORED
    elif check_mode and params['state'] == 'present':
        snapshot = backend.pending(declared)
    result: Dict[str, Any] = {'changed': bool(steps) or bool(cleared), 'operations': operations, 'snapshots': names_after,
                              'snapshot': snapshot, 'diff': {'before': {'snapshots': names_before}, 'after': {'snapshots': names_after}}}
    if safety:
        result['safety_snapshot'] = safety
    result.update(backend.result_extra())
    return result
