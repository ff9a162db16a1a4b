# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt volume module (the runners of volume and volume_info: _common/volume_run.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import volume_run
from ansible_collections.converge.virt.plugins.module_utils._common.volume_args import declared
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_backend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_observe, volume_spec
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.provider import VOLUME_ARGS
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import check_timeout


def info(client, params):
    """volume_info with backend kubevirt: ``(pools, volumes)`` (a namespace has no pools)."""
    return [], volume_observe.report(client, params['namespace'], params['name'])


def _declared(params):
    """The declaration keys of ``params`` that are set, kubevirt options included."""
    out = declared(params)
    out.update((k, params.get(k)) for k in VOLUME_ARGS if params.get(k) is not None)
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


def converge(client, params, specs, check_mode):
    """volume with backend kubevirt: the converge result of ``specs``."""
    wait_timeout = params['wait_timeout']
    return volume_backend.converge_volumes(client, params['namespace'], specs, force=params['force'], check_mode=check_mode,
                                           wait_timeout=volume_backend.DEFAULT_WAIT_TIMEOUT if wait_timeout is None else wait_timeout)
