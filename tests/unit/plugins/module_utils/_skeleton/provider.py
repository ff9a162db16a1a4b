# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A third backend, as a new backend's author writes it: the provider of the ``memory`` backend (issue 35).

Its folder holds what a backend package holds (this provider, a vm module and a volume module); outside it, a backend
is registered with one line in ``_providers.PROVIDERS`` and one per ``_providers.<resource>.LOADERS`` (the unit tests
register it in copies of those maps). Its world is the in-memory backend of the driver tests (no libvirt, no Kubernetes).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import session
from ansible_collections.converge.virt.plugins.module_utils._common.provider import NOT_USED, RESOURCES, OptionGroup, Provider, VmDefinition
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_backend import VolumeWorld, World

# world name -> (World, VolumeWorld): what the ``world`` connection option connects to
WORLDS = {}


class MemoryWorld(World):
    """A :class:`World` with what a connection offers the runners (a context manager with ``redact``)."""

    def __init__(self):
        super().__init__()
        self.volumes = VolumeWorld()
        self.with_options = []  # (name, action, shutdown_timeout, force_stop) of every step, as the backend was given it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def redact(text):
        return text


class MemorySession(session.ModuleSession):
    """The module session: connects to the world the task names."""

    def connect(self):
        try:
            return WORLDS[self.module.params['world']]
        except KeyError:
            from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError  # pylint: disable=import-outside-toplevel
            raise BackendError('world: no world called %r' % self.module.params['world']) from None


class MemoryProvider(Provider):  # pylint: disable=too-few-public-methods
    """The ``memory`` backend: guests and volumes of an in-memory world."""

    name = 'memory'
    connection_args = dict(world=dict(type='str'))
    options = dict((resource, OptionGroup(('world',), refusal=NOT_USED)) for resource in RESOURCES)
    vm_definition = VmDefinition(top=('generation',), refusal='is a memory option and is not supported with backend {backend}',
                                 args=dict(generation=dict(type='int')))

    def session(self, module):
        return MemorySession(module)


PROVIDER = MemoryProvider()
