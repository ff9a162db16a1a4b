# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt storage: declarations of volumes, observation of pools and volumes, and one volume operation.

The decisions (what to create, grow, delete; what is refused) are made by
:func:`..._phase.volumes.plan_volumes`. This module only

* validates a volume declaration (pure, :func:`normalize_volume`) and turns it
  into the planner's :class:`DesiredVolume` / :class:`Attachment`;
* observes pools and volumes (:class:`StorageObserver`);
* executes one volume operation (:func:`execute_volume_operation`): create
  (empty, clone, import of a local image with a sha256 read-back check, qcow2
  overlay on a backing volume), grow (online through the guest when it runs),
  delete (optionally wiped).

Volume keys are ``<pool>/<volume>``; a disk that is not a pool volume is keyed
by its path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._common import files
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_spec
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import daemon_gone, libvirt
from ansible_collections.converge.virt.plugins.module_utils._common.units import parse_size, unit_factor
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import Attachment, DesiredVolume

FORMATS = ('raw', 'qcow2')
PREALLOCATIONS = ('off', 'metadata', 'full')
STATES = ('present', 'absent')
CAPACITY_MAX = 64 * 1024 ** 5
_NAME_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.+@-]*\Z')
_VM_RE = re.compile(r'^[^/\x00-\x1f]+\Z')
_CONTROL_RE = re.compile(r'[\x00-\x1f\x7f]')
MAX_CHAIN = 16
# an empty volume <name><PARTIAL_SUFFIX> next to a volume marks an import into it that has not finished
PARTIAL_SUFFIX = '.converge-partial'


# ---------------------------------------------------------------------------------------------------------------------
# Declarations (pure)
# ---------------------------------------------------------------------------------------------------------------------

def volume_key(pool, name):
    """The planner's key of a pool volume."""
    return '%s/%s' % (pool, name)


def split_key(key):
    """``(pool, name)`` of a pool volume key."""
    pool, _sep, name = key.partition('/')
    return pool, name


def _name(value, field):
    if not isinstance(value, str) or not value:
        raise InvalidDeclaration(field, 'a non-empty name is required')
    if not _NAME_RE.fullmatch(value) or value in ('.', '..'):
        raise InvalidDeclaration(field, '%r is not a valid name (letters, digits and _.+@- ; no slash)' % value)
    if value.endswith(PARTIAL_SUFFIX):
        raise InvalidDeclaration(field, '%r: names ending in %s are reserved for unfinished imports' % (value, PARTIAL_SUFFIX))
    return value


def _ref(value, field, pool):
    """A reference to another volume: ``name`` (same pool) or ``pool/name``."""
    if not isinstance(value, str) or not value:
        raise InvalidDeclaration(field, 'a volume name or pool/name is required')
    if '/' in value:
        other_pool, name = value.split('/', 1)
        return volume_key(_name(other_pool, field), _name(name, field))
    return volume_key(pool, _name(value, field))


def normalize_attachment(item, field, pool, name):
    """Validate one attachment ``{vm, dev, bus, readonly, serial}``; return the canonical dict."""
    if not isinstance(item, dict):
        raise InvalidDeclaration(field, 'expected a dict, got %s' % type(item).__name__)
    unknown = sorted(set(item) - {'vm', 'dev', 'target', 'bus', 'readonly', 'serial'})
    if unknown:
        raise InvalidDeclaration(field, 'unknown keys %s' % ', '.join(unknown))
    vm = item.get('vm')
    if not isinstance(vm, str) or not vm or not _VM_RE.fullmatch(vm):
        raise InvalidDeclaration(field + '.vm', 'the name of the VM is required')
    disk = {'dev': item.get('dev') if item.get('dev') is not None else item.get('target'), 'bus': item.get('bus'),
            'readonly': item.get('readonly'), 'serial': item.get('serial'), 'pool': pool, 'volume': name}
    try:
        norm = domain_spec.normalize_disk(disk, field)
    except ValueError as exc:
        text = str(exc)
        sub, _sep, reason = text.partition(': ')
        raise InvalidDeclaration(sub, reason or text) from None
    return {'vm': vm, 'dev': norm['dev'], 'bus': norm['bus'], 'readonly': bool(norm['readonly']), 'serial': norm['serial']}


