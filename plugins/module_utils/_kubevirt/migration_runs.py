# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt runners of the host, migration and migration_info modules (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import migration_run as common
from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.host_driver import HostBackend, converge_host
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb


class KubevirtNode(HostBackend):
    """A node of the cluster; drained = cordoned (and tainted with ``taint``), marked with the reason and this run."""

    def __init__(self, client, name, node, taint, namespace):  # pylint: disable=too-many-arguments
        self.client = client
        self.name = name
        self.node = node        # as the caller read it; read again for the summary
        self.taint = taint
        self.namespace = namespace

    def draining(self):
        return kmb.node_draining(self.node)

    def drain(self, reason, check_mode):
        return kmb.set_drain(self.client, self.name, reason, self.taint, kmb.owner_id(), check_mode=check_mode)

    def undrain(self, check_mode):
        return kmb.clear_drain(self.client, self.name, check_mode=check_mode)

    def summary(self):
        return kmb.node_summary(self.client, kmb.read_node(self.client, self.name), self.namespace)


def run_host(module):
    """host with backend kubevirt: cordon / taint / uncordon a node."""
    params = module.params
    if not params['node']:
        module.fail_json(msg='node: is required with backend kubevirt')
    try:
        kubevirt_client.check_node_name(params['node'])
    except ConvergeError as exc:
        module.fail_json(**exc.to_result())
    with kubevirt_client.ModuleSession(module) as session, session.connect() as client:
        node = kmb.read_node(client, params['node'])
        if node is None:
            module.fail_json(msg='node: no node called %r in the cluster' % params['node'])
        changed, result = converge_host(KubevirtNode(client, params['node'], node, params['taint'], params['namespace']),
                                        params['state'], params['reason'], module.check_mode)
    module.exit_json(changed=changed, **result)


def run_migration_info(module):
    """migration_info with backend kubevirt."""
    params = module.params
    with kubevirt_client.ModuleSession(module) as session, session.connect() as client:
        migrations = kmb.migrations_info(client, params['namespace'], params['name'])
    module.exit_json(changed=False, migrations=migrations, hosts=[{'namespace': params['namespace'], 'ok': True}])


# libvirt settings whose KubeVirt counterpart is cluster-wide policy: only their defaults are accepted with backend kubevirt
POLICY_DEFAULTS = (('auto_converge', False), ('post_copy', False), ('completion_action', 'abort'), ('copy_storage', False),
                   ('persistent', True), ('undefine_source', True), ('peer_to_peer', True))


def options_from(params):
    """Validated :class:`KubevirtMigrationOptions` (the libvirt-only options are refused by the registry first)."""
    if params['mode'] != 'live':
        raise InvalidDeclaration('mode', 'KubeVirt migrates running instances only (live); a stopped VM has no instance to move')
    for key, default in POLICY_DEFAULTS:
        if params.get(key) != default:
            raise InvalidDeclaration(key, 'is not a per-migration setting on KubeVirt (a MigrationPolicy or the KubeVirt CR migrations '
                                          'configuration sets it cluster-wide); leave it at %r with backend kubevirt' % (default,))
    common.check_list_form(params)
    if params['name'] is not None:
        if '/' in params['name']:
            raise InvalidDeclaration('name', 'is the name of a VirtualMachine in namespace (no slash), got %r' % params['name'])
        kmb.split_name(params['name'], params['namespace'], 'name')
    for index, entry in enumerate(params['names'] or []):
        kmb.split_name(entry, params['namespace'], 'names[%d]' % index)
    return kmb.validate_options(kmb.KubevirtMigrationOptions(
        target_node=params['target_node'], source_node=params['source_node'], wait_timeout=params['wait_timeout'],
        pending_timeout=params['pending_timeout']))


def run_migration(module):
    """migration with backend kubevirt: one VM (``name``) or a list (``names``)."""
    params = module.params
    with kubevirt_client.ModuleSession(module) as session:
        opts = options_from(params)
        with session.connect() as client:
            if params['names'] is not None:
                common.exit_many(module, session, kmb.migrate_many(client, params['namespace'], params['names'], opts, module.check_mode,
                                                                   common.parallel(params)),
                                 lambda r: '%s/%s' % (r.get('namespace'), r['name']))

            def make(on_started=None):
                own = client if on_started is None else kubevirt_client.client_from_params(params)
                return kmb.KubevirtMigration(own, params['namespace'], params['name'], opts, check_mode=module.check_mode, on_started=on_started)
            if params['state'] == 'started' and not module.check_mode:
                client.close()
            result = common.run_one(module, make)
    common.exit_one(module, session, result)
