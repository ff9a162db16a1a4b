#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: migration
short_description: Converge a VM onto another libvirt host or KubeVirt node (live or offline migration)
version_added: 0.1.0
description:
  - Declares that a VM, found on the host of O(uri), should run on the host of O(target_uri). A VM that
    already runs on the target is no change.
  - The migration follows the collection's migration phase machine (Pending, Scheduling, Scheduled,
    PreparingTarget, TargetReady, Running, Succeeded or Failed); every phase reached is returned in
    RV(phases), and the reason of a failure in RV(reason).
  - A live migration is accepted only from vm_state ACTIVE or PAUSED with no task in flight; an offline one
    (O(mode=offline)) only from STOPPED. A refused migration names the current state and changes nothing.
    While the VM moves, its task_state is MIGRATING; its vm_state is the same afterwards, also when the
    migration fails or is cancelled (the guest keeps running on the source and the target's leftovers
    are removed).
  - The migrate call runs in a thread on its own connections; progress is polled and an abort sent on
    another connection, so O(state=cancelled) from another process stops a migration in flight.
  - A run that was interrupted (the controller died) is picked up by the next run, which attaches to the
    migration still running, or finishes the record of the one that completed.
  - A target host marked as draining (M(converge.virt.host) with O(converge.virt.host#module:state=drained)) is refused.
  - A migration that fails before it started (the target cannot be reached, reason C(the target could not be reached), or it
    is draining) changes nothing and returns C(changed=false); the attempt is written to the VM's migration history, which
    M(converge.virt.migration_info) lists. That history is a log of attempts, not state of the VM, so writing it is no change.
  - With O(backend=kubevirt) the VM is a VirtualMachine of O(namespace); the module creates a
    C(VirtualMachineInstanceMigration) (one per VM, a migration already in flight is followed, never duplicated)
    and maps its phases and the instance's C(migrationState) to the same phase machine. O(target_node) is optional
    (KubeVirt's scheduler picks a node; cordoned and tainted nodes are never chosen); O(state=cancelled) deletes the
    migration object, which is KubeVirt's abort. The VM must have a running, C(LiveMigratable) instance.
  - "libvirt only: O(uri), O(username), O(password), O(target_uri), O(target_uris), O(target_username), O(target_password),
    O(mode), O(persistent), O(undefine_source), O(bandwidth), O(max_downtime), O(auto_converge), O(post_copy),
    O(completion_timeout), O(completion_action), O(copy_storage), O(peer_to_peer). kubevirt only: O(kubeconfig), O(context),
    O(host), O(api_key), O(ca_cert), O(validate_certs), O(namespace), O(target_node), O(source_node), O(pending_timeout)."
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.act
attributes:
  check_mode:
    description: Returns the phases a real run would go through and changes nothing.
  diff_mode:
    support: none
    description: The result carries the phases and where the VM runs.
options:
  backend:
    description: Where the VM lives.
  name:
    description: Name of the VM. Required unless O(names) is given.
    type: str
  names:
    description:
      - Migrate several VMs from O(uri) in one task (O(state=finished) only), O(parallel) at a time; one
        result per VM in RV(results). A failure of one VM never stops the others.
      - With O(backend=kubevirt) an entry may be C(namespace/name) to name a VM of another namespace than O(namespace).
      - The entries are names only; every other option given (O(mode), O(bandwidth), O(wait_timeout), O(target_uri),
        O(target_node), O(source_node), ...) applies to each VM of the list, as if given in one task per VM.
    type: list
    elements: str
  target_node:
    description:
      - KubeVirt only. The node the VM should run on. A VM that already runs there is no change. A node that is
        cordoned, tainted against the VM or not Ready is refused (reason C(the target host is being drained)).
      - A node the VM's own placement excludes (its C(nodeSelector) or required node affinity, which KubeVirt keeps in
        the migration's target pod) is refused before anything is created, naming the placement and the VM's node.
      - Passed to KubeVirt as the migration's C(spec.addedNodeSelector) on C(kubernetes.io/hostname).
      - Without it KubeVirt's scheduler chooses the node, and every run moves the VM again unless O(source_node) says where it
        should not run.
    type: str
  source_node:
    description:
      - KubeVirt only. The node the VM should leave. A VM that does not run there is no change (this makes
        draining a node idempotent, see the role C(converge.virt.evacuate)).
    type: str
  pending_timeout:
    description:
      - KubeVirt only. Seconds the migration's target pod may stay unschedulable before KubeVirt fails the migration
        (the annotation C(kubevirt.io/migrationUnschedulablePodTimeoutSeconds)). At most V(86400).
      - Without it a target pod the scheduler reports Unschedulable fails the migration at once (reason
        C(the target stayed unschedulable too long), the scheduler's message quoted) and the migration is aborted;
        KubeVirt alone would wait 300 seconds. Reading the target pod needs C(list) on C(pods) in the namespace (not in
        the minimal RBAC of docs/examples/kubevirt-rbac.yaml); without it the run waits for KubeVirt's timeout and says so
        in its notes.
    type: int
  target_uri:
    description:
      - libvirt URI of the host the VM should run on. With O(peer_to_peer) (the default) the source host's
        libvirt daemon connects to it, so it must be reachable from the source host as written.
    type: str
  target_uris:
    description:
      - Candidate target hosts instead of O(target_uri). Each VM goes to the candidate with the most free
        memory (libvirt's free memory, less what this task already placed there) that fits it; draining
        candidates are never chosen. A VM that already runs on one of them is no change.
    type: list
    elements: str
  target_username:
    description: User name for the target's SASL authentication (client-driven migration only).
    type: str
  target_password:
    description: Password for the target's SASL authentication (client-driven migration only). Never logged nor returned.
    type: str
  state:
    description:
      - V(finished) migrates and waits until the phase is Succeeded (or Failed).
      - V(started) returns as soon as the transfer runs; a detached process of this module follows it to the end
        and writes the outcome, which M(converge.virt.migration_info) reports.
      - V(cancelled) aborts the migration of the VM in flight (from any process); the guest stays on the source.
    type: str
    choices: [finished, started, cancelled]
    default: finished
  mode:
    description:
      - V(live) moves a running (or paused) VM without stopping it.
      - V(offline) moves the persistent definition of a stopped VM. Its disks are not copied, so the VM must be
        diskless or its disks on storage both hosts share at the same paths.
    type: str
    choices: [live, offline]
    default: live
  persistent:
    description: Define the VM persistently on the target (VIR_MIGRATE_PERSIST_DEST); the task record travels with it.
    type: bool
    default: true
  undefine_source:
    description:
      - Remove the definition from the source after success. With V(false), the source keeps a stopped copy of
        the definition, recorded as STOPPED with no task.
    type: bool
    default: true
  bandwidth:
    description: Maximum bandwidth of the transfer in MiB/s (unlimited when not given).
    type: int
  max_downtime:
    description: Maximum tolerated downtime of the final switch-over, in milliseconds.
    type: int
  auto_converge:
    description: Throttle the guest's vCPUs when its memory changes faster than it is transferred.
    type: bool
    default: false
  post_copy:
    description: Allow switching to post-copy (needed by O(completion_action=postcopy)).
    type: bool
    default: false
  completion_timeout:
    description:
      - Seconds the transfer may run (counted from phase Running) before O(completion_action) is taken, once. No limit when
        not given; at most V(86400). After a switch to post-copy the migration is still bounded by O(wait_timeout).
    type: int
  completion_action:
    description:
      - What to do when O(completion_timeout) passes. V(abort) cancels the migration (the guest stays on the
        source); V(postcopy) switches to post-copy (the guest runs on the target at once).
    type: str
    choices: [abort, postcopy]
    default: abort
  copy_storage:
    description:
      - Copy non-shared disks to the target (VIR_MIGRATE_NON_SHARED_DISK). The target needs volumes of the same
        size at the same paths.
    type: bool
    default: false
  peer_to_peer:
    description:
      - V(true) lets the source's libvirt daemon drive the migration (it survives the death of this
        controller). V(false) drives it from here over both connections (O(target_username) and
        O(target_password) apply only then).
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait for the migration to end. When they pass, the migration is aborted once (libvirt C(abortJob);
        KubeVirt deletes the migration object, which is its abort), the module waits at most 60 more seconds for the
        migration to end (the guest stays on the source), and fails. The same rule holds on both backends.
      - At most V(86400) (one day; a task record's lease is bounded by the longest task).
    type: int
    default: 600
  parallel:
    description:
      - With O(names), how many VMs migrate at the same time; V(2) when not given.
      - Refused without O(names) (one VM given with O(name) migrates alone), so that it is never silently ignored.
    type: int
notes:
  - The task record (vm_state, task_state MIGRATING) and a short history of the VM's last migrations live in the
    domain's metadata; see M(converge.virt.migration_info).
seealso:
  - module: converge.virt.migration_info
  - module: converge.virt.host
  - module: converge.virt.vm
'''

EXAMPLES = r'''
- name: Move web-1 to hv2 and wait
  converge.virt.migration:
    uri: qemu+ssh://root@hv1/system
    name: web-1
    target_uri: qemu+ssh://root@hv2/system
    bandwidth: 500
    max_downtime: 300
    auto_converge: true
  register: moved

- name: Start a long migration and return at once
  converge.virt.migration:
    uri: qemu+ssh://root@hv1/system
    name: db-1
    target_uri: qemu+ssh://root@hv2/system
    state: started

- name: Cancel it (the guest stays on hv1)
  converge.virt.migration:
    uri: qemu+ssh://root@hv1/system
    name: db-1
    state: cancelled

- name: Move a stopped, diskless VM
  converge.virt.migration:
    uri: qemu+ssh://root@hv1/system
    name: template-1
    target_uri: qemu+ssh://root@hv2/system
    mode: offline

- name: Spread three VMs over two hosts by free memory
  converge.virt.migration:
    uri: qemu+ssh://root@hv1/system
    names: [app-1, app-2, app-3]
    target_uris:
      - qemu+ssh://root@hv2/system
      - qemu+ssh://root@hv3/system
    parallel: 2

- name: Move a KubeVirt VM to node02 and wait
  converge.virt.migration:
    backend: kubevirt
    namespace: prod
    name: web-1
    target_node: node02

- name: Move every VM off node01 (KubeVirt picks the nodes; VMs already elsewhere are no change)
  converge.virt.migration:
    backend: kubevirt
    names: [prod/web-1, prod/web-2, staging/db-1]
    source_node: node01
    parallel: 3

- name: Abort the KubeVirt migration in flight (deletes its VirtualMachineInstanceMigration)
  converge.virt.migration:
    backend: kubevirt
    namespace: prod
    name: web-1
    state: cancelled
'''

RETURN = r'''
phase:
  description: The migration's phase at the end (Succeeded, Failed, Running with O(state=started)).
  returned: with O(name)
  type: str
phases:
  description: Every phase the migration went through in this run, in order.
  returned: with O(name)
  type: list
  elements: str
reason:
  description:
    - Why the migration failed (for example C(aborted), C(the target could not be reached), C(the target died or vanished)
      (it was reached, then failed), C(the target host is being drained)).
    - C(aborted) is an abort someone asked for (O(state=cancelled), O(wait_timeout), O(completion_timeout) with V(abort), the deleted migration object).
      C(the transfer timed out) (KubeVirt only) is KubeVirt's own abort that nobody asked for, of a transfer that made no
      progress for its migration C(progressTimeout) or did not complete within C(completionTimeoutPerGiB) seconds per GiB;
      the message quotes KubeVirt's C(failureReason) and the guest keeps running on the source.
  returned: with O(name)
  type: str
progress:
  description:
    - The last progress read from the source's job (bytes, bytes/s, ms), for example C(data_total),
      C(data_processed), C(data_remaining), C(memory_dirty_rate), C(memory_iteration), C(downtime), C(time_elapsed).
  returned: with O(name)
  type: dict
vm:
  description:
    - The VM's state words where it runs after the task (vm_state, task_state, power_state, status, phase, host).
    - C(host) is the name of the host the VM is on, as M(converge.virt.vm_info) reports it (libvirt's host name); RV(on_target)
      tells whether that is the target.
  returned: when known
  type: dict
on_target:
  description: Whether the VM runs on the target host at the end.
  returned: when known
  type: bool
target_uri:
  description: The target (credentials removed).
  returned: with O(name)
  type: str
source_uri:
  description: The source (credentials removed).
  returned: with O(name) on libvirt
  type: str
namespace:
  description: Namespace of the VM.
  returned: with O(name) on kubevirt
  type: str
notes:
  description: What was done besides the migration (picked-up runs, cleaned leftovers).
  returned: when there is something to say
  type: list
  elements: str
results:
  description: With O(names), one result per VM (name, changed, failed, msg, phase, phases, reason, progress, target_uri).
  returned: when O(names) is given
  type: list
  elements: dict
kubevirt_phase:
  description: The phase KubeVirt reports on the C(VirtualMachineInstanceMigration) (RV(phase) is ours, derived from it and the instance).
  returned: on kubevirt, when a migration object exists
  type: str
migration:
  description: Name of the C(VirtualMachineInstanceMigration) created or followed.
  returned: on kubevirt
  type: str
source_node:
  description: The node the VM ran on when the task started.
  returned: on kubevirt
  type: str
target_node:
  description: The declared target node, or the node KubeVirt chose.
  returned: on kubevirt
  type: str
node:
  description: The node the VM runs on after the task.
  returned: on kubevirt
  type: str
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache
from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common import migration_run
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.migration_run import (  # noqa: F401  # pylint: disable=unused-import
    DEFAULT_PARALLEL, check_list_form, parallel)
from ansible_collections.converge.virt.plugins.module_utils._providers.migration import LOADERS


def argument_spec():
    """The module's argument spec."""
    return migration_run.argument_spec(_providers.argument_spec())


def options_from(params):
    """Validated libvirt :class:`MigrationOptions`."""
    return LOADERS['libvirt']().options_from(params)


def kubevirt_options_from(params):
    """Validated :class:`KubevirtMigrationOptions`; libvirt-only options are refused by name."""
    _providers.refuse_other_backend('migration', dict(params, backend='kubevirt'))
    return LOADERS['kubevirt']().options_from(params)


def main():
    """Entry point."""
    module = ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True,
                            mutually_exclusive=[('name', 'names'), ('target_uri', 'target_uris')], required_one_of=[('name', 'names')])
    _providers.run('migration', module, LOADERS, migration_run.run_migration)


if __name__ == '__main__':
    main()
