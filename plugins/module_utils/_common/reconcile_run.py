# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the reconcile module does the same on every backend: the options it refuses, examine(), the two-read check, fixes, the report.

:func:`run_reconcile` is the module's one runner; the backends' modules (``_libvirt/reconcile_runs.py``,
``_kubevirt/reconcile_runs.py``) give ``readings(connection, params)`` (the VMs as :func:`examine` reads them) and
``fix(connection, entry, params)`` (one fix, through their own vm backend and :func:`apply`); everything here is
backend-neutral (it imports no backend).
"""

from __future__ import annotations

import re
import time

from ansible_collections.converge.virt.plugins.module_utils._common import registry
from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone
from ansible_collections.converge.virt.plugins.module_utils._phase import reconcile, tasks
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration

# a Kubernetes namespace name (as _kubevirt.client.DNS_LABEL; repeated here so that a libvirt task does not import the KubeVirt client)
DNS_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z')


def _bad_namespace(params):
    """Why ``namespace`` is refused (not a DNS label), or None."""
    namespace = params.get('namespace')
    if namespace is not None and (len(namespace) > 63 or not DNS_LABEL.match(namespace)):
        return 'must be a DNS label (lower case letters, digits, -), got %r' % (namespace,)
    return None


def check(params):
    """Raises :class:`InvalidDeclaration` for a namespace that is not a DNS label, or :class:`ConvergeError` for a bad shutdown_timeout.

    Runs after the registry refused the options of another backend (a libvirt task's namespace is then unset or ``default``).
    """
    why = _bad_namespace(params)
    if why:
        raise InvalidDeclaration('namespace', why)
    tasks.check_timeout('shutdown_timeout', params['shutdown_timeout'])


def refused_option(params, providers, default='libvirt'):
    """(field, reason) of the first option refused: one of another backend, or a namespace that is not a DNS label; None when all is well (pure).

    ``providers``: the registry's map name -> provider; ``default``: the backend when ``params`` names none.
    """
    params = dict(params, backend=params.get('backend') or default)
    refused = registry.refused_option(providers, 'reconcile', params)
    if refused:
        return refused[0], refused[1][len(refused[0]) + 2:]
    why = _bad_namespace(params)
    return ('namespace', why) if why else None


def reading_of(obs, power_state, recorded):
    """The VM as examine() reads it (the keys of the bulk listing), or None when it does not exist (pure)."""
    if not obs.get('exists'):
        return None
    return {'name': obs['name'], 'vm_state': obs['vm_state'], 'power_state': power_state, 'task_state': obs.get('task_state'),
            'task_id': obs.get('task_id'), 'lease_until': obs.get('lease_until'), 'task_owner': obs.get('task_owner') or None,
            'recorded': recorded}


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


def apply(vm, entry, params, converge, make_options, reading):
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


def run_reconcile(module, provider, backend):
    """reconcile, on every backend: read the VMs (one bulk read), examine each, fix (``fix: true``) and report."""
    params = module.params
    with provider.session(module) as session, session.connect() as connection:
        vms = backend.readings(connection, params)
        now = time.time()
        found = [entry for entry in (examine(vm, now, params) for vm in vms) if entry]
        changed = run_fixes(module, found, lambda entry: backend.fix(connection, entry, params))
    finish(module, vms, found, changed, session.redact)
