"""Pure parts of the libvirt storage and attachment code: declarations, XML, observation mapping."""

import json
import subprocess
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._libvirt import attachments
from ansible_collections.converge.virt.plugins.module_utils._libvirt import local_image, storage_spec, storage_xml
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase

MIB = 1024 * 1024


def norm(**item):
    item.setdefault('name', 'v.raw')
    item.setdefault('pool', 'p')
    return storage_spec.normalize_volume(item)


def test_normalize_defaults_and_units():
    spec = norm(capacity='10GiB')
    assert spec['key'] == 'p/v.raw' and spec['capacity'] == 10 * 1024 ** 3 and spec['state'] == 'present'
    assert spec['preallocation'] == 'off' and spec['attachments'] is None and spec['wipe'] is False
    assert norm(capacity=512)['capacity'] == 512
    assert norm(capacity='1.5MiB')['capacity'] == 3 * MIB // 2


@pytest.mark.parametrize('item, field', [
    ({'capacity': '-1MiB'}, 'volume.capacity'),
    ({'capacity': '1 parsec'}, 'volume.capacity'),
    ({'capacity': 0}, 'volume.capacity'),
    ({'name': 'a/b'}, 'volume.name'),
    ({'name': '..'}, 'volume.name'),
    ({'name': 'disk.raw.converge-partial'}, 'volume.name'),
    ({'clone_from': 'other.converge-partial', 'capacity': 1}, 'volume.clone_from'),
    ({'pool': None}, 'volume.pool'),
    ({'pool_path': 'relative'}, 'volume.pool_path'),
    ({'state': 'gone'}, 'volume.state'),
    ({'format': 'vmdk'}, 'volume.format'),
    ({'clone_from': 'a', 'backing_volume': 'b'}, 'volume'),
    ({'import_from': 'relative.img'}, 'volume.import_from'),
    ({'import_format': 'raw'}, 'volume.import_format'),
    ({'clone_from': 'v.raw'}, 'volume'),
    ({'backing_volume': 'b', 'format': 'raw'}, 'volume.format'),
    ({'preallocation': 'metadata'}, 'volume.preallocation'),
    ({'wipe': 'yes'}, 'volume.wipe'),
    ({'attachments': [{'dev': 'vdb'}]}, 'volume.attachments[0].vm'),
    ({'attachments': [{'vm': 'a', 'dev': 'vd b'}]}, 'volume.attachments[0].dev'),
    ({'attachments': [{'vm': 'a', 'dev': 'vdb', 'bus': 'floppy'}]}, 'volume.attachments[0].bus'),
    ({'attachments': [{'vm': 'a', 'dev': 'vdb'}, {'vm': 'a', 'dev': 'vdb'}]}, 'volume.attachments[1]'),
    ({'attachments': [{'vm': 'a', 'dev': 'vdb', 'colour': 'red'}]}, 'volume.attachments[0]'),
    ({'state': 'absent', 'attachments': [{'vm': 'a', 'dev': 'vdb'}]}, 'volume.attachments'),
])
def test_bad_declarations_name_the_field(item, field):
    with pytest.raises(InvalidDeclaration) as info:
        norm(**item)
    assert info.value.field == field


def test_references_and_overlay_format():
    spec = norm(backing_volume='base.qcow2')
    assert spec['backing_volume'] == 'p/base.qcow2' and spec['format'] == 'qcow2'
    assert norm(clone_from='other/src.raw')['clone_from'] == 'other/src.raw'
    assert storage_spec.desired_source(spec) == 'backing:p/base.qcow2'
    assert storage_spec.desired_source(norm(import_from='/img')) == 'import:/img'
    assert storage_spec.desired_source(norm(capacity=1)) is None


def test_fleet_defaults_fill_items():
    spec = storage_spec.normalize_volume({'name': 'a.raw'}, 'volumes[3]', {'pool': 'p', 'capacity': '1MiB', 'format': 'raw'})
    assert spec['key'] == 'p/a.raw' and spec['capacity'] == MIB
    with pytest.raises(InvalidDeclaration) as info:
        storage_spec.normalize_volume({'name': 'a.raw', 'capacity': 'x'}, 'volumes[3]', {'pool': 'p'})
    assert info.value.field == 'volumes[3].capacity'


def test_desired_world_builds_planner_inputs():
    spec = norm(capacity='1MiB', attachments=[{'vm': 'web', 'dev': 'vdb', 'serial': 'S1'}, {'vm': 'db', 'dev': 'sdc', 'readonly': True}])
    vols, atts = storage_spec.desired_world([spec])
    assert vols == [phase.DesiredVolume('p/v.raw', True, MIB, None, None)]
    assert atts == [phase.Attachment('web', 'vdb', 'p/v.raw', False, 'virtio', 'S1'), phase.Attachment('db', 'sdc', 'p/v.raw', True, 'sata', None)]


def test_shrink_of_declared_volume_is_refused_by_the_planner():
    vols, atts = storage_spec.desired_world([norm(capacity='1MiB')])
    plan = phase.plan_volumes(vols, [phase.ActualVolume('p/v.raw', 2 * MIB, 'raw')], atts, [])
    assert plan.operations == [] and 'never shrunk' in plan.refusals[0]['reason']


