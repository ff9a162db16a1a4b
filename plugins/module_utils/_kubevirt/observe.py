# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Observe KubeVirt VirtualMachines: read the VM, its VMI and the DataVolumes / PVCs it references.

The state words come from the pure :func:`kubevirt_views.kubevirt_vm_view` (shared with
the inventory). One VM costs one GET of the VM and one of the VMI, plus one per
referenced DataVolume / claim; a whole namespace costs four list calls
(:func:`observe_namespace`), which is what the fleet form and ``vm_info`` use.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import CDI_API, CORE_API, KUBEVIRT_API
from ansible_collections.converge.virt.plugins.module_utils._phase import views
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import views as kubevirt_views
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get

ERROR_STATUSES = ('ErrorUnschedulable', 'ErrImagePull', 'ImagePullBackOff', 'ErrorPvcNotFound', 'ErrorDataVolumeNotFound',
                  'DataVolumeError', 'CrashLoopBackOff')


def absent(name, namespace):
    """The observation of a VM that does not exist."""
    result = {'exists': False, 'name': name, 'namespace': namespace, 'vm': None, 'vmi': None}
    result.update(views.absent_view())
    result.update(printable_status=None, run_strategy=None, start_failures=0, pending_restart=False)
    return result


def condition_message(vm, vmi):
    """The message of the condition behind an error status (for failure messages), or None."""
    for obj, ctype, status in ((vmi, 'PodScheduled', 'False'), (vmi, 'Synchronized', 'False'), (vm, 'Failure', 'True'),
                               (vmi, 'Ready', 'False')):
        for cond in _get(obj, 'status', 'conditions') or []:
            if cond.get('type') == ctype and cond.get('status') == status and cond.get('message'):
                return '%s: %s' % (cond.get('reason') or ctype, cond['message'])
    return None


def build(name, namespace, vm, vmi, datavolumes, pvcs):
    """The observation dict from objects already read."""
    if vm is None:
        return absent(name, namespace)
    if vmi is not None:
        refs = _get(vmi, 'metadata', 'ownerReferences') or []
        if refs and not any(r.get('uid') == _get(vm, 'metadata', 'uid') for r in refs):
            vmi = None      # a VMI of the same name owned by something else is not this VM's
    view = kubevirt_views.kubevirt_vm_view(vm, vmi, datavolumes, pvcs)
    meta = kubevirt_views.kubevirt_metadata(vm)
    domain = _get(vm, 'spec', 'template', 'spec', 'domain') or {}
    result = {
        'exists': True, 'name': name, 'namespace': namespace, 'uid': _get(vm, 'metadata', 'uid'),
        'resource_version': _get(vm, 'metadata', 'resourceVersion'), 'generation': _get(vm, 'metadata', 'generation'),
        'vmi_uid': _get(vmi, 'metadata', 'uid'), 'node': _get(vmi, 'status', 'nodeName'),
        'ready': bool(_get(vm, 'status', 'ready')), 'vcpus': _get(domain, 'cpu', 'cores'),
        'memory': _get(domain, 'resources', 'requests', 'memory') or _get(domain, 'memory', 'guest'),
        'lease_until': meta.get('lease_until'), 'task_owner': meta.get('owner'), 'last_action': meta.get('last_action'),
        'message': condition_message(vm, vmi), 'vm': vm, 'vmi': vmi, 'datavolumes': datavolumes, 'pvcs': pvcs,
    }
    result.update(view)
    return result


def observe_vm(client, namespace, name):
    """Read one VM and everything its state words depend on."""
    vm = client.get(KUBEVIRT_API, namespace, 'virtualmachines', name)
    if vm is None:
        return absent(name, namespace)
    vmi = client.get(KUBEVIRT_API, namespace, 'virtualmachineinstances', name)
    claims, dv_names = kubevirt_views.kubevirt_volume_claims(vm)
    dvs, pvcs = [], []
    for dv_name in dv_names:
        dv = client.get(CDI_API, namespace, 'datavolumes', dv_name)
        if dv is not None:
            dvs.append(dv)
    for claim in claims + dv_names:
        pvc = client.get(CORE_API, namespace, 'persistentvolumeclaims', claim)
        if pvc is not None:
            pvcs.append(pvc)
    return build(name, namespace, vm, vmi, dvs, pvcs)


class NamespaceSnapshot:
    """Every VM, VMI, DataVolume and PVC of a namespace, read with one list call each."""

    def __init__(self, client, namespace):
        self.namespace = namespace
        self.vms = dict((_get(o, 'metadata', 'name'), o) for o in client.list(KUBEVIRT_API, namespace, 'virtualmachines'))
        self.vmis = dict((_get(o, 'metadata', 'name'), o) for o in client.list(KUBEVIRT_API, namespace, 'virtualmachineinstances'))
        need_volumes = any(any(kubevirt_views.kubevirt_volume_claims(vm)) for vm in self.vms.values())
        self.dvs = client.list(CDI_API, namespace, 'datavolumes') if need_volumes else []
        self.pvcs = client.list(CORE_API, namespace, 'persistentvolumeclaims') if need_volumes else []

    def observe(self, name):
        """The observation of ``name`` from the snapshot."""
        return build(name, self.namespace, self.vms.get(name), self.vmis.get(name), self.dvs, self.pvcs)

    def names(self):
        """Names of every VM of the namespace."""
        return sorted(self.vms)


def intended_power(obs):
    """The power_state vm_state is reconciled against: a start or stop KubeVirt already carries out counts as done (pure)."""
    if not obs.get('exists'):
        return obs.get('power_state')
    return kubevirt_views.kubevirt_intended_power(kubevirt_views.kubevirt_status_input(obs['vm'], obs.get('vmi')), obs['power_state'])


def public_view(obs):
    """The VM as a module returns it: no raw objects."""
    keep = ('name', 'namespace', 'exists', 'uid', 'vm_state', 'power_state', 'task_state', 'task_id', 'status', 'printable_status', 'phase',
            'phase_reason', 'run_strategy', 'pending_restart', 'vmi_uid', 'node', 'ready', 'start_failures', 'vcpus', 'memory', 'message')
    return dict((k, obs.get(k)) for k in keep if k in obs)
