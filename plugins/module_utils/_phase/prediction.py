# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VM a check-mode run predicts: every state word from the plan, none left over from the observation.

A check-mode result used to carry the planned ``vm_state`` next to the observed ``power_state``, ``status`` and
``phase`` (``vm_state: STOPPED`` with ``status: Running``). :func:`predict_view` gives every word the value a real
run reports once the planned actions are done, and leaves null what only the run can tell (the final phase of a
stopped guest depends on how it stopped; the new instance's uid, libvirt's state reason). The observed VM is
returned separately by the modules (``observed``). Pure.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

# actions after which the hypervisor's words change (update only rewrites the definition)
POWER_ACTIONS = ('create', 'start', 'stop', 'reboot_soft', 'reboot_hard', 'pause', 'unpause', 'suspend', 'resume', 'delete')

# vm_state once the plan ran -> (power_state, status, phase); None: not known before the run
PREDICTED_WORDS = {
    s.ACTIVE: (s.RUNNING, 'Running', s.PHASE_RUNNING),
    s.VM_PAUSED: (s.PAUSED, 'Paused', s.PHASE_RUNNING),
    s.STOPPED: (s.SHUTDOWN, 'Stopped', None),
    s.VM_SUSPENDED: (s.SHUTDOWN, 'Stopped', None),
    s.DELETED: (s.NOSTATE, None, None),
}

# observed details that a power action makes stale: null in a prediction (printable_status is KubeVirt's own word, set
# by its controller when it gets there)
RUN_ONLY_FIELDS = ('phase_reason', 'state', 'state_reason', 'ready', 'message', 'vmi_uid', 'node', 'printable_status')


def predict_view(observed: Dict[str, Any], steps: Sequence[Any], vm_state: Optional[str] = None) -> Dict[str, Any]:
    """The VM ``observed`` (a module's public view) once ``steps`` (plan steps or their dicts) ran.

    ``vm_state`` overrides the plan's last vm_state (a recorded drift). Without a power action the hypervisor's words
    stay as observed and only ``vm_state`` (and ``exists``) follow the plan.
    """
    predicted = dict(observed)
    actions = [step['action'] if isinstance(step, dict) else step.action for step in steps]
    if steps:
        last = steps[-1]
        after = last['vm_state_after'] if isinstance(last, dict) else last.vm_state_after
        predicted['vm_state'] = vm_state or after
        predicted['exists'] = actions[-1] != 'delete'
    elif vm_state:
        predicted['vm_state'] = vm_state
    predicted['task_state'] = None
    if not any(action in POWER_ACTIONS for action in actions):
        return predicted
    power, status, phase = PREDICTED_WORDS.get(predicted['vm_state'], (None, None, None))
    predicted.update(power_state=power, status=status, phase=phase)
    for key in RUN_ONLY_FIELDS:
        if key in predicted:
            predicted[key] = None
    if 'managed_save' in predicted:
        predicted['managed_save'] = predicted['vm_state'] == s.VM_SUSPENDED
    return predicted
