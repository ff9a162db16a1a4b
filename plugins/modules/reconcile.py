#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: reconcile
short_description: Find and fix disagreements between vm_state and power_state on a host or namespace
version_added: 0.1.0
description:
  - Compares every VM's recorded C(vm_state) with the hypervisor's C(power_state) using the
    power-state reconciliation table of the phase model (Nova's C(_sync_power_states)), and finds
    tasks left behind by interrupted runs (their lease ran out, or the process that held them on this
    host is gone; Nova's C(_init_instance)).
  - Report-only by default; with O(fix=true) each disagreement is fixed through the same planner and
    action table as M(converge.virt.vm), and each stale task is recovered.
  - VMs with a task in flight are skipped, as the table says. A task whose lease is no finite number or ends further ahead
    than the longest possible task (two days of module timeouts, plus five minutes of clock skew) cannot have been written
    by a run of the collection; it is a stale task, reported with that reason and recovered by O(fix=true).
  - Never deletes a VM. A record lives with the VM (libvirt C(<metadata>), KubeVirt annotations), and whoever may write it
    may write any record, so a record alone is no reason to delete. A VM recorded C(DELETED) whose guest runs is reported
    only, and a stale C(DELETING) task is cleared (the VM kept as the hypervisor shows it); declare
    O(converge.virt.vm#module:state=absent) to delete. A fix that turns a guest off runs only when a second reading of the
    VM, taken just before it, agrees with the first (same record, same power state, same fix).
  - With O(backend=kubevirt) every C(VirtualMachine) of O(namespace) is examined with the same table. The power
    state compared is the one KubeVirt carries out (a start or stop already under way, for example after a change
    of C(runStrategy), counts as done); fixes go through the KubeVirt backend of M(converge.virt.vm), and stale
    tasks are recovered in the VM's annotations.
  - "libvirt only: O(uri), O(username), O(password). kubevirt only: O(kubeconfig), O(context), O(host), O(api_key), O(ca_cert),
    O(validate_certs), O(namespace) (its default V(default) aside). An option of the other backend is an error naming it."
author:
  - converge.virt developers (@converge-virt)
extends_documentation_fragment:
  - converge.virt.libvirt_connection
  - converge.virt.kubevirt_connection
attributes:
  check_mode:
    support: full
    description: Reports what would be done.
  diff_mode:
    support: none
    description: The report lists each disagreement.
options:
  backend:
    description:
      - Where the VMs live. V(libvirt) (every domain of a libvirt host) or V(kubevirt) (every C(VirtualMachine) of a namespace).
    type: str
    choices: [libvirt, kubevirt]
    default: libvirt
  namespace:
    description:
      - Namespace whose C(VirtualMachines) are examined (O(backend=kubevirt) only; another value than V(default) is refused on libvirt).
    type: str
    default: default
  fix:
    description: Fix what was found. Without it the module only reports.
    type: bool
    default: false
  name:
    description: Only these VMs (all VMs of the host or namespace when not given).
    type: list
    elements: str
  restart_stopped_guests:
    description:
      - A VM recorded ACTIVE whose guest shut itself down is started again instead of being recorded STOPPED.
    type: bool
    default: false
  accept_running_guests:
    description:
      - A VM recorded STOPPED that runs is recorded ACTIVE instead of being forced off.
    type: bool
    default: false
  shutdown_timeout:
    description: Seconds for a graceful shutdown when a fix stops a VM (forced stops do not wait). At most V(86400).
    type: int
    default: 60
requirements:
  - libvirt-python for O(backend=libvirt)
  - kubernetes (Python library) for O(backend=kubevirt)
seealso:
  - module: converge.virt.vm
  - module: converge.virt.vm_info
'''

EXAMPLES = r'''
- name: What disagrees on this host?
  converge.virt.reconcile:
    uri: qemu+ssh://root@hv1/system
  register: drift

- name: Fix it, restarting guests that stopped on their own
  converge.virt.reconcile:
    uri: qemu+ssh://root@hv1/system
    fix: true
    restart_stopped_guests: true

- name: What disagrees in a KubeVirt namespace?
  converge.virt.reconcile:
    backend: kubevirt
    namespace: demo
  register: kubevirt_drift
'''

RETURN = r'''
checked:
  description: Number of VMs compared.
  returned: always
  type: int
disagreements:
  description: One entry per VM that disagrees or holds a stale task.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: VM name., type: str, returned: always}
    vm_state: {description: Recorded vm_state., type: str, returned: always}
    power_state:
      description: "Hypervisor power_state; on kubevirt the power KubeVirt carries out (a start or stop under way counts as done)."
      type: str
      returned: always
    task_state: {description: The task recorded on the VM., type: str, returned: always}
    kind: {description: "V(power) for a vm_state/power_state disagreement, V(stale task) for a task whose run is gone.", type: str, returned: always}
    decision:
      description: "What the table says: record STOPPED, stop, force stop, finish delete, report only, or a stale-task recovery."
      type: str
      returned: always
    action:
      description:
        - "What was done (or would be done in check mode or without fix): a declared state, V(recover) for a stale task, or none."
        - "Never V(state=absent): a stale V(DELETING) task is only recovered (cleared), and a VM recorded C(DELETED) whose guest
          runs gets V(none); see RV(disagreements[].note)."
      type: str
      returned: always
    reason:
      description: "Why: the states compared for V(power); for V(stale task) why the task is stale (its run is gone, its lease ran out,
        or its lease is one no task can have written: not a finite number, or too far ahead)."
      type: str
      returned: always
    note:
      description: "What reconcile did not do and why (it never deletes a VM; a fix whose second reading disagreed with the first)."
      type: str
      returned: when something was left undone
    done: {description: Whether the fix ran., type: bool, returned: always}
    steps: {description: Steps the fix took., type: list, elements: dict, returned: when done}
    vm_state_after: {description: The VM's vm_state once a power fix ran., type: str, returned: when such a fix ran}
    error: {description: Why the fix failed., type: str, returned: when the fix failed}
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache
import time


from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.errors import ConvergeError
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import LIBVIRT_CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kubevirt_client
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession
from ansible_collections.converge.virt.plugins.module_utils._libvirt.fleet import list_vms
from ansible_collections.converge.virt.plugins.module_utils._common.owner import owner_gone
from ansible_collections.converge.virt.plugins.module_utils._libvirt.vm_backend import LibvirtVm, VmOptions, converge_vm
from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile, tasks
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import views as kubevirt_views
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration

LIBVIRT_ONLY = tuple(LIBVIRT_CONNECTION_ARGS)
KUBEVIRT_ONLY = tuple(kubevirt_client.KUBEVIRT_CONNECTION_ARGS)


def refused_option(params):
    """(field, reason) of the first option refused: one of the other backend, or a namespace that is not a DNS label; None when all is well (pure)."""
    backend = params.get('backend') or 'libvirt'
    if backend == 'kubevirt':
        for key in LIBVIRT_ONLY:
            if params.get(key) is not None:
                return key, 'is a libvirt option and is not supported with backend kubevirt'
        namespace = params.get('namespace')
        if namespace is not None and (len(namespace) > 63 or not kubevirt_client.DNS_LABEL.match(namespace)):
            return 'namespace', 'must be a DNS label (lower case letters, digits, -), got %r' % (namespace,)
        return None
    for key in KUBEVIRT_ONLY:
        # namespace has a default (the shared connection options): only another value is known to be meant for kubevirt
        if params.get(key) is not None and not (key == 'namespace' and params[key] == 'default'):
            return key, 'is a kubevirt option; set backend: kubevirt'
    return None


def _reading(obs, power_state, recorded):
    """The VM as examine() reads it (the keys of the bulk listing), or None when it does not exist (pure)."""
    if not obs.get('exists'):
        return None
    return {'name': obs['name'], 'vm_state': obs['vm_state'], 'power_state': power_state, 'task_state': obs.get('task_state'),
            'task_id': obs.get('task_id'), 'lease_until': obs.get('lease_until'), 'task_owner': obs.get('task_owner') or None,
            'recorded': recorded}


def kubevirt_reading(obs):
    """The VM as examine() reads it, from a KubeVirt observation (pure).

    vm_state is the record in the annotations (or the inferred word when there is none);
    power_state is the power KubeVirt carries out (a start or stop under way counts as done),
    the same reading the vm module plans from.
    """
    if not obs.get('exists'):
        return None
    return _reading(obs, kubevirt_vm_backend().intended_power(obs), bool(kubevirt_views.kubevirt_metadata(obs.get('vm')).get('vm_state')))


def libvirt_reading(obs):
    """The VM as examine() reads it, from one libvirt observation (the same words as the bulk listing; pure)."""
    return _reading(obs, obs.get('power_state'), bool(obs.get('recorded_vm_state')))


def kubevirt_vm_backend():
    """The KubeVirt vm backend (imported when needed: the libvirt path does not load it)."""
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend  # pylint: disable=import-outside-toplevel
    return vm_backend


# A record lives with the VM: whoever may write its metadata (libvirt) or annotations (KubeVirt) may write any
# record. Reconcile therefore never deletes a VM on the strength of a record (see _phase/reconcile.py
# FIX_DECLARATIONS), and acts destructively (turning a guest off) only on two reads that agree.
NOT_DELETED_NOTE = ('reconcile never deletes a VM on the strength of its record alone; declare state=absent with converge.virt.vm '
                    'to delete it (that finishes an interrupted delete), or any other state to keep it')
# what examine() compares between its reading and the second one taken before a destructive fix
READING_KEYS = ('vm_state', 'power_state', 'task_state', 'task_id', 'lease_until', 'task_owner', 'recorded')


def examine(vm, now, params):
    """The disagreement entry for one VM, or None when it agrees (pure, from the bulk view)."""
    entry = {'name': vm['name'], 'vm_state': vm['vm_state'], 'power_state': vm['power_state'], 'task_state': vm['task_state'],
             'done': False}
    if vm['task_state']:
        record = tasks.TaskRecord(vm_state=vm['vm_state'], task_state=vm['task_state'], lease_until=vm.get('lease_until'),
                                  owner=vm.get('task_owner'))
        reason = record.stale_reason(now, run_gone=owner_gone(vm.get('task_owner')))
        if reason is None:
            return None
        recovery = reconcile.recover_stale_task(vm['task_state'], vm['vm_state'], None, vm['power_state'])
        entry.update(kind='stale task', decision=recovery.action, action='recover', reason=reason)
        if recovery.action == reconcile.FINISH_DELETE:
            # Nova _init_instance finishes an interrupted delete; here the task is only cleared (the VM keeps
            # running or stays stopped as the hypervisor shows), a forged DELETING must not delete a VM
            entry['note'] = 'the interrupted delete is not finished: ' + NOT_DELETED_NOTE
        return entry
    if not vm.get('recorded'):
        return None
    decision = reconcile.power_sync_decision(vm['vm_state'], vm['power_state'])
    if decision.action in (reconcile.IN_SYNC, reconcile.LEAVE_ALONE, reconcile.SKIP_TASK_IN_FLIGHT):
        return None
    alternative = (decision.action == reconcile.RECORD_STOPPED and params['restart_stopped_guests']) or \
        (decision.action == reconcile.FORCE_STOP and vm['vm_state'] == 'STOPPED' and params['accept_running_guests'])
    fix = reconcile.fix_declaration(decision, use_alternative=alternative)
    entry.update(kind='power', decision=decision.action, reason=decision.reason,
                 action=('state=%s' % fix[0]) + (' (forced)' if fix[1].get('shutdown_timeout') == 0 else '') if fix else 'none')
    if decision.action == reconcile.REAP:
        entry['note'] = 'the VM is recorded %s but its guest runs: %s' % (vm['vm_state'], NOT_DELETED_NOTE)
    entry['_fix'] = fix
    entry['_reading'] = dict((key, vm.get(key)) for key in READING_KEYS)
    return entry


def reads_disagree(entry, again, now, params):
    """Why a second reading ``again`` of the VM of ``entry`` does not confirm its fix, or None when both reads agree (pure).

    Both reads must show the same record and power_state, and the second must still call for the same fix.
    """
    if again is None:
        return 'the VM is gone'
    first = entry.get('_reading') or {}
    changed = [key for key in READING_KEYS if first.get(key) != again.get(key)]
    if changed:
        return 'changed between two reads (%s)' % ', '.join('%s %s -> %s' % (key, first.get(key), again.get(key)) for key in changed)
    second = examine(again, now, params)
    if second is None or (second['kind'], second['decision'], second['action']) != (entry['kind'], entry['decision'], entry['action']):
        return 'the second read no longer calls for %s' % entry['action']
    return None


def _apply(vm, entry, params, converge, make_options, reading):
    """Run the fix of one entry through a vm backend (recovery of a stale task, then the fix declaration); updates it in place.

    ``reading(obs)`` turns the backend's observation into examine()'s reading: a destructive fix runs only when
    a second reading, taken just before it, agrees with the first (:func:`reads_disagree`).
    """
    fix = entry.pop('_fix', None)
    steps = []
    if entry['kind'] == 'stale task':
        recovered = vm.recover_stale(vm.observe(), time.time())
        entry['done'] = bool(recovered)
        steps = [recovered] if recovered else []
    entry['steps'] = steps
    if not fix:
        return
    declared, extra = fix
    if reconcile.destructive_fix(declared, entry['power_state']):
        why = reads_disagree(entry, reading(vm.observe()), time.time(), params)
        if why:
            entry['note'] = 'not fixed, %s: the next run looks again' % why
            return
    options = make_options(shutdown_timeout=extra.get('shutdown_timeout', params['shutdown_timeout']))
    changed, result = converge(vm, VmDeclaration(state=declared), None, options, False)
    entry['done'] = entry.get('done') or changed
    entry['steps'] = steps + result.get('steps', [])
    entry['vm_state_after'] = (result.get('vm') or {}).get('vm_state')


def apply_fix(connection, entry, params):
    """Run the fix of one entry on libvirt; updates it in place."""
    _apply(LibvirtVm(connection, entry['name']), entry, params, converge_vm, VmOptions, libvirt_reading)


def apply_fix_kubevirt(client, namespace, entry, params):
    """Run the fix of one entry on KubeVirt (the vm backend's converge, or its stale-task recovery); updates it in place."""
    backend = kubevirt_vm_backend()
    _apply(backend.KubevirtVm(client, namespace, entry['name']), entry, params, backend.converge_vm, backend.KubevirtOptions,
           kubevirt_reading)


def run_fixes(module, found, fixer):
    """Fix (or, in check mode, count as fixable) each entry; return changed. ``fixer(entry)`` runs one fix."""
    changed = False
    for entry in found:
        if module.params['fix'] and not module.check_mode and entry.get('action') != 'none':
            try:
                fixer(entry)
            except ConvergeError as exc:
                entry['error'] = exc.message
            changed = changed or entry['done']
        elif module.params['fix'] and module.check_mode and entry.get('action') != 'none':
            changed = True
        entry.pop('_fix', None)
        entry.pop('_reading', None)
    return changed


def finish(module, vms, found, changed, redact):
    """Exit with the report (fails naming the VMs whose fix failed)."""
    for entry in found:
        if entry.get('error'):
            entry['error'] = redact(entry['error'])
    failed = [entry['name'] for entry in found if entry.get('error')]
    result = dict(changed=changed, checked=len(vms), disagreements=sorted(found, key=lambda e: e['name']))
    if failed:
        module.fail_json(msg='could not fix %s' % ', '.join(failed), **result)
    module.exit_json(**result)


def main_kubevirt(module):
    """Every VirtualMachine of the namespace (or the named ones)."""
    namespace = module.params['namespace']
    vms, found, changed = [], [], False
    with kubevirt_client.ModuleSession(module) as session, session.connect() as client:
        from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve  # pylint: disable=import-outside-toplevel
        snapshot = kobserve.NamespaceSnapshot(client, namespace)
        wanted = set(module.params['name']) if module.params['name'] else None
        readings = [kubevirt_reading(snapshot.observe(name)) for name in snapshot.names() if wanted is None or name in wanted]
        vms = [vm for vm in readings if vm is not None]
        now = time.time()
        found = [entry for entry in (examine(vm, now, module.params) for vm in vms) if entry]
        changed = run_fixes(module, found, lambda entry: apply_fix_kubevirt(client, namespace, entry, module.params))
    finish(module, vms, found, changed, session.redact)


def main():
    """Entry point."""
    spec = dict(
        backend=dict(type='str', choices=['libvirt', 'kubevirt'], default='libvirt'),
        fix=dict(type='bool', default=False),
        name=dict(type='list', elements='str'),
        restart_stopped_guests=dict(type='bool', default=False),
        accept_running_guests=dict(type='bool', default=False),
        shutdown_timeout=dict(type='int', default=60),
    )
    spec.update(LIBVIRT_CONNECTION_ARGS)
    spec.update(kubevirt_client.KUBEVIRT_CONNECTION_ARGS)
    module = ConvergeModule(argument_spec=spec, supports_check_mode=True)
    refused = refused_option(module.params)
    if refused:
        module.fail_json(msg='%s: %s' % refused, field=refused[0])
    try:
        tasks.check_timeout('shutdown_timeout', module.params['shutdown_timeout'])
    except ConvergeError as exc:
        module.fail_json(**exc.to_result())
    if module.params['backend'] == 'kubevirt':
        main_kubevirt(module)
        return
    with ModuleSession(module) as session, session.connect() as connection:
        vms = list_vms(connection, names=module.params['name'])
        now = time.time()
        found = [entry for entry in (examine(vm, now, module.params) for vm in vms) if entry]
        changed = run_fixes(module, found, lambda entry: apply_fix(connection, entry, module.params))
    finish(module, vms, found, changed, session.redact)


if __name__ == '__main__':
    main()
