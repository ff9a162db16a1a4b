# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt vm module (the vm module's runner is _common/vm_run.run_vm; what it asks of this module: _libvirt/vm_converge.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import spec_of
from ansible_collections.converge.virt.plugins.module_utils._common.vm_run import options_from
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_manifest
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.provider import DEFINITION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration

NO_PORT = ('port is not available on backend kubevirt (the module\'s host is seldom inside the pod network); '
           'wait for address and connect from where the guest is reachable')


def kubevirt_declaration(params, namespace):
    """Validate one kubevirt declaration before anything is touched; return (VmDeclaration, declared manifest, name)."""
    name = params.get('name')
    if not name:
        raise InvalidDeclaration('name', 'is required (or give vms)')
    if params['state'] == 'suspended':
        raise InvalidDeclaration('state', 'suspended is not available on backend kubevirt (use paused or stopped)')
    spec = spec_of(params)
    for key in DEFINITION_ARGS:
        if params.get(key) is not None:
            spec[key] = params[key]
    for key in ('disks', 'interfaces'):
        if params.get(key) is not None:
            spec[key] = [dict((k, v) for k, v in item.items() if v is not None) for item in params[key]]
    declared = vm_manifest.declared_vm(spec, namespace)
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


def declaration(params, task):
    """One declaration (the task's or an item of its ``vms``) in the namespace of ``task`` (see :func:`kubevirt_declaration`)."""
    return kubevirt_declaration(params, task['namespace'])


options = kubevirt_options  # pylint: disable=invalid-name


def agent(params):  # pylint: disable=unused-argument
    """A VirtualMachineInstance reports its guest agent itself: wait_for agent is checked against the guest."""
    return True


def vm(client, params, name):
    """The :class:`~.vm_backend.KubevirtVm` ``name`` of the task's namespace."""
    return vm_backend.KubevirtVm(client, params['namespace'], name)


def fleet_snapshot(client, params):
    """Every VM of the namespace, read once for a fleet."""
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe  # pylint: disable=import-outside-toplevel
    return observe.NamespaceSnapshot(client, params['namespace'])


def probe(client, params, name):
    """The readiness probe of VM ``name``."""
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import readiness as kubevirt_readiness
    return kubevirt_readiness.probe(client, params['namespace'], name)
