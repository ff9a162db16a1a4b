# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cloud-init on libvirt: the NoCloud seed as a volume ``<vm>-cidata.iso`` attached as a read-only SATA cdrom.

The seed volume's content is compared by reading it back through a libvirt stream (``virStorageVol.download``)
and naming the files it carries with :func:`nocloud.seed_digest`. That is the robust choice over a digest
recorded in the domain's metadata: a record says what a run meant to write, not what the volume holds - a
run killed between the upload and the record, a volume rewritten or deleted behind our back, or a VM that
does not exist yet (nowhere to record) would all be missed. The image is small (a few hundred KiB), so the
read costs one short stream per run. The files are compared, not the image bytes: pycdlib stamps the
image with its creation time, so two builds of one seed never have equal bytes.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._common import nocloud
from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
# the seed as a domain XML names it is read by every run, without this module's code (domain_read); a declaration
# carries its Seed under domain_spec.SEED_KEY
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_read import seed_in_domain, seed_volume_name  # pylint: disable=unused-import
from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import sub_element, to_string
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks

# the cdrom's target: fixed, so that adding a disk never moves the seed (and never counts as a change)
SEED_DEV = 'sdz'
DEFAULT_POOL = 'default'


class Seed:
    """The declared seed of one VM: its files, digest, pool and volume (no bytes of user data leave this object)."""

    def __init__(self, name, cloud_init, disks, field='cloud_init'):
        if not isinstance(cloud_init, dict):
            raise InvalidDeclaration(field, 'must be a dict, got %s' % type(cloud_init).__name__)
        self.field = field
        self.name = name
        declared = dict((k, v) for k, v in cloud_init.items() if k != 'pool' and v is not None)
        self.files = nocloud.seed_files(declared, name, field)
        self.digest = nocloud.seed_digest(self.files)
        pool = cloud_init.get('pool')
        if pool is None:
            pool = next((d.get('pool') for d in disks or [] if isinstance(d, dict) and d.get('pool')), None) or DEFAULT_POOL
        if not isinstance(pool, str) or not pool.strip():
            raise InvalidDeclaration(field + '.pool', 'must be a storage pool name')
        self.pool = pool
        self.volume = seed_volume_name(name)

    def disk(self):
        """The cdrom the domain carries (a disk of the ``disks`` option's form)."""
        return {'dev': SEED_DEV, 'bus': 'sata', 'device': 'cdrom', 'pool': self.pool, 'volume': self.volume, 'readonly': True}

    def image(self):
        """The ISO9660 image (bytes)."""
        return nocloud.seed_iso(self.files)


def with_seed_disk(spec, seed):
    """``spec`` with the seed's cdrom added to its disks; refuses a declared disk on the seed's target."""
    disks = spec.get('disks')
    if disks is None:
        raise InvalidDeclaration(seed.field, 'needs disks declared (the seed is attached as one of the VM\'s disks; give disks: [] for none)')
    for index, disk in enumerate(disks):
        if (disk.get('dev') or disk.get('target')) == SEED_DEV:
            raise InvalidDeclaration('disks[%d].dev' % index, '%s is the cloud_init seed\'s cdrom; use another target' % SEED_DEV)
        if disk.get('volume') == seed.volume:
            raise InvalidDeclaration('disks[%d].volume' % index, '%s is the cloud_init seed volume; it is attached by cloud_init' % seed.volume)
    out = dict(spec)
    out['disks'] = list(disks) + [seed.disk()]
    return out


def _pool(conn, name, field):
    try:
        pool = conn.storagePoolLookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_POOL:
            raise InvalidDeclaration(field + '.pool', 'storage pool %r does not exist (the seed volume is stored there)' % name)
        raise
    if not pool.isActive():
        raise InvalidDeclaration(field + '.pool', 'storage pool %r is not active' % name)
    return pool


def _volume(pool, name):
    try:
        pool.refresh(0)
    except libvirt.libvirtError:
        pass
    try:
        return pool.storageVolLookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_VOL:
            return None
        raise


