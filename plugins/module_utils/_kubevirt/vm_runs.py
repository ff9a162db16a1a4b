# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runners of the vm_info module (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.vm_filters import exit_with_vms
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kubevirt_observe


def run_vm_info(module):
    """vm_info with backend kubevirt: every VM of the namespace (or only the named ones) with the state words."""
    with kubevirt_client.ModuleSession(module) as session, session.connect() as client:
        snapshot = kubevirt_observe.NamespaceSnapshot(client, module.params['namespace'])
        names = module.params['name'] or snapshot.names()
        vms = []
        for name in names:
            view = kubevirt_observe.public_view(snapshot.observe(name))
            view.pop('effective_vm_state', None)
            vms.append(view)
    exit_with_vms(module, vms)
