"""converge.virt.volume and volume_info on real private libvirt hosts, driven through the ansible CLI.

Covers create (raw, qcow2, preallocated), grow offline and online, the shrink
refusal, clone, import with a sha256 read-back, qcow2 overlays, delete (wiped)
and the refusal to delete a volume in use (naming the VMs), attachments on
stopped and running guests (hot-plug, hot-unplug with force, the refusal
without it, an unplug the guest never confirms), the VM task lock, check mode,
diff, idempotence, the fleet form, bad input, volume_info, and
reconcile_vm_disks. Data safety: a known pattern is written into volumes and
its sha256 is checked after every grow, attach, detach and clone.
"""

import hashlib
import os
import subprocess
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from tests.integration.ansible_run import run_module, start_module
from tests.reliability.reliability_lab import kill_tree
from tools.virtlab import domains, hosts as virtlab_hosts

MIB = 1024 * 1024
NS = 'https://converge.virt/xmlns/vm/1'
POOL = 'w3pool'


@pytest.fixture(scope='module')
def pool_dir(host, conn, tmp_path_factory):
    path = str(tmp_path_factory.mktemp('volpool'))
    args = {'uri': host.uri, 'pool': POOL, 'pool_path': path, 'name': 'first.raw', 'capacity': '1MiB'}
    checked = run_module('volume', args, check=True)
    assert checked['changed'] and checked['pool_operations'][0]['op'] == 'create_pool'
    with pytest.raises(libvirt.libvirtError):
        conn.storagePoolLookupByName(POOL)
    created = run_module('volume', args)
    assert created['changed'] and created['pool_operations'] == [{'op': 'create_pool', 'pool': POOL, 'path': path}]
    pool = conn.storagePoolLookupByName(POOL)
    assert pool.isActive() and pool.autostart()
    return path


def vol(host, name, **extra):
    args = {'uri': host.uri, 'pool': POOL, 'name': name}
    args.update(extra)
    return args


def ops(result):
    return [(o['op'], o['volume'].split('/', 1)[1]) + ((o['vm'], o['target']) if 'vm' in o else ()) for o in result['operations']]


def write_pattern(path, size, seed):
    block = hashlib.sha256(seed.encode()).digest() * 128
    with open(path, 'r+b') as handle:
        written = 0
        while written < size:
            handle.write(block[:size - written])
            written += min(len(block), size - written)
    return sha(path, size)


def sha(path, length):
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read(length)).hexdigest()


def sha_chunked(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(8 * MIB), b''):
            digest.update(block)
    return digest.hexdigest()


def acpi_guest(conn, name):
    """A diskless guest with ACPI (PCI hot-plug needs it) started on conn."""
    root = ET.fromstring(domains.diskless_domain_xml(name, virtlab_hosts.diskless_domain_type()))
    ET.SubElement(ET.SubElement(root, 'features'), 'acpi')
    dom = conn.defineXML(ET.tostring(root, encoding='unicode'))
    dom.create()
    return dom


def disk_targets(dom, flags=0):
    root = ET.fromstring(dom.XMLDesc(flags))
    return {d.find('target').get('dev'): d for d in root.findall('./devices/disk')}


def task_state(dom):
    root = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    meta = root.find('metadata/{%s}vm' % NS)
    return None if meta is None else (meta.findtext('{%s}task_state' % NS) or None)


