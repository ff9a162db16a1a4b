# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runner of the reconcile module (selected through _common.registry)."""

from __future__ import annotations

import time

from ansible_collections.converge.virt.plugins.module_utils._common import reconcile_run
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import views as kubevirt_views
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend


def kubevirt_reading(obs):
    """The VM as examine() reads it, from a KubeVirt observation (pure).

    vm_state is the record in the annotations (or the inferred word when there is none);
    power_state is the power KubeVirt carries out (a start or stop under way counts as done),
    the same reading the vm module plans from.
    """
    if not obs.get('exists'):
        return None
    return reconcile_run.reading_of(obs, vm_backend.intended_power(obs), bool(kubevirt_views.kubevirt_metadata(obs.get('vm')).get('vm_state')))


def apply_fix_kubevirt(client, namespace, entry, params):
    """Run the fix of one entry on KubeVirt (the vm backend's converge, or its stale-task recovery); updates it in place."""
    reconcile_run.apply(vm_backend.KubevirtVm(client, namespace, entry['name']), entry, params, vm_backend.converge_vm, vm_backend.KubevirtOptions,
                        kubevirt_reading)


def run_reconcile(module):
    """reconcile with backend kubevirt: every VirtualMachine of the namespace (or the named ones)."""
    namespace = module.params['namespace']
    vms, found, changed = [], [], False
    with kubevirt_client.ModuleSession(module) as session, session.connect() as client:
        snapshot = kobserve.NamespaceSnapshot(client, namespace)
        wanted = set(module.params['name']) if module.params['name'] else None
        readings = [kubevirt_reading(snapshot.observe(name)) for name in snapshot.names() if wanted is None or name in wanted]
        vms = [vm for vm in readings if vm is not None]
        now = time.time()
        found = [entry for entry in (reconcile_run.examine(vm, now, module.params) for vm in vms) if entry]
        changed = reconcile_run.run_fixes(module, found, lambda entry: apply_fix_kubevirt(client, namespace, entry, module.params))
    reconcile_run.finish(module, vms, found, changed, session.redact)
