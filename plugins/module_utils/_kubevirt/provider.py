# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt provider: the options only KubeVirt takes (and how the other backends refuse them), its connection, its session.

Imported by every module run (see _common/provider.py): nothing here imports the kubernetes library or another file of this
backend at import time.
"""

from __future__ import annotations

from typing import Any, Dict

from ansible_collections.converge.virt.plugins.module_utils._common.provider import NOT_USED, SET_BACKEND, OptionGroup, Provider, VmDefinition
from ansible_collections.converge.virt.plugins.module_utils._common.volume_options import ACCESS_MODES, VOLUME_MODES

# Argument spec of the KubeVirt connection (documented by the converge.virt.backend fragment).
CONNECTION_ARGS: Dict[str, Dict[str, Any]] = dict(
    kubeconfig=dict(type='path'),
    context=dict(type='str'),
    host=dict(type='str'),
    api_key=dict(type='str', no_log=True),
    ca_cert=dict(type='path'),
    validate_certs=dict(type='bool'),
    namespace=dict(type='str', default='default'),
)
CONNECTION = ('kubeconfig', 'context', 'host', 'api_key', 'ca_cert', 'validate_certs')

# the vm module's definition options only KubeVirt takes: top level, and the sub-options of a disk and an interface
DEFINITION_ARGS = dict(
    spec=dict(type='dict'),
    instancetype=dict(type='str'),
    preference=dict(type='str'),
    data_volume_templates=dict(type='list', elements='dict'),
    labels=dict(type='dict'),
)
DISK_ARGS = dict(name=dict(type='str'), image=dict(type='str'), claim=dict(type='str'), data_volume=dict(type='str'))
INTERFACE_ARGS = dict(name=dict(type='str'))

# the volume module's options only KubeVirt takes (top level and per item; the parser checks the choices again)
VOLUME_ARGS: Dict[str, Dict[str, Any]] = dict(
    data_volume=dict(type='bool'),
    clone_from_datasource=dict(type='str'),
    storage_class=dict(type='str'),
    access_modes=dict(type='list', elements='str', choices=list(ACCESS_MODES)),
    volume_mode=dict(type='str', choices=list(VOLUME_MODES)),
)

# namespace: default is the option's default, so it counts as not given
NAMESPACE: Dict[str, Any] = dict(unset={'namespace': 'default'}, wording={'namespace': '{key}: is a {owner} option and is not used with backend {backend}'})


class KubevirtProvider(Provider):  # pylint: disable=too-few-public-methods
    """KubeVirt: VirtualMachines of a namespace of a Kubernetes cluster."""

    name = 'kubevirt'
    connection_args = CONNECTION_ARGS
    options = {
        'host': OptionGroup(('node',), field=False, required=('node',)),
        'migration_info': OptionGroup(()),
        'migration': OptionGroup(('target_node', 'source_node', 'pending_timeout') + CONNECTION, field=False),
        'snapshot_info': OptionGroup(CONNECTION, refusal=SET_BACKEND),
        'snapshot': OptionGroup(CONNECTION + ('wait_timeout', 'deletion_policy', 'target_vm', 'failure_deadline'), refusal=SET_BACKEND),
        'volume_info': OptionGroup(CONNECTION, refusal=SET_BACKEND),
        'volume': OptionGroup(('wait_timeout',) + CONNECTION, refusal=SET_BACKEND, item_owns=tuple(VOLUME_ARGS), items='volumes'),
        'vm_info': OptionGroup(CONNECTION + ('namespace',), refusal=NOT_USED, **NAMESPACE),
        'vm': OptionGroup(CONNECTION + ('namespace',), refusal=NOT_USED, **NAMESPACE),
        'reconcile': OptionGroup(CONNECTION + ('namespace',), refusal=SET_BACKEND, unset={'namespace': 'default'}),
    }
    vm_definition = VmDefinition(top=tuple(DEFINITION_ARGS), disk_keys=tuple(DISK_ARGS), iface_keys=tuple(INTERFACE_ARGS),
                                 refusal='is a kubevirt option; set backend: kubevirt', args=DEFINITION_ARGS, disk_args=DISK_ARGS,
                                 iface_args=INTERFACE_ARGS)
    volume_args = VOLUME_ARGS

    def session(self, module: Any) -> Any:
        from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import ModuleSession  # pylint: disable=import-outside-toplevel
        return ModuleSession(module)


PROVIDER = KubevirtProvider()
