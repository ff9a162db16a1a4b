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
author:
  - converge.virt developers (@converge-virt)
extends_documentation_fragment:
  - converge.virt.libvirt_connection
  - converge.virt.kubevirt_connection
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Reads only.
options:
  backend:
    description: Where the VM lives. V(libvirt) (a libvirt/KVM host) or V(kubevirt) (a KubeVirt C(VirtualMachine) in O(namespace)).
    type: str
    choices: [libvirt, kubevirt]
    default: libvirt
  vm:
    description:
      - Name of the VM (libvirt domain, or KubeVirt C(VirtualMachine)).
      - Required with O(backend=libvirt); on O(backend=kubevirt) omitting it reports the snapshots of every VM of O(namespace).
    type: str
  name:
    description: Only these snapshots; a name that does not exist is reported with C(exists=false).
    type: list
    elements: str
requirements:
  - libvirt-python (backend libvirt)
  - kubernetes (backend kubevirt)
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

from ansible_collections.converge.virt.plugins.module_utils._common.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import LIBVIRT_CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase


def argument_spec():
    """The module's argument spec."""
    spec = dict(
        backend=dict(type='str', choices=['libvirt', 'kubevirt'], default='libvirt'),
        vm=dict(type='str'),
        name=dict(type='list', elements='str'),
    )
    spec.update(LIBVIRT_CONNECTION_ARGS)
    spec.update(KUBEVIRT_CONNECTION_ARGS)
    return spec


LIBVIRT_ONLY = ('uri', 'username', 'password')
KUBEVIRT_ONLY = ('kubeconfig', 'context', 'host', 'api_key', 'ca_cert', 'validate_certs')


def refuse_other_backend(params):
    """Raise :class:`InvalidDeclaration` naming the first option of the other backend that is set (and vm on libvirt)."""
    kubevirt = params['backend'] == 'kubevirt'
    for key in LIBVIRT_ONLY if kubevirt else KUBEVIRT_ONLY:
        if params.get(key) is not None:
            raise InvalidDeclaration(key, 'is a libvirt option and is not supported with backend kubevirt' if kubevirt
                                     else 'is a kubevirt option; set backend: kubevirt')
    if not kubevirt and not params.get('vm'):
        raise InvalidDeclaration('vm', 'is required with backend libvirt')


def report(connection, vm, names):
    """The result dict for VM ``vm``."""
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import snapshots as backend  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore  # pylint: disable=import-outside-toplevel
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


def report_kubevirt(client, namespace, vm, names):
    """The result dict on kubevirt: the VirtualMachineSnapshots of ``vm`` (every VM's when None) in ``namespace``, oldest first."""
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshots as backend  # pylint: disable=import-outside-toplevel
    task_state = None
    if vm:
        observer = backend.SnapshotObserver(client, namespace, vm)
        objects = observer.objects()
        task_state = observer.obs.get('task_state')
    else:
        objects = dict((obj['metadata']['name'], obj) for obj in client.list(backend.SNAPSHOT_API, namespace, 'virtualmachinesnapshots'))
    actual = dict((name, backend.actual_snapshot(obj)) for name, obj in objects.items())
    ordered = [snap.name for snap in phase.age_order(list(actual.values()))]
    if names:
        entries = [dict(backend.public_snapshot(objects[name]), exists=True) if name in objects
                   else {'name': name, 'vm': vm, 'namespace': namespace, 'exists': False, 'phase': phase.ABSENT} for name in names]
    else:
        entries = [dict(backend.public_snapshot(objects[name]), exists=True) for name in ordered]
    return {'changed': False, 'snapshots': entries, 'current': None, 'task_state': task_state}


def main():
    """Entry point."""
    module = ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True)
    if module.params['backend'] == 'kubevirt':
        with kubevirt_client.ModuleSession(module) as session:
            refuse_other_backend(module.params)
            with session.connect() as client:
                result = report_kubevirt(client, module.params['namespace'], module.params['vm'], module.params['name'])
        module.exit_json(**session.redact_result(result))
    with ModuleSession(module) as session:
        refuse_other_backend(module.params)
        with session.connect() as connection:
            result = report(connection, module.params['vm'], module.params['name'])
    module.exit_json(**session.redact_result(result))


if __name__ == '__main__':
    main()
