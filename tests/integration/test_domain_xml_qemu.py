# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""domain_xml against the QEMU driver's normalisation (it adds more defaults than the test driver).

Uses the private libvirt hosts of ``tests/integration/virtlab_fixtures.py``.  Run as root with::

    cd /work/main && PYTHONPATH=build/collections .venv/bin/python -m pytest tests/integration/test_domain_xml_qemu.py

(``build/collections/ansible_collections/converge/virt`` must be a symlink to the repository.)
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import itertools
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_build import build_domain_xml, disk_device_xml
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_diff import LIVE, RESTART, desired_vs_actual
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_merge import merge_into_inactive
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_read import disks_in, interfaces_in
from ansible_collections.converge.virt.plugins.module_utils._libvirt.metadata import CONVERGE_NS, converge_metadata_element, read_converge_metadata

libvirt = pytest.importorskip('libvirt')

pytest_plugins = ['tests.integration.virtlab_fixtures']

_COUNTER = itertools.count()

META = {'vm_state': 'stopped', 'task_state': None, 'task_id': 't-1', 'task_started_at': '2026-01-01T00:00:00Z', 'last_action': 'define',
        'pending_restart': False}


@pytest.fixture(name='conn')
def conn_fixture(host_conns):
    """A read-write connection to the first private QEMU host."""
    return host_conns[0]


@pytest.fixture(name='defined')
def defined_fixture(conn):
    """Define domains on the QEMU host and undefine them at the end of the test."""
    names = []

    def define(xml):
        dom = conn.defineXML(xml)
        names.append(dom.name())
        return dom, dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)

    yield define
    for name in names:
        try:
            dom = conn.lookupByName(name)
        except libvirt.libvirtError:
            continue
        if dom.isActive():
            dom.destroy()
        dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)


def _name(prefix='dx'):
    return 'vlt-%s-%d' % (prefix, next(_COUNTER))


def _spec(name, **changes):
    spec = {
        'name': name, 'title': 'Title & <more>', 'description': 'multi\nline "desc"', 'vcpus': 2, 'memory': '256MiB', 'machine': 'pc',
        'domain_type': 'qemu', 'firmware': 'bios',
        'disks': [
            {'source': {'pool': 'default', 'volume': name + '.qcow2'}, 'dev': 'vda', 'format': 'qcow2', 'serial': 'root'},
            {'source': '/var/lib/libvirt/images/%s-data.raw' % name, 'dev': 'vdb', 'format': 'raw', 'readonly': True},
            {'source': '/srv/iso/install.iso', 'dev': 'sda', 'device': 'cdrom'},
        ],
        'interfaces': [{'bridge': 'br-none'}, {'bridge': 'br-other', 'model': 'e1000', 'mac': '52:54:00:12:34:56'}],
        'serial': 'pty', 'graphics': 'none', 'on_crash': 'destroy',
    }
    spec.update(changes)
    return spec


def _addresses(xml):
    return sorted(ET.tostring(a) for a in ET.fromstring(xml).iter('address'))


@pytest.mark.parametrize('changes', [
    {},
    {'machine': 'q35'},
    {'graphics': 'vnc'},
    {'graphics': 'spice'},
    {'serial': '/var/log/converge-test.log'},
    {'serial': 'none'},
    {'boot': {'kernel': '/boot/vmlinuz', 'initrd': '/boot/initrd.img', 'cmdline': 'console=ttyS0 a&b'}},
    {'firmware': 'efi', 'machine': 'q35'},
    {'memory': '1G', 'vcpus': 1},
    {'disks': [{'path': '/dev/null', 'dev': 'vda'}, {'dev': 'sdb', 'device': 'cdrom', 'bus': 'scsi'}]},
    {'interfaces': []},
])
def test_qemu_normalisation_is_not_a_change(defined, changes):
    spec = _spec(_name(), **changes)
    _dom, actual = defined(build_domain_xml(spec, metadata=META))
    assert not desired_vs_actual(spec, actual), (desired_vs_actual(spec, actual), actual)
    assert not desired_vs_actual(build_domain_xml(spec), actual), actual
    got = read_converge_metadata(actual)
    assert {k: got[k] for k in META} == META
    # A redefine from the merged XML changes nothing libvirt added.
    merged = merge_into_inactive(actual, spec)
    _dom, again = defined(merged)
    assert again == actual


@pytest.mark.parametrize('changes, path, kind', [
    ({'title': 'Other'}, 'title', LIVE),
    ({'description': ''}, 'description', LIVE),
    ({'vcpus': 3}, 'vcpus', RESTART),
    ({'memory': '512MiB'}, 'memory', RESTART),
    ({'machine': 'q35'}, 'machine', RESTART),
    ({'on_crash': 'restart'}, 'on_crash', RESTART),
    ({'graphics': 'vnc'}, 'graphics', RESTART),
    ({'serial': '/var/log/x.log'}, 'serial', RESTART),
    ({'boot': {'kernel': '/boot/vmlinuz'}}, 'kernel', RESTART),
    ({'interfaces': [{'bridge': 'br-changed'}, {'bridge': 'br-other', 'model': 'e1000'}]}, 'interfaces[0].source', LIVE),
    ({'interfaces': [{'bridge': 'br-none'}, {'bridge': 'br-other', 'model': 'virtio'}]}, 'interfaces[1].model', RESTART),
    ({'interfaces': [{'bridge': 'br-none'}]}, 'interfaces[1]', LIVE),
])
def test_qemu_one_change_and_merge_keeps_macs_and_addresses(defined, changes, path, kind):
    spec = _spec(_name())
    _dom, actual = defined(build_domain_xml(spec))
    changed = dict(spec, **changes)
    diff = desired_vs_actual(changed, actual)
    assert [(c.path, c.kind) for c in diff] == [(path, kind)]
    _dom, redefined = defined(merge_into_inactive(actual, changed))
    assert not desired_vs_actual(changed, redefined), desired_vs_actual(changed, redefined)
    assert ET.fromstring(redefined).findtext('uuid') == ET.fromstring(actual).findtext('uuid')
    kept = len(changed['interfaces'])
    assert [n['mac'] for n in interfaces_in(redefined)] == [n['mac'] for n in interfaces_in(actual)][:kept]
    if path not in ('machine', 'interfaces[1]', 'interfaces[1].model', 'graphics'):
        assert _addresses(redefined) == _addresses(actual)