def normalize_volume(item, field='volume', defaults=None):
    """Validate one volume declaration; return the canonical dict (raises :class:`InvalidDeclaration`).

    Keys: ``name``, ``pool``, ``pool_path``, ``state``, ``capacity``, ``format``,
    ``preallocation``, ``clone_from``, ``import_from``, ``import_format``,
    ``backing_volume``, ``wipe``, ``attachments`` (None: attachments left alone).
    ``defaults`` fills keys the item does not set (the fleet form).
    """
    merged = dict(defaults or {})
    merged.update(dict((k, v) for k, v in item.items() if v is not None))
    name = _name(merged.get('name'), field + '.name')
    pool = _name(merged.get('pool'), field + '.pool')
    out = {'name': name, 'pool': pool, 'key': volume_key(pool, name)}
    pool_path = merged.get('pool_path')
    if pool_path is not None and (not isinstance(pool_path, str) or not pool_path.startswith('/')):
        raise InvalidDeclaration(field + '.pool_path', 'must be an absolute path, got %r' % (pool_path,))
    if pool_path is not None and (_CONTROL_RE.search(pool_path) or '..' in pool_path.split('/')):
        raise InvalidDeclaration(field + '.pool_path', 'must be a plain absolute path (no .. component, no control character), got %r' % (pool_path,))
    out['pool_path'] = pool_path.rstrip('/') or '/' if pool_path else None
    state = merged.get('state') or 'present'
    if state not in STATES:
        raise InvalidDeclaration(field + '.state', '%r is not one of present, absent' % (state,))
    out['state'] = state
    capacity = merged.get('capacity')
    if capacity is not None:
        try:
            capacity = parse_size(capacity, field=field + '.capacity', maximum=CAPACITY_MAX)
        except ValueError as exc:
            sub, _sep, reason = str(exc).partition(': ')
            raise InvalidDeclaration(sub, reason) from None
    out['capacity'] = capacity
    for key, choices in (('format', FORMATS), ('import_format', FORMATS), ('preallocation', PREALLOCATIONS)):
        value = merged.get(key)
        if value is not None and value not in choices:
            raise InvalidDeclaration('%s.%s' % (field, key), '%r is not one of %s' % (value, ', '.join(choices)))
        out[key] = value
    out['preallocation'] = out['preallocation'] or 'off'
    sources = [k for k in ('clone_from', 'import_from', 'backing_volume') if merged.get(k) is not None]
    if len(sources) > 1:
        raise InvalidDeclaration(field, '%s are mutually exclusive' % ', '.join(sources))
    out['clone_from'] = _ref(merged['clone_from'], field + '.clone_from', pool) if merged.get('clone_from') is not None else None
    out['backing_volume'] = _ref(merged['backing_volume'], field + '.backing_volume', pool) \
        if merged.get('backing_volume') is not None else None
    imp = merged.get('import_from')
    if imp is not None and (not isinstance(imp, str) or not imp.startswith('/') or _CONTROL_RE.search(imp)):
        raise InvalidDeclaration(field + '.import_from', 'must be an absolute path of a local image file, got %r' % (imp,))
    out['import_from'] = imp
    if out['import_format'] and not imp:
        raise InvalidDeclaration(field + '.import_format', 'only applies with import_from')
    for key in ('clone_from', 'backing_volume'):
        if out[key] == out['key']:
            raise InvalidDeclaration(field, 'a volume cannot be made from itself (%s: %s)' % (key, out['key']))
    if out['backing_volume'] and out['format'] not in (None, 'qcow2'):
        raise InvalidDeclaration(field + '.format', 'an overlay on a backing volume must be qcow2')
    if out['backing_volume']:
        out['format'] = 'qcow2'
    if out['preallocation'] == 'metadata' and (out['format'] or 'raw') == 'raw':
        raise InvalidDeclaration(field + '.preallocation', 'metadata preallocation needs format qcow2')
    wipe = merged.get('wipe', False)
    if not isinstance(wipe, bool):
        raise InvalidDeclaration(field + '.wipe', 'expected a boolean')
    out['wipe'] = wipe
    atts = merged.get('attachments')
    if atts is not None:
        if not isinstance(atts, list):
            raise InvalidDeclaration(field + '.attachments', 'expected a list')
        atts = [normalize_attachment(a, '%s.attachments[%d]' % (field, i), pool, name) for i, a in enumerate(atts)]
        seen = set()
        for i, att in enumerate(atts):
            if (att['vm'], att['dev']) in seen:
                raise InvalidDeclaration('%s.attachments[%d]' % (field, i), 'VM %s has %s declared twice' % (att['vm'], att['dev']))
            seen.add((att['vm'], att['dev']))
        if state == 'absent' and atts:
            raise InvalidDeclaration(field + '.attachments', 'a volume declared absent cannot be attached')
    out['attachments'] = atts
    return out


