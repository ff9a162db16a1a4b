#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: snapshot
short_description: Snapshots of a VM as declared state (present, absent, restored), with retention and a safety snapshot
version_added: 0.1.0
description:
  - Creates, deletes and restores internal snapshots of a libvirt VM, kept inside its qcow2 disks.
  - A stopped VM gets a disk snapshot; a running or paused VM a snapshot with its memory (it is restored running or paused).
  - With O(backend=kubevirt), a snapshot is a C(VirtualMachineSnapshot) (snapshot.kubevirt.io/v1beta1) of a KubeVirt C(VirtualMachine)
    in O(namespace); the module waits until KubeVirt reports it ready (C(status.phase) Succeeded and C(status.readyToUse)).
    A restore is a C(VirtualMachineRestore) into the same VM, which must be stopped (a running VM is refused, naming its state),
    waited for until C(status.complete). KubeVirt snapshots hold the disks only (no memory) and have no parent.
    KubeVirt's snapshot controller and the C(Snapshot) feature gate must be enabled in the cluster.
  - While a snapshot is created, restored or deleted the VM holds a task (task_state C(IMAGE_SNAPSHOT),
    C(RESTORING_SNAPSHOT) or C(DELETING_SNAPSHOT)), so a snapshot never overlaps another task on the VM
    (a run of M(converge.virt.vm), M(converge.virt.volume) or M(converge.virt.migration)); a VM held by a live task is refused.
  - What this libvirt cannot do is refused before anything changes, naming the reason in the failure message and in C(reason);
    a writable disk that is not qcow2, UEFI firmware in pflash, a managed save image, a disk-only snapshot of a running VM
    (it would be an external snapshot, and libvirt before 9.9 cannot revert those).
  - libvirt snapshots are crash-consistent (as after a power cut), since filesystems are not frozen through a guest agent.
    On KubeVirt a snapshot of a running VM whose guest agent froze the filesystems (indication C(GuestAgent)) is
    filesystem-consistent; C(NoGuestAgent), an offline snapshot or no indication is reported crash-consistent.
  - O(state=restored) always reverts and reports C(changed), since no observation can prove that the VM's current data is still the
    snapshot's. A safety snapshot of the current state is taken first unless O(safety_snapshot=false).
  - Options of the other backend are refused naming them; libvirt only are the connection options O(uri), O(username),
    O(password), and O(memory), O(children); kubevirt only are the connection options, O(wait_timeout) and O(deletion_policy).
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.act
attributes:
  check_mode:
    description: Reports the planned steps (and every refusal) and changes nothing.
  diff_mode:
    description: The VM's snapshot names before and after.
