# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt vm_info module (its runner: _common/vm_filters.run_vm_info)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._libvirt import departures
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.fleet import list_vms
from ansible_collections.converge.virt.plugins.module_utils._phase.views import absent_view


def vms(connection, params):
    """vm_info with backend libvirt: the domains of the host (a named one that does not exist listed as absent).

    A VM that migrated away from the host (a departure record, see _libvirt/departures.py) carries ``moved_to`` and
    ``departure``: listed when named though it is not defined here any more, and on the copy a migration with
    ``undefine_source: false`` left behind.
    """
    views = list_vms(connection, names=params['name'])
    try:
        records = departures.departures(connection.conn)
    except libvirt.libvirtError as exc:
        raise connection.error(exc, 'cannot read the departure records')
    if params['name']:
        found = set(vm['name'] for vm in views)
        for name in params['name']:
            if name not in found:
                missing = dict(name=name, exists=False)
                missing.update(absent_view())
                missing.pop('effective_vm_state', None)
                views.append(missing)
    for vm in views:
        record = records.get(vm['name'])
        if record and not (vm.get('exists') and vm.get('state') in departures.RUNS_HERE_WORDS):
            vm.update(moved_to=record.get('target'), departure=dict(record))
    return views
