#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: snapshot_info
short_description: Report the snapshots of a VM
version_added: 0.1.0
description:
  - Reports the snapshots of one libvirt VM (the same observation M(converge.virt.snapshot) plans from), oldest first,
    with creation time, the VM's state at the snapshot, memory, consistency, parent, children and which one is current.
  - Also reports the VM's task, when one is in flight (a snapshot, restore or delete holds C(IMAGE_SNAPSHOT),
    C(RESTORING_SNAPSHOT) or C(DELETING_SNAPSHOT)).
  - Only the libvirt backend is implemented; O(backend=kubevirt) is refused.
author:
  - converge.virt developers (@converge-virt)
extends_documentation_fragment:
  - converge.virt.libvirt_connection
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Reads only.
options:
  backend:
    description: Where the VM lives. Only V(libvirt) is implemented; V(kubevirt) fails with a message saying so.
    type: str
    choices: [libvirt, kubevirt]
    default: libvirt
  vm:
    description: Name of the VM (libvirt domain).
    type: str
    required: true
  name:
    description: Only these snapshots; a name that does not exist is reported with C(exists=false).
    type: list
    elements: str
requirements:
  - libvirt-python
seealso:
  - module: converge.virt.snapshot
'''

EXAMPLES = r'''
- name: Snapshots of a VM
  converge.virt.snapshot_info:
    vm: web-1
  register: snaps
- ansible.builtin.debug:
    msg: "{{ snaps.snapshots | map(attribute='name') | list }}"
'''

RETURN = r'''
snapshots:
  description: One entry per snapshot, oldest first, with the fields of the snapshot result of M(converge.virt.snapshot) and C(exists).
  returned: always
  type: list
  elements: dict
current:
  description: Name of libvirt's current snapshot (the last taken or restored), or none.
  returned: always
  type: str
task_state:
  description: The VM's task in flight, or none.
  returned: always
  type: str
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import LIBVIRT_CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._libvirt import snapshots as backend
from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase


def argument_spec():
    """The module's argument spec."""
    spec = dict(
        backend=dict(type='str', choices=['libvirt', 'kubevirt'], default='libvirt'),
        vm=dict(type='str', required=True),
        name=dict(type='list', elements='str'),
    )
    spec.update(LIBVIRT_CONNECTION_ARGS)
    return spec


def report(connection, vm, names):
    """The result dict for VM ``vm``."""
    observer = backend.SnapshotObserver(connection, vm)
    snaps, current = observer.snapshots()
    by_name = dict((snap.name, snap) for snap in snaps)
    ordered = phase.age_order(snaps)
    if names:
        entries = [dict(backend.public_snapshot(by_name[name], vm, current), exists=True) if name in by_name
                   else {'name': name, 'vm': vm, 'exists': False, 'phase': 'absent'} for name in names]
    else:
        entries = [dict(backend.public_snapshot(snap, vm, current), exists=True) for snap in ordered]
    meta = taskstore.read_metadata(observer.dom)
    return {'changed': False, 'snapshots': entries, 'current': current, 'task_state': meta.get('task_state') or None}


def main():
    """Entry point."""
    module = ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True)
    if module.params['backend'] == 'kubevirt':
        module.fail_json(msg='backend: snapshots on kubevirt are not supported yet; only backend libvirt is implemented', field='backend')
    with ModuleSession(module) as session:
        with session.connect() as connection:
            result = report(connection, module.params['vm'], module.params['name'])
    module.exit_json(**session.redact_result(result))


if __name__ == '__main__':
    main()
