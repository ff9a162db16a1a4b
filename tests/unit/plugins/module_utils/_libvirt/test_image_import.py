"""Import of a local image (volume import_from) on libvirt: the file that is checked is the file that is uploaded.

The import runs against a fake libvirt pool whose volumes are byte strings; qemu-img is the real one (qemu-utils).
Each test names an attack on the old code: a symbolic link to a secret file, a qcow2 whose header names an external
data file, and a swap of the path between the check and the upload.
"""

import hashlib
import os
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._libvirt import storage
from ansible_collections.converge.virt.plugins.module_utils._libvirt import local_image, storage_spec
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase

MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(shutil.which('qemu-img') is None, reason='qemu-img (qemu-utils) is needed to inspect images')


class FakeStream:
    def __init__(self):
        self.sent = []
        self.target = None
        self.pending = None
        self.aborted = False

    def sendAll(self, handler, opaque):  # pylint: disable=invalid-name
        while True:
            try:
                data = handler(self, 256 * 1024, opaque)
            except BaseException:
                self.aborted = True
                raise
            if not data:
                break
            self.sent.append(data)

    def recv(self, nbytes):
        data, self.pending = self.pending[:nbytes], self.pending[nbytes:]
        return data

    def finish(self):
        if self.target is not None and self.sent:
            self.target.content = b''.join(self.sent)


class FakeVol:
    def __init__(self, pool, name, capacity, fmt):
        self.pool, self.name, self.capacity, self.fmt = pool, name, capacity, fmt
        self.content = b''
        self.deleted = False

    def upload(self, stream, offset, length, flags):
        assert (offset, flags) == (0, 0)
        stream.target = self
        self.pool.upload_lengths.append(length)

    def download(self, stream, offset, length, flags):
        assert (offset, flags) == (0, 0)
        stream.pending = self.content[:length]

    def delete(self, flags):
        assert flags == 0
        self.deleted = True
        self.pool.volumes.pop(self.name, None)

    def resize(self, capacity, flags):
        assert flags == 0
        self.capacity = capacity


class FakePool:
    def __init__(self, on_create=None):
        self.volumes = {}
        self.upload_lengths = []
        self.on_create = on_create

    def createXML(self, xml, flags):  # pylint: disable=invalid-name
        assert flags == 0
        root = ET.fromstring(xml)
        vol = FakeVol(self, root.findtext('name'), int(root.findtext('capacity')), root.find('target/format').get('type'))
        self.volumes[vol.name] = vol
        if self.on_create is not None and not vol.name.endswith(storage_spec.PARTIAL_SUFFIX):
            self.on_create(vol)
        return vol


class FakeConn:
    def newStream(self, flags):  # pylint: disable=invalid-name
        assert flags == 0
        return FakeStream()


class FakeConnection:
    conn = FakeConn()

    def error(self, exc, what):
        return BackendError('%s: %s' % (what, exc))


class FakeObserver:
    def __init__(self, pool):
        self._pool = pool

    def pool(self, name):
        assert name == 'p'
        return self._pool

    def partial_marker(self, key):
        del key


def import_volume(path, on_create=None, **extra):
    """Run the create operation of volume p/v with import_from=path; (result, pool)."""
    pool = FakePool(on_create)
    item = {'name': 'v', 'pool': 'p', 'import_from': str(path)}
    item.update(extra)
    spec = storage_spec.normalize_volume(item)
    op = phase.Operation(phase.CREATE, 'p/v')
    return storage.execute_volume_operation(FakeConnection(), FakeObserver(pool), op, spec, []), pool


def qemu_img(*args):
    subprocess.run(('qemu-img',) + args, check=True, capture_output=True)