def test_create_check_mode_idempotence_and_diff(host, conn, pool_dir):
    args = vol(host, 'c1.qcow2', format='qcow2', capacity='16MiB', preallocation='metadata')
    checked = run_module('volume', args, check=True, diff=True)
    assert checked['changed'] and ops(checked) == [('create_volume', 'c1.qcow2')]
    assert checked['diff']['after']['%s/c1.qcow2' % POOL]['capacity'] == 16 * MIB
    assert not os.path.exists(os.path.join(pool_dir, 'c1.qcow2')), 'check mode must create nothing'
    created = run_module('volume', args, diff=True)
    assert created['changed'] and ops(created) == [('create_volume', 'c1.qcow2')]
    assert created['volume']['capacity'] == 16 * MIB and created['volume']['format'] == 'qcow2'
    assert created['volume']['path'] == os.path.join(pool_dir, 'c1.qcow2') and created['volume']['used_by'] == []
    assert created['diff']['before'] == {} and created['diff']['after']['%s/c1.qcow2' % POOL]['exists']
    assert 'qcow2' in subprocess.run(['qemu-img', 'info', os.path.join(pool_dir, 'c1.qcow2')], capture_output=True, text=True, check=True).stdout
    again = run_module('volume', args)
    assert not again['changed'] and again['operations'] == []
    assert not run_module('volume', args, check=True)['changed']
    full = run_module('volume', vol(host, 'full.raw', capacity='4MiB', preallocation='full'))
    assert full['volume']['allocation'] >= 4 * MIB


def test_grow_offline_keeps_data_and_shrink_is_refused(host, conn, pool_dir):
    created = run_module('volume', vol(host, 'g1.raw', capacity='8MiB'))
    path = created['volume']['path']
    digest = write_pattern(path, 8 * MIB, 'g1')
    checked = run_module('volume', vol(host, 'g1.raw', capacity='12MiB'), check=True)
    assert ops(checked) == [('grow_volume', 'g1.raw')] and os.path.getsize(path) == 8 * MIB
    grown = run_module('volume', vol(host, 'g1.raw', capacity='12MiB'))
    assert grown['changed'] and grown['operations'][0]['online'] is False
    assert grown['volume']['capacity'] == 12 * MIB and sha(path, 8 * MIB) == digest
    shrink = run_module('volume', vol(host, 'g1.raw', capacity='4MiB'))
    assert shrink['failed'] and not shrink['changed'] and 'never shrunk' in shrink['msg'] and 'g1.raw' in shrink['msg']
    assert shrink['refusals'][0]['capacity'] == 12 * MIB and shrink['operations'] == []
    assert conn.storagePoolLookupByName(POOL).storageVolLookupByName('g1.raw').info()[1] == 12 * MIB
    assert sha(path, 8 * MIB) == digest
    assert not run_module('volume', vol(host, 'g1.raw', capacity='12MiB'))['changed']


def test_a_file_in_the_directory_of_a_new_pool_is_taken_as_the_volume(host, conn, tmp_path):
    # libvirt lists a directory pool's files as its volumes: a declared volume whose file is already in the directory
    # of the pool this task makes is that volume (grown here, its data kept), not a create that fails "exists already"
    directory = tmp_path / 'prefilled'
    directory.mkdir()
    path = str(directory / 'pre.raw')
    with open(path, 'wb') as handle:
        handle.truncate(2 * MIB)
    digest = write_pattern(path, 2 * MIB, 'pre')
    args = {'uri': host.uri, 'pool': 'w3prefilled', 'pool_path': str(directory), 'name': 'pre.raw', 'capacity': '4MiB'}
    try:
        made = run_module('volume', args)
        assert made['changed'] and not made.get('failed'), made
        assert [o['op'] for o in made['pool_operations']] == ['create_pool']
        assert ops(made) == [('grow_volume', 'pre.raw')]
        assert os.path.getsize(path) == 4 * MIB and sha(path, 2 * MIB) == digest
        assert not run_module('volume', args)['changed']
    finally:
        pool = conn.storagePoolLookupByName('w3prefilled')
        pool.destroy()
        pool.undefine()


def test_clone_copies_content_and_leaves_source(host, conn, pool_dir):
    src = run_module('volume', vol(host, 'src.raw', capacity='6MiB'))['volume']['path']
    digest = write_pattern(src, 6 * MIB, 'src')
    cloned = run_module('volume', vol(host, 'copy.raw', clone_from='src.raw'))
    assert cloned['changed'] and ops(cloned) == [('create_volume', 'copy.raw')]
    assert cloned['operations'][0]['cloned_from'] == '%s/src.raw' % POOL
    assert cloned['volume']['capacity'] == 6 * MIB
    assert sha(cloned['volume']['path'], 6 * MIB) == digest and sha(src, 6 * MIB) == digest
    assert not run_module('volume', vol(host, 'copy.raw', clone_from='src.raw'))['changed']
    smaller = run_module('volume', vol(host, 'copy2.raw', clone_from='src.raw', capacity='1MiB'))
    assert smaller['failed'] and 'capacity' in smaller['msg']
    with pytest.raises(libvirt.libvirtError):
        conn.storagePoolLookupByName(POOL).storageVolLookupByName('copy2.raw')


