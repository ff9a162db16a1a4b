# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt runners of the vm_info module (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.vm_filters import exit_with_vms
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._libvirt.fleet import list_vms
from ansible_collections.converge.virt.plugins.module_utils._phase.views import absent_view


def run_vm_info(module):
    """vm_info with backend libvirt: the domains of the host (a named one that does not exist listed as absent)."""
    with ModuleSession(module) as session, session.connect() as connection:
        vms = list_vms(connection, names=module.params['name'])
    if module.params['name']:
        found = set(vm['name'] for vm in vms)
        for name in module.params['name']:
            if name not in found:
                missing = dict(name=name, exists=False)
                missing.update(absent_view())
                missing.pop('effective_vm_state', None)
                vms.append(missing)
    exit_with_vms(module, vms)
