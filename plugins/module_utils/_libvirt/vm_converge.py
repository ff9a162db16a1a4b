# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt vm module (the vm module's runner is _common/vm_run.run_vm; vm_info's module is vm_runs.py, apart: its payload stays small).

What the runner asks of a backend's vm module: ``options(params)``, ``declaration(params, task)`` (one VM - the task's or an item of ``vms`` - validated:
(VmDeclaration, spec, name); another backend's definition options are refused by the runner first), ``agent(params)``
(whether ``wait_for: agent`` can be met), ``NO_PORT`` (why ``wait_for: port`` is refused, or None), ``vm(connection,
params, name)`` (the ``VmBackend``), ``fleet_snapshot(connection, params)`` (what a fleet reads in bulk) and
``probe(connection, params, name)`` (the readiness probe).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import spec_of
from ansible_collections.converge.virt.plugins.module_utils._common.vm_run import options_from
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_read, domain_spec
from ansible_collections.converge.virt.plugins.module_utils._libvirt import readiness as libvirt_readiness
from ansible_collections.converge.virt.plugins.module_utils._libvirt.vm_backend import LibvirtVm, bulk_snapshot
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration

NO_PORT = None  # the module's host reaches a libvirt guest's address: wait_for port is available

options = options_from  # pylint: disable=invalid-name


def declaration(params, task=None):  # pylint: disable=unused-argument
    """Validate one declaration (the task's, or an item of its ``vms``) before anything is touched; return (VmDeclaration, spec, name)."""
    spec = spec_of(params)
    try:
        domain_spec.normalize_spec(spec)
    except ValueError as exc:
        field, _sep, reason = str(exc).partition(':')
        raise InvalidDeclaration(field.strip(), reason.strip() or str(exc))
    name = params.get('name')
    if params.get('xml'):
        try:
            name = domain_read.domain_model(params['xml'])['name']
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidDeclaration('xml', 'not a domain XML with a name (%s)' % exc)
        if params.get('name') and params['name'] != name:
            raise InvalidDeclaration('name', 'differs from the name in xml (%r)' % name)
        spec = {'xml': params['xml'], 'autostart': params.get('autostart')}
    if not name:
        raise InvalidDeclaration('name', 'is required (or give xml or vms)')
    if params.get('cloud_init') is not None:
        # only when declared: a run without cloud_init never loads the seed's code
        from ansible_collections.converge.virt.plugins.module_utils._libvirt import cloud_init as libvirt_cloud_init  # pylint: disable=import-outside-toplevel
        if params.get('xml'):
            raise InvalidDeclaration('cloud_init', 'cannot be combined with xml (write the seed cdrom into the XML, or use the simple options)')
        seed = libvirt_cloud_init.Seed(name, params['cloud_init'], spec.get('disks'))
        spec = libvirt_cloud_init.with_seed_disk(spec, seed)
        spec[domain_spec.SEED_KEY] = seed
    decl = VmDeclaration(state=params['state'], autostart=params.get('autostart'), restart_on_change=params.get('restart_on_change', False))
    return decl, spec, name


def agent(params):
    """Whether the VM has a guest agent channel (``guest_agent``)."""
    return params.get('guest_agent')


def vm(connection, params, name):  # pylint: disable=unused-argument
    """The :class:`LibvirtVm` ``name`` of ``connection``."""
    return LibvirtVm(connection, name)


def fleet_snapshot(connection, params):  # pylint: disable=unused-argument
    """Every domain of the host, read once for a fleet."""
    return bulk_snapshot(connection)


def probe(connection, params, name):  # pylint: disable=unused-argument
    """The readiness probe of domain ``name``."""
    dom = connection.conn.lookupByName(name)
    return lambda: libvirt_readiness.probe(dom)
