# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt runners of the host and migration_info modules (selected through _common.registry)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.errors import BackendError, ConvergeError
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as mb
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import Connection, libvirt


def run_host(module):
    """host with backend libvirt: set or clear the host's drain mark."""
    state = module.params['state']
    with mb.MigrationSession(module) as session, session.connect() as connection:
        try:
            before = mb.drain_mark(connection.conn)
            changed = (state == 'drained' and before is None) or (state == 'active' and before is not None)
            if changed and not module.check_mode:
                if state == 'drained':
                    changed = mb.set_drain_mark(connection.conn, module.params['reason'], mb.owner_id())
                else:
                    changed = mb.clear_drain_mark(connection.conn)
            host = mb.host_summary(connection)
        except libvirt.libvirtError as exc:
            raise BackendError('host %s: %s' % (connection.uri, exc)) from exc
        if module.check_mode and changed:
            host['draining'] = state == 'drained'
    diff = {'before': {'draining': before is not None}, 'after': {'draining': host['draining']}}
    module.exit_json(changed=changed, host=host, diff=diff)


def run_migration_info(module):
    """migration_info with backend libvirt: every host of ``uri`` and ``uris`` (one that cannot be read is listed with its error)."""
    params = module.params
    with mb.MigrationSession(module) as session:
        uris = list(params['uris'] or [])
        if params['uri'] or not uris:
            uris.insert(0, session.source_args()[0])
        migrations, hosts = [], []
        for uri in uris:
            try:
                with Connection(uri, params['username'], params['password']) as connection:
                    migrations.extend(mb.migrations_on(connection, params['name']))
                hosts.append({'uri': redact_uri(uri), 'ok': True})
            except ConvergeError as exc:
                hosts.append({'uri': redact_uri(uri), 'ok': False, 'msg': session.redact(exc.message)})
            except Exception as exc:  # pylint: disable=broad-except
                hosts.append({'uri': redact_uri(uri), 'ok': False, 'msg': session.redact(str(exc))})
    if not any(h['ok'] for h in hosts):
        module.fail_json(msg='no host could be read: %s' % '; '.join(h['msg'] for h in hosts), hosts=hosts, migrations=[])
    module.exit_json(changed=False, migrations=migrations, hosts=hosts)
