# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the migration module does the same on every backend: its options, the list form, one VM's run and the exits.

The runners of migration, migration_info and host are here, written once. The backends' modules
(``_libvirt/migration_runs.py``, ``_kubevirt/migration_runs.py``) give ``session(module)``, ``options_from(params)``,
``connect(session)`` (a context manager: what a migration runs with), ``migrate_many(connection, params, opts,
check_mode, parallel)`` (the list form's results), ``label(result)`` (a VM of those results),
``migration(connection, params, opts, check_mode)`` (``make(on_started=None)``: one VM's migration),
``migrations(session, params)`` (``(migrations, hosts)`` of migration_info), ``check_host(params)`` and ``host(connection, params)`` (a
``_common.host_driver.HostBackend``; ``host_errors(connection)`` translates what it raises). Imports no backend.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import migrate
from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.fleet import fleet_failure
from ansible_collections.converge.virt.plugins.module_utils._common.host_driver import converge_host

DEFAULT_PARALLEL = 2


def argument_spec(shared):
    """The migration module's argument spec: ``shared`` (the registry's: backend and connections), then its own."""
    return dict(shared, **dict(
        name=dict(type='str'),
        target_node=dict(type='str'),
        source_node=dict(type='str'),
        pending_timeout=dict(type='int'),
        names=dict(type='list', elements='str'),
        target_uri=dict(type='str'),
        target_uris=dict(type='list', elements='str'),
        target_username=dict(type='str'),
        target_password=dict(type='str', no_log=True),
        state=dict(type='str', choices=['finished', 'started', 'cancelled'], default='finished'),
        mode=dict(type='str', choices=['live', 'offline'], default='live'),
        persistent=dict(type='bool', default=True),
        undefine_source=dict(type='bool', default=True),
        bandwidth=dict(type='int'),
        max_downtime=dict(type='int'),
        auto_converge=dict(type='bool', default=False),
        post_copy=dict(type='bool', default=False),
        completion_timeout=dict(type='int'),
        completion_action=dict(type='str', choices=['abort', 'postcopy'], default='abort'),
        copy_storage=dict(type='bool', default=False),
        peer_to_peer=dict(type='bool', default=True),
        wait_timeout=dict(type='int', default=600),
        parallel=dict(type='int'),
    ))


def check_list_form(params):
    """The list form (``names``): every top-level option applies to every VM; the options only it uses are refused without it."""
    if params['names'] is not None and params['state'] != 'finished':
        raise InvalidDeclaration('names', 'only with state finished (use name for %s)' % params['state'])
    if params['parallel'] is not None:
        if params['names'] is None:
            raise InvalidDeclaration('parallel', 'only with names (a VM given with name migrates alone)')
        if params['parallel'] < 1:
            raise InvalidDeclaration('parallel', 'must be at least 1')


def parallel(params):
    """How many VMs of ``names`` migrate at the same time."""
    return params['parallel'] or DEFAULT_PARALLEL


def exit_many(module, session, results, label):
    """Exit with one result per VM of ``names``; fail naming the VMs that failed (``label`` names one)."""
    results = [session.redact_result(r) for r in results]
    changed = any(r.get('changed') for r in results)
    failure = fleet_failure(results, label=label)
    if failure:
        module.fail_json(msg=failure, changed=changed, results=results)
    module.exit_json(changed=changed, results=results)


def run_one(module, make):
    """Cancel, start (a detached process follows it) or converge the one VM ``make()`` builds; return its result."""
    if module.params['state'] == 'cancelled':
        return make().cancel()
    if module.params['state'] == 'started' and not module.check_mode:
        return migrate.run_detached(make)
    return make().converge()


def exit_one(module, session, result):
    """Exit (or fail) with the result of one VM."""
    result = session.redact_result(result)
    result.pop('name', None)
    if result.pop('failed', False):
        module.fail_json(**result)
    module.exit_json(**result)


def run_migration(module, provider, backend):  # pylint: disable=unused-argument
    """migration, on every backend: one VM (``name``: converge, start or cancel) or the list form (``names``)."""
    params = module.params
    with backend.session(module) as session:
        opts = backend.options_from(params)
        with backend.connect(session) as connection:
            if params['names'] is not None:
                exit_many(module, session, backend.migrate_many(connection, params, opts, module.check_mode, parallel(params)), backend.label)
            make = backend.migration(connection, params, opts, module.check_mode)
            result = run_one(module, make)
    exit_one(module, session, result)


def run_migration_info(module, provider, backend):  # pylint: disable=unused-argument
    """migration_info, on every backend: the migrations the backend reports and the hosts it read."""
    with backend.session(module) as session:
        migrations, hosts = backend.migrations(session, module.params)
    module.exit_json(changed=False, migrations=migrations, hosts=hosts)


def run_host(module, provider, backend):  # pylint: disable=unused-argument
    """host, on every backend: drain (mark) or undrain a host through ``_common.host_driver.converge_host``."""
    params = module.params
    try:
        backend.check_host(params)
    except ConvergeError as exc:
        module.fail_json(**exc.to_result())
    with backend.session(module) as session, session.connect() as connection:
        host = backend.host(connection, params)
        with backend.host_errors(connection):
            changed, result = converge_host(host, params['state'], params['reason'], module.check_mode)
    module.exit_json(changed=changed, **result)