def test_a_raw_and_a_qcow2_image_are_imported_with_their_sha256(tmp_path):
    raw = tmp_path / 'image.raw'
    raw.write_bytes(hashlib.sha256(b'img').digest() * (MIB // 32))
    result, pool = import_volume(raw)
    assert result['sha256'] == hashlib.sha256(raw.read_bytes()).hexdigest() and result['image_format'] == 'raw'
    assert pool.volumes['v'].content == raw.read_bytes() and pool.volumes['v'].capacity == MIB
    assert list(pool.volumes) == ['v']  # the partial marker is gone
    qcow = tmp_path / 'image.qcow2'
    qemu_img('convert', '-f', 'raw', '-O', 'qcow2', str(raw), str(qcow))
    result, pool = import_volume(qcow, capacity='2MiB')
    assert result['image_format'] == 'qcow2' and pool.volumes['v'].fmt == 'qcow2'
    assert pool.volumes['v'].content == qcow.read_bytes() and pool.volumes['v'].capacity == 2 * MIB


def test_a_symbolic_link_to_a_secret_file_is_refused(tmp_path):
    secret = tmp_path / 'shadow'
    secret.write_bytes(b'root:$6$secret-hash:19000:0:99999:7:::\n')
    os.chmod(str(secret), 0o600)
    link = tmp_path / 'disk.raw'
    link.symlink_to(secret)
    pool = FakePool()
    with pytest.raises(InvalidDeclaration) as refused:
        storage.execute_volume_operation(FakeConnection(), FakeObserver(pool), phase.Operation(phase.CREATE, 'p/v'),
                                         storage_spec.normalize_volume({'name': 'v', 'pool': 'p', 'import_from': str(link)}), [])
    assert refused.value.field == 'import_from' and 'symbolic link' in refused.value.reason and str(link) in refused.value.reason
    assert 'secret-hash' not in str(refused.value)
    assert not pool.volumes  # nothing created, not even the partial marker


@pytest.mark.parametrize('kind', ['fifo', 'directory'])
def test_anything_but_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    path = tmp_path / 'thing'
    if kind == 'fifo':
        os.mkfifo(str(path))  # opening it for reading would wait for a writer forever
    else:
        path.mkdir()
    with pytest.raises(InvalidDeclaration) as refused:
        import_volume(path)
    assert refused.value.field == 'import_from' and 'not a regular file' in refused.value.reason


def test_a_missing_or_unreadable_file_names_the_field(tmp_path):
    with pytest.raises(InvalidDeclaration) as refused:
        import_volume(tmp_path / 'missing.raw')
    assert refused.value.field == 'import_from' and 'missing.raw' in refused.value.reason


def test_a_qcow2_with_an_external_data_file_is_refused(tmp_path):
    (tmp_path / 'data.raw').write_bytes(b'\0' * MIB)
    image = tmp_path / 'image.qcow2'
    qemu_img('create', '-f', 'qcow2', '-o', 'data_file=' + str(tmp_path / 'data.raw'), str(image), '1M')
    with pytest.raises(InvalidDeclaration) as refused:
        import_volume(image)
    assert refused.value.field == 'import_from' and 'data file' in refused.value.reason and 'data-file' in refused.value.reason


def test_a_qcow2_with_a_backing_file_is_refused(tmp_path):
    base = tmp_path / 'base.qcow2'
    qemu_img('create', '-f', 'qcow2', str(base), '1M')
    image = tmp_path / 'image.qcow2'
    qemu_img('create', '-f', 'qcow2', '-b', str(base), '-F', 'qcow2', str(image))
    with pytest.raises(InvalidDeclaration) as refused:
        import_volume(image)
    assert refused.value.field == 'import_from' and 'backing file' in refused.value.reason


def _qcow2_header(incompatible=0, extensions=b'', backing_offset=0):
    """A minimal version 3 qcow2 header: 1 MiB, 64 KiB clusters."""
    header = struct.pack('>4sIQIIQIIQQIIQQQQII', b'QFI\xfb', 3, backing_offset, 0, 16, MIB, 0, 0, 0, 0, 0, 0, 0, incompatible, 0, 0, 4, 104)
    return header + extensions + struct.pack('>II', 0, 0)


@pytest.mark.parametrize('header, words', [
    (_qcow2_header(incompatible=1 << 2), 'external data file'),
    (_qcow2_header(extensions=struct.pack('>II', 0x44415441, 8) + b'/dev/sda'), "data-file '/dev/sda'"),
    (_qcow2_header(backing_offset=4096), 'backing file'),
    (_qcow2_header(incompatible=1 << 40), 'incompatible'),
    (struct.pack('>4sI', b'QFI\xfb', 1) + b'\0' * 100, 'version 1'),
])
def test_the_qcow2_header_is_checked_from_the_file_itself(tmp_path, header, words):
    """The checks come from the bytes read through the one descriptor, not from what qemu-img chooses to report."""
    image = tmp_path / 'crafted.qcow2'
    image.write_bytes(header + b'\0' * (2 * 65536 - len(header)))
    calls = []

    def runner(argv, **kwargs):
        calls.append(argv)
        return subprocess.run(argv, **kwargs)  # pylint: disable=subprocess-run-check

    with pytest.raises(InvalidDeclaration) as refused:
        with local_image.LocalImage(str(image)) as local:
            local.inspect(runner=runner)
    assert refused.value.field == 'import_from' and words in refused.value.reason
    assert not calls  # refused before qemu-img ever opened it


def test_the_path_swapped_after_the_check_is_not_what_gets_uploaded(tmp_path):
    """Between the check and the upload, the path is replaced by a qcow2 that names a backing file: the bytes
    uploaded are still the ones checked (one descriptor), and the sha256 reported is theirs."""
    image = tmp_path / 'image.raw'
    checked = hashlib.sha256(b'checked').digest() * (MIB // 32)
    image.write_bytes(checked)
    evil = tmp_path / 'evil.qcow2'
    qemu_img('create', '-f', 'qcow2', '-b', '/etc/shadow', '-F', 'raw', str(evil), '1M')

    def swap(_vol):  # the volume is created after every check
        os.rename(str(evil), str(image))

    result, pool = import_volume(image, on_create=swap)
    assert pool.volumes['v'].content == checked
    assert result['sha256'] == hashlib.sha256(checked).hexdigest() and result['image_format'] == 'raw'
    assert image.read_bytes()[:4] == b'QFI\xfb'  # the path did change under the import


def test_the_path_is_opened_once(tmp_path, monkeypatch):
    image = tmp_path / 'image.raw'
    image.write_bytes(b'x' * MIB)
    opened = []
    real_os_open = os.open

    def counting_os_open(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(os, 'open', counting_os_open)
    monkeypatch.setattr('builtins.open', _refuse_open(str(image)))
    _result, pool = import_volume(image)
    assert pool.volumes['v'].content == image.read_bytes()
    assert opened.count(str(image)) == 1


def _refuse_open(path):
    real_open = open

    def guarded_open(file, *args, **kwargs):
        assert os.fspath(file) != path, 'the image is opened again by its path'
        return real_open(file, *args, **kwargs)
    return guarded_open


def test_content_changed_during_the_import_fails_and_leaves_nothing(tmp_path):
    """The owner of the file rewrites it (same inode) after the check: the import fails naming import_from, and the
    volume and its partial marker are removed."""
    image = tmp_path / 'image.raw'
    image.write_bytes(b'a' * MIB)

    def rewrite(_vol):
        with open(str(image), 'r+b') as handle:
            handle.write(b'QFI\xfb')

    with pytest.raises(BackendError) as failed:
        import_volume(image, on_create=rewrite)
    assert 'import_from' in failed.value.message and 'changed' in failed.value.message


def test_a_format_qemu_img_detects_but_is_not_raw_or_qcow2_is_refused(tmp_path):
    image = tmp_path / 'image.vmdk'
    qemu_img('create', '-f', 'vmdk', str(image), '1M')
    with pytest.raises(InvalidDeclaration) as refused:
        import_volume(image)
    assert refused.value.field == 'import_from' and 'vmdk' in refused.value.reason
