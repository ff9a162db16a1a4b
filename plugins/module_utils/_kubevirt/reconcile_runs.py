# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt reconcile module (its runner: _common/reconcile_run.run_reconcile)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import reconcile_run
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


def readings(client, params):
    """Every VirtualMachine of the namespace (or the named ones) as examine() reads it, from one namespace snapshot."""
    snapshot = kobserve.NamespaceSnapshot(client, params['namespace'])
    wanted = set(params['name']) if params['name'] else None
    found = [kubevirt_reading(snapshot.observe(name)) for name in snapshot.names() if wanted is None or name in wanted]
    return [vm for vm in found if vm is not None]


def fix(client, entry, params):
    """Run the fix of one entry (see :func:`apply_fix_kubevirt`)."""
    apply_fix_kubevirt(client, params['namespace'], entry, params)
