# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vm_info module on every backend: its filters (status, vm_state) and its one runner."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._phase.states import VM_STATES
from ansible_collections.converge.virt.plugins.module_utils._phase.status import STATUSES

FILTERS = (('status', STATUSES), ('vm_state', VM_STATES))


def check_filters(params):
    """Raises :class:`InvalidDeclaration` for a filter word that is not a status / vm_state."""
    for field, words in FILTERS:
        unknown = [word for word in params[field] or [] if word not in words]
        if unknown:
            raise InvalidDeclaration(field, '%r is not one of %s' % (unknown[0], ', '.join(words)))


def exit_with_vms(module, vms):
    """Exits the module with the views that pass its filters, sorted by name."""
    for field, _words in FILTERS:
        if module.params[field]:
            vms = [vm for vm in vms if vm.get(field) in module.params[field]]
    module.exit_json(changed=False, vms=sorted(vms, key=lambda vm: vm['name']))


def run_vm_info(module, provider, backend):
    """vm_info: the backend's VMs (``backend.vms(connection, params)``: public views), filtered and sorted by name."""
    with provider.session(module) as session, session.connect() as connection:
        vms = backend.vms(connection, module.params)
    exit_with_vms(module, vms)
