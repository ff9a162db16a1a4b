# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runners of the volume and volume_info modules (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import volume_run
from ansible_collections.converge.virt.plugins.module_utils._common.volume_args import declared
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_backend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_observe, volume_spec
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import check_timeout


def run_volume_info(module):
    """volume_info with backend kubevirt."""
    with kubevirt_client.ModuleSession(module) as session:
        with session.connect() as client:
            volumes = volume_observe.report(client, module.params['namespace'], module.params['name'])
    module.exit_json(changed=False, pools=[], volumes=volumes)


def _declared(params):
    """The declaration keys of ``params`` that are set, kubevirt options included."""
    out = declared(params)
    out.update((k, params.get(k)) for k in volume_run.KUBEVIRT_VOLUME_OPTIONS if params.get(k) is not None)
    return out


def declarations(params):
    """volume: validate every kubevirt declaration before anything is touched; return normalized specs."""
    check_timeout('detach_timeout', params['detach_timeout'])
    check_timeout('wait_timeout', params['wait_timeout'])
    if params['volumes'] is None:
        return [volume_spec.normalize_volume(_declared(params))]
    defaults = volume_run.fleet_defaults(params, _declared)
    specs = [volume_spec.normalize_volume(_declared(item), 'volumes[%d].' % index, defaults)
             for index, item in enumerate(params['volumes'])]
    volume_run.declared_twice([s['key'] for s in specs])
    return specs


def run_volume(module):
    """volume with backend kubevirt."""
    with kubevirt_client.ModuleSession(module) as session:
        specs = declarations(module.params)
        wait_timeout = module.params['wait_timeout']
        with session.connect() as client:
            result = volume_backend.converge_volumes(client, module.params['namespace'], specs, force=module.params['force'],
                                                     check_mode=module.check_mode,
                                                     wait_timeout=volume_backend.DEFAULT_WAIT_TIMEOUT if wait_timeout is None else wait_timeout)
    volume_run.finish(module, result, session.redact)
