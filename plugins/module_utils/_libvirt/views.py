# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every state word of one libvirt domain from one observation, for every consumer.

Modules, ``*_info`` modules and inventory plugins all call :func:`libvirt_vm_view`
(and its KubeVirt sibling, :func:`.._kubevirt.views.kubevirt_vm_view`), so a word
the inventory reports is the word a module returns. Pure: the backend passes what it read.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._phase import status as st
from ansible_collections.converge.virt.plugins.module_utils._phase.views import effective_vm_state
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_state import domain_phase_reason, phase_from_domain, power_state_from_libvirt

# task states that expect the domain to start (the status word Starting)
START_TASKS = ('STARTING', 'REBOOTING', 'REBOOTING_HARD', 'RESUMING', 'UNPAUSING', 'RESTORING')


def _grace_seconds(value):
    """A recorded grace period (a number or its text) in seconds; None when absent or unreadable."""
    if isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def libvirt_vm_view(state, reason, metadata=None, acpi=True, managed_save=False, autostart=False, job_active=False, grace_period=None):
    """All state words of a libvirt domain.

    ``state`` / ``reason``: ``dom.state()``; ``metadata``: the converge record
    (vm_state, task_state, task_id ...); ``acpi``: the domain has ACPI;
    ``job_active``: a migration job runs; ``grace_period``: the seconds the last
    stop gave a graceful shutdown before destroying the domain (0: forced at once),
    None to read ``stop_grace_period`` from the record (unknown when absent).
    Returns a dict with power_state, vm_state (as recorded, or inferred when
    there is no record), effective_vm_state, task_state, task_id, status, phase,
    phase_reason (why a final phase is what it is), state and state_reason.
    """
    metadata = metadata or {}
    if grace_period is None:
        grace_period = _grace_seconds(metadata.get('stop_grace_period'))
    power = power_state_from_libvirt(state, reason)
    task_state = metadata.get('task_state') or None
    phase = phase_from_domain(power.state, power.reason, acpi=acpi, previous=s.PHASE_UNSET, grace_period=grace_period)
    active = power.state not in ('shutoff', 'nostate')
    instance = None
    if active:
        instance = st.InstanceView(
            phase=phase, paused=power.state == 'paused' and power.reason != 'migration',
            migrating=job_active or task_state == 'MIGRATING')
    elif s.is_final(phase) and not managed_save:
        instance = st.InstanceView(phase=phase)
    inp = st.StatusInput(
        deletion_requested=task_state == 'DELETING',    # Terminating: before Stopping, so no marked_for_deletion is needed
        instance=instance,
        start_expected=task_state in START_TASKS,
        stop_expected=task_state == 'STOPPING' or power.state == 'shutdown',
        run_strategy='Always' if autostart else 'Manual',
    )
    recorded = metadata.get('vm_state') or None
    shown_phase = phase if active or s.is_final(phase) else s.PHASE_UNSET
    return {
        'power_state': power.power_state,
        'state': power.state,
        'state_reason': power.reason,
        'vm_state': recorded or s.infer_vm_state(power.power_state, managed_save),
        'effective_vm_state': effective_vm_state(recorded, power.power_state, managed_save, task_state),
        'task_state': task_state,
        'task_id': metadata.get('task_id') or None,
        'status': st.printable_status(inp),
        'phase': shown_phase,
        'phase_reason': domain_phase_reason(power.state, power.reason, acpi=acpi, grace_period=grace_period)
        if s.is_final(shown_phase) else None,
    }
