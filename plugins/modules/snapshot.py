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
author:
  - converge.virt developers (@converge-virt)
extends_documentation_fragment:
  - converge.virt.libvirt_connection
  - converge.virt.kubevirt_connection
attributes:
  check_mode:
    support: full
    description: Reports the planned steps (and every refusal) and changes nothing.
  diff_mode:
    support: full
    description: The VM's snapshot names before and after.
options:
  backend:
    description: Where the VM lives. V(libvirt) (a libvirt/KVM host) or V(kubevirt) (a KubeVirt C(VirtualMachine) in O(namespace)).
    type: str
    choices: [libvirt, kubevirt]
    default: libvirt
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
requirements:
  - libvirt-python (backend libvirt)
  - kubernetes (backend kubevirt)
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

- name: Roll a stopped KubeVirt VM back to a snapshot
  converge.virt.snapshot:
    backend: kubevirt
    namespace: demo
    vm: db-1
    name: nightly-2026-11-25
    state: restored
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

import datetime
import re
import time

from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import LIBVIRT_CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as phase
from ansible_collections.converge.virt.plugins.module_utils._phase import states


def argument_spec():
    """The module's argument spec."""
    spec = dict(
        backend=dict(type='str', choices=['libvirt', 'kubevirt'], default='libvirt'),
        vm=dict(type='str'),
        vms=dict(type='list', elements='str'),
        parallel=dict(type='int', default=8),
        name=dict(type='str', required=True),
        state=dict(type='str', choices=list(phase.STATES), default='present'),
        description=dict(type='str'),
        memory=dict(type='bool'),
        children=dict(type='bool', default=False),
        keep_last=dict(type='int'),
        older_than=dict(type='str'),
        safety_snapshot=dict(type='bool', default=True),
        wait_timeout=dict(type='int'),
        deletion_policy=dict(type='str', choices=['delete', 'retain']),
        target_vm=dict(type='str'),
        failure_deadline=dict(type='str'),
    )
    spec.update(LIBVIRT_CONNECTION_ARGS)
    spec.update(KUBEVIRT_CONNECTION_ARGS)
    return spec


# options of one backend that the other refuses, naming them (nothing is silently ignored); namespace has a default
LIBVIRT_ONLY = ('uri', 'username', 'password', 'memory')
KUBEVIRT_ONLY = ('kubeconfig', 'context', 'host', 'api_key', 'ca_cert', 'validate_certs', 'wait_timeout', 'deletion_policy', 'target_vm',
                 'failure_deadline')
MAX_WAIT = 86400


def refuse_other_backend(params):
    """Raise :class:`InvalidDeclaration` naming the first option of the other backend that is set."""
    if params['backend'] == 'kubevirt':
        for key in LIBVIRT_ONLY:
            if params.get(key) is not None:
                raise InvalidDeclaration(key, 'is a libvirt option and is not supported with backend kubevirt')
        if params.get('children'):
            raise InvalidDeclaration('children', 'is a libvirt option (KubeVirt snapshots have no parent and no children)')
        timeout = params.get('wait_timeout')
        if timeout is not None and not 1 <= timeout <= MAX_WAIT:
            raise InvalidDeclaration('wait_timeout', 'must be between 1 and %d seconds, got %r' % (MAX_WAIT, timeout))
        return
    for key in KUBEVIRT_ONLY:
        if params.get(key) is not None:
            raise InvalidDeclaration(key, 'is a kubevirt option; set backend: kubevirt')


def check_name(field, value):
    """A snapshot or VM name: not empty, no slash, no control character (libvirt names files after them)."""
    if not value or '/' in value or any(ord(char) < 32 for char in value):
        raise InvalidDeclaration(field, '%r is not a valid name (not empty, no slash, no control character)' % value)


def check_kubernetes_name(field, value):
    """A VirtualMachine or VirtualMachineSnapshot name: a DNS subdomain (lower case, digits, '-' and '.', at most 253)."""
    if not value or len(value) > 253 or not kubevirt_client.is_subdomain(value):
        raise InvalidDeclaration(field, '%r is not a valid Kubernetes name (a DNS subdomain: lower case letters, digits, \'-\' and \'.\', '
                                        'starting and ending with a letter or digit, at most 253 characters)' % value)


