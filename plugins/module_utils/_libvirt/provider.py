# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt provider: the options only libvirt takes (and how the other backends refuse them), its connection, its session.

Imported by every module run (see _common/provider.py): nothing here imports libvirt-python or another file of this backend
at import time.
"""

from __future__ import annotations

from typing import Any, Dict

from ansible_collections.converge.virt.plugins.module_utils._common.provider import NOT_USED, OptionGroup, Provider, VmDefinition
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import LIBVIRT_DEFINITION_KEYS
from ansible_collections.converge.virt.plugins.module_utils._common.volume_options import LIBVIRT_ONLY

# Argument spec of the libvirt connection (documented by the converge.virt.backend fragment).
CONNECTION_ARGS: Dict[str, Dict[str, Any]] = dict(
    uri=dict(type='str', fallback=(lambda: None, [])),
    username=dict(type='str'),
    password=dict(type='str', no_log=True),
)
CONNECTION = tuple(CONNECTION_ARGS)


class LibvirtProvider(Provider):  # pylint: disable=too-few-public-methods
    """libvirt: a hypervisor host reached by a libvirt URI."""

    name = 'libvirt'
    connection_args = CONNECTION_ARGS
    # resource -> the options only libvirt takes (the other backends refuse them, in this order, with this wording)
    options = {
        'host': OptionGroup(CONNECTION, field=False),
        'migration_info': OptionGroup(('uri', 'uris', 'username', 'password'), field=False),
        'migration': OptionGroup(CONNECTION + ('target_uri', 'target_uris', 'target_username', 'target_password', 'bandwidth',
                                               'max_downtime', 'completion_timeout')),
        'snapshot_info': OptionGroup(CONNECTION, required=('vm',)),
        'snapshot': OptionGroup(CONNECTION + ('memory', 'children'), unset={'children': False},
                                wording={'children': '{key}: is a {owner} option (KubeVirt snapshots have no parent and no children)'}),
        'volume_info': OptionGroup(('pool',) + CONNECTION),
        'volume': OptionGroup((), item_owns=LIBVIRT_ONLY, items='volumes'),
        'vm_info': OptionGroup(CONNECTION, refusal=NOT_USED),
        'vm': OptionGroup(CONNECTION, refusal=NOT_USED),
        'reconcile': OptionGroup(CONNECTION),
    }
    vm_definition = VmDefinition(top=LIBVIRT_DEFINITION_KEYS, refusal='is a libvirt option and is not supported with backend {backend}')

    def session(self, module: Any) -> Any:
        from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession  # pylint: disable=import-outside-toplevel
        return ModuleSession(module)


PROVIDER = LibvirtProvider()