def test_import_raw_and_qcow2_verified_by_sha256(host, conn, pool_dir, tmp_path):
    raw = tmp_path / 'image.raw'
    raw.write_bytes(hashlib.sha256(b'img').digest() * (3 * MIB // 32))
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()
    imported = run_module('volume', vol(host, 'imp.raw', import_from=str(raw)))
    assert imported['changed'] and imported['operations'][0]['sha256'] == digest
    assert imported['volume']['format'] == 'raw' and imported['volume']['capacity'] == 3 * MIB
    assert sha(imported['volume']['path'], 3 * MIB) == digest
    assert not run_module('volume', vol(host, 'imp.raw', import_from=str(raw)))['changed']
    qcow = tmp_path / 'image.qcow2'
    subprocess.run(['qemu-img', 'convert', '-f', 'raw', '-O', 'qcow2', str(raw), str(qcow)], check=True)
    wrong = run_module('volume', vol(host, 'imp.qcow2', import_from=str(qcow), import_format='raw'))
    assert wrong['failed'] and 'import_format' in wrong['msg']
    with pytest.raises(libvirt.libvirtError):
        conn.storagePoolLookupByName(POOL).storageVolLookupByName('imp.qcow2')
    imported = run_module('volume', vol(host, 'imp.qcow2', import_from=str(qcow), capacity='4MiB'))
    assert imported['operations'][0]['image_format'] == 'qcow2' and imported['volume']['format'] == 'qcow2'
    assert imported['volume']['capacity'] == 4 * MIB
    out = tmp_path / 'back.raw'
    subprocess.run(['qemu-img', 'convert', '-f', 'qcow2', '-O', 'raw', imported['volume']['path'], str(out)], check=True)
    assert sha(str(out), 3 * MIB) == digest


def test_import_refuses_a_link_to_a_secret_and_a_qcow2_with_a_data_file(host, conn, pool_dir, tmp_path):
    """A symbolic link to a root-readable file is not imported as "raw", and a qcow2 whose header names an external data
    file (the VM would read and write that file) is refused like a backing file; nothing is created either time."""
    secret = tmp_path / 'shadow'
    secret.write_bytes(b'root:$6$not-for-guests:19000:0:99999:7:::\n' * 100)
    os.chmod(str(secret), 0o600)
    link = tmp_path / 'disk.raw'
    link.symlink_to(secret)
    refused = run_module('volume', vol(host, 'leak.raw', import_from=str(link)))
    assert refused['failed'] and refused['msg'].startswith('import_from: ') and 'symbolic link' in refused['msg'], refused
    assert 'not-for-guests' not in str(refused)
    (tmp_path / 'data.raw').write_bytes(b'\0' * MIB)
    image = tmp_path / 'external.qcow2'
    subprocess.run(['qemu-img', 'create', '-f', 'qcow2', '-o', 'data_file=' + str(tmp_path / 'data.raw'), str(image), '1M'],
                   check=True, capture_output=True)
    refused = run_module('volume', vol(host, 'ext.qcow2', import_from=str(image)))
    assert refused['failed'] and refused['msg'].startswith('import_from: ') and 'data-file' in refused['msg'], refused
    names = conn.storagePoolLookupByName(POOL).listVolumes()
    assert not [n for n in names if n.startswith(('leak.raw', 'ext.qcow2'))], names


def test_an_import_killed_during_the_upload_is_never_taken_for_the_image(host, conn, pool_dir, tmp_path):
    """SIGKILL while the image streams in: the half-written volume is marked partial, volume_info says so, a
    declaration without import_from is refused, and the next import run removes it and imports again (sha256 checked)."""
    image = tmp_path / 'big.raw'
    with open(str(image), 'wb') as handle:
        handle.truncate(1024 * MIB)
        handle.seek(512 * MIB)
        handle.write(b'converge-virt-middle-marker' * 1000)
    digest = sha_chunked(str(image))
    marker = os.path.join(pool_dir, 'big.raw.converge-partial')
    proc = start_module('volume', vol(host, 'big.raw', import_from=str(image)))
    deadline = time.monotonic() + 120
    volume_file = os.path.join(pool_dir, 'big.raw')
    while not (os.path.exists(marker) and os.path.exists(volume_file)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert os.path.exists(marker), 'the import never wrote its marker'
    kill_tree(proc)
    proc.communicate()
    assert os.path.exists(marker) and os.path.exists(os.path.join(pool_dir, 'big.raw'))  # killed mid-upload

    info = run_module('volume_info', {'uri': host.uri, 'pool': POOL})
    listed = dict((v['name'], v) for v in info['volumes'])
    assert listed['big.raw']['partial'] is True and 'big.raw.converge-partial' not in listed
    assert listed['first.raw']['partial'] is False

    refused = run_module('volume', vol(host, 'big.raw', capacity='1GiB'))
    assert refused['failed'] and 'unfinished import' in refused['msg'] and os.path.exists(marker)

    checked = run_module('volume', vol(host, 'big.raw', import_from=str(image)), check=True)
    assert checked['changed'] and [o['op'] for o in checked['operations']] == ['remove_partial', 'create_volume']
    assert os.path.exists(marker)

    again = run_module('volume', vol(host, 'big.raw', import_from=str(image)))
    assert again['changed'] and [o['op'] for o in again['operations']] == ['remove_partial', 'create_volume'], again
    assert again['operations'][1]['sha256'] == digest and again['volume']['partial'] is False
    assert not os.path.exists(marker) and sha_chunked(again['volume']['path']) == digest
    assert not run_module('volume', vol(host, 'big.raw', import_from=str(image)))['changed']
    assert run_module('volume', vol(host, 'big.raw', state='absent'))['changed']
    # killed between writing the marker and creating the volume: the lone marker does not block the next import
    pool = conn.storagePoolLookupByName(POOL)
    pool.createXML('<volume><name>big.raw.converge-partial</name><capacity>0</capacity><target><format type="raw"/></target></volume>', 0)
    small = tmp_path / 'small.raw'
    small.write_bytes(b'x' * MIB)
    redone = run_module('volume', vol(host, 'big.raw', import_from=str(small)))
    assert redone['changed'] and not redone.get('failed') and not os.path.exists(marker), redone
    assert run_module('volume', vol(host, 'big.raw', state='absent'))['changed']


def test_overlay_on_backing_volume_and_volume_info(host, conn, pool_dir):
    run_module('volume', vol(host, 'base.qcow2', format='qcow2', capacity='8MiB'))
    overlay = run_module('volume', vol(host, 'top.qcow2', backing_volume='base.qcow2'))
    assert overlay['changed'] and overlay['volume']['format'] == 'qcow2' and overlay['volume']['capacity'] == 8 * MIB
    chain = overlay['volume']['backing_chain']
    assert [c['volume'] for c in chain] == ['%s/base.qcow2' % POOL] and chain[0]['format'] == 'qcow2'
    info = run_module('volume_info', {'uri': host.uri, 'pool': POOL, 'name': ['top.qcow2', 'nope']})
    assert not info['changed']
    top, missing = info['volumes']
    assert top['backing_chain'][0]['path'] == os.path.join(pool_dir, 'base.qcow2') and missing['exists'] is False
    everything = run_module('volume_info', {'uri': host.uri})
    assert {'%s/base.qcow2' % POOL, '%s/top.qcow2' % POOL} <= {v['key'] for v in everything['volumes']}
    assert POOL in [p['name'] for p in everything['pools']]


def test_delete_in_use_is_refused_naming_the_vms_then_detached_and_wiped(host, conn, pool_dir):
    run_module('volume', vol(host, 'shared.raw', capacity='2MiB'))
    for name in ('vol-user-a', 'vol-user-b'):
        conn.defineXML(domains.diskless_domain_xml(name, virtlab_hosts.diskless_domain_type()))
    attached = run_module('volume', vol(host, 'shared.raw', attachments=[{'vm': 'vol-user-a', 'dev': 'vdb'}, {'vm': 'vol-user-b', 'dev': 'vdc'}]))
    assert ops(attached) == [('attach_config', 'shared.raw', 'vol-user-a', 'vdb'), ('attach_config', 'shared.raw', 'vol-user-b', 'vdc')]
    assert attached['volume']['used_by'] == ['vol-user-a', 'vol-user-b']
    refused = run_module('volume', vol(host, 'shared.raw', state='absent'))
    assert refused['failed'] and 'vol-user-a' in refused['msg'] and 'vol-user-b' in refused['msg']
    assert refused['refusals'][0]['used_by'] == ['vol-user-a', 'vol-user-b']
    assert conn.storagePoolLookupByName(POOL).storageVolLookupByName('shared.raw')
    path = os.path.join(pool_dir, 'shared.raw')
    write_pattern(path, 2 * MIB, 'secret')
    checked = run_module('volume', vol(host, 'shared.raw', state='absent', attachments=[], wipe=True), check=True)
    assert ops(checked) == [('detach_config', 'shared.raw', 'vol-user-a', 'vdb'), ('detach_config', 'shared.raw', 'vol-user-b', 'vdc'),
                            ('delete_volume', 'shared.raw')]
    assert 'vdb' in disk_targets(conn.lookupByName('vol-user-a'), libvirt.VIR_DOMAIN_XML_INACTIVE)
    deleted = run_module('volume', vol(host, 'shared.raw', state='absent', attachments=[], wipe=True))
    assert deleted['changed'] and ops(deleted) == ops(checked) and deleted['operations'][-1]['wiped'] is True
    assert not os.path.exists(path) and deleted['volume']['exists'] is False
    assert 'vdb' not in disk_targets(conn.lookupByName('vol-user-a'), libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert not run_module('volume', vol(host, 'shared.raw', state='absent'))['changed']
    for name in ('vol-user-a', 'vol-user-b'):
        domains.remove_domain(conn, name)


def test_hotplug_grow_online_and_unplug_running_guest_keep_data(host, conn, pool_dir):
    dom = acpi_guest(conn, 'vol-hot')
    try:
        path = run_module('volume', vol(host, 'hot.raw', capacity='8MiB'))['volume']['path']
        digest = write_pattern(path, 8 * MIB, 'hot')
        want = [{'vm': 'vol-hot', 'dev': 'vdb', 'bus': 'virtio', 'serial': 'hot1'}]
        checked = run_module('volume', vol(host, 'hot.raw', attachments=want), check=True)
        assert ops(checked) == [('attach_config', 'hot.raw', 'vol-hot', 'vdb'), ('attach_live', 'hot.raw', 'vol-hot', 'vdb')]
        assert 'vdb' not in disk_targets(dom)
        plugged = run_module('volume', vol(host, 'hot.raw', attachments=want))
        assert plugged['changed'] and ops(plugged) == ops(checked)
        live = disk_targets(dom)['vdb']
        assert live.find('serial').text == 'hot1' and live.find('driver').get('type') == 'raw'
        assert 'vdb' in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert plugged['volume']['attachments'][0]['live'] and plugged['volume']['attachments'][0]['persistent']
        assert task_state(dom) is None, 'the attach task must be finished'
        assert not run_module('volume', vol(host, 'hot.raw', attachments=want))['changed']

        grown = run_module('volume', vol(host, 'hot.raw', capacity='16MiB', attachments=want))
        assert grown['operations'][0]['op'] == 'grow_volume' and grown['operations'][0]['online'] is True
        assert grown['volume']['capacity'] == 16 * MIB and sha(path, 8 * MIB) == digest

        refused = run_module('volume', vol(host, 'hot.raw', attachments=[]))
        assert refused['failed'] and 'vol-hot' in refused['msg'] and 'force' in refused['msg']
        assert 'vdb' in disk_targets(dom) and 'vdb' in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)

        # SCSI disks leave the guest at once (virtio needs a guest OS to acknowledge the unplug)
        path2 = run_module('volume', vol(host, 'hot2.raw', capacity='4MiB'))['volume']['path']
        digest2 = write_pattern(path2, 4 * MIB, 'hot2')
        scsi = [{'vm': 'vol-hot', 'dev': 'sdb', 'bus': 'scsi'}]
        assert ops(run_module('volume', vol(host, 'hot2.raw', attachments=scsi)))[-1][0] == 'attach_live'
        assert 'sdb' in disk_targets(dom)
        unplugged = run_module('volume', vol(host, 'hot2.raw', attachments=[], force=True))
        assert ops(unplugged) == [('detach_live', 'hot2.raw', 'vol-hot', 'sdb'), ('detach_config', 'hot2.raw', 'vol-hot', 'sdb')]
        assert 'sdb' not in disk_targets(dom) and 'sdb' not in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert unplugged['volume']['used_by'] == [] and task_state(dom) is None
        assert sha(path2, 4 * MIB) == digest2 and sha(path, 8 * MIB) == digest
        assert not run_module('volume', vol(host, 'hot2.raw', attachments=[], force=True))['changed']

        # a virtio unplug the guest never acknowledges: reported, the persistent definition is kept
        stuck = run_module('volume', vol(host, 'hot.raw', attachments=[], force=True, detach_timeout=2))
        assert stuck['failed'] and 'not confirmed' in stuck['msg'] and stuck['uncertain'] == ['vol-hot:vdb']
        assert 'vdb' in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE) and task_state(dom) is None
        assert sha(path, 8 * MIB) == digest
    finally:
        domains.remove_domain(conn, 'vol-hot')


def test_attach_waits_for_no_other_task_on_the_vm(host, conn, pool_dir):
    from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore
    from ansible_collections.converge.virt.plugins.module_utils._phase import tasks

    dom = conn.defineXML(domains.diskless_domain_xml('vol-locked', virtlab_hosts.diskless_domain_type()))
    try:
        run_module('volume', vol(host, 'locked.raw', capacity='1MiB'))
        store = LibvirtTaskStore(conn, dom, 'test', inferred_vm_state='STOPPED')
        tasks.take_task(store, 'start', 'other-task', 1e12, owner='test')
        busy = run_module('volume', vol(host, 'locked.raw', attachments=[{'vm': 'vol-locked', 'dev': 'vdb'}]))
        assert busy['failed'] and not busy['changed'] and 'busy' in busy['msg'] and 'other-task' in busy['msg']
        assert 'vdb' not in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
        tasks.abandon_task(store, 'other-task')
        done = run_module('volume', vol(host, 'locked.raw', attachments=[{'vm': 'vol-locked', 'dev': 'vdb'}]))
        assert done['changed'] and 'vdb' in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
    finally:
        domains.remove_domain(conn, 'vol-locked')


def test_fleet_form_with_one_refused_volume(host, conn, pool_dir):
    items = [{'name': 'fleet-%d.raw' % i, 'capacity': '1MiB'} for i in range(5)]
    created = run_module('volume', {'uri': host.uri, 'pool': POOL, 'volumes': items})
    assert created['changed'] and len(created['operations']) == 5 and all(v['exists'] for v in created['volumes'])
    assert not run_module('volume', {'uri': host.uri, 'pool': POOL, 'volumes': items})['changed']
    items[0] = {'name': 'fleet-0.raw', 'capacity': '512KiB'}
    items[1] = {'name': 'fleet-1.raw', 'capacity': '2MiB'}
    mixed = run_module('volume', {'uri': host.uri, 'pool': POOL, 'volumes': items})
    assert mixed['failed'] and mixed['changed'] and 'fleet-0.raw' in mixed['msg']
    assert ops(mixed) == [('grow_volume', 'fleet-1.raw')]
    sizes = {v['name']: v['capacity'] for v in mixed['volumes']}
    assert sizes['fleet-0.raw'] == MIB and sizes['fleet-1.raw'] == 2 * MIB
    twice = run_module('volume', {'uri': host.uri, 'pool': POOL, 'volumes': [items[2], items[2]]})
    assert twice['failed'] and 'more than once' in twice['msg']


@pytest.mark.parametrize('extra, field', [
    ({'capacity': '10 parsecs'}, 'volume.capacity'),
    ({'capacity': '1MiB', 'clone_from': 'a', 'import_from': '/x'}, 'mutually exclusive'),
    ({'capacity': '1MiB', 'format': 'raw', 'preallocation': 'metadata'}, 'volume.preallocation'),
    ({'capacity': '1MiB', 'attachments': [{'vm': 'no-such-vm', 'dev': 'vdb'}]}, 'no-such-vm'),
    ({'capacity': '1MiB', 'attachments': [{'vm': 'x', 'dev': 'not a dev'}]}, 'attachments[0].dev'),
    ({}, 'capacity is required'),
])
def test_bad_input_fails_naming_the_field_and_changes_nothing(host, conn, pool_dir, extra, field):
    result = run_module('volume', vol(host, 'bad.raw', **extra))
    assert result['failed'] and field in result['msg'] and not result.get('changed')
    with pytest.raises(libvirt.libvirtError):
        conn.storagePoolLookupByName(POOL).storageVolLookupByName('bad.raw')


def test_missing_pool_names_the_field_and_password_is_never_shown(host):
    result = run_module('volume', {'uri': host.uri, 'pool': 'nopool', 'name': 'x.raw', 'capacity': '1MiB'})
    assert result['failed'] and result['msg'].startswith('pool:') and 'pool_path' in result['msg']
    canary = 'Canary-Pw-5e21c0'
    uri = 'qemu+tcp://someone:%s@%s:1/system' % (canary, host.address)  # nothing listens on port 1
    leaked = run_module('volume', {'uri': uri, 'password': canary, 'pool': POOL, 'name': 'x.raw', 'capacity': '1MiB'})
    assert leaked['failed'] and canary not in repr(leaked)
    leaked = run_module('volume_info', {'uri': uri, 'password': canary})
    assert leaked['failed'] and canary not in repr(leaked)


def test_reconcile_vm_disks_uses_the_same_planner(host, conn, pool_dir):
    from ansible_collections.converge.virt.plugins.module_utils._libvirt.attachments import reconcile_vm_disks
    from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import Connection

    run_module('volume', vol(host, 'vmdisk.raw', capacity='1MiB'))
    dom = conn.defineXML(domains.diskless_domain_xml('vol-disks', virtlab_hosts.diskless_domain_type()))
    try:
        with Connection(host.uri) as connection:
            disks = [{'dev': 'vdb', 'pool': POOL, 'volume': 'vmdisk.raw'}]
            changed, planned, refusals = reconcile_vm_disks(connection, 'vol-disks', disks, check_mode=True)
            assert changed and [o['op'] for o in planned] == ['attach_config'] and refusals == []
            assert 'vdb' not in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
            changed, done, refusals = reconcile_vm_disks(connection, 'vol-disks', disks)
            assert changed and 'vdb' in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
            assert reconcile_vm_disks(connection, 'vol-disks', disks) == (False, [], [])
            dom.create()
            changed, done, refusals = reconcile_vm_disks(connection, 'vol-disks', [])
            assert not changed and refusals and 'force' in refusals[0]['reason']
            assert 'vdb' in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
            dom.destroy()
            changed, done, refusals = reconcile_vm_disks(connection, 'vol-disks', [])
            assert changed and [o['op'] for o in done] == ['detach_config'] and refusals == []
            assert 'vdb' not in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
    finally:
        domains.remove_domain(conn, 'vol-disks')


def test_interrupted_attach_is_finished_from_the_observed_state(host, conn, pool_dir):
    dom = acpi_guest(conn, 'vol-resume')
    try:
        path = run_module('volume', vol(host, 'resume.raw', capacity='2MiB'))['volume']['path']
        digest = write_pattern(path, 2 * MIB, 'resume')
        # a run killed between attach_config and attach_live left the disk in the persistent definition only
        xml = "<disk type='volume' device='disk'><driver name='qemu' type='raw'/><source pool='%s' volume='resume.raw'/>" \
              "<target dev='sdc' bus='scsi'/></disk>" % POOL
        dom.attachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        want = [{'vm': 'vol-resume', 'dev': 'sdc', 'bus': 'scsi'}]
        resumed = run_module('volume', vol(host, 'resume.raw', attachments=want))
        assert ops(resumed) == [('attach_live', 'resume.raw', 'vol-resume', 'sdc')]
        assert 'sdc' in disk_targets(dom) and sha(path, 2 * MIB) == digest
        assert not run_module('volume', vol(host, 'resume.raw', attachments=want))['changed']
    finally:
        domains.remove_domain(conn, 'vol-resume')


def test_a_refused_live_attach_rolls_the_persistent_definition_back(host, conn, pool_dir):
    """A live attach that fails after this run wrote the persistent definition (libvirt cannot hot-plug a SATA disk) must
    not leave the disk in the persistent definition only, reported changed: the attach_config is undone, the task fails
    saying so, nothing is reported changed, and a second run does the same (never a half-changed definition)."""
    dom = acpi_guest(conn, 'vol-rollback')
    try:
        path = run_module('volume', vol(host, 'rollback.raw', capacity='2MiB'))['volume']['path']
        digest = write_pattern(path, 2 * MIB, 'rollback')
        before = sorted(disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE))
        want = [{'vm': 'vol-rollback', 'dev': 'sdb', 'bus': 'sata'}]
        for _run in range(2):
            refused = run_module('volume', vol(host, 'rollback.raw', attachments=want))
            assert refused['failed'] and not refused['changed'], refused
            assert ops(refused) == [('attach_config', 'rollback.raw', 'vol-rollback', 'sdb'), ('attach_live', 'rollback.raw', 'vol-rollback', 'sdb')]
            assert refused['operations'][0]['rolled_back'] is True and refused['operations'][1]['failed'] is True
            assert refused['rolled_back'] is True and 'rolled back' in refused['msg'] and 'nothing was changed' in refused['msg']
            assert 'sata' in refused['msg'], refused['msg']
            assert sorted(disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)) == before and 'sdb' not in disk_targets(dom)
            assert refused['volume']['used_by'] == [] and task_state(dom) is None
        assert sha(path, 2 * MIB) == digest
    finally:
        domains.remove_domain(conn, 'vol-rollback')


