#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: volume_info
short_description: Report storage volumes (libvirt volumes, KubeVirt claims and DataVolumes) and the VMs that use them
version_added: 0.1.0
description:
  - Reports the volumes of one pool, or of every active pool of a connection, with capacity, allocation,
    format, path, backing chain, and which VMs use each one in their live or persistent definition.
  - The same observation as M(converge.virt.volume) uses to plan.
  - With O(backend=kubevirt), the C(PersistentVolumeClaims) and CDI C(DataVolumes) of O(namespace) with the size asked for,
    the bound size, the claim and DataVolume phases, import progress, which VMs use each one (C(spec.template) or the
    running instance) and, for hotplugged disks, the hotplug phase (Pending, Bound, AttachedToNode, MountedToPod, Ready).
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.read
options:
  pool:
    description: Only the volumes of this pool (every active pool when not given). libvirt only.
    type: str
  name:
    description:
      - Only these volume names. A name that does not exist is reported with C(exists=false) (needs O(pool) on libvirt).
      - On O(backend=kubevirt), claim or DataVolume names in O(namespace) (every one when not given).
    type: list
    elements: str
seealso:
  - module: converge.virt.volume
'''

EXAMPLES = r'''
- name: Every volume of a host, with its users
  converge.virt.volume_info:
    uri: qemu:///system
  register: all_volumes

- name: Volumes of one pool that no VM uses
  converge.virt.volume_info:
    pool: data
  register: data
- ansible.builtin.debug:
    msg: "{{ data.volumes | selectattr('used_by', 'equalto', []) | map(attribute='name') | list }}"

- name: Claims and DataVolumes of a namespace, with the hotplug phase of each attachment
  converge.virt.volume_info:
    backend: kubevirt
    namespace: vms
    name: [web-1-data, fedora-root]
  register: claims
- ansible.builtin.debug:
    msg: "{{ claims.volumes | map(attribute='attachments') | flatten | map(attribute='hotplug_phase') | list }}"
'''

RETURN = r'''
volumes:
  description: One entry per volume.
  returned: always
  type: list
  elements: dict
  contains:
    key: {description: C(pool/name) (C(namespace/name) on kubevirt)., type: str, returned: always}
    pool: {description: Pool name., type: str, returned: on libvirt}
    namespace: {description: Namespace of the claim., type: str, returned: on kubevirt}
    kind: {description: C(PersistentVolumeClaim) or C(DataVolume)., type: str, returned: on kubevirt when exists}
    phase: {description: "Phase of the claim (Pending, Bound, Lost).", type: str, returned: on kubevirt when exists}
    dv_phase: {description: "Phase of the DataVolume (Pending, ImportScheduled, ImportInProgress, Succeeded, Failed, ...).", type: str,
               returned: on kubevirt when exists}
    bound_capacity: {description: "Bytes of the bound volume (C(status.capacity)); C(capacity) is the size asked for.", type: int,
                     returned: on kubevirt when exists}
    progress: {description: "Import progress of the DataVolume (C(status.progress), e.g. V(45.00%)).", type: str, returned: on kubevirt when exists}
    message: {description: "The DataVolume's failure message, or null.", type: str, returned: on kubevirt when exists}
    storage_class: {description: Storage class of the claim., type: str, returned: on kubevirt when exists}
    access_modes: {description: Access modes of the claim., type: list, elements: str, returned: on kubevirt when exists}
    volume_mode: {description: "C(Filesystem) or C(Block), or null when the claim does not say.", type: str, returned: on kubevirt when exists}
    resizing: {description: Whether the claim is being resized (a C(Resizing) or C(FileSystemResizePending) condition)., type: bool,
               returned: on kubevirt when exists}
    name: {description: Volume name., type: str, returned: always}
    exists: {description: Whether the volume exists., type: bool, returned: always}
    path: {description: Path on the host., type: str, returned: when exists}
    capacity: {description: Size in bytes., type: int, returned: when exists}
    allocation: {description: Bytes allocated on the host., type: int, returned: when exists}
    format: {description: raw or qcow2 (or what the pool reports)., type: str, returned: when exists}
    backing_chain: {description: "The backing files below the volume, each with path, format and volume.", type: list, returned: when exists}
    used_by: {description: Names of the VMs whose live or persistent definition uses the volume., type: list, returned: when exists}
    attachments: {description: "Where it is plugged in (vm, dev, bus, readonly, serial, live, persistent, vm_running; on kubevirt also
                  hotpluggable and hotplug_phase).", type: list, returned: when exists}
    partial:
      description:
        - True when an import into this volume never finished (a run was killed during the upload); libvirt backend.
        - Such a volume is never taken for the image; the next converge.virt.volume run that declares its import_from removes it and imports again.
      type: bool
      returned: when exists, libvirt
pools:
  description: The pools reported (name, exists, active, type, path, autostart, capacity, allocation, available); empty on kubevirt.
  returned: always
  type: list
  elements: dict
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._common.volume_run import run_volume_info
from ansible_collections.converge.virt.plugins.module_utils._providers.volume import LOADERS


def argument_spec():
    """The module's argument spec."""
    return _providers.argument_spec(pool=dict(type='str'), name=dict(type='list', elements='str'))


def main():
    """Entry point."""
    _providers.run('volume_info', ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True), LOADERS, run_volume_info)


if __name__ == '__main__':
    main()
