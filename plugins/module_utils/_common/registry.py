# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a module run uses the registered providers, for any map name -> :class:`~._common.provider.Provider`.

The map itself is in ``plugins/module_utils/_providers`` (the layer above the backends: it names them); everything here
takes it as ``providers`` and imports no backend.

* :func:`argument_spec`: ``backend`` (its choices: the registered names), every provider's connection options, then
  the module's own options;
* :func:`refused_option`: the first option of another backend that is set (in the order of the map, with the
  resource's wording), or a required one missing;
* :func:`select`: the provider of a name, or a clear error naming the registered ones;
* :func:`run`: options refused, the resource's checks, the backend's resource module loaded, the runner called.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration


class UnknownBackend(InvalidDeclaration):
    """A backend name no provider is registered under (or that has no module for a resource)."""


def argument_spec(providers, default, **own):
    """The argument spec of a module: ``backend``, every backend's connection options, then the module's own (``own`` wins)."""
    spec = dict(backend=dict(type='str', choices=list(providers), default=default))
    for provider in providers.values():
        spec.update(provider.connection_args)
    spec.update(own)
    return spec


def select(providers, name):
    """The provider registered as ``name``; :class:`UnknownBackend` naming the registered ones otherwise."""
    try:
        return providers[name]
    except (KeyError, TypeError):
        raise UnknownBackend('backend', 'no backend %r is registered (registered: %s)' % (name, ', '.join(providers))) from None


def refused_option(providers, resource, params):
    """``(field, message, named)`` for the first option of another backend set in ``params`` (or a required one missing), or None.

    Nothing is silently ignored: an option the selected backend does not take is a mistake the user hears about.
    """
    backend = params['backend']
    selected = select(providers, backend)
    for owner, provider in providers.items():
        if owner == backend:
            continue
        group = provider.options[resource]
        key = group.given(params)
        if key is not None:
            return key, group.wording.get(key, group.refusal).format(key=key, owner=owner, backend=backend), group.field
    group = selected.options[resource]
    for key in group.required:
        if not params.get(key):
            return key, '%s: is required with backend %s' % (key, backend), group.field
    return None


def refuse_other_backend(providers, resource, params):
    """Raises :class:`InvalidDeclaration` for the first option of another backend set in ``params``."""
    refused = refused_option(providers, resource, params)
    if refused:
        key, message, _named = refused
        raise InvalidDeclaration(key, message[len(key) + 2:])


def load(loaders, resource, name):
    """The resource module of backend ``name``: ``loaders[name]()`` (a function that imports it, see _providers.loaders); a clear error when missing."""
    try:
        loader = loaders[name]
    except KeyError:
        raise UnknownBackend('backend', 'backend %r has no %s module (registered for %s: %s)' % (name, resource, resource, ', '.join(loaders))) from None
    return loader()


def run(providers, resource, module, loaders, runner, check=None):  # pylint: disable=too-many-arguments
    """Runs ``resource`` with the backend the task selects: ``runner(module, provider, backend)``.

    The other backends' options are refused first (nothing of any backend imported yet but the providers); then
    ``check(params)``; then the backend's resource module is imported (``loaders``: name -> import function) and the
    runner, written once for every backend (``_common/*_run.py``), runs it. Every refusal fails the module naming the field.
    """
    try:
        refused = refused_option(providers, resource, module.params)
    except UnknownBackend as exc:
        module.fail_json(**exc.to_result())
    if refused:
        key, message, named = refused
        if named:
            module.fail_json(msg=message, field=key)
        module.fail_json(msg=message)
    try:
        if check is not None:
            check(module.params)
        backend = load(loaders, resource, module.params['backend'])
    except InvalidDeclaration as exc:
        module.fail_json(**exc.to_result())
    return runner(module, select(providers, module.params['backend']), backend)