def desired_source(spec):
    """The planner's ``source`` word of a normalized declaration."""
    if spec['clone_from']:
        return 'clone:' + spec['clone_from']
    if spec['import_from']:
        return 'import:' + spec['import_from']
    if spec['backing_volume']:
        return 'backing:' + spec['backing_volume']
    return None


def desired_world(specs):
    """``(desired_volumes, desired_attachments)`` for the planner from normalized declarations."""
    volumes, attachments = [], []
    for spec in specs:
        volumes.append(DesiredVolume(spec['key'], present=spec['state'] == 'present', capacity=spec['capacity'],
                                     fmt=spec['format'], source=desired_source(spec)))
        for att in spec['attachments'] or ():
            attachments.append(Attachment(att['vm'], att['dev'], spec['key'], att['readonly'], att['bus'], att['serial']))
    return volumes, attachments


# ---------------------------------------------------------------------------------------------------------------------
# Volume XML (pure)
# ---------------------------------------------------------------------------------------------------------------------

def volume_xml(name, capacity, fmt, preallocation='off', backing=None):
    """``<volume>`` XML for createXML; ``backing`` is ``{path, format}`` for a qcow2 overlay."""
    root = ET.Element('volume')
    ET.SubElement(root, 'name').text = name
    ET.SubElement(root, 'capacity', {'unit': 'bytes'}).text = str(int(capacity))
    ET.SubElement(root, 'allocation', {'unit': 'bytes'}).text = str(int(capacity) if preallocation == 'full' else 0)
    target = ET.SubElement(root, 'target')
    ET.SubElement(target, 'format', {'type': fmt})
    if backing:
        store = ET.SubElement(root, 'backingStore')
        ET.SubElement(store, 'path').text = backing['path']
        ET.SubElement(store, 'format', {'type': backing['format'] or 'raw'})
    return ET.tostring(root, encoding='unicode')


def parse_volume_xml(xml):
    """``{name, path, capacity, allocation, format, backing: {path, format} or None}`` of a volume XML."""
    root = ET.fromstring(xml)

    def size(tag):
        elem = root.find(tag)
        if elem is None or not (elem.text or '').strip():
            return 0
        return int(elem.text.strip()) * _unit(elem.get('unit'))

    fmt = root.find('target/format')
    backing = None
    store = root.find('backingStore')
    if store is not None and (store.findtext('path') or '').strip():
        bfmt = store.find('format')
        backing = {'path': store.findtext('path').strip(), 'format': _data_format(bfmt.get('type') if bfmt is not None else None)}
    return {'name': root.findtext('name'), 'path': (root.findtext('target/path') or '').strip() or None,
            'capacity': size('capacity'), 'allocation': size('allocation'),
            'format': _data_format(fmt.get('type') if fmt is not None else None), 'backing': backing, 'type': root.get('type')}


# libvirt names a raw file by the content it probes (an ISO9660 file system is "iso"); to qemu, and to a guest, it is raw
# data: an overlay on it needs backing_fmt=raw (qemu-img has no "iso" driver) and a copy of it is a raw volume
RAW_CONTENT_FORMATS = ('iso',)


def _data_format(fmt):
    """The disk image format of a libvirt volume format (``raw`` for a raw file libvirt named by its content)."""
    return 'raw' if fmt in RAW_CONTENT_FORMATS else fmt


def _unit(unit):
    if not unit or unit in ('bytes', 'B', 'b'):
        return 1
    return unit_factor(unit)


def pool_xml(name, path):
    """``<pool type='dir'>`` XML."""
    root = ET.Element('pool', {'type': 'dir'})
    ET.SubElement(root, 'name').text = name
    target = ET.SubElement(root, 'target')
    ET.SubElement(target, 'path').text = path
    return ET.tostring(root, encoding='unicode')


def parse_pool_xml(xml):
    """``{name, type, path}`` of a pool XML."""
    root = ET.fromstring(xml)
    return {'name': root.findtext('name'), 'type': root.get('type'), 'path': (root.findtext('target/path') or '').strip() or None}


# ---------------------------------------------------------------------------------------------------------------------
# Local images
# ---------------------------------------------------------------------------------------------------------------------