def test_volume_xml_round_trip():
    xml = storage_xml.volume_xml('top.qcow2', 8 * MIB, 'qcow2', backing={'path': '/p/base.qcow2', 'format': 'qcow2'})
    parsed = storage_xml.parse_volume_xml(xml)
    assert parsed['name'] == 'top.qcow2' and parsed['capacity'] == 8 * MIB and parsed['format'] == 'qcow2'
    assert parsed['backing'] == {'path': '/p/base.qcow2', 'format': 'qcow2'} and parsed['allocation'] == 0
    assert storage_xml.parse_volume_xml(storage_xml.volume_xml('a', MIB, 'raw', 'full'))['allocation'] == MIB
    kib = "<volume><name>x</name><capacity unit='KiB'>4</capacity><allocation>0</allocation><target><path>/x</path></target></volume>"
    assert storage_xml.parse_volume_xml(kib)['capacity'] == 4096 and storage_xml.parse_volume_xml(kib)['path'] == '/x'


def test_xml_is_built_not_templated():
    xml = storage_xml.volume_xml("a'<b>&", MIB, 'raw')
    assert ET.fromstring(xml).findtext('name') == "a'<b>&"
    assert storage_xml.parse_pool_xml(storage_xml.pool_xml('p<', '/srv/p&')) == {'name': 'p<', 'type': 'dir', 'path': '/srv/p&'}


def test_image_inspection_uses_argv_on_the_open_descriptor_and_checks_format(tmp_path):
    image = tmp_path / 'i.img'
    image.write_bytes(b'x' * 1024)
    seen = []

    def runner(argv, **kwargs):
        seen.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, 0, json.dumps({'format': 'raw', 'virtual-size': 1024}), '')

    with local_image.LocalImage(str(image)) as local:
        assert local.inspect(runner=runner) == {'format': 'raw', 'virtual_size': 1024, 'file_size': 1024}
        argv, kwargs = seen[0]
        assert argv[:2] == ['qemu-img', 'info'] and argv[-1] == '/proc/self/fd/%d' % local.fd and kwargs['pass_fds'] == (local.fd,)
        with pytest.raises(InvalidDeclaration) as info:
            local.inspect('qcow2', runner=runner)
        assert info.value.field == 'import_format'
    with pytest.raises(InvalidDeclaration) as info:
        local_image.LocalImage(str(tmp_path / 'missing'))
    assert info.value.field == 'import_from'


def test_image_sha256_reads_the_whole_file_through_the_descriptor(tmp_path):
    path = tmp_path / 'f'
    path.write_bytes(b'abcdef')
    import hashlib
    with local_image.LocalImage(str(path)) as local:
        path.unlink()
        assert local.sha256() == hashlib.sha256(b'abcdef').hexdigest()


def disk(dev, pool=None, volume=None, path=None, bus='virtio', readonly=False, serial=None, device='disk'):
    return {'dev': dev, 'bus': bus, 'device': device, 'type': 'volume' if pool else 'file', 'path': path, 'pool': pool, 'volume': volume,
            'format': 'raw', 'readonly': readonly, 'serial': serial}


def test_attachments_merge_live_and_persistent():
    live = [disk('vda', path='/img/root'), disk('vdb', 'p', 'd.raw'), disk('hdc', path='/iso', device='cdrom', bus='ide')]
    config = [disk('vda', path='/img/root'), disk('vdb', 'p', 'd.raw', serial='changed')]
    keys = {'/img/root': 'p/root.qcow2'}
    atts = attachments.attachments_from_disks('web', True, live, config, lambda d: attachments.disk_key(d, keys.get))
    by = {(a.target, a.serial): a for a in atts}
    assert by[('vda', None)].volume == 'p/root.qcow2' and by[('vda', None)].live and by[('vda', None)].persistent
    assert by[('vdb', None)].live and not by[('vdb', None)].persistent
    assert by[('vdb', 'changed')].persistent and not by[('vdb', 'changed')].live
    assert all(a.vm_running for a in atts) and len(atts) == 3, 'cdroms are not managed volumes'
    stopped = attachments.attachments_from_disks('db', False, None, [disk('vdb', path='/elsewhere')], lambda d: attachments.disk_key(d, keys.get))
    assert stopped == [phase.Attachment('db', 'vdb', '/elsewhere', persistent=True, bus='virtio')]


def test_users_and_public_attachments():
    atts = [phase.Attachment('b', 'vdb', 'p/x', live=True, vm_running=True), phase.Attachment('a', 'vdc', 'p/x', persistent=True)]
    assert attachments.users_of(atts) == {'p/x': {'a', 'b'}}
    public = attachments.public_attachments(atts, 'p/x')
    assert [p['vm'] for p in public] == ['a', 'b'] and public[1]['live'] and not public[0]['live']


def test_attach_xml_for_pool_volume_and_path():
    op = phase.Operation(phase.ATTACH_LIVE, 'p/d.qcow2', 'web', 'vdb', (('readonly', True), ('bus', 'virtio'), ('serial', 'S')))
    elem = ET.fromstring(attachments.attach_disk_xml(op, 'qcow2'))
    assert elem.get('type') == 'volume' and elem.find('source').attrib == {'pool': 'p', 'volume': 'd.qcow2'}
    assert elem.find('driver').get('type') == 'qcow2' and elem.find('readonly') is not None and elem.findtext('serial') == 'S'
    op = phase.Operation(phase.ATTACH_CONFIG, '/dev/sdz', 'web', 'sdb', (('readonly', False), ('bus', 'scsi'), ('serial', None)))
    elem = ET.fromstring(attachments.attach_disk_xml(op, None))
    assert elem.get('type') == 'block' and elem.find('source').get('dev') == '/dev/sdz' and elem.find('readonly') is None
