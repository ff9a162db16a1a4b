# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt vm_info module (its runner: _common/vm_filters.run_vm_info)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kubevirt_observe


def vms(client, params):
    """vm_info with backend kubevirt: every VM of the namespace (or only the named ones) with the state words."""
    snapshot = kubevirt_observe.NamespaceSnapshot(client, params['namespace'])
    views = []
    for name in params['name'] or snapshot.names():
        view = kubevirt_observe.public_view(snapshot.observe(name))
        view.pop('effective_vm_state', None)
        views.append(view)
    return views
