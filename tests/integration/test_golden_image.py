"""Golden images on libvirt, and a cloud-init seed that goes when the declaration drops cloud_init.

One golden volume is imported from the ISO9660 image of tools/virtlab/golden.py; converge.virt.volume then makes a
qcow2 overlay on it (backing_volume) and full copies of it (clone_from, raw and qcow2), each grown to the declared
capacity in the same task. The data each new volume shows the guest (the overlay read through its backing chain with
qemu-img) begins with the golden image byte for byte, the rest reads zero, and writing into the copies and the
overlay never changes the golden volume: its sha256 is the same before and after. The journey that boots guests on
such overlays is tests/integration/test_golden_journey.py.
"""

import hashlib
import os
import subprocess
import xml.etree.ElementTree as ET

import libvirt
import pytest

from tests.integration.ansible_run import ok, run_module
from tools.virtlab import golden, hosts as virtlab_hosts

POOL = 'goldpool'
MIB = 1024 * 1024


@pytest.fixture(scope='module')
def pool_dir(host, tmp_path_factory):
    path = str(tmp_path_factory.mktemp('goldpool'))
    ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'pool_path': path, 'name': 'gold-scratch.raw', 'capacity': '1MiB'}))
    return path


def file_sha256(path, length=None):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        digest.update(handle.read() if length is None else handle.read(length))
    return digest.hexdigest()


def guest_view(path, fmt, tmp_path):
    """What a guest reads from the volume at ``path``: its whole virtual disk, the backing chain resolved (qemu-img convert)."""
    out = str(tmp_path / (os.path.basename(path) + '.view'))
    subprocess.run(['qemu-img', 'convert', '-f', fmt, '-O', 'raw', path, out], check=True, capture_output=True)
    with open(out, 'rb') as handle:
        return handle.read()


def qemu_io_write(path, fmt, offset, pattern):
    """Write 64 KiB of byte ``pattern`` at ``offset`` into the volume at ``path`` (through qemu, as a guest would)."""
    subprocess.run(['qemu-io', '-f', fmt, '-c', 'write -P %d %d 64k' % (pattern, offset), path], check=True, capture_output=True)


def test_overlay_and_grown_full_copies_of_a_golden_volume_never_touch_it(host, conn, pool_dir, tmp_path):
    image = golden.build_golden_image(str(tmp_path / 'golden.iso'))
    imported = ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'name': 'golden.raw', 'import_from': image['path']}))
    assert imported['operations'][0]['sha256'] == image['sha256']
    gold_path = imported['volume']['path']
    before = file_sha256(gold_path)
    assert before == image['sha256'] and os.path.getsize(gold_path) == image['size']

    declared = [{'name': 'web-1-root.qcow2', 'backing_volume': 'golden.raw', 'capacity': '8MiB'},
                {'name': 'web-2-root.raw', 'clone_from': 'golden.raw', 'capacity': '8MiB'},
                {'name': 'web-3-root.qcow2', 'clone_from': 'golden.raw', 'format': 'qcow2', 'capacity': '8MiB'}]
    made = ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'volumes': declared}))
    assert [(o['op'], o['volume']) for o in made['operations']] == [('create_volume', '%s/%s' % (POOL, d['name'])) for d in declared]
    by_name = dict((v['name'], v) for v in made['volumes'])
    # every one is grown to the declared size in the same task, in the declared format
    assert {n: (v['capacity'], v['format']) for n, v in by_name.items()} == {
        'web-1-root.qcow2': (8 * MIB, 'qcow2'), 'web-2-root.raw': (8 * MIB, 'raw'), 'web-3-root.qcow2': (8 * MIB, 'qcow2')}
    # the overlay is backed by the golden volume; the copies stand alone
    assert [c['volume'] for c in by_name['web-1-root.qcow2']['backing_chain']] == ['%s/golden.raw' % POOL]
    assert by_name['web-2-root.raw']['backing_chain'] == [] and by_name['web-3-root.qcow2']['backing_chain'] == []
    golden_bytes = open(gold_path, 'rb').read()  # pylint: disable=consider-using-with
    for name, vol in by_name.items():
        view = guest_view(vol['path'], vol['format'], tmp_path)
        assert len(view) == 8 * MIB and view[:image['size']] == golden_bytes, name
        assert view[image['size']:] == bytes(8 * MIB - image['size']), name
    # a second run changes nothing
    assert not ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'volumes': declared}))['changed']

    # guests write into their volumes - over the golden data and into the grown space: the golden volume is untouched
    for name, vol in by_name.items():
        qemu_io_write(vol['path'], vol['format'], 0, 0x5a)
        qemu_io_write(vol['path'], vol['format'], 6 * MIB, 0xa5)
        view = guest_view(vol['path'], vol['format'], tmp_path)
        assert view[:65536] == b'\x5a' * 65536 and view[6 * MIB:6 * MIB + 65536] == b'\xa5' * 65536, name
    assert file_sha256(gold_path) == before and os.path.getsize(gold_path) == image['size']
    # a copy smaller than its golden source is refused, naming the field
    smaller = run_module('volume', {'uri': host.uri, 'pool': POOL, 'name': 'tiny.raw', 'clone_from': 'golden.raw', 'capacity': 4096})
    assert smaller.get('failed') and 'capacity' in smaller['msg'], smaller
    gone = ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'state': 'absent', 'volumes': [{'name': d['name']} for d in declared]}))
    assert gone['changed'] and file_sha256(gold_path) == before