options:
  backend:
    description: Where the VM lives. V(libvirt) (a libvirt/KVM host) or V(kubevirt) (a KubeVirt C(VirtualMachine) in O(namespace)).
  vm:
    description:
      - Name of the VM (libvirt domain, or KubeVirt C(VirtualMachine)).
      - One of O(vm) and O(vms) is required.
    type: str
  vms:
    description:
      - The fleet form - the same snapshot declaration (O(name), O(state) and the other options) for each of these VMs, in one
        task; up to O(parallel) VMs at a time over one connection. Each VM holds its own task while its steps run.
      - Returns RV(results), one per VM (vm, changed, failed, msg, operations, snapshots, snapshot); the task fails when one VM
        failed, naming them, and the others are done as declared. Mutually exclusive with O(vm).
    type: list
    elements: str
  parallel:
    description: With O(vms), how many VMs are worked on at the same time.
    type: int
    default: 8
  name:
    description: Name of the snapshot (on O(backend=kubevirt) a DNS subdomain name, the C(VirtualMachineSnapshot)'s name).
    type: str
    required: true
  state:
    description:
      - V(present) creates the snapshot when missing (an existing snapshot is never changed).
      - V(absent) deletes it when present; the VM's current data is not changed.
      - V(restored) reverts the VM to it (the snapshot must exist).
    type: str
    choices: [present, absent, restored]
    default: present
  description:
    description: Description stored with a new snapshot.
    type: str
  memory:
    description:
      - Include the guest's memory. Default true when the VM runs or is paused, false when it is stopped.
      - V(false) on a running VM and V(true) on a stopped VM are refused (see the description).
      - libvirt only (KubeVirt snapshots hold no memory).
    type: bool
  children:
    description:
      - With O(state=absent), delete the snapshots taken after it from it too; otherwise they are kept (re-parented).
      - libvirt only (KubeVirt snapshots have no parent).
    type: bool
    default: false
  keep_last:
    description:
      - With O(state=present), keep only the newest O(keep_last) snapshots of the VM (the one named included) and delete the
        older ones, each named in RV(operations) (check mode shows them). Every snapshot of the VM counts.
    type: int
  older_than:
    description:
      - With O(state=present), also delete the other snapshots of the VM taken longer ago than this duration
        (V(90s), V(30m), V(12h), V(7d), V(2w); a bare number is seconds), each named in RV(operations) with its reason
        (check mode shows them). The snapshot named by O(name) is never deleted by it. Combines with O(keep_last).
    type: str
  safety_snapshot:
    description: With O(state=restored), snapshot the current state first (named RV(safety_snapshot)) so a restore can be undone.
    type: bool
    default: true
  wait_timeout:
    description:
      - kubevirt only. Seconds to wait for each step (a snapshot to become ready, a restore to complete, a deleted
        snapshot to be gone) before failing with the last observed phase. Default V(300).
      - A snapshot left in progress by a run that timed out is waited for by the next run with O(state=present)
        (no change); one that failed fails the run with KubeVirt's error (delete it with O(state=absent) to take it again).
    type: int
  deletion_policy:
    description:
      - kubevirt only. C(spec.deletionPolicy) of a new C(VirtualMachineSnapshot) (also its safety snapshot) - V(delete) (KubeVirt's
        default) deletes its content with it, V(retain) keeps the C(VirtualMachineSnapshotContent) when the snapshot is deleted.
      - An existing snapshot is never changed.
    type: str
    choices: [delete, retain]
  target_vm:
    description:
      - kubevirt only, with O(state=restored). Restore into this new C(VirtualMachine) instead of O(vm) (the
        C(VirtualMachineRestore)'s C(spec.target)); KubeVirt creates it, halted, from the snapshot (its disks from the snapshot's
        volume snapshots). The VM O(vm) is not changed, so it may run, and no safety snapshot is taken (O(safety_snapshot) is not used).
      - Idempotent - once a restore of this snapshot made O(target_vm) (KubeVirt's C(restore.kubevirt.io/lastRestoreUID)
        annotation names it), a run changes nothing. A O(target_vm) that exists otherwise is refused before anything changes.
    type: str
  failure_deadline:
    description:
      - kubevirt only. C(spec.failureDeadline) of a new C(VirtualMachineSnapshot) (also its safety snapshot), a duration
        (V(90s), V(5m), V(1h); a bare number is seconds). KubeVirt fails a snapshot not done by then (its default is 5 minutes);
        the module stops waiting for one still in progress past its deadline, with that reason.
      - An existing snapshot is never changed.
    type: str
notes:
  - libvirt takes and reverts internal snapshots synchronously; the module waits for each call.
  - On KubeVirt the module waits for each step up to O(wait_timeout) seconds; the VM holds its task meanwhile (renewed while it waits).
seealso:
  - module: converge.virt.snapshot_info
  - module: converge.virt.vm
'''

EXAMPLES = r'''
- name: Snapshot a VM before an upgrade, keeping the last three
  converge.virt.snapshot:
    vm: web-1
    name: before-upgrade-{{ ansible_date_time.date }}
    description: before the kernel upgrade
    keep_last: 3

- name: Snapshot twenty VMs in one task, four at a time
  converge.virt.snapshot:
    vms: "{{ groups['web'] }}"
    name: before-upgrade
    parallel: 4

- name: Roll back (a safety snapshot of the current state is taken first)
  converge.virt.snapshot:
    vm: web-1
    name: before-upgrade-2026-11-23
    state: restored

- name: Delete a snapshot and the ones taken from it
  converge.virt.snapshot:
    vm: web-1
    name: before-upgrade-2026-11-23
    state: absent
    children: true

- name: Snapshot a KubeVirt VM, keeping the last five
  converge.virt.snapshot:
    backend: kubevirt
    namespace: demo
    vm: db-1
    name: nightly-{{ ansible_date_time.date }}
    keep_last: 5
    wait_timeout: 600

- name: Restore a KubeVirt snapshot into a new VM (the source keeps running)
  converge.virt.snapshot:
    backend: kubevirt
    namespace: demo
    vm: db-1
    name: nightly-2026-11-25
    state: restored
    target_vm: db-1-clone

- name: Roll a KubeVirt VM back in place - KubeVirt restores a VM only while it is stopped
  module_defaults:
    group/converge.virt.kubevirt:
      backend: kubevirt
      namespace: demo
  block:
    - name: Stop db-1
      converge.virt.vm:
        name: db-1
        state: stopped
    - name: Restore it
      converge.virt.snapshot:
        vm: db-1
        name: nightly-2026-11-25
        state: restored
    - name: Start it again
      converge.virt.vm:
        name: db-1
        state: running
'''

RETURN = r'''
snapshot:
  description: The snapshot named by O(name) after the run (none when absent).
  returned: always
  type: dict
  contains:
    name: {description: Snapshot name., type: str, returned: when present}
    vm: {description: VM name., type: str, returned: when present}
    phase: {description: "Ready (created), Restored (after a restore), Pending (check mode), or absent.", type: str, returned: always}
    namespace: {description: Namespace of the VirtualMachineSnapshot., type: str, returned: when present on kubevirt}
    kubevirt_phase: {description: "KubeVirt's own C(status.phase) (InProgress, Succeeded, Failed).", type: str, returned: when present on kubevirt}
    ready_to_use: {description: "The VirtualMachineSnapshot's C(status.readyToUse).", type: bool, returned: when present on kubevirt}
    indications: {description: "C(status.indications) (Online, GuestAgent, NoGuestAgent, Paused).", type: list, returned: when present on kubevirt}
    content: {description: Name of its VirtualMachineSnapshotContent., type: str, returned: when present on kubevirt}
    deletion_policy: {description: Its C(spec.deletionPolicy)., type: str, returned: when present on kubevirt}
    failure_deadline:
      description: "Its C(spec.failureDeadline) in seconds (KubeVirt's default 300 when unset)."
      type: float
      returned: when present on kubevirt
    error: {description: "C(status.error.message) KubeVirt reported, or none.", type: str, returned: when present on kubevirt}
    created: {description: "Creation time (UTC, ISO 8601).", type: str, returned: when present}
    creation_time: {description: Creation time (seconds since the epoch)., type: float, returned: when present}
    vm_state_at_snapshot: {description: "The VM's state when it was taken (running, paused, shutoff).", type: str, returned: when present}
    memory: {description: Whether the guest's memory is in it., type: bool, returned: when present}
    consistency:
      description: "C(crash-consistent): no guest agent froze the filesystems; C(filesystem-consistent) (kubevirt): the guest agent did."
      type: str
      returned: when present
    kind: {description: "C(internal) (kept inside the qcow2 disks) or C(VirtualMachineSnapshot).", type: str, returned: when present}
    description: {description: Its description., type: str, returned: when present}
    parent: {description: The snapshot it was taken from., type: str, returned: when present on libvirt}
    children: {description: Snapshots taken from it., type: list, returned: when present on libvirt}
    current: {description: Whether it is libvirt's current snapshot., type: bool, returned: when present on libvirt}
operations:
  description:
    - The steps taken (planned, in check mode), each with op (create_snapshot, restore_snapshot, delete_snapshot) and snapshot.
    - A run with no step that finds the task of a killed snapshot run on the VM (its step had finished in libvirtd or KubeVirt)
      clears it and reports op C(clear_stale_task) with its task_state and task_id (and C(changed)).
    - On kubevirt a restore step also names its C(restore) (the VirtualMachineRestore), and its C(target) when O(target_vm) is set.
  returned: always
  type: list
  elements: dict
snapshots:
  description: Names of the VM's snapshots after the run (as planned, in check mode).
  returned: always
  type: list
  elements: str
target_vm:
  description: The new VM the snapshot was restored into (kubevirt, O(target_vm)).
  returned: when target_vm is set and differs from vm
  type: str
results:
  description: With O(vms), one result per VM, in the order given (vm, changed, failed, msg when failed, and the keys above).
  returned: when vms is set
  type: list
  elements: dict
safety_snapshot:
  description: Name of the safety snapshot taken (or planned) before a restore.
  returned: when state is restored and safety_snapshot
  type: str
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common import snapshot_run
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.snapshot_run import (  # noqa: F401  # pylint: disable=unused-import
    add_older_than, check, check_fleet, check_name, parse_older_than, predicted_names, run_fleet, safety_name)
from ansible_collections.converge.virt.plugins.module_utils._providers.snapshot import LOADERS


def argument_spec():
    """The module's argument spec."""
    return snapshot_run.argument_spec(_providers.argument_spec())


def refuse_other_backend(params):
    """Raise :class:`InvalidDeclaration` naming the first option of the other backend that is set (or a bad wait_timeout)."""
    _providers.refuse_other_backend('snapshot', params)
    check(dict(params, vms=None))


def run(connection, params, check_mode):
    """One VM with backend libvirt (result dict)."""
    return LOADERS['libvirt']().converge(connection, params, check_mode)


def run_kubevirt(client, params, check_mode, now=None):
    """One VM with backend kubevirt (result dict)."""
    return LOADERS['kubevirt']().converge(client, params, check_mode, now=now)


def check_kubernetes_name(field, value):
    """A Kubernetes name (a DNS subdomain)."""
    LOADERS['kubevirt']().check_kubernetes_name(field, value)


def main():
    """Entry point."""
    module = ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True, mutually_exclusive=[('vm', 'vms')],
                            required_one_of=[('vm', 'vms')])
    _providers.run('snapshot', module, LOADERS, snapshot_run.run_snapshot, check=check)


if __name__ == '__main__':
    main()