def download(conn, vol):
    """The whole content of a (small) volume, read through a libvirt stream."""
    length = vol.info()[1]
    stream = conn.newStream(0)
    vol.download(stream, 0, length, 0)
    chunks = []
    while True:
        data = stream.recv(1 << 20)
        if isinstance(data, int) or not data:
            break
        chunks.append(data)
    stream.finish()
    return b''.join(chunks)


def observed_digest(conn, seed):
    """The digest of the seed the VM's seed volume carries; None when there is no volume, '' when it holds no seed."""
    vol = _volume(_pool(conn, seed.pool, seed.field), seed.volume)
    if vol is None:
        return None
    data = download(conn, vol)
    try:
        files, label = nocloud.read_seed_iso(data)
    except Exception:  # pylint: disable=broad-exception-caught  # bytes that are not a seed image are "another seed"
        return ''
    if label != nocloud.VOLUME_LABEL:
        return ''
    return nocloud.seed_digest(files)


def write_seed(conn, seed):
    """Replace the seed volume with the declared seed: delete, create, upload (libvirt stream, no shell)."""
    pool = _pool(conn, seed.pool, seed.field)
    image = seed.image()
    old = _volume(pool, seed.volume)
    if old is not None:
        old.delete(0)
    root = ET.Element('volume')
    sub_element(root, 'name', seed.volume)
    sub_element(root, 'capacity', str(len(image)), unit='bytes')
    sub_element(sub_element(root, 'target'), 'format', type='raw')
    vol = pool.createXML(to_string(root), 0)
    try:
        stream = conn.newStream(0)
        vol.upload(stream, 0, len(image), 0)
        sent = [0]

        def chunk(_stream, nbytes, _opaque):
            data = image[sent[0]:sent[0] + nbytes]
            sent[0] += len(data)
            return data
        stream.sendAll(chunk, None)
        stream.finish()
    except libvirt.libvirtError:
        try:
            vol.delete(0)
        except libvirt.libvirtError:
            pass
        raise


def write_seed_under_task(vm, obs, seed, task_id, lease_seconds, pending_restart):  # pylint: disable=too-many-arguments
    """Write the seed of the existing VM ``vm`` (a LibvirtVm; ``obs`` its observation) while its task is held.

    The task (action ``update``, id ``<task_id>-cloud_init``) is taken before the volume is touched: a run that
    another run's task refuses (TaskConflict, or the action table for the recorded state) changes nothing, and two
    runs never write one seed at once. ``pending_restart``: the running guest boots the new seed only at its next
    boot, recorded under the same task. A VM that does not exist yet has no record to hold: its seed is written
    as it is, before the create step defines the VM on it.
    """
    if not obs.get('exists'):
        write_seed(vm.conn, seed)
        return
    store = vm.store(obs)
    task_id = (task_id or tasks.new_task_id()) + '-cloud_init'
    record = tasks.take_task(store, 'update', task_id, time.time(), lease_seconds=lease_seconds, owner=vm.owner, name=vm.name)
    try:
        write_seed(vm.conn, seed)
        if pending_restart:
            # remembered in the record like any restart-needing change (restart_on_change, pending_restart)
            store.set_pending_restart(True)
    except (ConvergeError, libvirt.libvirtError):
        try:
            tasks.abandon_task(store, task_id, name=vm.name, rolled_back=True)
        except (ConvergeError, libvirt.libvirtError):   # the first error is the one to report
            pass
        raise
    tasks.finish_task(store, task_id, name=vm.name, vm_state=record.vm_state)


def delete_seed(conn, pool_name, volume):
    """Delete the seed volume; True when it was there."""
    try:
        pool = conn.storagePoolLookupByName(pool_name)
    except libvirt.libvirtError:
        return False
    vol = _volume(pool, volume)
    if vol is None:
        return False
    vol.delete(0)
    return True
