# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The volume and volume_info modules on every backend: the argument spec, list-form defaults, the result, the two runners.

The backends' volume modules (``_libvirt/volume_runs.py``, ``_kubevirt/volume_runs.py``) give ``declarations(params)``
(every declaration validated, nothing touched), ``converge(connection, params, specs, check_mode)`` (the result of
``_common.volume_driver.converge_volumes``) and ``info(connection, params)`` (``(pools, volumes)``).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_fields
from ansible_collections.converge.virt.plugins.module_utils._common.volume_args import VOLUME_OPTIONS


def argument_spec(shared, providers):
    """The volume module's argument spec: ``shared`` (the registry's: backend, connections), then its own, each provider's ``volume_args`` last."""
    extra = {}
    for provider in providers.values():
        extra.update(provider.volume_args)
    item = dict(name=dict(type='str', required=True))
    item.update(VOLUME_OPTIONS)
    item.update(extra)
    own = dict(name=dict(type='str'), force=dict(type='bool', default=False), detach_timeout=dict(type='int', default=30),
               wait_timeout=dict(type='int'), volumes=dict(type='list', elements='dict', options=item))
    own.update(VOLUME_OPTIONS)
    own.update(extra)
    spec = dict(shared)
    spec.update(own)
    return spec


def fleet_defaults(params, declared_keys):
    """The top-level options given with ``volumes``: the defaults of every item (an item's own value wins).

    A non-empty attachments list inherited by two or more items would plug every volume into the same VM targets: refused,
    naming the field ([] - unplug every listed volume - is a valid default).
    """
    defaults = dict((k, v) for k, v in declared_keys(params).items() if k != 'name')
    if defaults.get('attachments'):
        heirs = [item['name'] for item in params['volumes'] if item.get('attachments') is None]
        if len(heirs) > 1:
            raise InvalidDeclaration('attachments', 'as the default of every item of volumes it would plug %s into the same VM targets; '
                                     'set attachments in the volumes items' % ', '.join(heirs))
    return defaults


def declared_twice(keys):
    """Raises :class:`InvalidDeclaration` when a volume is declared more than once."""
    twice = sorted(set(k for k in keys if keys.count(k) > 1))
    if twice:
        raise InvalidDeclaration('volumes', 'the same volume is declared more than once: %s' % ', '.join(twice))


def _refusal_text(refusals):
    parts = []
    for ref in refusals:
        where = ref['volume']
        if ref.get('vm'):
            where += ' (VM %s%s)' % (ref['vm'], ', ' + ref['target'] if ref.get('target') else '')
        if ref.get('field'):
            where += ' [%s]' % ref['field']
        parts.append('%s: %s' % (where, ref['reason']))
    return 'refused, nothing was changed for these volumes: ' + '; '.join(parts)


def finish(module, result, redact):
    """exit_json / fail_json from a converge result (the same on both backends)."""
    out = dict(changed=result['changed'], operations=result['operations'], pool_operations=result['pool_operations'],
               refusals=result['refusals'], deferred=result['deferred'], uncertain=result['uncertain'])
    if module.params['volumes'] is None:
        out['volume'] = result['volumes'][0]
    else:
        out['volumes'] = result['volumes']
    if module._diff:  # pylint: disable=protected-access
        out['diff'] = result['diff']
    error = result['error']
    if error is not None:
        details = redact_fields(error.to_result(), redact)
        details.pop('msg', None)
        details.update(out)
        module.fail_json(msg=redact(error.message), **details)
    if result['refusals']:
        module.fail_json(msg=_refusal_text(result['refusals']), **out)
    module.exit_json(**out)


def run_volume(module, provider, backend):
    """volume, on every backend: every declaration validated, then converged; exits with :func:`finish`."""
    with provider.session(module) as session:
        specs = backend.declarations(module.params)
        with session.connect() as connection:
            result = backend.converge(connection, module.params, specs, module.check_mode)
    finish(module, result, session.redact)


def run_volume_info(module, provider, backend):
    """volume_info, on every backend: the pools and volumes the backend reports."""
    with provider.session(module) as session, session.connect() as connection:
        pools, volumes = backend.info(connection, module.params)
    module.exit_json(changed=False, pools=pools, volumes=volumes)
