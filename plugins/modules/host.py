#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: host
short_description: Mark a libvirt host or a KubeVirt node as draining (no VM placed or migrated onto it) or active, and report it
version_added: 0.1.0
description:
  - V(drained) marks the host so that M(converge.virt.migration) refuses it as a target and placement never
    chooses it; V(active) removes the mark; V(present) only reports.
  - The mark is a persistent private libvirt secret on the host itself, with usage
    C(converge-virt-host-drain) and a JSON description (reason, since, by). Every controller that connects
    to the host sees it, it survives daemon restarts, and its usage is unique, so two controllers marking
    the host at once create one mark.
  - Marking a host does not move its VMs; the role C(converge.virt.evacuate) does.
  - Always returns the host's free memory, drain mark and VMs.
  - With O(backend=kubevirt) the host is the Kubernetes node O(node). V(drained) cordons it (C(spec.unschedulable)),
    adds the taint C(converge.virt/draining=true:NoSchedule) unless O(taint=false), and records the reason, time and
    controller in the annotation C(converge.virt/drain); V(active) uncordons it and removes that taint and annotation
    (other taints stay). The scheduler then places no VM and no migration target on the node. The result lists the
    VirtualMachineInstances running on the node (all namespaces) as C(namespace/name) in C(running_vms).
  - "libvirt only: O(uri), O(username), O(password). kubevirt only: O(kubeconfig), O(context), O(host), O(api_key), O(ca_cert),
    O(validate_certs), O(namespace), O(node), O(taint)."
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.act
attributes:
  check_mode:
    description: Reports whether the mark would change and changes nothing.
  diff_mode:
    description: Shows the drain mark before and after.
options:
  backend:
    description: Where the host is.
  node:
    description: KubeVirt only (required there). Name of the Kubernetes node.
    type: str
  taint:
    description: KubeVirt only. With O(state=drained), also taint the node C(converge.virt/draining=true:NoSchedule) besides cordoning it.
    type: bool
    default: true
  state:
    description: V(drained) sets the drain mark, V(active) removes it, V(present) only reports.
    type: str
    choices: [drained, active, present]
    default: present
  reason:
    description: Why the host is drained (stored with the mark, shown by every controller).
    type: str
seealso:
  - module: converge.virt.migration
    description: Moves the VMs off a drained host (O(converge.virt.migration#module:names) of the host, to another one).
  - module: converge.virt.migration_info
    description: Follows the migrations of a host being drained.
'''

EXAMPLES = r'''
- name: Nothing is placed on hv1 any more
  converge.virt.host:
    uri: qemu+ssh://root@hv1/system
    state: drained
    reason: kernel update

- name: hv1 takes VMs again
  converge.virt.host:
    uri: qemu+ssh://root@hv1/system
    state: active

- name: Cordon and taint a KubeVirt node
  converge.virt.host:
    backend: kubevirt
    node: node01
    state: drained
    reason: firmware update
'''

RETURN = r'''
host:
  description:
    - The host after the task. C(hostname), C(host_uuid), C(free_memory) (bytes), C(draining), C(drain)
      (reason, since, by; null when not draining), C(vms) (name, vm_state, power_state, task_state, running,
      persistent, memory_kib), C(running_vms) and C(stopped_vms) (names).
    - On kubevirt C(node), C(hostname), C(unschedulable), C(taints), C(ready), C(draining), C(drain), C(blockers)
      (why the scheduler places no new pod there), C(allocatable_memory), C(vms) (name, namespace, phase, running,
      migrating, memory) and C(running_vms) (C(namespace/name)); C(stopped_vms) is empty (a stopped VM has no node).
  returned: always
  type: dict
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache
from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.migration_run import run_host
from ansible_collections.converge.virt.plugins.module_utils._providers.migration import LOADERS


def main():
    """Entry point."""
    spec = _providers.argument_spec(state=dict(type='str', choices=['drained', 'active', 'present'], default='present'), reason=dict(type='str'),
                                    node=dict(type='str'), taint=dict(type='bool', default=True))
    _providers.run('host', ConvergeModule(argument_spec=spec, supports_check_mode=True), LOADERS, run_host)


if __name__ == '__main__':
    main()
