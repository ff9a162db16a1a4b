# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runner of the vm module (selected through _common.registry; vm_info's runner is in vm_runs.py, apart: its payload stays small)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import spec_of
from ansible_collections.converge.virt.plugins.module_utils._common.vm_run import (
    KUBEVIRT_DEFINITION_ARGS, await_readiness, finish_items, fleet_items, options_from, readiness_wanted, refuse_other_definition)
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration

NO_PORT = ('port is not available on backend kubevirt (the module\'s host is seldom inside the pod network); '
           'wait for address and connect from where the guest is reachable')


def kubevirt_declaration(params, namespace):
    """Validate one kubevirt declaration before anything is touched; return (VmDeclaration, declared manifest, name)."""
    refuse_other_definition(params, 'kubevirt')
    name = params.get('name')
    if not name:
        raise InvalidDeclaration('name', 'is required (or give vms)')
    if params['state'] == 'suspended':
        raise InvalidDeclaration('state', 'suspended is not available on backend kubevirt (use paused or stopped)')
    spec = spec_of(params)
    for key in KUBEVIRT_DEFINITION_ARGS:
        if params.get(key) is not None:
            spec[key] = params[key]
    for key in ('disks', 'interfaces'):
        if params.get(key) is not None:
            spec[key] = [dict((k, v) for k, v in item.items() if v is not None) for item in params[key]]
    declared = vm_backend.declared_vm(spec, namespace)
    if params.get('cloud_init') is not None:
        # pylint: disable-next=import-outside-toplevel
        from ansible_collections.converge.virt.plugins.module_utils._kubevirt import cloud_init as kubevirt_cloud_init
        declared = kubevirt_cloud_init.with_seed(declared, kubevirt_cloud_init.Seed(name, params['cloud_init']))
    decl = VmDeclaration(state=params['state'], autostart=None, restart_on_change=params.get('restart_on_change', False))
    return decl, declared, name


def kubevirt_options(params):
    """Execution options on kubevirt, validated."""
    base = options_from(params)
    if params.get('if_moved') == 'skip':
        raise InvalidDeclaration('if_moved', 'is a libvirt option and is not supported with backend kubevirt (a KubeVirt VM never leaves its cluster)')
    return vm_backend.KubevirtOptions(wait=base.wait, wait_timeout=base.wait_timeout, shutdown_timeout=base.shutdown_timeout,
                                      force_stop=base.force_stop, lock_timeout=base.lock_timeout, delete_volumes=params['delete_volumes'])


def run_vm(module):
    """vm with backend kubevirt: one VirtualMachine or the items of ``vms``, converged through the KubeVirt vm backend."""
    namespace = module.params['namespace']
    with kubevirt_client.ModuleSession(module) as session:
        options = kubevirt_options(module.params)
        refuse_other_definition(module.params, 'kubevirt')
        single = items = None
        if module.params['vms']:
            items = fleet_items(module, lambda params: kubevirt_declaration(params, namespace))
        else:
            single = kubevirt_declaration(module.params, namespace)
        wanted = None if module.check_mode else readiness_wanted(module.params, True, no_port=NO_PORT)
        with session.connect() as client:
            # pylint: disable-next=import-outside-toplevel
            from ansible_collections.converge.virt.plugins.module_utils._kubevirt import readiness as kubevirt_readiness

            def probe_of(name):
                return kubevirt_readiness.probe(client, namespace, name)

            if module.params['vms']:
                changed, results = vm_backend.converge_fleet(client, namespace, items, options, module.check_mode, module.params['parallel'])
                finish_items(module, probe_of, wanted, items, changed, results)
            decl, declared, name = single
            changed, result = vm_backend.converge_vm(vm_backend.KubevirtVm(client, namespace, name), decl, declared, options, module.check_mode)
            if wanted:
                await_readiness(module, probe_of, wanted, changed, result)
    module.exit_json(changed=changed, **result)
