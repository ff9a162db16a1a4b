# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt runner of the reconcile module (selected through _common.registry)."""

from __future__ import annotations

import time

from ansible_collections.converge.virt.plugins.module_utils._common import reconcile_run
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._libvirt.fleet import list_vms
from ansible_collections.converge.virt.plugins.module_utils._libvirt.vm_backend import LibvirtVm, VmOptions, converge_vm


def libvirt_reading(obs):
    """The VM as examine() reads it, from one libvirt observation (the same words as the bulk listing; pure)."""
    return reconcile_run.reading_of(obs, obs.get('power_state'), bool(obs.get('recorded_vm_state')))


def apply_fix(connection, entry, params):
    """Run the fix of one entry on libvirt; updates it in place."""
    reconcile_run.apply(LibvirtVm(connection, entry['name']), entry, params, converge_vm, VmOptions, libvirt_reading)


def run_reconcile(module):
    """reconcile with backend libvirt: the domains of the host (or the named ones), from one bulk listing."""
    with ModuleSession(module) as session, session.connect() as connection:
        vms = list_vms(connection, names=module.params['name'])
        now = time.time()
        found = [entry for entry in (reconcile_run.examine(vm, now, module.params) for vm in vms) if entry]
        changed = reconcile_run.run_fixes(module, found, lambda entry: apply_fix(connection, entry, module.params))
    reconcile_run.finish(module, vms, found, changed, session.redact)
