# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's VirtualMachineSnapshot / VirtualMachineRestore status dicts onto the snapshot phases of ``_phase/snapshots.py``.

Apart from :mod:`views` so that what observes VMs does not load the snapshot phase layer. Pure: no kubernetes import.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as sn

# status.phase of a VirtualMachineSnapshot (snapshot.kubevirt.io/v1beta1) onto the neutral snapshot phases of
# _phase/snapshots.py; Succeeded waits for readyToUse (see phase_from_kubevirt_snapshot)
KUBEVIRT_SNAPSHOT_PHASES = {
    '': sn.PENDING,
    'Unknown': sn.PENDING,
    'InProgress': sn.CREATING,
    'Succeeded': sn.READY,
    'Failed': sn.FAILED,
}


def phase_from_kubevirt_snapshot(status, deleting=False, now=None, created_at=None, failure_deadline=None):
    """Our phase of a VirtualMachineSnapshot from its ``status`` dict (pure).

    - being deleted (``metadata.deletionTimestamp``): Deleting;
    - ``phase`` Failed: Failed; Succeeded and ``readyToUse``: Ready; Succeeded but not yet
      ``readyToUse`` (the content is still being written): Creating;
    - InProgress past ``failureDeadline`` seconds after ``created_at`` (``now`` given): Failed, as the
      snapshot controller would mark it;
    - no status or no phase yet: Pending.
    """
    if deleting:
        return sn.DELETING
    status = status or {}
    phase = KUBEVIRT_SNAPSHOT_PHASES.get(status.get('phase') or '', sn.PENDING)
    if phase == sn.READY and not status.get('readyToUse'):
        phase = sn.CREATING
    if phase in (sn.PENDING, sn.CREATING) and None not in (now, created_at, failure_deadline) and now - created_at > failure_deadline:
        return sn.FAILED
    return phase


def consistency_from_kubevirt(status):
    """Consistency of a VirtualMachineSnapshot from ``status.indications``.

    ``GuestAgent`` (filesystems frozen through the agent) is filesystem-consistent; ``NoGuestAgent``,
    ``Online`` alone or no indication is crash-consistent (offline snapshots are consistent on disk, but
    we report only what was proven).
    """
    indications = (status or {}).get('indications') or ()
    return sn.FS_CONSISTENT if 'GuestAgent' in indications else sn.CRASH_CONSISTENT


def phase_from_kubevirt_restore(status, deleting=False):
    """Our restore phase of a VirtualMachineRestore from its ``status``: Restored when ``complete``, Failed when a
    ``Failure`` condition is True (or ``Ready`` is False with reason ``Failed``), Restoring otherwise."""
    if deleting:
        return sn.DELETING
    status = status or {}
    if status.get('complete'):
        return sn.RESTORED
    for cond in status.get('conditions') or ():
        if cond.get('type') == 'Failure' and str(cond.get('status')) == 'True':
            return sn.FAILED
        if cond.get('type') == 'Ready' and str(cond.get('status')) == 'False' and cond.get('reason') == 'Failed':
            return sn.FAILED
    return sn.RESTORING
