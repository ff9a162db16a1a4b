# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vm module of the ``memory`` backend: what _common/vm_run.run_vm asks of a backend (see _libvirt/vm_converge.py)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_run import options_from
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_backend import InMemoryVm

NO_PORT = 'port is not available on backend memory (its guests have no network)'
options = options_from  # pylint: disable=invalid-name


class MemoryVm(InMemoryVm):
    """An in-memory guest that notes the execution options each step was given (the grace of a stop)."""

    def act(self, step, spec, obs, options):  # pylint: disable=redefined-outer-name
        self.world.with_options.append((self.name, step.action, options.shutdown_timeout, options.force_stop))
        return super().act(step, spec, obs, options)


def declaration(params, task):  # pylint: disable=unused-argument
    """(VmDeclaration, spec, name) of one VM: its definition is vcpus, memory and generation."""
    if not params.get('name'):
        raise InvalidDeclaration('name', 'is required (or give vms)')
    definition = dict((key, params[key]) for key in ('vcpus', 'memory', 'generation') if params.get(key) is not None)
    decl = VmDeclaration(state=params['state'], autostart=None, restart_on_change=params.get('restart_on_change', False))
    return decl, {'definition': definition}, params['name']


def agent(params):  # pylint: disable=unused-argument
    return False


def vm(world, params, name):  # pylint: disable=unused-argument
    return MemoryVm(world, name, owner='this-run')


def fleet_snapshot(world, params):  # pylint: disable=unused-argument
    return world.snapshot()


def probe(world, params, name):  # pylint: disable=unused-argument
    return lambda: {'readiness': 'booted'}
