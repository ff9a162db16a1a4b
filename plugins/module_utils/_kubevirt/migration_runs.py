# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runners of the host and migration_info modules (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.errors import ConvergeError
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb


def run_host(module):
    """host with backend kubevirt: cordon / taint / uncordon a node."""
    params = module.params
    if not params['node']:
        module.fail_json(msg='node: is required with backend kubevirt')
    try:
        kubevirt_client.check_node_name(params['node'])
    except ConvergeError as exc:
        module.fail_json(**exc.to_result())
    state = params['state']
    with kubevirt_client.ModuleSession(module) as session, session.connect() as client:
        node = kmb.read_node(client, params['node'])
        if node is None:
            module.fail_json(msg='node: no node called %r in the cluster' % params['node'])
        before = kmb.node_draining(node)
        changed = False
        if state == 'drained':
            changed = kmb.set_drain(client, params['node'], params['reason'], params['taint'], kmb.owner_id(), check_mode=module.check_mode)
        elif state == 'active':
            changed = kmb.clear_drain(client, params['node'], check_mode=module.check_mode)
        host = kmb.node_summary(client, kmb.read_node(client, params['node']), params['namespace'])
        if module.check_mode and changed:
            host['draining'] = state == 'drained'
    diff = {'before': {'draining': before}, 'after': {'draining': host['draining']}}
    module.exit_json(changed=changed, host=host, diff=diff)


def run_migration_info(module):
    """migration_info with backend kubevirt."""
    params = module.params
    with kubevirt_client.ModuleSession(module) as session, session.connect() as client:
        migrations = kmb.migrations_info(client, params['namespace'], params['name'])
    module.exit_json(changed=False, migrations=migrations, hosts=[{'namespace': params['namespace'], 'ok': True}])
