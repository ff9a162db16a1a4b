# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every state word of one VM from one observation, for every consumer.

Modules, ``*_info`` modules and inventory plugins all call :func:`libvirt_vm_view`
(and its KubeVirt sibling), so a word the inventory reports is the word a
module returns. Pure: the backend passes what it read.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase import status as st

# recorded vm_states that the hypervisor's word never overrides
STICKY_VM_STATES = (s.ERROR, s.RESCUED, s.RESIZED, s.SOFT_DELETED, s.BUILDING)
START_TASKS = ('STARTING', 'REBOOTING', 'RESUMING', 'UNPAUSING', 'RESTORING')


def effective_vm_state(recorded, power_state, managed_save=False, task_state=None):
    """The vm_state a new task starts from: the record, unless the hypervisor contradicts it.

    power_state is authoritative (Nova); with no task in flight, a record the
    power-sync table does not find in sync is replaced by the state read off
    the hypervisor (the guest shut itself down: STOPPED). Sticky states
    (ERROR, RESCUED, ...) are kept; an unrecorded VM gets the inferred state.
    """
    inferred = s.infer_vm_state(power_state, managed_save)
    if not recorded:
        return inferred
    if recorded in STICKY_VM_STATES or task_state is not None:
        return recorded
    if recorded == s.VM_SUSPENDED:
        return recorded if managed_save else inferred
    decision = reconcile.power_sync_decision(recorded, power_state)
    return recorded if decision.action == reconcile.IN_SYNC else inferred


def libvirt_vm_view(state, reason, metadata=None, acpi=True, managed_save=False, autostart=False, job_active=False):
    """All state words of a libvirt domain.

    ``state`` / ``reason``: ``dom.state()``; ``metadata``: the converge record
    (vm_state, task_state, task_id ...); ``acpi``: the domain has ACPI;
    ``job_active``: a migration job runs. Returns a dict with power_state,
    vm_state (as recorded, or inferred when there is no record),
    effective_vm_state, task_state, task_id, status, phase, state and
    state_reason.
    """
    metadata = metadata or {}
    power = s.power_state_from_libvirt(state, reason)
    task_state = metadata.get('task_state') or None
    phase = s.phase_from_domain(power.state, power.reason, acpi=acpi, previous=s.PHASE_UNSET)
    active = power.state not in ('shutoff', 'nostate')
    instance = None
    if active:
        instance = st.InstanceView(
            phase=phase, paused=power.state == 'paused' and power.reason != 'migration',
            migrating=job_active or task_state == 'MIGRATING', marked_for_deletion=task_state == 'DELETING')
    elif s.is_final(phase) and not managed_save:
        instance = st.InstanceView(phase=phase)
    inp = st.StatusInput(
        deletion_requested=task_state == 'DELETING',
        instance=instance,
        start_expected=task_state in START_TASKS,
        stop_expected=task_state == 'STOPPING' or power.state == 'shutdown',
        run_strategy='Always' if autostart else 'Manual',
    )
    recorded = metadata.get('vm_state') or None
    return {
        'power_state': power.power_state,
        'state': power.state,
        'state_reason': power.reason,
        'vm_state': recorded or s.infer_vm_state(power.power_state, managed_save),
        'effective_vm_state': effective_vm_state(recorded, power.power_state, managed_save, task_state),
        'task_state': task_state,
        'task_id': metadata.get('task_id') or None,
        'status': st.printable_status(inp),
        'phase': phase if active or s.is_final(phase) else s.PHASE_UNSET,
    }


def absent_view():
    """The words for a VM that does not exist."""
    return {'power_state': s.NOSTATE, 'state': None, 'state_reason': None, 'vm_state': s.DELETED, 'effective_vm_state': s.DELETED,
            'task_state': None, 'task_id': None, 'status': None, 'phase': None}