def safety_name(name, now=None, kubernetes=False):
    """Name of the safety snapshot before restoring ``name`` (``kubernetes``: a DNS subdomain, lower case, at most 253)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if kubernetes:
        suffix = '-before-restore-%s' % now.strftime('%Y%m%d%H%M%S')
        return name[:253 - len(suffix)] + suffix
    return '%s-before-restore-%s' % (name, now.strftime('%Y%m%dT%H%M%SZ'))


DURATION = re.compile(r'^\s*(\d+)\s*([smhdw]?)\s*$')
UNIT_SECONDS = {'': 1, 's': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 604800}


def parse_older_than(value, field='older_than'):
    """Seconds of an ``older_than`` duration (``7d``, ``12h``, ``30m``, ``90s``, ``2w``, a bare number of seconds); None when unset."""
    if value is None:
        return None
    match = DURATION.match(str(value))
    if not match or int(match.group(1)) < 1:
        raise InvalidDeclaration(field, 'must be a duration of 1 or more with unit s, m, h, d or w (such as 7d or 12h), got %r' % value)
    return int(match.group(1)) * UNIT_SECONDS[match.group(2)]


def add_older_than(steps, snapshots, declared, now=None):
    """``steps`` plus a delete step for each other snapshot taken more than ``older_than`` ago, oldest first (pure).

    Only snapshots observed now are named (each in the plan before anything is deleted); the declared one and those the
    plan deletes already are skipped."""
    seconds = parse_older_than(declared.get('older_than'))
    if seconds is None:
        return steps
    if declared['state'] != 'present':
        raise InvalidDeclaration('older_than', 'applies with state=present only')
    now = time.time() if now is None else now
    deleting = set(step.name for step in steps if step.op == phase.DELETE)
    reason = 'older_than %s' % declared['older_than']
    extra = [phase.SnapshotStep(phase.DELETE, snap.name, (('children', False), ('reason', reason)))
             for snap in phase.age_order(snapshots)
             if snap.name != declared['name'] and snap.name not in deleting and snap.created is not None and now - snap.created > seconds]
    return list(steps) + extra


def predicted_names(names, steps):
    """Snapshot names once ``steps`` ran (for check mode and the diff)."""
    result = set(names)
    for step in steps:
        if step.op == phase.CREATE:
            result.add(step.name)
        elif step.op == phase.DELETE:
            result.discard(step.name)
    return sorted(result)


def _libvirt_backend():
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import snapshots  # pylint: disable=import-outside-toplevel
    return snapshots


def _kubevirt_backend():
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshots  # pylint: disable=import-outside-toplevel
    return snapshots


def run(connection, params, check_mode):
    """Observe, plan, refuse or execute; return the result dict."""
    backend = _libvirt_backend()
    check_name('vm', params['vm'])
    check_name('name', params['name'])
    parse_older_than(params.get('older_than'))
    observer = backend.SnapshotObserver(connection, params['vm'])
    backend.check_task_free(observer)
    memory = params['memory']
    if memory is None:
        memory = observer.power_state() in (states.RUNNING, states.PAUSED)
    declared = dict(params, memory=memory)
    safety = safety_name(params['name']) if params['state'] == 'restored' and params['safety_snapshot'] else None
    steps, before, _current = backend.refuse_or_plan(observer, declared, safety)
    steps = add_older_than(steps, before, declared)
    names_before = sorted(snap.name for snap in before)
    operations = [dict([('op', step.op), ('snapshot', step.name)] + list(step.detail)) for step in steps]
    cleared = None
    if not steps:
        # a killed run's step had finished in libvirtd: nothing to do but the task it left on the VM
        cleared = backend.clear_stale_snapshot_task(observer, check_mode)
    if not check_mode:
        operations = backend.execute_plan(observer, steps)
    if cleared:
        operations.append(cleared)
    after, current = observer.snapshots()
    names_after = predicted_names(names_before, steps) if check_mode else sorted(snap.name for snap in after)
    found = [snap for snap in after if snap.name == params['name']]
    snapshot = {'phase': phase.ABSENT}
    if found and not (check_mode and params['state'] == 'absent'):
        snapshot = backend.public_snapshot(found[0], params['vm'], current)
        if params['state'] == 'restored' and not check_mode:
            snapshot['phase'] = phase.RESTORED
    elif check_mode and params['state'] == 'present':
        snapshot = {'name': params['name'], 'vm': params['vm'], 'phase': phase.PENDING, 'memory': memory, 'consistency': phase.CRASH_CONSISTENT}
    result = {'changed': bool(steps) or bool(cleared), 'operations': operations, 'snapshots': names_after, 'snapshot': snapshot,
              'diff': {'before': {'snapshots': names_before}, 'after': {'snapshots': names_after}}}
    if safety:
        result['safety_snapshot'] = safety
    return result


def run_kubevirt(client, params, check_mode, now=None):
    """The module on backend kubevirt: observe, plan, refuse or execute; return the result dict."""
    backend = _kubevirt_backend()
    namespace = params['namespace']
    check_kubernetes_name('vm', params['vm'])
    check_kubernetes_name('name', params['name'])
    check_kubernetes_name('namespace', namespace)
    parse_older_than(params.get('older_than'))
    failure_deadline = parse_older_than(params.get('failure_deadline'), field='failure_deadline')
    target = params.get('target_vm')
    if target is not None:
        check_kubernetes_name('target_vm', target)
        if params['state'] != 'restored':
            raise InvalidDeclaration('target_vm', 'applies with state=restored only')
        if target == params['vm']:
            target = None
    observer = backend.SnapshotObserver(client, namespace, params['vm'])
    backend.check_task_free(observer)
    safety = None
    if params['state'] == 'restored' and params['safety_snapshot'] and target is None:
        safety = safety_name(params['name'], now=now, kubernetes=True)
    if target is None:
        steps, before = backend.refuse_or_plan(observer, dict(params, memory=None), safety)
    else:
        steps, before = backend.plan_restore_into_new_vm(observer, params['name'], target)
    steps = add_older_than(steps, before, params)
    names_before = sorted(snap.name for snap in before)
    operations = [dict([('op', step.op), ('snapshot', step.name)] + list(step.detail)) for step in steps]
    # a killed run's step had finished in KubeVirt: nothing to do but the task it left on the VM
    cleared = None if steps else backend.clear_stale_snapshot_task(observer, check_mode)
    if not check_mode:
        runner = backend.Runner(observer, wait_timeout=params.get('wait_timeout') or 300, deletion_policy=params.get('deletion_policy'),
                                failure_deadline=failure_deadline)
        operations = runner.run(steps)
        if params['state'] == 'present' and params['name'] in names_before:
            # taken by an earlier run that stopped waiting (wait_timeout): KubeVirt is still at it, so this run waits (or
            # fails with KubeVirt's error when it failed; a failed snapshot is deleted with state absent and taken again)
            runner.await_ready(params['name'])
    if cleared:
        operations.append(cleared)
    objects = observer.objects()
    names_after = predicted_names(names_before, steps) if check_mode else sorted(objects)
    found = objects.get(params['name'])
    snapshot = {'phase': phase.ABSENT}
    if found is not None and not (check_mode and params['state'] == 'absent'):
        snapshot = backend.public_snapshot(found)
        if params['state'] == 'restored' and not (check_mode and steps):
            snapshot['phase'] = phase.RESTORED
    elif check_mode and params['state'] == 'present':
        snapshot = {'name': params['name'], 'vm': params['vm'], 'namespace': namespace, 'phase': phase.PENDING, 'memory': False,
                    'kind': 'VirtualMachineSnapshot', 'consistency': phase.CRASH_CONSISTENT, 'deletion_policy': params.get('deletion_policy')}
    result = {'changed': bool(steps) or bool(cleared), 'operations': operations, 'snapshots': names_after, 'snapshot': snapshot,
              'diff': {'before': {'snapshots': names_before}, 'after': {'snapshots': names_after}}}
    if safety:
        result['safety_snapshot'] = safety
    if target is not None:
        result['target_vm'] = target
    return result


def check_fleet(params):
    """The names of the fleet form (``vms``), or None for one VM; refuses what cannot be planned per VM."""
    names = params.get('vms')
    if names is None:
        return None
    if not names:
        raise InvalidDeclaration('vms', 'is empty: name at least one VM')
    duplicates = sorted(set(name for name in names if names.count(name) > 1))
    if duplicates:
        raise InvalidDeclaration('vms', 'names a VM more than once: %s' % ', '.join(duplicates))
    if not 1 <= params['parallel'] <= 64:
        raise InvalidDeclaration('parallel', 'must be between 1 and 64, got %r' % params['parallel'])
    if params.get('target_vm') is not None:
        raise InvalidDeclaration('target_vm', 'restores one VM\'s snapshot into one new VM: use vm, not vms')
    return names


def run_fleet(runner, connection, params, check_mode, names):
    """``runner`` (run or run_kubevirt) for each VM of ``names``, ``parallel`` at a time; (changed, results, failed names)."""
    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel

    def one(name):
        try:
            result = runner(connection, dict(params, vm=name, vms=None), check_mode)
        except ConvergeError as exc:
            return dict(exc.to_result(), vm=name, failed=True, changed=bool(getattr(exc, 'changed', False)))
        result.update(vm=name, failed=False)
        return result

    with ThreadPoolExecutor(max_workers=min(params['parallel'], len(names))) as pool:
        results = list(pool.map(one, names))
    return any(r['changed'] for r in results), results, [r['vm'] for r in results if r['failed']]


def main():
    """Entry point."""
    module = ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True, mutually_exclusive=[('vm', 'vms')],
                            required_one_of=[('vm', 'vms')])
    kubevirt = module.params['backend'] == 'kubevirt'
    with (kubevirt_client.ModuleSession(module) if kubevirt else ModuleSession(module)) as session:
        refuse_other_backend(module.params)
        names = check_fleet(module.params)
        runner = run_kubevirt if kubevirt else run
        with session.connect() as connection:
            if names is not None:
                changed, results, failed = run_fleet(runner, connection, module.params, module.check_mode, names)
                if not module._diff:  # pylint: disable=protected-access
                    for item in results:
                        item.pop('diff', None)
                if failed:
                    message = '%d of %d VMs failed: %s' % (len(failed), len(results), ', '.join(failed))
                    module.fail_json(**session.redact_result({'msg': message, 'changed': changed, 'results': results}))
                module.exit_json(**session.redact_result({'changed': changed, 'results': results}))
            result = runner(connection, module.params, module.check_mode)
    if not module._diff:  # pylint: disable=protected-access
        result.pop('diff')
    module.exit_json(**session.redact_result(result))


if __name__ == '__main__':
    main()