def seed_cdroms(dom, flags):
    root = ET.fromstring(dom.XMLDesc(flags))
    return [d.find('source').get('volume') for d in root.findall('devices/disk') if d.get('device') == 'cdrom']


def test_dropping_cloud_init_removes_the_seed_as_a_restart_needing_change(host, conn, pool_dir):
    pool = conn.storagePoolLookupByName(POOL)
    seed = {'meta_data': {'local-hostname': 'seeded'}, 'user_data': {'hostname': 'seeded'}, 'pool': POOL}
    states = {'seeded-off': 'stopped', 'seeded-on': 'running'}
    common = {'uri': host.uri, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(), 'disks': [], 'shutdown_timeout': 1}
    seeded = dict(common, vms=[{'name': name, 'state': state, 'cloud_init': seed} for name, state in states.items()])
    unseeded = dict(common, vms=[{'name': name, 'state': state} for name, state in states.items()])
    ok(run_module('vm', seeded))
    pool.refresh(0)
    for name in states:
        assert seed_cdroms(conn.lookupByName(name), libvirt.VIR_DOMAIN_XML_INACTIVE) == [name + '-cidata.iso']
        assert name + '-cidata.iso' in pool.listVolumes()
    seeds = {name: {'pool': POOL, 'volume': name + '-cidata.iso', 'removed': True} for name in states}
    planned = ok(run_module('vm', unseeded, check=True))
    pool.refresh(0)
    assert {r['name']: (r['changed'], r.get('cloud_init')) for r in planned['results']} == {n: (True, seeds[n]) for n in states}, planned
    assert all(name + '-cidata.iso' in pool.listVolumes() for name in states), 'check mode deleted a seed'
    dropped = ok(run_module('vm', unseeded))
    pool.refresh(0)
    assert {r['name']: (r['changed'], r.get('cloud_init')) for r in dropped['results']} == {n: (True, seeds[n]) for n in states}, dropped
    by_name = dict((r['name'], r) for r in dropped['results'])
    for name, state in states.items():
        assert name + '-cidata.iso' not in pool.listVolumes()
        dom = conn.lookupByName(name)
        assert seed_cdroms(dom, libvirt.VIR_DOMAIN_XML_INACTIVE) == [] and dom.isActive() == (state == 'running')
        # the running guest keeps its cdrom until it restarts: a restart-needing change
        assert by_name[name]['vm']['pending_restart'] is (state == 'running'), by_name[name]['vm']
    again = ok(run_module('vm', unseeded))
    assert [(r['changed'], 'cloud_init' in r) for r in again['results']] == [(False, False)] * len(states), again
    ok(run_module('vm', {'uri': host.uri, 'state': 'absent', 'shutdown_timeout': 1, 'vms': [{'name': name} for name in states]}))
