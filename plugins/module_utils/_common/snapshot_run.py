# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the snapshot module does the same on every backend: its options, the pure checks and plans, the fleet form.

The runners of snapshot and snapshot_info are here, written once (:func:`run_snapshot`, :func:`run_snapshot_info`).
The backends' modules (``_libvirt/snapshot_runs.py``, ``_kubevirt/snapshot_runs.py``) give ``snapshots(connection,
params)`` (one VM's :class:`~._common.snapshot_driver.SnapshotBackend`, its names checked), whose loop
:func:`~._common.snapshot_driver.converge_snapshot` owns and :func:`run_module` runs for ``vm`` or for each VM of
``vms``, and ``info(connection, params)`` (snapshot_info's result). Imports no backend.
"""

from __future__ import annotations

import datetime

from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.fleet import fleet_failure
from ansible_collections.converge.virt.plugins.module_utils._common.snapshot_driver import converge_snapshot
# re-exported: the snapshot module and the backends' snapshot_runs name them here
from ansible_collections.converge.virt.plugins.module_utils._common.snapshot_driver import (  # noqa: F401 pylint: disable=unused-import
    add_older_than, parse_older_than, predicted_names)
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase

MAX_WAIT = 86400


def argument_spec(shared):
    """The snapshot module's argument spec: ``shared`` (the registry's: backend and connections), then its own."""
    return dict(shared, **dict(
        vm=dict(type='str'),
        vms=dict(type='list', elements='str'),
        parallel=dict(type='int', default=8),
        name=dict(type='str', required=True),
        state=dict(type='str', choices=list(phase.STATES), default='present'),
        description=dict(type='str'),
        memory=dict(type='bool'),
        children=dict(type='bool', default=False),
        keep_last=dict(type='int'),
        older_than=dict(type='str'),
        safety_snapshot=dict(type='bool', default=True),
        wait_timeout=dict(type='int'),
        deletion_policy=dict(type='str', choices=['delete', 'retain']),
        target_vm=dict(type='str'),
        failure_deadline=dict(type='str'),
    ))


def check_wait_timeout(params):
    """``wait_timeout`` (a KubeVirt option: the other backends refuse it first) between 1 and :data:`MAX_WAIT`."""
    timeout = params.get('wait_timeout')
    if timeout is not None and not 1 <= timeout <= MAX_WAIT:
        raise InvalidDeclaration('wait_timeout', 'must be between 1 and %d seconds, got %r' % (MAX_WAIT, timeout))


def check_name(field, value):
    """A snapshot or VM name: not empty, no slash, no control character (libvirt names files after them)."""
    if not value or '/' in value or any(ord(char) < 32 for char in value):
        raise InvalidDeclaration(field, '%r is not a valid name (not empty, no slash, no control character)' % value)


def safety_name(name, now=None, kubernetes=False):
    """Name of the safety snapshot before restoring ``name`` (``kubernetes``: a DNS subdomain, lower case, at most 253)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if kubernetes:
        suffix = '-before-restore-%s' % now.strftime('%Y%m%d%H%M%S')
        return name[:253 - len(suffix)] + suffix
    return '%s-before-restore-%s' % (name, now.strftime('%Y%m%dT%H%M%SZ'))


def check_fleet(params):
    """The names of the fleet form (``vms``), or None for one VM; refuses what cannot be planned per VM."""
    names = params.get('vms')
    if names is None:
        return None
    if not names:
        raise InvalidDeclaration('vms', 'is empty: name at least one VM')
    duplicates = sorted(set(name for name in names if names.count(name) > 1))
    if duplicates:
        raise InvalidDeclaration('vms', 'names a VM more than once: %s' % ', '.join(duplicates))
    if not 1 <= params['parallel'] <= 64:
        raise InvalidDeclaration('parallel', 'must be between 1 and 64, got %r' % params['parallel'])
    if params.get('target_vm') is not None:
        raise InvalidDeclaration('target_vm', 'restores one VM\'s snapshot into one new VM: use vm, not vms')
    return names


def check(params):
    """The checks after the backend's options (run by the registry before the backend is imported)."""
    check_wait_timeout(params)
    check_fleet(params)


def run_fleet(runner, connection, params, check_mode, names):
    """``runner`` (one VM's) for each VM of ``names``, ``parallel`` at a time; (changed, results, failed names)."""
    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel

    def one(name):
        try:
            result = runner(connection, dict(params, vm=name, vms=None), check_mode)
        except ConvergeError as exc:
            return dict(exc.to_result(), vm=name, failed=True, changed=bool(getattr(exc, 'changed', False)))
        result.update(vm=name, failed=False)
        return result

    with ThreadPoolExecutor(max_workers=min(params['parallel'], len(names))) as pool:
        results = list(pool.map(one, names))
    return any(r['changed'] for r in results), results, [r['vm'] for r in results if r['failed']]


def run_module(module, session, runner):
    """Run ``runner(connection, params, check_mode)`` for ``vm``, or for each VM of ``vms``, in ``session``; exit the module."""
    names = check_fleet(module.params)
    with session.connect() as connection:
        if names is not None:
            changed, results, failed = run_fleet(runner, connection, module.params, module.check_mode, names)
            if not module._diff:  # pylint: disable=protected-access
                for item in results:
                    item.pop('diff', None)
            if failed:
                message = fleet_failure(results, label=lambda result: result['vm'])
                module.fail_json(**session.redact_result({'msg': message, 'changed': changed, 'results': results}))
            module.exit_json(**session.redact_result({'changed': changed, 'results': results}))
        result = runner(connection, module.params, module.check_mode)
    if not module._diff:  # pylint: disable=protected-access
        result.pop('diff')
    module.exit_json(**session.redact_result(result))


def converge_with(backend):
    """One VM's runner ``(connection, params, check_mode) -> result`` of a backend's snapshot module: the driver's loop on
    ``backend.snapshots(connection, params)``."""
    def converge(connection, params, check_mode):
        return converge_snapshot(backend.snapshots(connection, params), params, check_mode)
    return converge


def run_snapshot(module, provider, backend):
    """snapshot, on every backend: the driver's loop on ``backend.snapshots`` for ``vm`` or for each VM of ``vms``."""
    with provider.session(module) as session:
        run_module(module, session, converge_with(backend))


def run_snapshot_info(module, provider, backend):
    """snapshot_info, on every backend: the snapshots ``backend.info`` reports."""
    with provider.session(module) as session:
        with session.connect() as connection:
            result = backend.info(connection, module.params)
    module.exit_json(**session.redact_result(result))
