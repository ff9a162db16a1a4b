# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local image to import into a volume: its format and qcow2 header checked (a standalone image, no backing file),
its bytes read for the upload with a check that the file did not change meanwhile, and its sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common import files
from ansible_collections.converge.virt.plugins.module_utils._libvirt.storage_spec import FORMATS

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