QCOW2_MAGIC = b'QFI\xfb'
# the header, its extensions and (for a checked image, none) the backing file name lie in the first cluster, at most 2 MiB;
# the head of a raw image is kept the same length, and every byte of it is compared again as it is uploaded
HEAD_BYTES = 2 * 1024 * 1024
_QCOW2_EXTERNAL_DATA_FILE = 1 << 2
_QCOW2_KNOWN_INCOMPATIBLE = 0x1f  # dirty, corrupt, external data file, compression type, extended L2
_QCOW2_EXT_DATA_FILE = 0x44415441
_STANDALONE = 'import a standalone image (qemu-img convert -O qcow2 makes one)'


class ImageChanged(BackendError):
    """The image to import changed after it was checked (its owner wrote to it): nothing is imported."""


def qcow2_header(path, head):
    """``{version, virtual_size}`` of the qcow2 header at the start of ``head`` (bytes from offset 0), None when head
    has no qcow2 magic. Refuses (InvalidDeclaration on import_from) a backing file, an external data file (the
    ``data-file`` header extension or incompatible feature bit 2), an unknown incompatible feature and a damaged header:
    the VM would read or write a file outside the pool that nobody checked."""
    if head[:4] != QCOW2_MAGIC:
        return None
    if len(head) < 72:
        raise InvalidDeclaration('import_from', '%s has a truncated qcow2 header' % path)
    version, backing_offset, backing_size, cluster_bits, size = struct.unpack_from('>IQIIQ', head, 4)
    if version not in (2, 3):
        raise InvalidDeclaration('import_from', '%s is a qcow image of version %d; only qcow2 (versions 2 and 3) and raw are imported'
                                 % (path, version))
    if backing_offset or backing_size:
        raise InvalidDeclaration('import_from', '%s has a backing file (qcow2 backing_file_offset %d): the VM would read a file outside '
                                 'the pool; %s' % (path, backing_offset, _STANDALONE))
    if not 9 <= cluster_bits <= 21:
        raise InvalidDeclaration('import_from', '%s has a damaged qcow2 header (cluster_bits %d)' % (path, cluster_bits))
    incompatible, header_length = 0, 72
    if version == 3:
        if len(head) < 104:
            raise InvalidDeclaration('import_from', '%s has a truncated qcow2 header' % path)
        incompatible = struct.unpack_from('>Q', head, 72)[0]
        header_length = struct.unpack_from('>I', head, 100)[0]
        if header_length < 104 or header_length % 8:
            raise InvalidDeclaration('import_from', '%s has a damaged qcow2 header (header_length %d)' % (path, header_length))
    if incompatible & _QCOW2_EXTERNAL_DATA_FILE:
        raise InvalidDeclaration('import_from', '%s has an external data file (qcow2 data-file, incompatible feature bit 2): the VM would '
                                 'read and write a file outside the pool; %s' % (path, _STANDALONE))
    if incompatible & ~_QCOW2_KNOWN_INCOMPATIBLE:
        raise InvalidDeclaration('import_from', '%s uses unknown incompatible qcow2 features (0x%x)' % (path, incompatible & ~_QCOW2_KNOWN_INCOMPATIBLE))
    end = min(1 << cluster_bits, len(head))
    offset = header_length
    while True:
        if offset + 8 > end:
            raise InvalidDeclaration('import_from', '%s has a damaged qcow2 header (its extensions do not end in the first cluster)' % path)
        ext_type, ext_length = struct.unpack_from('>II', head, offset)
        offset += 8
        if ext_type == 0:
            break
        if offset + ext_length > end:
            raise InvalidDeclaration('import_from', '%s has a damaged qcow2 header extension 0x%08x' % (path, ext_type))
        if ext_type == _QCOW2_EXT_DATA_FILE:
            name = head[offset:offset + min(ext_length, 200)].decode('utf-8', 'backslashreplace')
            raise InvalidDeclaration('import_from', '%s has an external data file (qcow2 data-file %r): the VM would read and write a file '
                                     'outside the pool; %s' % (path, name, _STANDALONE))
        offset += (ext_length + 7) & ~7
    return {'version': version, 'virtual_size': size}


