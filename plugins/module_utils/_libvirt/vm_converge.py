# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt runner of the vm module (selected through _common.registry; vm_info's runner is in vm_runs.py, apart: its payload stays small)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import spec_of
from ansible_collections.converge.virt.plugins.module_utils._common.vm_run import (
    await_readiness, finish_items, fleet_items, options_from, readiness_wanted, refuse_other_definition)
from ansible_collections.converge.virt.plugins.module_utils._common.driver import run_fleet
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._libvirt import cloud_init as libvirt_cloud_init, domain_read, domain_spec
from ansible_collections.converge.virt.plugins.module_utils._libvirt import readiness as libvirt_readiness
from ansible_collections.converge.virt.plugins.module_utils._libvirt.vm_backend import LibvirtVm, bulk_snapshot, converge_vm
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration


def declaration(params):
    """Validate one declaration before anything is touched; return (VmDeclaration, spec, name)."""
    refuse_other_definition(params, 'libvirt')
    spec = spec_of(params)
    try:
        domain_spec.normalize_spec(spec)
    except ValueError as exc:
        field, _sep, reason = str(exc).partition(':')
        raise InvalidDeclaration(field.strip(), reason.strip() or str(exc))
    name = params.get('name')
    if params.get('xml'):
        try:
            name = domain_read.domain_model(params['xml'])['name']
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidDeclaration('xml', 'not a domain XML with a name (%s)' % exc)
        if params.get('name') and params['name'] != name:
            raise InvalidDeclaration('name', 'differs from the name in xml (%r)' % name)
        spec = {'xml': params['xml'], 'autostart': params.get('autostart')}
    if not name:
        raise InvalidDeclaration('name', 'is required (or give xml or vms)')
    if params.get('cloud_init') is not None:
        if params.get('xml'):
            raise InvalidDeclaration('cloud_init', 'cannot be combined with xml (write the seed cdrom into the XML, or use the simple options)')
        seed = libvirt_cloud_init.Seed(name, params['cloud_init'], spec.get('disks'))
        spec = libvirt_cloud_init.with_seed_disk(spec, seed)
        spec[libvirt_cloud_init.SPEC_KEY] = seed
    decl = VmDeclaration(state=params['state'], autostart=params.get('autostart'), restart_on_change=params.get('restart_on_change', False))
    return decl, spec, name


def run_vm(module):
    """vm with backend libvirt: one VM (``name`` or ``xml``) or the items of ``vms``, converged through the libvirt vm backend."""
    with ModuleSession(module) as session:
        options = options_from(module.params)
        single = None if module.params['vms'] else declaration(module.params)
        wanted = None if module.check_mode else readiness_wanted(module.params, module.params.get('guest_agent'))
        with session.connect() as connection:
            def probe_of(name):
                dom = connection.conn.lookupByName(name)
                return lambda: libvirt_readiness.probe(dom)

            if single is None:
                items = fleet_items(module, declaration)
                changed, results = run_fleet(items, lambda name: LibvirtVm(connection, name), options, module.check_mode, module.params['parallel'],
                                             snapshot=bulk_snapshot(connection), redact=connection.redact)
                finish_items(module, probe_of, wanted, items, changed, results)
            decl, spec, name = single
            changed, result = converge_vm(LibvirtVm(connection, name), decl, spec, options, module.check_mode)
            if wanted:
                await_readiness(module, probe_of, wanted, changed, result)
    module.exit_json(changed=changed, **result)
