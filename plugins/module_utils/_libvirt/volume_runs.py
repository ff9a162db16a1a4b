# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt volume module (the runners of volume and volume_info: _common/volume_run.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import volume_run
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.volume_args import declared
from ansible_collections.converge.virt.plugins.module_utils._libvirt import attachments, storage
from ansible_collections.converge.virt.plugins.module_utils._libvirt import storage_spec
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import check_timeout


def report(connection, pool, names):
    """``(pools, volumes)`` of the connection."""
    observer = storage.StorageObserver(connection)
    if pool is not None:
        if '/' in pool or any(ord(char) < 32 for char in pool):
            raise InvalidDeclaration('pool', '%r is not a valid pool name (no slash, no control character)' % pool)
        if observer.pool(pool) is None:
            raise InvalidDeclaration('pool', 'storage pool %s does not exist on this connection' % pool)
        pools = [pool]
    else:
        if names:
            raise InvalidDeclaration('name', 'needs pool')
        pools = observer.pool_names()
    views = attachments.observe_domains(connection)
    all_atts = attachments.actual_attachments(views, observer)
    users = attachments.users_of(all_atts)
    pool_states, volumes = [], []
    for pool_name in pools:
        pool_states.append(observer.pool_state(pool_name))
        wanted = names if names else observer.volume_names(pool_name)
        for name in wanted:
            key = storage_spec.volume_key(pool_name, name)
            info = observer.volume(key)
            if info is None:
                volumes.append({'key': key, 'pool': pool_name, 'name': name, 'exists': False})
                continue
            entry = storage.public_volume(info, users.get(key, ()), attachments.public_attachments(all_atts, key))
            entry['exists'] = True
            volumes.append(entry)
    return pool_states, volumes


def info(connection, params):
    """volume_info with backend libvirt: ``(pools, volumes)``."""
    return report(connection, params['pool'], params['name'])


def declarations(params):
    """volume: validate every declaration before anything is touched; return normalized specs."""
    check_timeout('detach_timeout', params['detach_timeout'])
    if params['volumes'] is None:
        return [storage_spec.normalize_volume(declared(params), 'volume')]
    defaults = volume_run.fleet_defaults(params, declared)
    specs = [storage_spec.normalize_volume(declared(item), 'volumes[%d]' % index, defaults) for index, item in enumerate(params['volumes'])]
    volume_run.declared_twice([s['key'] for s in specs])
    return specs


def converge(connection, params, specs, check_mode):
    """volume with backend libvirt: the converge result of ``specs``."""
    return attachments.converge_volumes(connection, specs, force=params['force'], check_mode=check_mode, detach_timeout=params['detach_timeout'])
