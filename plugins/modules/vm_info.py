#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: vm_info
short_description: Report VMs with the collection's state words
version_added: 0.1.0
description:
  - Reports one VM, a list of VMs, or every VM of a connection, with exactly the state words the
    M(converge.virt.vm) module returns (vm_state, power_state, task_state, status, phase, state reason).
  - Reads all domains with one bulk call, so it stays fast on hosts with thousands of VMs.
  - With O(backend=kubevirt) it reports the C(VirtualMachines) of O(namespace) (four list calls for the whole namespace), with
    the same words computed from the VM, its VirtualMachineInstance and the DataVolumes and claims it references, and
    KubeVirt's own C(printableStatus) next to them as RV(vms[].printable_status).
  - "libvirt only: O(uri), O(username), O(password). kubevirt only: O(kubeconfig), O(context), O(host), O(api_key), O(ca_cert),
    O(validate_certs), O(namespace)."
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.read
options:
  name:
    description: Names of the VMs to report (all when not given). A name that does not exist is reported with C(exists=false).
    type: list
    elements: str
  status:
    description: Only VMs whose status is one of these words (for example V(Running), V(Stopped)); an unknown word is an error.
    type: list
    elements: str
  vm_state:
    description: Only VMs whose vm_state is one of these words (for example V(ACTIVE), V(STOPPED)); an unknown word is an error.
    type: list
    elements: str
seealso:
  - module: converge.virt.vm
'''

EXAMPLES = r'''
- name: Every VM of a host
  converge.virt.vm_info:
    uri: qemu+ssh://root@hv1/system
  register: all_vms

- name: The VMs that are not running
  converge.virt.vm_info:
    status: [Stopped, CrashLoopBackOff, Unknown]
  register: down

- name: The KubeVirt VMs of a namespace
  converge.virt.vm_info:
    backend: kubevirt
    namespace: demo
  register: kubevirt_vms
'''

RETURN = r'''
vms:
  description: One entry per VM, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Name., type: str, returned: always}
    exists: {description: Whether the VM exists., type: bool, returned: always}
    vm_state: {description: Stable state., type: str, returned: always}
    power_state: {description: Hypervisor state., type: str, returned: always}
    task_state: {description: The task in flight or null., type: str, returned: always}
    task_id: {description: Id of the task in flight (or of the last one recorded)., type: str, returned: when a task was recorded}
    task_owner: {description: "Who runs the task in flight, C(host:pid) of the module process; a task whose owner on this host is gone is stale.",
                 type: str, returned: when a task is in flight}
    status: {description: Printable status., type: str, returned: always}
    phase: {description: Instance phase., type: str, returned: always}
    phase_reason: {description: "Why a final phase is what it is (see M(converge.virt.vm)), or null.", type: str, returned: always}
    state_reason: {description: libvirt's reason., type: str, returned: when exists on libvirt}
    printable_status: {description: "KubeVirt's status.printableStatus (RV(vms[].status) is ours, computed independently).", type: str, returned: on kubevirt}
    run_strategy: {description: The VirtualMachine's run strategy., type: str, returned: on kubevirt}
    vmi_uid: {description: UID of the VirtualMachineInstance., type: str, returned: on kubevirt}
    namespace: {description: Namespace., type: str, returned: on kubevirt}
    node: {description: Node the instance runs on., type: str, returned: on kubevirt}
    vcpus: {description: Virtual CPUs., type: int, returned: when exists}
    memory_kib: {description: Maximum memory in KiB., type: int, returned: when exists}
    autostart: {description: Autostart flag., type: bool, returned: when exists}
    uuid: {description: UUID., type: str, returned: when exists}
    host: {description: The libvirt host name., type: str, returned: when exists}
    state: {description: "libvirt's own state word (running, paused, shutoff, crashed, pmsuspended, ...).", type: str, returned: when exists on libvirt}
    managed_save: {description: Whether a managed-save image (C(suspended)) exists., type: bool, returned: when exists on libvirt}
    persistent: {description: Whether the VM has a persistent definition (false for a transient domain)., type: bool, returned: when exists on libvirt}
    pending_restart: {description: The running guest runs an older definition than the persistent one., type: bool, returned: when exists on libvirt}
    lease_until: {description: "End of the lease of the recorded task (seconds since the epoch), or null.", type: float, returned: when exists on libvirt}
    moved_to: {description: "The host the VM migrated to (URI without credentials): it departed from this host (a departure record, see
                 M(converge.virt.vm) O(converge.virt.vm#module:if_moved)); also on a copy left defined here that does not run the guest.",
               type: str, returned: on libvirt when the host keeps a departure record of the VM}
    departure: {description: "The departure record (name, uuid, target, task_id, phase V(leaving) or V(left), since), as M(converge.virt.vm) returns it.",
                type: dict, returned: on libvirt when the host keeps a departure record of the VM}
    recorded: {description: "Whether the VM carries the collection's task record (false: RV(vms[].vm_state) is read off the power state).",
               type: bool, returned: when exists on libvirt}
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.vm_filters import check_filters, run_vm_info
from ansible_collections.converge.virt.plugins.module_utils._providers.vm_info import LOADERS


def main():
    """Entry point."""
    spec = _providers.argument_spec(name=dict(type='list', elements='str'),
                                    status=dict(type='list', elements='str'), vm_state=dict(type='list', elements='str'))
    _providers.run('vm_info', ConvergeModule(argument_spec=spec, supports_check_mode=True), LOADERS, run_vm_info, check=check_filters)


if __name__ == '__main__':
    main()
