# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt module of host, migration and migration_info (their runners: _common/migration_run.py)."""

from __future__ import annotations

import contextlib

from ansible_collections.converge.virt.plugins.module_utils._common import migration_run as common
from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.host_driver import HostBackend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_observe, migration_options, node_drain


class KubevirtNode(HostBackend):
    """A node of the cluster; drained = cordoned (and tainted with ``taint``), marked with the reason and this run."""

    def __init__(self, client, name, node, taint, namespace):  # pylint: disable=too-many-arguments
        self.client = client
        self.name = name
        self.node = node        # as the caller read it; read again for the summary
        self.taint = taint
        self.namespace = namespace

    def draining(self):
        return node_drain.node_draining(self.node)

    def drain(self, reason, check_mode):
        return node_drain.set_drain(self.client, self.name, reason, self.taint, kmb.owner_id(), check_mode=check_mode)

    def undrain(self, check_mode):
        return node_drain.clear_drain(self.client, self.name, check_mode=check_mode)

    def summary(self):
        return node_drain.node_summary(self.client, node_drain.read_node(self.client, self.name), self.namespace)


def session(module):
    """The module session (the API key redacted)."""
    return kubevirt_client.ModuleSession(module)


def check_host(params):
    """host: ``node`` (required by the registry) is a node name; raises :class:`ConvergeError`."""
    kubevirt_client.check_node_name(params['node'])


def host(client, params):
    """The node ``node`` of the cluster (read once); a node that does not exist is an error naming it."""
    node = node_drain.read_node(client, params['node'])
    if node is None:
        raise ConvergeError('node: no node called %r in the cluster' % params['node'])
    return KubevirtNode(client, params['node'], node, params['taint'], params['namespace'])


host_errors = contextlib.nullcontext  # the client's errors are ConvergeErrors already  # pylint: disable=invalid-name


def migrations(session, params):
    """migration_info with backend kubevirt: ``(migrations, hosts)`` of the namespace."""
    with session.connect() as client:
        return migration_observe.migrations_info(client, params['namespace'], params['name']), [{'namespace': params['namespace'], 'ok': True}]


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
        migration_options.split_name(params['name'], params['namespace'], 'name')
    for index, entry in enumerate(params['names'] or []):
        migration_options.split_name(entry, params['namespace'], 'names[%d]' % index)
    return migration_options.validate_options(migration_options.KubevirtMigrationOptions(
        target_node=params['target_node'], source_node=params['source_node'], wait_timeout=params['wait_timeout'],
        pending_timeout=params['pending_timeout']))


def connect(session):
    """What a KubeVirt migration runs with: the client of the module's connection options."""
    return session.connect()


def migrate_many(client, params, opts, check_mode, parallel):
    """The list form: one result per VM of ``names``."""
    return kmb.migrate_many(client, params['namespace'], params['names'], opts, check_mode, parallel)


def label(result):
    """A VM of the list form's results (namespace/name)."""
    return '%s/%s' % (result.get('namespace'), result['name'])


def migration(client, params, opts, check_mode):
    """``make(on_started=None)``: the migration of VM ``name``; a started one (followed by a detached process) gets its own client."""
    def make(on_started=None):
        own = client if on_started is None else kubevirt_client.client_from_params(params)
        return kmb.KubevirtMigration(own, params['namespace'], params['name'], opts, check_mode=check_mode, on_started=on_started)
    if params['state'] == 'started' and not check_mode:
        client.close()
    return make
