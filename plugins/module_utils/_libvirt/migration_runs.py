# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt module of host, migration and migration_info (their runners: _common/migration_run.py)."""

from __future__ import annotations

import contextlib

from ansible_collections.converge.virt.plugins.module_utils._common import migration_run as common
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.host_driver import HostBackend
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as mb
from ansible_collections.converge.virt.plugins.module_utils._libvirt import drain, migration_observe, migration_options
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import Connection, libvirt


class LibvirtHost(HostBackend):
    """The host of a libvirt connection; its drain mark is a private libvirt secret (migration_backend.drain_mark)."""

    def __init__(self, connection):
        self.connection = connection
        self.mark = None

    def draining(self):
        self.mark = drain.drain_mark(self.connection.conn)
        return self.mark is not None

    def drain(self, reason, check_mode):
        if self.mark is not None:
            return False
        return True if check_mode else drain.set_drain_mark(self.connection.conn, reason, mb.owner_id())

    def undrain(self, check_mode):
        if self.mark is None:
            return False
        return True if check_mode else drain.clear_drain_mark(self.connection.conn)

    def summary(self):
        return migration_observe.host_summary(self.connection)


def session(module):
    """The module session of migration, migration_info and host: the source's and the target's secrets redacted."""
    return migration_options.MigrationSession(module)


def check_host(params):  # pylint: disable=unused-argument
    """host: nothing to check before connecting (the host is the connection's)."""


def host(connection, params):  # pylint: disable=unused-argument
    """The host of ``connection``, drained by its drain mark."""
    return LibvirtHost(connection)


@contextlib.contextmanager
def host_errors(connection):
    """A libvirt error while draining is the host's error."""
    try:
        yield
    except libvirt.libvirtError as exc:
        raise BackendError('host %s: %s' % (connection.uri, exc)) from exc


class NoHostRead(ConvergeError):
    """Not one host of migration_info could be read."""


def migrations(session, params):  # pylint: disable=redefined-outer-name
    """migration_info with backend libvirt: every host of ``uri`` and ``uris`` (one that cannot be read is listed with its error).

    ``(migrations, hosts)``; :class:`NoHostRead` (with ``hosts`` and no migrations) when not one could be read.
    """
    uris = list(params['uris'] or [])
    if params['uri'] or not uris:
        uris.insert(0, session.source_args()[0])
    found, hosts = [], []
    for uri in uris:
        try:
            with Connection(uri, params['username'], params['password']) as connection:
                found.extend(migration_observe.migrations_on(connection, params['name']))
            hosts.append({'uri': redact_uri(uri), 'ok': True})
        except ConvergeError as exc:
            hosts.append({'uri': redact_uri(uri), 'ok': False, 'msg': session.redact(exc.message)})
        except Exception as exc:  # pylint: disable=broad-except
            hosts.append({'uri': redact_uri(uri), 'ok': False, 'msg': session.redact(str(exc))})
    if not any(h['ok'] for h in hosts):
        raise NoHostRead('no host could be read: %s' % '; '.join(h['msg'] for h in hosts), hosts=hosts, migrations=[])
    return found, hosts


def options_from(params):
    """Validated :class:`MigrationOptions`."""
    opts = migration_options.MigrationOptions(
        offline=params['mode'] == 'offline', persistent=params['persistent'], undefine_source=params['undefine_source'],
        bandwidth=params['bandwidth'], max_downtime=params['max_downtime'], auto_converge=params['auto_converge'],
        post_copy=params['post_copy'], completion_timeout=params['completion_timeout'], completion_action=params['completion_action'],
        copy_storage=params['copy_storage'], peer_to_peer=params['peer_to_peer'], wait_timeout=params['wait_timeout'],
        target_username=params['target_username'], target_password=params['target_password'])
    migration_options.validate_options(opts)
    if params['state'] != 'cancelled' and not (params['target_uri'] or params['target_uris']):
        raise InvalidDeclaration('target_uri', 'is required (or target_uris) with state %s' % params['state'])
    common.check_list_form(params)
    if params['target_uris'] is not None and not params['target_uris']:
        raise InvalidDeclaration('target_uris', 'must name at least one host')
    named = [('name', params['name'])] if params['names'] is None else [('names[%d]' % i, n) for i, n in enumerate(params['names'])]
    for field, name in named:
        if name is not None and (not name or '/' in name or any(ord(char) < 32 for char in name)):
            raise InvalidDeclaration(field, '%r is not a VM name (no slash, no control character)' % name)
    return opts


@contextlib.contextmanager
def connect(session):  # pylint: disable=redefined-outer-name
    """What a libvirt migration runs with: the source's (uri, username, password); each migration opens its own connections."""
    yield session.source_args()


def migrate_many(source_args, params, opts, check_mode, parallel):
    """The list form: ``names`` placed on ``target_uris`` (or ``target_uri``); one result per VM."""
    return mb.migrate_many(source_args, params['names'], params['target_uris'] or [params['target_uri']], opts, check_mode, parallel)


def label(result):
    """A VM of the list form's results."""
    return result['name']


def migration(source_args, params, opts, check_mode):
    """``make(on_started=None)``: the migration of VM ``name`` to ``target_uri``."""
    if params['target_uris'] and params['state'] != 'cancelled':
        raise InvalidDeclaration('target_uris', 'with name, give target_uri (target_uris places several VMs given with names)')
    target = params['target_uri'] or (params['target_uris'] or [None])[0]

    def make(on_started=None):
        return mb.Migration(source_args, target, params['name'], opts, check_mode=check_mode, on_started=on_started)
    return make
