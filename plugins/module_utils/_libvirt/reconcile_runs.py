# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt reconcile module (its runner: _common/reconcile_run.run_reconcile)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import reconcile_run
from ansible_collections.converge.virt.plugins.module_utils._libvirt.fleet import list_vms
from ansible_collections.converge.virt.plugins.module_utils._libvirt.vm_backend import LibvirtVm, VmOptions, converge_vm


def libvirt_reading(obs):
    """The VM as examine() reads it, from one libvirt observation (the same words as the bulk listing; pure)."""
    return reconcile_run.reading_of(obs, obs.get('power_state'), bool(obs.get('recorded_vm_state')))


def readings(connection, params):
    """The domains of the host (or the named ones), from one bulk listing."""
    return list_vms(connection, names=params['name'])


def fix(connection, entry, params):
    """Run the fix of one entry on libvirt; updates it in place."""
    reconcile_run.apply(LibvirtVm(connection, entry['name']), entry, params, converge_vm, VmOptions, libvirt_reading)
