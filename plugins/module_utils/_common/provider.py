# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a backend declares to the modules (community.crypto's provider shape): :class:`Provider`.

Each backend package has one ``provider.py`` with one ``PROVIDER`` object: its name, its connection options (an
argument spec fragment), the options it alone takes per resource (:class:`OptionGroup`, with the refusal every other
backend gives them), its own vm definition and volume options (:class:`VmDefinition`, ``volume_args``) and its module
session. The registry (``plugins/module_utils/_providers``) keeps the one map name -> provider; the runners
(``_common/runners``) are written once and get the provider and the backend's resource module.

A provider module imports nothing but this file and the standard library at import time: every module run imports every
registered provider (to build the argument spec and refuse another backend's options) and only the selected backend's code.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional

# How a resource words the refusal of another backend's option ({key}, {owner}: the backend owning it, {backend}: the selected one).
NOT_SUPPORTED = '{key}: is a {owner} option and is not supported with backend {backend}'
NOT_USED = '{key}: is a {owner} connection option and is not used with backend {backend}'
SET_BACKEND = '{key}: is a {owner} option; set backend: {owner}'

# the resources a provider serves: one runner each in _common/runners (host, migration and migration_info share a backend module)
RESOURCES = ('vm', 'vm_info', 'volume', 'volume_info', 'migration', 'migration_info', 'host', 'snapshot', 'snapshot_info', 'reconcile')


class OptionGroup:  # pylint: disable=too-few-public-methods
    """The options one backend owns for one resource, and how the others refuse them.

    ``owns``: option names, in the order they are checked; ``refusal``: the message template another
    backend fails with when one of them is set; ``field``: whether the failure names it as ``field``;
    ``unset``: option values that count as not given (``namespace: default`` is the default);
    ``wording``: a template per option that is worded apart from the others;
    ``required``: options this backend cannot run without;
    ``item_owns``: options owned both at the top and in each item of the list option ``items`` (named ``items[i].key``).
    """

    def __init__(self, owns: Iterable[str], refusal: str = NOT_SUPPORTED, field: bool = True,  # pylint: disable=too-many-arguments
                 unset: Optional[Mapping[str, Any]] = None, wording: Optional[Mapping[str, str]] = None,
                 required: Iterable[str] = (), item_owns: Iterable[str] = (), items: Optional[str] = None) -> None:
        self.owns = tuple(owns)
        self.required = tuple(required)
        self.item_owns = tuple(item_owns)
        self.items = items
        self.refusal = refusal
        self.wording = dict(wording or {})
        self.field = field
        self.unset = dict(unset or {})

    def given(self, params: Mapping[str, Any]) -> Optional[str]:
        """The first owned option set in ``params``, or None."""
        for key in self.owns:
            value = params.get(key)
            if value is not None and (key not in self.unset or value != self.unset[key]):
                return key
        if self.item_owns:
            listed = params.get(self.items) if self.items else None
            items = [('', params)] + [('%s[%d].' % (self.items, index), item) for index, item in enumerate(listed or [])]
            for prefix, item in items:
                for key in self.item_owns:
                    if item.get(key) is not None:
                        return prefix + key
        return None


class VmDefinition:  # pylint: disable=too-few-public-methods
    """The vm module's definition options one backend alone takes, and how another backend refuses them.

    ``top``: top-level option names it owns (among the shared table ``_common/vm_args.DEFINITION_ARGS`` or its own
    ``args``); ``disk_keys`` / ``iface_keys``: sub-options of a disk / an interface it owns; ``refusal``: the reason
    another backend gives ({backend}: the selected one); ``args``, ``disk_args``, ``iface_args``: argument spec
    fragments of the options it adds to the vm module (top level, per disk, per interface).
    """

    def __init__(self, top: Iterable[str] = (), disk_keys: Iterable[str] = (),  # pylint: disable=too-many-arguments
                 iface_keys: Iterable[str] = (), refusal: str = '', args: Optional[Mapping[str, Any]] = None,
                 disk_args: Optional[Mapping[str, Any]] = None, iface_args: Optional[Mapping[str, Any]] = None) -> None:
        self.top = tuple(top)
        self.disk_keys = tuple(disk_keys)
        self.iface_keys = tuple(iface_keys)
        self.refusal = refusal
        self.args = dict(args or {})
        self.disk_args = dict(disk_args or {})
        self.iface_args = dict(iface_args or {})


class Provider:  # pylint: disable=too-few-public-methods
    """One backend, as the modules see it. Subclasses set the attributes and implement :meth:`session`.

    ``name``: the value of the ``backend`` option; ``connection_args``: the argument spec of its connection options;
    ``options``: resource -> :class:`OptionGroup` (every resource of :data:`RESOURCES`); ``vm_definition``: a
    :class:`VmDefinition`; ``volume_args``: argument spec of the volume options it adds (top level and per item).
    """

    name = ''
    connection_args: Dict[str, Dict[str, Any]] = {}
    options: Dict[str, OptionGroup] = {}
    vm_definition = VmDefinition()
    volume_args: Dict[str, Dict[str, Any]] = {}

    def session(self, module: Any) -> Any:
        """The module session (a ``_common.session.ModuleSession``) of a run of this backend."""
        raise NotImplementedError