class LocalImage:
    """A local image to import, opened once: its checks, its sha256 and its upload all read this one descriptor.

    The path is opened with ``O_NOFOLLOW`` (a symbolic link is refused) and must be a regular file; ``qemu-img info``
    inspects the open file through ``/proc/self/fd/N`` (argv, no shell), after the qcow2 header read from the
    descriptor was checked. A path replaced after the open is never read again; a file rewritten in place after the
    check is found by :meth:`reader` (its head differs from the checked one, its size or mtime changed) and refused.
    Use as a context manager (closes the descriptor).
    """

    def __init__(self, path):
        self.path = path
        try:
            self.fd = files.open_regular(path, os.O_RDONLY)
        except files.UnsafeFile as exc:
            raise InvalidDeclaration('import_from', '%s %s' % (path, exc)) from None
        except OSError as exc:
            raise InvalidDeclaration('import_from', 'cannot open %s on the machine running the module: %s' % (path, exc.strerror)) from None
        info = os.fstat(self.fd)
        self.size = info.st_size
        self._identity = (info.st_size, info.st_mtime_ns)
        self.head = files.read_at(self.fd, min(self.size, HEAD_BYTES), 0)
        self.format = None
        self.virtual_size = None

    def close(self):
        """Close the descriptor (again: nothing)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def inspect(self, declared_format=None, runner=None):
        """Check the image; ``{format, virtual_size, file_size}``. Only raw and qcow2 without a backing or data file pass."""
        header = qcow2_header(self.path, self.head)
        fd_path = '/proc/self/fd/%d' % self.fd
        runner = runner or subprocess.run
        try:
            proc = runner(['qemu-img', 'info', '--force-share', '--output', 'json', fd_path], pass_fds=(self.fd,), capture_output=True,
                          text=True, check=False, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError('import_from: cannot run qemu-img to inspect %s: %s' % (self.path, exc)) from None
        if proc.returncode != 0:
            raise InvalidDeclaration('import_from', 'qemu-img cannot read %s: %s' % (self.path, (proc.stderr or '').replace(fd_path, self.path).strip()[:300]))
        try:
            info = json.loads(proc.stdout)
        except ValueError:
            raise BackendError('import_from: qemu-img info printed no JSON for %s' % self.path) from None
        detected = info.get('format')
        if detected not in FORMATS:
            raise InvalidDeclaration('import_from', '%s is a %s image; only raw and qcow2 are imported' % (self.path, detected))
        data = (info.get('format-specific') or {}).get('data') or {}
        if info.get('backing-filename') or data.get('data-file'):
            what = 'backing file' if info.get('backing-filename') else 'external data file (qcow2 data-file)'
            raise InvalidDeclaration('import_from', '%s has a %s: the VM would use a file outside the pool; %s' % (self.path, what, _STANDALONE))
        virtual_size = header['virtual_size'] if header else self.size
        if (detected == 'qcow2') != (header is not None) or info.get('virtual-size') != virtual_size:
            raise ImageChanged('import_from: %s changed while it was checked (qemu-img saw another image than the one read); nothing was '
                               'imported' % self.path)
        if declared_format and declared_format != detected:
            raise InvalidDeclaration('import_format', 'declared %s but %s is a %s image' % (declared_format, self.path, detected))
        self.format, self.virtual_size = detected, virtual_size
        return {'format': detected, 'virtual_size': virtual_size, 'file_size': self.size}

    def reader(self):
        """``read(nbytes) -> bytes``: the image from its start to the size it had when opened, then ``b''``.

        Raises :class:`ImageChanged` when the bytes read differ from the head that was checked, or the file is shorter,
        longer or written since it was opened.
        """
        position = [0]

        def read(nbytes):
            offset = position[0]
            want = min(nbytes, self.size - offset)
            if want <= 0:
                self._check_unchanged()
                return b''
            data = files.read_at(self.fd, want, offset)
            if len(data) != want:
                raise self.changed('it is shorter than when it was opened')
            if offset < len(self.head) and data[:len(self.head) - offset] != self.head[offset:offset + len(data)]:
                raise self.changed('its header is not the one that was checked')
            position[0] = offset + want
            return data
        return read

    def sha256(self):
        """sha256 hex digest of the image (read through the checked descriptor)."""
        digest = hashlib.sha256()
        read = self.reader()
        for chunk in iter(lambda: read(1 << 20), b''):
            digest.update(chunk)
        return digest.hexdigest()

    def _check_unchanged(self):
        info = os.fstat(self.fd)
        if (info.st_size, info.st_mtime_ns) != self._identity:
            raise self.changed('it was written to')

    def changed(self, why):
        """The :class:`ImageChanged` error saying why."""
        return ImageChanged('import_from: %s changed while it was imported (%s); nothing was imported' % (self.path, why))


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
