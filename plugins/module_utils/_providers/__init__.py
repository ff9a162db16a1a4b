# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The registry: the one map backend name -> provider, and a module run with it (the layer above the backends).

A module builds its argument spec with :func:`argument_spec` and hands over with :func:`run`::

    from ansible_collections.converge.virt.plugins.module_utils import _providers
    from ansible_collections.converge.virt.plugins.module_utils._common.migration_run import run_host
    from ansible_collections.converge.virt.plugins.module_utils._providers import migration

    def main():
        _providers.run('host', ConvergeModule(argument_spec=_providers.argument_spec(...)), migration.LOADERS, run_host)

Each provider (``_<backend>/provider.py``, see _common/provider.py) declares its options; the runner is written once
(``_common/*_run.py``); the backend's resource module is imported only once the task selected it, by the function of
``<resource>.LOADERS`` in this package that names it (AnsiballZ packs what an import statement names, one file at a
time: a loader per resource keeps each module's payload to its own resource's code, and a libvirt task never compiles
the KubeVirt backend).

Adding a backend, by hand: its folder with a ``provider.py`` (``PROVIDER``) and its resource modules, one line in
:data:`PROVIDERS`, and its options in the converge.virt.backend documentation fragment (two files outside the folder).
The six ``<resource>.LOADERS`` maps of this package (:func:`loaders`, and the import statements AnsiballZ reads) are
generated from :data:`PROVIDERS` by ``python tools/providers_gen.py`` (tests/unit/test_providers_gen.py fails while they are stale).
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._common import registry
from ansible_collections.converge.virt.plugins.module_utils._common.provider import Provider, VmDefinition
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.provider import PROVIDER as KUBEVIRT
from ansible_collections.converge.virt.plugins.module_utils._libvirt.provider import PROVIDER as LIBVIRT

# backend name -> provider, in the order refusals are checked (and the backend option's choices are listed)
PROVIDERS: Dict[str, Provider] = {
    'libvirt': LIBVIRT,
    'kubevirt': KUBEVIRT,
}
DEFAULT_BACKEND = 'libvirt'


def argument_spec(**own: Any) -> Dict[str, Any]:
    """``backend``, every registered backend's connection options, then the module's own options."""
    return registry.argument_spec(PROVIDERS, DEFAULT_BACKEND, **own)


def refused_option(resource: str, params: Mapping[str, Any]) -> Optional[Tuple[str, str, bool]]:
    """See :func:`_common.registry.refused_option`."""
    return registry.refused_option(PROVIDERS, resource, params)


def refuse_other_backend(resource: str, params: Mapping[str, Any]) -> None:
    """See :func:`_common.registry.refuse_other_backend`."""
    registry.refuse_other_backend(PROVIDERS, resource, params)


def vm_definitions() -> Dict[str, VmDefinition]:
    """backend name -> its :class:`~._common.provider.VmDefinition`."""
    return dict((name, provider.vm_definition) for name, provider in PROVIDERS.items())


def loaders(module: str, *backends: str) -> Dict[str, Callable[[], ModuleType]]:
    """A loader map: backend name -> a function that imports ``_<backend>/<module>.py`` when called (only then).

    Each ``<group>.py`` of this package holds one such map and, for AnsiballZ, the import statements naming those files
    (tools/providers_gen.py writes both from :data:`PROVIDERS`).
    """
    package = __name__.rsplit('.', 1)[0]
    return dict((name, functools.partial(importlib.import_module, '%s._%s.%s' % (package, name, module))) for name in backends)


# run(resource, module, loaders, runner, check=None): _common.registry.run with this map (a partial: no frame of its own)
run = functools.partial(registry.run, PROVIDERS)  # pylint: disable=invalid-name
