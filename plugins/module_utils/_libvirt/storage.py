# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt storage: observation of pools and volumes, and one volume operation.

The decisions (what to create, grow, delete; what is refused) are made by
:func:`..._phase.volumes.plan_volumes`. This module only

* observes pools and volumes (:class:`StorageObserver`);
* executes one volume operation (:func:`execute_volume_operation`): create
  (empty, clone, import of a local image with a sha256 read-back check, qcow2
  overlay on a backing volume), grow (online through the guest when it runs),
  delete (optionally wiped).

Beside it: the declarations (pure, :mod:`.storage_spec`: :func:`normalize_volume` and the planner's
:class:`DesiredVolume` / :class:`Attachment`), the volume and pool XML (:mod:`.storage_xml`) and the local image of an
import (:mod:`.local_image`).

Volume keys are ``<pool>/<volume>``; a disk that is not a pool volume is keyed
by its path.
"""

from __future__ import annotations

import hashlib
import os

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import daemon_gone, libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.local_image import ImageChanged, LocalImage
from ansible_collections.converge.virt.plugins.module_utils._libvirt.storage_spec import PARTIAL_SUFFIX, split_key, volume_key
from ansible_collections.converge.virt.plugins.module_utils._libvirt.storage_xml import parse_pool_xml, parse_volume_xml, pool_xml, volume_xml
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase

MAX_CHAIN = 16


# ---------------------------------------------------------------------------------------------------------------------
# Observation
# ---------------------------------------------------------------------------------------------------------------------


class StorageObserver:
    """Reads pools and volumes of one connection, with per-run caches."""

    def __init__(self, connection):
        self.connection = connection
        self.conn = connection.conn
        self._pools = {}
        self._vol_objects = {}
        self._volumes = {}
        self._by_path = {}
        self._markers = {}

    def _err(self, exc, what):
        return self.connection.error(exc, what)

    def pool(self, name):
        """The virStoragePool or None."""
        if name not in self._pools:
            try:
                self._pools[name] = self.conn.storagePoolLookupByName(name)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_POOL:
                    raise self._err(exc, 'cannot look up storage pool %s' % name)
                self._pools[name] = None
        return self._pools[name]

    def forget_pool(self, name):
        """Drop cached knowledge of a pool (after it was created or started)."""
        self._pools.pop(name, None)
        self._vol_objects.pop(name, None)

    def pool_state(self, name):
        """``{name, exists, active, type, path, autostart, capacity, available}``."""
        pool = self.pool(name)
        if pool is None:
            return {'name': name, 'exists': False, 'active': False}
        try:
            info = parse_pool_xml(pool.XMLDesc(0))
            state = pool.info()
            return {'name': name, 'exists': True, 'active': bool(pool.isActive()), 'type': info['type'], 'path': info['path'],
                    'autostart': bool(pool.autostart()), 'capacity': state[1], 'allocation': state[2], 'available': state[3]}
        except libvirt.libvirtError as exc:
            raise self._err(exc, 'cannot read storage pool %s' % name)

    def pool_names(self):
        """Names of every pool of the connection."""
        try:
            return sorted(p.name() for p in self.conn.listAllStoragePools(0))
        except libvirt.libvirtError as exc:
            raise self._err(exc, 'cannot list storage pools')

    def _volume_objects(self, pool_name):
        """{name: virStorageVol} of a pool, without partial-import markers (kept in self._markers)."""
        if pool_name not in self._vol_objects:
            pool = self.pool(pool_name)
            objects = {}
            if pool is not None and pool.isActive():
                try:
                    objects = dict((v.name(), v) for v in pool.listAllVolumes(0))
                except libvirt.libvirtError as exc:
                    raise self._err(exc, 'cannot list the volumes of pool %s' % pool_name)
            self._markers[pool_name] = dict((name[:-len(PARTIAL_SUFFIX)], objects.pop(name)) for name in list(objects)
                                            if name.endswith(PARTIAL_SUFFIX))
            self._vol_objects[pool_name] = objects
        return self._vol_objects[pool_name]

    def partial_marker(self, key):
        """The marker volume left by an import that did not finish into ``key``, or None."""
        pool_name, name = split_key(key)
        self._volume_objects(pool_name)
        return self._markers.get(pool_name, {}).get(name)

    def volume_names(self, pool_name):
        """Names of the volumes of an active pool."""
        return sorted(self._volume_objects(pool_name))

    def vol(self, key):
        """The virStorageVol of ``key`` or None."""
        pool_name, name = split_key(key)
        return self._volume_objects(pool_name).get(name)

    def volume(self, key, refresh=False):
        """Observed volume ``{key, pool, name, path, capacity, allocation, format, backing_chain}`` or None."""
        if refresh:
            self._volumes.pop(key, None)
            pool_name, name = split_key(key)
            self._vol_objects.get(pool_name, {}).pop(name, None)
            self._markers.get(pool_name, {}).pop(name, None)
            pool = self.pool(pool_name)
            if pool is not None and pool.isActive():
                for store, lookup_name in ((self._volume_objects(pool_name), name), (self._markers[pool_name], name + PARTIAL_SUFFIX)):
                    try:
                        store[name] = pool.storageVolLookupByName(lookup_name)
                    except libvirt.libvirtError:
                        pass
        if key not in self._volumes:
            vol = self.vol(key)
            if vol is None:
                return None
            try:
                info = parse_volume_xml(vol.XMLDesc(0))
            except libvirt.libvirtError as exc:
                raise self._err(exc, 'cannot read volume %s' % key)
            pool_name, name = split_key(key)
            info.update(key=key, pool=pool_name, name=name, backing_chain=self.backing_chain(info['backing']),
                        partial=self.partial_marker(key) is not None)
            self._volumes[key] = info
            if info['path']:
                self._by_path[info['path']] = key
        return self._volumes[key]

    def backing_chain(self, backing):
        """The chain below a volume: ``[{path, format, volume}]`` (volume: the pool key when it is a pool volume)."""
        chain = []
        while backing and len(chain) < MAX_CHAIN:
            key = self.key_of_path(backing['path'])
            entry = {'path': backing['path'], 'format': backing['format'], 'volume': key}
            chain.append(entry)
            if key is None:
                break
            vol = self.vol(key)
            try:
                backing = parse_volume_xml(vol.XMLDesc(0))['backing'] if vol is not None else None
            except libvirt.libvirtError:
                backing = None
        return chain

    def key_of_path(self, path):
        """The pool key of a volume path, or None when no active pool holds it."""
        if path not in self._by_path:
            try:
                vol = self.conn.storageVolLookupByPath(path)
                self._by_path[path] = volume_key(vol.storagePoolLookupByVolume().name(), vol.name())
            except libvirt.libvirtError:
                self._by_path[path] = None
        return self._by_path[path]


# ---------------------------------------------------------------------------------------------------------------------
# Execution of one volume operation
# ---------------------------------------------------------------------------------------------------------------------


def ensure_pool(connection, observer, name, path, check_mode):
    """Make pool ``name`` usable: create and start a directory pool at ``path`` when declared; return a note or None."""
    pool = observer.pool(name)
    if pool is None:
        if not path:
            raise InvalidDeclaration('pool', 'storage pool %s does not exist on this connection (give pool_path to create a directory pool)'
                                     % name)
        if check_mode:
            return {'op': 'create_pool', 'pool': name, 'path': path}
        try:
            pool = connection.conn.storagePoolDefineXML(pool_xml(name, path), 0)
            pool.build(0)
            pool.create(0)
            pool.setAutostart(1)
        except libvirt.libvirtError as exc:
            raise connection.error(exc, 'cannot create directory pool %s at %s' % (name, path))
        observer.forget_pool(name)
        return {'op': 'create_pool', 'pool': name, 'path': path}
    actual_path = parse_pool_xml(pool.XMLDesc(0))['path']
    if path and actual_path and os.path.normpath(actual_path) != os.path.normpath(path):
        raise InvalidDeclaration('pool_path', 'pool %s already exists with path %s, not %s' % (name, actual_path, path))
    if not pool.isActive():
        if check_mode:
            return {'op': 'start_pool', 'pool': name}
        try:
            pool.create(0)
        except libvirt.libvirtError as exc:
            raise connection.error(exc, 'cannot start storage pool %s' % name)
        observer.forget_pool(name)
        return {'op': 'start_pool', 'pool': name}
    return None


def _upload(conn, vol, image):
    """Send the image (a checked :class:`LocalImage`) into vol; the sha256 of the bytes sent."""
    digest = hashlib.sha256()
    read = image.reader()

    def chunk(_stream, nbytes, _opaque):
        data = read(nbytes)
        digest.update(data)
        return data
    stream = conn.newStream(0)
    vol.upload(stream, 0, image.size, 0)
    stream.sendAll(chunk, None)
    stream.finish()
    return digest.hexdigest()


def _delete_partial(vol):
    try:
        vol.delete(0)
    except libvirt.libvirtError:
        pass


def volume_sha256(conn, vol, length):
    """sha256 of the first ``length`` bytes of a volume, read back through libvirt."""
    digest = hashlib.sha256()
    stream = conn.newStream(0)
    vol.download(stream, 0, length, 0)
    received = 0
    while True:
        data = stream.recv(1 << 20)
        if isinstance(data, int) or not data:
            break
        digest.update(data)
        received += len(data)
    stream.finish()
    return digest.hexdigest(), received


def _import(connection, observer, pool, op, spec, image, result):
    """Create volume op.volume from the local image (opened once, every step reads that descriptor); the volume."""
    name = split_key(op.volume)[1]
    fmt, capacity = spec['format'], spec['capacity']
    image.inspect(spec['import_format'])
    if fmt and fmt != image.format:
        raise InvalidDeclaration('format', 'declared %s but the image to import is %s' % (fmt, image.format))
    if capacity is not None and capacity < image.virtual_size:
        raise InvalidDeclaration('capacity', 'smaller (%d bytes) than the image to import (%d bytes)' % (capacity, image.virtual_size))
    expected = image.sha256()
    # the marker goes first: a run killed during the upload leaves a volume that the next run knows to be partial
    # (a marker left alone - a run killed before it created the volume - is reused)
    marker = observer.partial_marker(op.volume) or pool.createXML(volume_xml(name + PARTIAL_SUFFIX, 0, 'raw'), 0)
    vol = pool.createXML(volume_xml(name, image.virtual_size, image.format), 0)
    try:
        sent = _upload(connection.conn, vol, image)
        if sent != expected:
            raise image.changed('the bytes sent are not the ones hashed')
    except (libvirt.libvirtError, ImageChanged) as exc:
        # a half-written volume would pass for the imported one in the next run: the volume this run created goes
        _delete_partial(vol)
        _delete_partial(marker)
        if isinstance(exc, ImageChanged):
            raise
        raise connection.error(exc, 'import of %s into %s failed, the partial volume was removed' % (spec['import_from'], op.volume))
    actual, received = volume_sha256(connection.conn, vol, image.size)
    if actual != expected or received != image.size:
        raise BackendError('import of %s into %s: the content read back differs (sha256 %s, expected %s); the volume is left for inspection, '
                           'marked partial (the next run imports it again)' % (spec['import_from'], op.volume, actual, expected))
    marker.delete(0)
    result.update(imported_from=spec['import_from'], sha256=actual, image_format=image.format)
    if capacity is not None and capacity > image.virtual_size:
        vol.resize(capacity, 0)
    return vol


def _create(connection, observer, spec, op):
    pool_name, name = split_key(op.volume)
    pool = observer.pool(pool_name)
    fmt = spec['format']
    capacity = spec['capacity']
    result = {}
    if spec['clone_from']:
        src = observer.volume(spec['clone_from'])
        if src is None:
            raise InvalidDeclaration('clone_from', 'source volume %s does not exist' % spec['clone_from'])
        if capacity is not None and capacity < src['capacity']:
            raise InvalidDeclaration('capacity', 'the clone would be smaller (%d bytes) than its source %s (%d bytes)'
                                     % (capacity, spec['clone_from'], src['capacity']))
        xml = volume_xml(name, max(capacity or 0, src['capacity']), fmt or src['format'] or 'raw')
        vol = pool.createXMLFrom(xml, observer.vol(spec['clone_from']), 0)
        # libvirt copies the source at its own size whatever the XML asks for: grow the copy to the declared capacity
        if capacity is not None and vol.info()[1] < capacity:
            try:
                vol.resize(capacity, 0)
            except libvirt.libvirtError:
                vol.delete(0)
                raise
            result['grown_to'] = capacity
        result['cloned_from'] = spec['clone_from']
    elif spec['import_from']:
        with LocalImage(spec['import_from']) as image:
            vol = _import(connection, observer, pool, op, spec, image, result)
    elif spec['backing_volume']:
        base = observer.volume(spec['backing_volume'])
        if base is None:
            raise InvalidDeclaration('backing_volume', 'backing volume %s does not exist' % spec['backing_volume'])
        if capacity is not None and capacity < base['capacity']:
            raise InvalidDeclaration('capacity', 'an overlay cannot be smaller than its backing volume (%d bytes)' % base['capacity'])
        xml = volume_xml(name, max(capacity or 0, base['capacity']), 'qcow2', backing={'path': base['path'], 'format': base['format']})
        vol = pool.createXML(xml, 0)
        result['backing_volume'] = spec['backing_volume']
    else:
        if capacity is None:
            raise InvalidDeclaration('capacity', 'is required to create volume %s' % op.volume)
        flags = 0
        if spec['preallocation'] == 'metadata':
            flags |= libvirt.VIR_STORAGE_VOL_CREATE_PREALLOC_METADATA
        vol = pool.createXML(volume_xml(name, capacity, fmt or 'raw', spec['preallocation']), flags)
    del vol
    return result


def execute_volume_operation(connection, observer, op, spec, attachments):
    """Run one create / grow / delete operation of a plan; return extra result fields.

    ``spec``: the normalized declaration of the volume; ``attachments``: the
    actual attachments (to grow online through the guest that uses it).
    """
    try:
        if op.kind == phase.CREATE:
            return _create(connection, observer, spec, op)
        vol = observer.vol(op.volume)
        if vol is None:
            raise BackendError('volume %s vanished while being converged' % op.volume)
        if op.kind == phase.GROW:
            detail = dict(op.detail)
            live = [a for a in attachments if a.volume == op.volume and a.live and a.vm_running]
            if live:
                dom = connection.conn.lookupByName(live[0].vm)
                dom.blockResize(live[0].target, detail['to'], libvirt.VIR_DOMAIN_BLOCK_RESIZE_BYTES)
                return {'online': True, 'through': '%s:%s' % (live[0].vm, live[0].target)}
            vol.resize(detail['to'], 0)
            return {'online': False}
        if op.kind == phase.DELETE:
            wiped = False
            if spec and spec.get('wipe'):
                vol.wipe(0)
                wiped = True
            vol.delete(0)
            marker = observer.partial_marker(op.volume)
            if marker is not None:
                marker.delete(0)
            return {'wiped': wiped}
    except libvirt.libvirtError as exc:
        if daemon_gone(exc):
            raise _daemon_gone(connection, exc, op, observer)
        raise connection.error(exc, '%s of %s failed' % (op.kind, op.volume))
    raise BackendError('unknown volume operation %s' % op.kind)


def _daemon_gone(connection, exc, op, observer):
    """The error of a volume operation whose libvirt daemon went away under it: what happened, the volume as last read
    (before the operation) and why running the task again converges."""
    doing = op.kind.split('_')[0]       # grow_volume -> grow
    error = connection.error(exc, '%s of %s failed' % (op.kind, op.volume), during='the %s of volume %s' % (doing, op.volume))
    try:
        info = observer.volume(op.volume)      # as read before the operation (cached): the daemon can no longer be asked
        last = 'absent' if info is None else '%s bytes' % info.get('capacity')
    except (ConvergeError, libvirt.libvirtError):
        last = 'not known (it was not read before)'
    text = ('%s; volume %s was %s when last read, before the %s; run the task again once the daemon is back: it plans from what '
            'libvirt then shows (an interrupted import is marked partial and imported again)' % (error.message, op.volume, last, doing))
    return BackendError(connection.redact(text), volume_last_read=last, **error.details)


def public_volume(info, used_by=None, attachments=None):
    """The volume as reported in results."""
    if info is None:
        return None
    return {'key': info['key'], 'pool': info['pool'], 'name': info['name'], 'path': info['path'], 'capacity': info['capacity'],
            'allocation': info['allocation'], 'format': info['format'], 'backing_chain': info['backing_chain'],
            'used_by': sorted(used_by or ()), 'attachments': attachments or [], 'partial': bool(info.get('partial'))}


def remove_partial(connection, observer, key):
    """Delete the volume of an import that never finished, and its marker; the caller checked nobody uses it."""
    try:
        vol = observer.vol(key)
        if vol is not None:
            vol.delete(0)
        marker = observer.partial_marker(key)
        if marker is not None:
            marker.delete(0)
    except libvirt.libvirtError as exc:
        raise connection.error(exc, 'removing the partial import %s failed' % key)
    observer.volume(key, refresh=True)
