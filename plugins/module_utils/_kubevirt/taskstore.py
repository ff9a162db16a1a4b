# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The task record in a VirtualMachine's annotations, with a compare-and-swap on resourceVersion.

A write is a JSON merge patch carrying ``metadata.resourceVersion``: the API
server refuses it with 409 Conflict when the object changed in between. The
KubeVirt controller writes the VM's status all the time, which changes the
resourceVersion without touching the record; such a 409 is retried with the
fresh resourceVersion as long as the record itself is still the one we loaded,
so only a change of the record makes the swap fail.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.owner import expire_if_owner_gone
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_API, Conflict, NotFound
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import views as kubevirt_views
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord, TaskStore, record_fields, record_from_fields

CAS_RETRIES = 8


def record_from_annotations(annotations, inferred_vm_state=None):
    """A :class:`TaskRecord` from a VM's annotations (``inferred_vm_state``, else STOPPED, when none is recorded)."""
    fields = dict((field, (annotations or {}).get(key)) for field, key in kubevirt_views.RECORD_ANNOTATIONS.items())
    return record_from_fields(fields, inferred_vm_state or 'STOPPED')


def annotations_from_record(record, last_action=None):
    """The annotations to write for ``record`` (None removes a key in a merge patch)."""
    return dict((kubevirt_views.RECORD_ANNOTATIONS[field], value) for field, value in record_fields(record, last_action).items())


def _record_part(annotations):
    return tuple((key, (annotations or {}).get(key)) for key in sorted(kubevirt_views.RECORD_ANNOTATIONS.values()))


class KubevirtTaskStore(TaskStore):
    """:class:`TaskStore` on a VirtualMachine; version = (resourceVersion, the record annotations).

    ``inferred_vm_state``: the effective vm_state of the observation, used for an idle record.
    """

    def __init__(self, client, namespace, name, inferred_vm_state=None, vm=None):
        self.client = client
        self.namespace = namespace
        self.name = name
        self.inferred_vm_state = inferred_vm_state
        self._cached = vm

    def _read(self):
        if self._cached is not None:
            vm, self._cached = self._cached, None
            return vm
        vm = self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachines', self.name)
        if vm is None:
            raise NotFound('VirtualMachine %s/%s does not exist (any more)' % (self.namespace, self.name), code=404)
        return vm

    def load(self):
        vm = self._read()
        annotations = (vm.get('metadata') or {}).get('annotations') or {}
        # the run holding the task was killed on this host: its lease is over now (as on libvirt)
        record = expire_if_owner_gone(record_from_annotations(annotations, self.inferred_vm_state))
        if record.idle() and self.inferred_vm_state:
            # an idle record is read as the observation corrects it (_phase views.effective_vm_state):
            # KubeVirt starts and stops instances by itself (run strategies)
            record = TaskRecord(vm_state=self.inferred_vm_state, previous_vm_state=record.previous_vm_state)
        return record, (vm['metadata'].get('resourceVersion'), _record_part(annotations))

    def compare_and_swap(self, expected_version, record):
        resource_version, expected_record = expected_version
        patch_annotations = annotations_from_record(record)
        for _attempt in range(CAS_RETRIES):
            patch = {'metadata': {'resourceVersion': resource_version, 'annotations': patch_annotations}}
            try:
                self.client.merge_patch(KUBEVIRT_API, self.namespace, 'virtualmachines', self.name, patch)
                return True
            except Conflict:
                vm = self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachines', self.name)
                if vm is None:
                    return False
                if _record_part((vm.get('metadata') or {}).get('annotations')) != expected_record:
                    return False
                resource_version = vm['metadata'].get('resourceVersion')
        return False
