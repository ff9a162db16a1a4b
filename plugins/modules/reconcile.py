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
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.act
attributes:
  check_mode:
    description: Reports what would be done.
  diff_mode:
    support: none
    description: The report lists each disagreement.
options:
  backend:
    description:
      - Where the VMs live. V(libvirt) (every domain of a libvirt host) or V(kubevirt) (every C(VirtualMachine) of a namespace).
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

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common import reconcile_run
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.reconcile_run import check
from ansible_collections.converge.virt.plugins.module_utils._common.reconcile_run import (  # pylint: disable=unused-import
    apply as _apply, examine)
from ansible_collections.converge.virt.plugins.module_utils._providers.reconcile import LOADERS


def refused_option(params):
    """(field, reason) of the first option refused (see _common/reconcile_run.refused_option), or None."""
    return reconcile_run.refused_option(params, _providers.PROVIDERS, _providers.DEFAULT_BACKEND)


def kubevirt_reading(obs):
    """The VM as examine() reads it, from a KubeVirt observation (see _kubevirt.reconcile_runs)."""
    return LOADERS['kubevirt']().kubevirt_reading(obs)


def main():
    """Entry point."""
    shared = _providers.argument_spec()  # backend, then the connection options after the module's own (the order errors are reported in)
    spec = dict(backend=shared.pop('backend'), fix=dict(type='bool', default=False), name=dict(type='list', elements='str'),
                restart_stopped_guests=dict(type='bool', default=False), accept_running_guests=dict(type='bool', default=False),
                shutdown_timeout=dict(type='int', default=60))
    spec.update(shared)
    _providers.run('reconcile', ConvergeModule(argument_spec=spec, supports_check_mode=True), LOADERS, reconcile_run.run_reconcile, check=check)


if __name__ == '__main__':
    main()