def test_virtio_hot_unplug_from_a_booted_guest(host, conn, pool_dir, guest_image):
    dom, log = domains.start_kernel_guest(conn, host, 'vol-booted', guest_image)
    try:
        domains.wait_for_console(log)
        path = run_module('volume', vol(host, 'booted.raw', capacity='4MiB'))['volume']['path']
        digest = write_pattern(path, 4 * MIB, 'booted')
        want = [{'vm': 'vol-booted', 'dev': 'vdb'}]
        plugged = run_module('volume', vol(host, 'booted.raw', attachments=want))
        assert ops(plugged) == [('attach_config', 'booted.raw', 'vol-booted', 'vdb'), ('attach_live', 'booted.raw', 'vol-booted', 'vdb')]
        assert 'vdb' in disk_targets(dom)
        unplugged = run_module('volume', vol(host, 'booted.raw', attachments=[], force=True))
        assert ops(unplugged) == [('detach_live', 'booted.raw', 'vol-booted', 'vdb'), ('detach_config', 'booted.raw', 'vol-booted', 'vdb')]
        assert unplugged['operations'][0]['attempts'] >= 1
        assert 'vdb' not in disk_targets(dom) and 'vdb' not in disk_targets(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert sha(path, 4 * MIB) == digest and task_state(dom) is None
    finally:
        domains.remove_domain(conn, 'vol-booted')
