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
  - With O(backend=kubevirt), reports the C(VirtualMachineSnapshot)s of a KubeVirt C(VirtualMachine) in O(namespace), or of every
    VM of the namespace when O(vm) is omitted, oldest first, with our phase word (Pending, Creating, Ready, Failed, Deleting),
    KubeVirt's own phase, C(readyToUse), indications and consistency.
  - Options of the other backend are refused naming them (libvirt only O(uri), O(username), O(password); kubevirt only the
    connection options).
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.read
options:
  vm:
    description:
      - Name of the VM (libvirt domain, or KubeVirt C(VirtualMachine)).
      - Required with O(backend=libvirt); on O(backend=kubevirt) omitting it reports the snapshots of every VM of O(namespace).
    type: str
  name:
    description: Only these snapshots; a name that does not exist is reported with C(exists=false).
    type: list
    elements: str
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

- name: Every VirtualMachineSnapshot of a namespace, with its phase
  converge.virt.snapshot_info:
    backend: kubevirt
    namespace: demo
  register: kube_snaps
'''

RETURN = r'''
snapshots:
  description: One entry per snapshot, oldest first, with the fields of the snapshot result of M(converge.virt.snapshot) and C(exists).
  returned: always
  type: list
  elements: dict
current:
  description: Name of libvirt's current snapshot (the last taken or restored), or none (always none on kubevirt).
  returned: always
  type: str
task_state:
  description: The VM's task in flight, or none (on kubevirt without O(vm), none).
  returned: always
  type: str
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.snapshot_run import run_snapshot_info
from ansible_collections.converge.virt.plugins.module_utils._providers.snapshot import LOADERS


def argument_spec():
    """The module's argument spec."""
    return _providers.argument_spec(vm=dict(type='str'), name=dict(type='list', elements='str'))


def refuse_other_backend(params):
    """Raise :class:`InvalidDeclaration` naming the first option of the other backend that is set (and vm on libvirt)."""
    _providers.refuse_other_backend('snapshot_info', params)


def main():
    """Entry point."""
    _providers.run('snapshot_info', ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True), LOADERS, run_snapshot_info)


if __name__ == '__main__':
    main()
