# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The volume module of the ``memory`` backend: what _common/volume_run.run_volume asks of a backend."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import volume_driver
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_backend import InMemoryVolumes


def _spec(params):
    attachments = params.get('attachments')
    return {'key': params['name'], 'state': params.get('state') or 'present', 'capacity': params.get('capacity'),
            'attachments': None if attachments is None else [{'vm': att['vm'], 'target': att['dev']} for att in attachments]}


def declarations(params):
    if params['volumes'] is None:
        return [_spec(params)]
    return [_spec(item) for item in params['volumes']]


def converge(world, params, specs, check_mode):
    return volume_driver.converge_volumes(InMemoryVolumes(world.volumes), specs, force=params['force'], check_mode=check_mode)


def info(world, params):  # pylint: disable=unused-argument
    return [], [{'key': key, 'capacity': capacity, 'exists': True} for key, capacity in sorted(world.volumes.volumes.items())]
