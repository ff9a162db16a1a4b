#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: volume
short_description: Converge storage volumes (libvirt volumes, KubeVirt claims and DataVolumes) and their attachments to VMs
version_added: 0.1.0
description:
  - Declares volumes (size, format, content) and which VM each one is plugged into; the module observes the pools
    and every domain's live and persistent definition, plans one reconciliation pass with the collection's volume
    planner (tear down first, then set up) and runs it. Re-running an unchanged declaration reports no change.
  - Data is never lost by default. A volume is never shrunk; a volume used by any VM (live or persistent
    definition) is never deleted, and the refusal names the VMs; a disk is never detached from a running
    guest unless O(force=true). A refused volume is left entirely unchanged, other volumes proceed, and the task fails
    naming the volume, the field or the VM.
  - Attach and detach take the VM's task (C(attach_volume) / C(detach_volume)), so they never race a run of
    M(converge.virt.vm) on the same VM. A live detach asks the guest to release the disk and waits for it,
    asking again between attempts.
  - Converge many volumes in one task with O(volumes); the other options then serve as defaults of every item.
  - With O(backend=kubevirt) a volume is a C(PersistentVolumeClaim) of O(namespace), or a CDI C(DataVolume) when it is
    imported (O(import_from) an V(http://), V(https://) or V(docker://) URL), cloned (O(clone_from) another claim, or
    O(clone_from_datasource) a CDI C(DataSource), the usual handle of a golden image) or O(data_volume=true) (blank).
    The source of a clone is only read. The same planner runs - the same operations, refusals and words as on libvirt. Growing
    raises C(spec.resources.requests.storage) and waits for the resizer; deleting removes the DataVolume or the claim and
    is refused while a VirtualMachine or its instance references it, naming the VM (declare O(attachments=[]), and
    O(force=true) for a running VM, to unplug it first). An attachment hotplugs the claim into a running VM with the
    C(addvolume) subresource (kept in C(spec.template)) and waits for the volume phases Pending, Bound, AttachedToNode,
    MountedToPod and Ready; for a stopped VM C(spec.template) is edited. A detach uses C(removevolume) and waits for
    the instance to release the volume. Check mode sends every write with C(dryRun=All).
  - "Options for libvirt only: O(pool), O(pool_path), O(format), O(preallocation), O(import_format), O(backing_volume),
    O(wipe), O(uri), O(username), O(password). For kubevirt only: the connection options, O(data_volume), O(storage_class),
    O(access_modes), O(volume_mode), O(wait_timeout). Giving an option of the other backend fails naming it."
extends_documentation_fragment:
  - converge.virt.backend
  - converge.virt.backend.act
attributes:
  check_mode:
    description: Returns the operations a real run would take and changes nothing.
  diff_mode:
    description: Shows each volume's existence, capacity, format and attachments before and after.
options:
  backend:
    description: Where the volumes live. V(libvirt) (storage pools of a libvirt host) or V(kubevirt) (claims and DataVolumes of a namespace).
  name:
    description:
      - Name of the volume in O(pool). Required unless O(volumes) is given.
      - On O(backend=kubevirt), the name of the C(PersistentVolumeClaim) (and of the C(DataVolume) that owns it).
    type: str
  pool: &pool
    description:
      - Name of the storage pool. An existing pool is used as it is (started if it is inactive).
      - With O(pool_path), a directory pool is created and started when it does not exist.
    type: str
  pool_path: &pool_path
    description: Absolute path of the directory pool to create when O(pool) does not exist.
    type: str
  state: &state
    description:
      - V(present) creates or grows the volume; V(absent) deletes it (refused while a VM uses it).
      - Defaults to V(present).
    type: str
    choices: [present, absent]
  capacity: &capacity
    description:
      - Size with a unit (V(10GiB), V(512MiB), V(1G), V(10GB)); a bare number means bytes.
      - On O(backend=kubevirt) a Kubernetes quantity (V(10Gi), V(512Mi), V(1G) = 10^9 bytes) is read as Kubernetes
        reads it; sizes with a B unit are read as above. Not required to clone.
      - Required to create an empty volume. A larger size grows the volume (online through the guest when
        a running VM uses it); a smaller one is refused.
    type: raw
  format: &format
    description: V(raw) or V(qcow2) (default V(raw) for a new empty volume; the source's format for a clone or import).
    type: str
    choices: [raw, qcow2]
  preallocation: &preallocation
    description:
      - V(off) (sparse), V(metadata) (qcow2 only) or V(full) (all space allocated). Defaults to V(off).
      - Only used when the volume is created.
    type: str
    choices: ['off', metadata, full]
  clone_from: &clone_from
    description:
      - Create the volume as a copy of this volume (a name in O(pool), or C(pool/name)).
      - On O(backend=kubevirt), a claim to clone (C(name) in O(namespace), or C(namespace/name)); a DataVolume with a pvc source.
    type: str
  import_from: &import_from
    description:
      - Create the volume with the content of this image file on the machine running the module; its format is
        detected with C(qemu-img info) (or O(import_format)). The content is read back and its sha256 compared.
      - The path is opened once, without following a symbolic link (a link is refused), and must be a regular file; the
        format check, the sha256 and the upload all read that one open file, so replacing the path meanwhile changes
        nothing, and a file written to meanwhile fails the task and leaves no volume. Only raw and standalone qcow2
        images are imported; a qcow2 with a backing file or an external data file (C(data-file)) is refused, since the
        VM would read or write a file outside the pool.
      - While the image streams in, an empty volume C(<name>.converge-partial) marks the import as unfinished; a run killed
        in between leaves the volume marked (RV(converge.virt.volume_info#module:volumes[].partial)), and the next run with
        O(import_from) removes it and imports again; a declaration without O(import_from) is refused for it. Names ending in
        C(.converge-partial) are reserved.
      - On O(backend=kubevirt), an V(http://) or V(https://) URL (DataVolume http source) or a V(docker://) image
        (registry source), imported by CDI; the task waits for the import to succeed and fails with CDI's message.
    type: str
  import_format: &import_format
    description: Format of the O(import_from) image; it must match what C(qemu-img) detects.
    type: str
    choices: [raw, qcow2]
  backing_volume: &backing_volume
    description: Create the volume as a qcow2 overlay on this volume (a name in O(pool), or C(pool/name)).
    type: str
  wipe: &wipe
    description: Wipe the content before deleting the volume (O(state=absent)). Defaults to V(false).
    type: bool
  attachments: &attachments
    description:
      - The complete list of the VMs this volume is plugged into. An attachment not listed is detached
        (from a running guest only with O(force)); a listed one is added to the persistent definition and,
        when the VM runs, hot-plugged.
      - Not given means the volume's attachments are left alone.
      - On O(backend=kubevirt), hotplugged into a running VM (and kept in its C(spec.template)), or added to the
        C(spec.template) of a stopped VM.
    type: list
    elements: dict
    suboptions:
      vm:
        description: Name of the VM.
        type: str
        required: true
      dev:
        description:
          - Target device, for example V(vdb) or V(sdb).
          - On O(backend=kubevirt), the name of the disk and volume in the VM (a DNS label).
        type: str
        required: true
      bus:
        description:
          - Disk bus (default from the device name, V(virtio) for V(vd*)).
          - On O(backend=kubevirt) V(scsi) (default), V(virtio) or V(sata).
        type: str
        choices: [virtio, scsi, sata, ide, usb]
      readonly:
        description: Attach read-only.
        type: bool
        default: false
      serial:
        description: Disk serial number shown to the guest.
        type: str
  force:
    description:
      - Allow detaching a disk from a running guest (a hot-unplug), which the module refuses otherwise.
      - The guest must take part - a virtio (V(vd*)) or SCSI disk is released only by a guest OS that handles
        hot-unplug (a Linux guest with its virtio or SCSI driver; ACPI PCI hotplug for virtio on q35/pc). A guest that
        does not (no OS running yet, firmware, a kernel without the driver, a disk still mounted or in use) keeps
        the disk; the module repeats the request for O(detach_timeout) seconds, then fails naming the VM and the
        target, with the persistent definition unchanged. SATA and IDE disks cannot be hot-unplugged at all.
      - On kubevirt, C(removevolume) works only for a volume that was hotplugged (C(hotpluggable)); the guest must
        release it the same way.
    type: bool
    default: false
  data_volume: &data_volume
    description:
      - Create a CDI C(DataVolume) (O(backend=kubevirt) only). Defaults to V(true) with O(import_from), O(clone_from) or
        O(clone_from_datasource) (a blank DataVolume otherwise), else a plain C(PersistentVolumeClaim).
    type: bool
  clone_from_datasource: &clone_from_datasource
    description:
      - Create the volume as a clone of the claim a CDI C(DataSource) points to (O(backend=kubevirt) only), named C(name) in
        O(namespace), or C(namespace/name). The DataVolume gets a C(spec.sourceRef) of kind C(DataSource) with its name and namespace
        and CDI resolves it (its C(spec.source.pvc) or C(spec.source.snapshot)), the way KubeVirt's instance types and
        C(dataVolumeTemplates) use golden images. The DataSource and its claim are only read.
      - Without O(capacity) the clone takes the size of its source; a larger O(capacity) grows it.
      - Refused, naming the field, when the DataSource does not exist (checked before anything is created) or together
        with O(import_from) or O(clone_from).
      - A VM disk cloned from a DataSource when the VM is created is a O(converge.virt.vm#module:data_volume_templates)
        entry with the same C(sourceRef).
    type: str
  storage_class: &storage_class
    description: Storage class of a new claim (O(backend=kubevirt) only; the cluster default when not given).
    type: str
  access_modes: &access_modes
    description: Access modes of a new claim (O(backend=kubevirt) only; default V(ReadWriteOnce), or the storage profile's for a DataVolume).
    type: list
    elements: str
    choices: [ReadWriteOnce, ReadOnlyMany, ReadWriteMany, ReadWriteOncePod]
  volume_mode: &volume_mode
    description: Volume mode of a new claim (O(backend=kubevirt) only).
    type: str
    choices: [Filesystem, Block]
  wait_timeout:
    description:
      - Seconds to wait for a claim to bind, an import to finish, a resize, a deletion, or a hotplug to reach Ready or
        be released (O(backend=kubevirt) only; default 300). V(0) does not wait. At most V(86400).
    type: int
  detach_timeout:
    description: Seconds to wait for a running guest to release a disk (the request is repeated during that time). At most V(86400).
    type: int
    default: 30
  volumes:
    description:
      - Converge several volumes in one task. Each item takes O(name) and the volume options above; options given
        at the top level (O(state), O(pool), O(capacity), ...) are the defaults of every item, and an item's own value wins
        (a list such as O(attachments) is replaced whole, never merged). O(force), O(detach_timeout), O(wait_timeout) and
        the connection options apply to all.
      - A non-empty O(attachments) at the top level that two or more items would inherit is refused, naming the field (it
        would plug every volume into the same VM targets); V([]) is a valid default (unplug every listed volume).
    type: list
    elements: dict
    suboptions:
      name:
        description: Name of the volume.
        type: str
        required: true
      # each other option of an item is the top-level option of that name (the YAML alias: written once)
      pool: *pool
      pool_path: *pool_path
      state: *state
      capacity: *capacity
      format: *format
      preallocation: *preallocation
      clone_from: *clone_from
      import_from: *import_from
      import_format: *import_format
      backing_volume: *backing_volume
      wipe: *wipe
      attachments: *attachments
      data_volume: *data_volume
      clone_from_datasource: *clone_from_datasource
      storage_class: *storage_class
      access_modes: *access_modes
      volume_mode: *volume_mode
requirements:
  - qemu-img (only for O(import_from) on libvirt)
seealso:
  - module: converge.virt.volume_info
  - module: converge.virt.vm
'''

EXAMPLES = r'''
- name: A data volume plugged into web-1 (hot-plugged when it runs)
  converge.virt.volume:
    uri: qemu:///system
    pool: data
    pool_path: /srv/pools/data
    name: web-1-data.qcow2
    format: qcow2
    capacity: 20GiB
    attachments:
      - {vm: web-1, dev: vdb, bus: virtio, serial: web1data}

- name: Grow it (online, through the running guest)
  converge.virt.volume:
    pool: data
    name: web-1-data.qcow2
    capacity: 40GiB

- name: Import an image, then a qcow2 overlay on it
  converge.virt.volume:
    pool: data
    volumes:
      - {name: base.qcow2, import_from: /var/tmp/debian-12.qcow2}
      - {name: web-2-root.qcow2, backing_volume: base.qcow2}

- name: Unplug from a running guest and delete, wiped
  converge.virt.volume:
    pool: data
    name: old.raw
    state: absent
    attachments: []
    force: true
    wipe: true

- name: A claim in namespace vms, hotplugged into the running VM web-1 (waits for the phase Ready)
  converge.virt.volume:
    backend: kubevirt
    namespace: vms
    name: web-1-data
    capacity: 20Gi
    storage_class: standard
    attachments:
      - {vm: web-1, dev: data, bus: scsi, serial: web1data}

- name: Import a disk image with CDI (a DataVolume), then grow it
  converge.virt.volume:
    backend: kubevirt
    namespace: vms
    volumes:
      - {name: fedora-root, import_from: "https://example.com/images/fedora-40.qcow2", capacity: 10Gi}
      - {name: web-1-data, capacity: 40Gi}

- name: Three root disks cloned from one golden image, a DataSource (CDI reads the source, never writes it)
  converge.virt.volume:
    backend: kubevirt
    namespace: vms
    clone_from_datasource: os-images/fedora-40
    volumes:
      - {name: web-1-root}
      - {name: web-2-root}
      - {name: db-1-root, capacity: 40Gi}

- name: Unplug from the running VM and delete (refused while a VM uses it unless unplugged here)
  converge.virt.volume:
    backend: kubevirt
    namespace: vms
    name: web-1-data
    state: absent
    attachments: []
    force: true
'''

RETURN = r'''
volume:
  description:
    - The volume after the task (as observed before, in check mode).
    - The fields of an entry of RV(converge.virt.volume_info#module:volumes) (the same observation), documented there.
  returned: when O(name) is given
  type: dict
volumes:
  description: With O(volumes), the state of each volume (the same fields as RV(volume)).
  returned: when O(volumes) is given
  type: list
  elements: dict
operations:
  description:
    - The operations run (planned in check mode), in order, each with op, volume, and vm and target for attachments.
    - On kubevirt an operation also carries what was waited for - C(phases) (the hotplug phases seen up to C(Ready), or
      C(Detached); the DataVolume phases of an import), C(phase) of a new claim, C(dv_phase), C(bound_capacity) after a grow.
    - A failed operation has C(failed) and C(msg); an C(attach_config) undone because its live attach failed has C(rolled_back=true).
  returned: always
  type: list
  elements: dict
rolled_back:
  description:
    - When a live attach (hot-plug) failed - V(true) when this run had just added the disk to the VM's persistent definition and took it
      out again (nothing was changed for that attachment, and the task reports no change for it).
    - V(false) when the declaration was kept - on libvirt the persistent definition already held the disk before the run, or taking it
      out failed; on kubevirt a hotplug accepted but not Ready in time. The message says what stays where; the next run finishes it.
  returned: when a live attach failed
  type: bool
pool_operations:
  description: Pools created or started.
  returned: always
  type: list
  elements: dict
refusals:
  description: What was refused (volume, reason, and the vm, target or field concerned); the task fails when not empty.
  returned: always
  type: list
  elements: dict
deferred:
  description: Operations postponed (an operation in flight, backoff after failures).
  returned: always
  type: list
  elements: dict
uncertain:
  description: Volumes or attachments whose state could not be confirmed; they were left alone.
  returned: always
  type: list
  elements: str
'''

# pylint: disable=wrong-import-position  # bytecache.install() runs before the collection's own imports, which then use the cache

from ansible_collections.converge.virt.plugins.module_utils._common import bytecache

bytecache.install()

from ansible_collections.converge.virt.plugins.module_utils import _providers
from ansible_collections.converge.virt.plugins.module_utils._common import volume_run
from ansible_collections.converge.virt.plugins.module_utils._common.module import ConvergeModule
from ansible_collections.converge.virt.plugins.module_utils._providers.volume import LOADERS


def argument_spec():
    """The module's argument spec."""
    return volume_run.argument_spec(_providers.argument_spec(), _providers.PROVIDERS)


def declarations(params):
    """The normalized libvirt specs of ``params`` (validated before anything is touched)."""
    return LOADERS['libvirt']().declarations(params)


def kubevirt_declarations(params):
    """The normalized KubeVirt specs of ``params`` (validated before anything is touched)."""
    return LOADERS['kubevirt']().declarations(params)


def main():
    """Entry point."""
    module = ConvergeModule(argument_spec=argument_spec(), supports_check_mode=True, mutually_exclusive=[('name', 'volumes')],
                            required_one_of=[('name', 'volumes')])
    _providers.run('volume', module, LOADERS, volume_run.run_volume)


if __name__ == '__main__':
    main()