def test_qemu_disk_add_and_remove(defined):
    spec = _spec(_name())
    _dom, actual = defined(build_domain_xml(spec))
    vda_address = [d for d in ET.fromstring(actual).iter('disk') if d.find('target').get('dev') == 'vda'][0].find('address')
    added = dict(spec, disks=spec['disks'] + [{'path': '/var/lib/libvirt/images/extra.raw', 'dev': 'vdc', 'format': 'raw'}])
    assert [(c.path, c.kind) for c in desired_vs_actual(added, actual)] == [('disks[vdc]', LIVE)]
    _dom, redefined = defined(merge_into_inactive(actual, added))
    assert not desired_vs_actual(added, redefined)
    assert [d['dev'] for d in disks_in(redefined)] == ['vda', 'vdb', 'vdc', 'sda']
    new_vda = [d for d in ET.fromstring(redefined).iter('disk') if d.find('target').get('dev') == 'vda'][0].find('address')
    assert ET.tostring(new_vda) == ET.tostring(vda_address)
    removed = dict(spec, disks=spec['disks'][:1])
    assert sorted((c.path, c.kind) for c in desired_vs_actual(removed, redefined)) == [
        ('disks[sda]', RESTART), ('disks[vdb]', LIVE), ('disks[vdc]', LIVE)]
    _dom, shrunk = defined(merge_into_inactive(redefined, removed))
    assert not desired_vs_actual(removed, shrunk)


def test_qemu_raw_xml_second_run_is_unchanged(defined):
    name = _name('raw')
    raw = ("<domain type='qemu'><name>%s</name><memory unit='MiB'>128</memory><vcpu>1</vcpu>"
           "<os><type arch='x86_64' machine='q35'>hvm</type></os><features><acpi/></features>"
           "<devices><disk type='file' device='disk'><driver name='qemu' type='qcow2' cache='none'/>"
           "<source file='/var/lib/libvirt/images/raw.qcow2'/><target dev='vda' bus='virtio'/></disk>"
           "<interface type='bridge'><source bridge='br-none'/><model type='virtio'/></interface>"
           "<console type='pty'/><video><model type='vga'/></video><graphics type='vnc'/></devices></domain>") % name
    _dom, actual = defined(raw)
    assert not desired_vs_actual(raw, actual), (desired_vs_actual(raw, actual), actual)
    _dom, again = defined(merge_into_inactive(actual, raw))
    assert again == actual
    changed = raw.replace("cache='none'", "cache='writeback'")
    assert desired_vs_actual(changed, again).paths == ['disks[vda].xml']


def test_qemu_metadata_and_running_guest(defined, guest_image):
    name = _name('run')
    spec = {'name': name, 'domain_type': 'qemu', 'memory': '128MiB', 'vcpus': 1, 'machine': 'pc', 'serial': 'pty',
            'boot': {'kernel': guest_image.kernel, 'initrd': guest_image.initrd, 'cmdline': guest_image.cmdline}, 'on_reboot': 'destroy'}
    dom, _xml = defined(build_domain_xml(spec))
    dom.create()
    try:
        flags = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, converge_metadata_element(dict(META, vm_state='running')), 'converge', CONVERGE_NS, flags)
        inactive = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert read_converge_metadata(inactive)['vm_state'] == 'running'
        assert not desired_vs_actual(spec, inactive)
        # Live change: title; hot-plug of a virtio disk (backing file is /dev/null, read-only).
        changed = dict(spec, title='live title', disks=[{'path': '/dev/null', 'dev': 'vdb', 'readonly': True, 'format': 'raw'}])
        diff = desired_vs_actual(changed, inactive)
        assert sorted((c.path, c.kind) for c in diff) == [('disks[vdb]', LIVE), ('title', LIVE)]
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_TITLE, 'live title', None, None, flags)
        dom.attachDeviceFlags(disk_device_xml(changed['disks'][0]), flags)
        assert not desired_vs_actual(changed, dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        assert not desired_vs_actual(changed, dom.XMLDesc(0))
        # Restart change: recorded in the persistent config only.
        bigger = dict(changed, memory='192MiB')
        dom2, _xml = defined(merge_into_inactive(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), bigger))
        assert not desired_vs_actual(bigger, dom2.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        assert desired_vs_actual(bigger, dom2.XMLDesc(0)).paths == ['memory']
    finally:
        dom.destroy()
