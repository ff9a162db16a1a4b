# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runners of the volume_info module (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_backend


def run_volume_info(module):
    """volume_info with backend kubevirt."""
    with kubevirt_client.ModuleSession(module) as session:
        with session.connect() as client:
            volumes = volume_backend.report(client, module.params['namespace'], module.params['name'])
    module.exit_json(changed=False, pools=[], volumes=volumes)
