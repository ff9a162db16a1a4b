# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for domain XML building, change detection, merging and converge metadata."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import itertools
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_build import build_domain_xml, disk_device_xml, interface_device_xml
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_diff import (
    LIVE, RECREATE, RESTART, Change, Diff, desired_vs_actual, machine_matches)
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_merge import merge_into_inactive
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_read import disks_in, domain_model, interfaces_in
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_spec import normalize_spec, spec_autostart
from ansible_collections.converge.virt.plugins.module_utils._libvirt.metadata import (
    CONVERGE_NS, METADATA_FIELDS, converge_metadata_element, read_converge_metadata)

try:
    import libvirt
except ImportError:  # pragma: no cover
    libvirt = None

needs_libvirt = pytest.mark.skipif(libvirt is None, reason='libvirt-python is not installed')

_COUNTER = itertools.count()

BASE = {'name': 'web1', 'vcpus': 2, 'memory': '1GiB', 'machine': 'q35'}

FULL = {
    'name': 'full', 'title': 'Full & <complete>', 'description': 'line one\nline "two"', 'vcpus': 4, 'memory': '2GiB',
    'machine': 'pc', 'arch': 'x86_64', 'domain_type': 'kvm', 'firmware': 'bios',
    'boot': {'kernel': '/boot/vmlinuz', 'initrd': '/boot/initrd.img', 'cmdline': 'console=ttyS0 root=/dev/vda1 quiet'},
    'disks': [
        {'source': {'pool': 'default', 'volume': 'full-root.qcow2'}, 'dev': 'vda', 'format': 'qcow2', 'serial': 'root-1'},
        {'source': '/var/lib/libvirt/images/data.raw', 'dev': 'vdb', 'format': 'raw', 'readonly': True},
        {'source': '/srv/iso/install.iso', 'dev': 'sda', 'device': 'cdrom'},
    ],
    'interfaces': [{'network': 'default'}, {'bridge': 'br0', 'model': 'e1000', 'mac': '52:54:00:12:34:56'}],
    'serial': 'pty', 'graphics': 'none', 'on_poweroff': 'destroy', 'on_reboot': 'restart', 'on_crash': 'destroy', 'autostart': True,
}

# What the QEMU driver of libvirt 9.0 gives back for FULL (inactive XML): uuid, MACs, addresses, controllers, memballoon,
# input devices, emulator, cpu, clock, pm, seclabel, aliases-free, machine expanded, units in KiB, attributes reordered.
QEMU_FULL = """<domain type='kvm'>
  <name>full</name>
  <uuid>0b4c6a6e-93b5-4c8f-a1a2-5a3c6d2e9f10</uuid>
  <title>Full &amp; &lt;complete&gt;</title>
  <description>line one
line "two"</description>
  <metadata>
    <converge:vm xmlns:converge="https://converge.virt/xmlns/vm/1">
      <converge:vm_state>running</converge:vm_state>
    </converge:vm>
  </metadata>
  <memory unit='KiB'>2097152</memory>
  <currentMemory unit='KiB'>2097152</currentMemory>
  <vcpu placement='static'>4</vcpu>
  <resource>
    <partition>/machine</partition>
  </resource>
  <os>
    <type arch='x86_64' machine='pc-i440fx-7.2'>hvm</type>
    <kernel>/boot/vmlinuz</kernel>
    <initrd>/boot/initrd.img</initrd>
    <cmdline>console=ttyS0 root=/dev/vda1 quiet</cmdline>
    <boot dev='hd'/>
  </os>
  <features>
    <acpi/>
    <apic/>
  </features>
  <cpu mode='custom' match='exact' check='none'>
    <model fallback='forbid'>qemu64</model>
  </cpu>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <pm>
    <suspend-to-mem enabled='no'/>
    <suspend-to-disk enabled='no'/>
  </pm>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source pool='default' volume='full-root.qcow2'/>
      <target dev='vda' bus='virtio'/>
      <serial>root-1</serial>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x04' function='0x0'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='/var/lib/libvirt/images/data.raw'/>
      <target dev='vdb' bus='virtio'/>
      <readonly/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/srv/iso/install.iso'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </disk>
    <controller type='usb' index='0' model='piix3-uhci'>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x01' function='0x2'/>
    </controller>
    <controller type='pci' index='0' model='pci-root'/>
    <controller type='sata' index='0'>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x06' function='0x0'/>
    </controller>
    <interface type='network'>
      <mac address='52:54:00:6b:1e:0a'/>
      <source network='default'/>
      <model type='virtio'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x02' function='0x0'/>
    </interface>
    <interface type='bridge'>
      <mac address='52:54:00:12:34:56'/>
      <source bridge='br0'/>
      <model type='e1000'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x03' function='0x0'/>
    </interface>
    <serial type='pty'>
      <target type='isa-serial' port='0'>
        <model name='isa-serial'/>
      </target>
    </serial>
    <console type='pty'>
      <target type='serial' port='0'/>
    </console>
    <input type='mouse' bus='ps2'/>
    <input type='keyboard' bus='ps2'/>
    <audio id='1' type='none'/>
    <memballoon model='virtio'>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x07' function='0x0'/>
    </memballoon>
  </devices>
  <seclabel type='dynamic' model='apparmor' relabel='yes'/>
</domain>
"""

UUID = '0b4c6a6e-93b5-4c8f-a1a2-5a3c6d2e9f10'


def _root(xml):
    return ET.fromstring(xml)


def _with(spec, **changes):
    out = dict(spec)
    out.update(changes)
    return out


def _uniq(prefix='t'):
    return '%s-%d' % (prefix, next(_COUNTER))


# ---------------------------------------------------------------------------------------------------------------------
# build_domain_xml: one table row per option
# ---------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('changes, xpath, attr, expected', [
    ({}, '.', 'type', 'kvm'),
    ({'domain_type': 'qemu'}, '.', 'type', 'qemu'),
    ({}, 'name', None, 'web1'),
    ({'uuid': '0B4C6A6E-93B5-4C8F-A1A2-5A3C6D2E9F10'}, 'uuid', None, UUID),
    ({'title': 'a <b> & c'}, 'title', None, 'a <b> & c'),
    ({'description': 'x\r\ny'}, 'description', None, 'x\ny'),
    ({}, 'vcpu', None, '2'),
    ({'vcpus': '8'}, 'vcpu', None, '8'),
    ({}, 'memory', None, '1048576'),
    ({}, 'memory', 'unit', 'KiB'),
    ({}, 'currentMemory', None, '1048576'),
    ({'memory': 512}, 'memory', None, '524288'),
    ({'memory': '512MiB'}, 'memory', None, '524288'),
    ({'memory': '1G'}, 'memory', None, '1048576'),
    ({'memory': '2GB'}, 'memory', None, '1953125'),
    ({'memory': '1000001KB'}, 'memory', None, '976564'),
    ({}, 'os/type', 'machine', 'q35'),
    ({}, 'os/type', 'arch', 'x86_64'),
    ({'arch': 'aarch64', 'machine': 'virt'}, 'os/type', 'arch', 'aarch64'),
    ({}, 'os/type', None, 'hvm'),
    ({'firmware': 'efi'}, 'os', 'firmware', 'efi'),
    ({'firmware': 'bios'}, 'os', 'firmware', None),
    ({'boot': {'kernel': '/k', 'initrd': '/i', 'cmdline': 'a=1 b="2"'}}, 'os/kernel', None, '/k'),
    ({'boot': {'kernel': '/k', 'initrd': '/i', 'cmdline': 'a=1 b="2"'}}, 'os/initrd', None, '/i'),
    ({'boot': {'kernel': '/k', 'initrd': '/i', 'cmdline': 'a=1 b="2"'}}, 'os/cmdline', None, 'a=1 b="2"'),
    ({}, 'on_poweroff', None, 'destroy'),
    ({}, 'on_reboot', None, 'restart'),
    ({}, 'on_crash', None, 'destroy'),
    ({'on_crash': 'coredump-restart'}, 'on_crash', None, 'coredump-restart'),
    ({}, 'features/acpi', None, None),
    ({}, 'devices/serial', 'type', 'pty'),
    ({}, 'devices/console/target', 'type', 'serial'),
    ({'serial': '/var/log/vm.log'}, 'devices/serial/source', 'path', '/var/log/vm.log'),
    ({'serial': '/var/log/vm.log'}, 'devices/serial', 'type', 'file'),
    ({'graphics': 'vnc'}, 'devices/graphics', 'type', 'vnc'),
    ({'graphics': 'spice'}, 'devices/graphics', 'listen', '127.0.0.1'),
    ({'disks': [{'pool': 'p', 'volume': 'v', 'dev': 'vda'}]}, 'devices/disk', 'type', 'volume'),
    ({'disks': [{'pool': 'p', 'volume': 'v', 'dev': 'vda'}]}, 'devices/disk/source', 'volume', 'v'),
    ({'disks': [{'source': {'pool': 'p', 'volume': 'v'}, 'dev': 'vda'}]}, 'devices/disk/source', 'pool', 'p'),
    ({'disks': [{'source': '/img/a.qcow2', 'dev': 'vda'}]}, 'devices/disk/source', 'file', '/img/a.qcow2'),
    ({'disks': [{'source': {'path': '/img/a.qcow2'}, 'target': 'vda'}]}, 'devices/disk/target', 'dev', 'vda'),
    ({'disks': [{'path': '/dev/vg/lv', 'dev': 'vda'}]}, 'devices/disk/source', 'dev', '/dev/vg/lv'),
    ({'disks': [{'path': '/dev/vg/lv', 'dev': 'vda'}]}, 'devices/disk', 'type', 'block'),
    ({'disks': [{'path': '/a', 'dev': 'vda'}]}, 'devices/disk/target', 'bus', 'virtio'),
    ({'disks': [{'path': '/a', 'dev': 'sda', 'bus': 'scsi'}]}, 'devices/disk/target', 'bus', 'scsi'),
    ({'disks': [{'path': '/a', 'dev': 'sdb'}]}, 'devices/disk/target', 'bus', 'sata'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'format': 'qcow2'}]}, 'devices/disk/driver', 'type', 'qcow2'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'format': 'raw'}]}, 'devices/disk/driver', 'name', 'qemu'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'readonly': True}]}, 'devices/disk/readonly', None, None),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'serial': 'SN-1'}]}, 'devices/disk/serial', None, 'SN-1'),
    ({'disks': [{'path': '/a.iso', 'dev': 'sda', 'device': 'cdrom'}]}, 'devices/disk', 'device', 'cdrom'),
    ({'disks': [{'path': '/a.iso', 'dev': 'sda', 'device': 'cdrom'}]}, 'devices/disk/readonly', None, None),
    ({'disks': [{'dev': 'sdc', 'device': 'cdrom'}]}, 'devices/disk/target', 'bus', 'sata'),
    ({'interfaces': [{'network': 'default'}]}, 'devices/interface', 'type', 'network'),
    ({'interfaces': [{'network': 'default'}]}, 'devices/interface/source', 'network', 'default'),
    ({'interfaces': [{'network': 'default'}]}, 'devices/interface/model', 'type', 'virtio'),
    ({'interfaces': [{'bridge': 'br0', 'model': 'e1000'}]}, 'devices/interface/source', 'bridge', 'br0'),
    ({'interfaces': [{'bridge': 'br0', 'model': 'e1000'}]}, 'devices/interface/model', 'type', 'e1000'),
    ({'interfaces': [{'bridge': 'br0', 'mac': '52:54:00:AA:BB:CC'}]}, 'devices/interface/mac', 'address', '52:54:00:aa:bb:cc'),
])
def test_build_options(changes, xpath, attr, expected):
    root = _root(build_domain_xml(_with(BASE, **changes)))
    elem = root.find(xpath)
    assert elem is not None, xpath
    value = elem.get(attr) if attr else (elem.text if expected is not None else None)
    assert value == expected


@pytest.mark.parametrize('xpath', [
    'uuid', 'title', 'description', 'metadata', 'os/kernel', 'devices/disk', 'devices/interface', 'devices/graphics', 'os[@firmware]',
])
def test_build_leaves_out_undeclared(xpath):
    assert _root(build_domain_xml(BASE)).find(xpath) is None


def test_build_graphics_none_and_serial_none():
    root = _root(build_domain_xml(_with(BASE, graphics='none', serial='none')))
    assert root.find('devices/graphics') is None
    assert root.find('devices/serial') is None
    assert root.find('devices/console') is None


def test_build_defaults_and_autostart_not_in_xml():
    root = _root(build_domain_xml({'name': 'minimal', 'autostart': True}))
    assert root.findtext('vcpu') == '1'
    assert root.findtext('memory') == str(1024 * 1024)
    assert root.get('type') == 'kvm'
    assert 'autostart' not in build_domain_xml({'name': 'minimal', 'autostart': True})
    assert spec_autostart({'name': 'x', 'autostart': True}) is True
    assert spec_autostart({'name': 'x', 'autostart': False}) is False
    assert spec_autostart({'name': 'x'}) is None


def test_build_with_metadata():
    root = _root(build_domain_xml(BASE, metadata={'vm_state': 'running', 'pending_restart': False}))
    vm = root.find('metadata/{%s}vm' % CONVERGE_NS)
    assert vm.findtext('{%s}vm_state' % CONVERGE_NS) == 'running'
    assert vm.findtext('{%s}pending_restart' % CONVERGE_NS) == 'false'


def test_build_raw_xml_passthrough():
    xml = "<domain type='kvm'><name>raw</name><memory>1024</memory></domain>"
    assert _root(build_domain_xml({'xml': xml})).findtext('name') == 'raw'


def test_values_are_data_not_markup():
    evil = "x<name><uuid>bad<uuid><name>y &amp; &"
    spec = _with(BASE, name=evil, title="'; <!-- & -->", description=']]>&amp;', disks=[{'path': "/a'b\"<c>", 'dev': 'vda', 'serial': 'a b'}])
    root = _root(build_domain_xml(spec))
    assert root.findtext('name') == evil
    assert root.find('uuid') is None
    assert root.findtext('title') == "'; <!-- & -->"
    assert root.findtext('description') == ']]>&amp;'
    assert root.find('devices/disk/source').get('file') == "/a'b\"<c>"
    assert not desired_vs_actual(spec, build_domain_xml(spec))


@pytest.mark.parametrize('changes, field, reason', [
    ({'name': None}, 'name', 'required'),
    ({'name': ''}, 'name', 'must not be empty'),
    ({'name': 'a/b'}, 'name', "'/'"),
    ({'name': 'a\nb'}, 'name', 'single line'),
    ({'name': 'a\x00b'}, 'name', 'XML'),
    ({'name': 5}, 'name', 'expected a string'),
    ({'uuid': 'nope'}, 'uuid', 'not a UUID'),
    ({'title': 'a\nb'}, 'title', 'single line'),
    ({'vcpus': 0}, 'vcpus', 'at least 1'),
    ({'vcpus': -2}, 'vcpus', 'at least 1'),
    ({'vcpus': 100000}, 'vcpus', 'at most'),
    ({'vcpus': True}, 'vcpus', 'integer'),
    ({'vcpus': '2x'}, 'vcpus', 'integer'),
    ({'memory': 0}, 'memory', 'greater than zero'),
    ({'memory': '-1GiB'}, 'memory', 'negative'),
    ({'memory': '1GiBs'}, 'memory', 'unknown unit'),
    ({'memory': '12 parsecs'}, 'memory', 'unknown unit'),
    ({'memory': '100KiB'}, 'memory', 'too small'),
    ({'memory': '1000TiB'}, 'memory', 'absurdly large'),
    ({'memory': '1000000B'}, 'memory', 'too small'),
    ({'memory': 1.5}, 'memory', 'expected a size'),
    ({'machine': 'pc q35'}, 'machine', 'identifier'),
    ({'domain_type': 'xen'}, 'domain_type', 'not one of'),
    ({'firmware': 'uefi'}, 'firmware', 'not one of'),
    ({'boot': {'kernel': 'vmlinuz'}}, 'boot.kernel', 'absolute path'),
    ({'boot': {'cmdline': 'quiet'}}, 'boot', 'need boot.kernel'),
    ({'boot': {'kernel': '/k', 'append': 'x'}}, 'boot', 'unknown option'),
    ({'boot': '/k'}, 'boot', 'expected a dict'),
    ({'on_crash': 'explode'}, 'on_crash', 'not one of'),
    ({'on_reboot': 'coredump-restart'}, 'on_reboot', 'not one of'),
    ({'serial': 'tty'}, 'serial', 'absolute path'),
    ({'graphics': 'sdl'}, 'graphics', 'not one of'),
    ({'autostart': 'yes'}, 'autostart', 'boolean'),
    ({'disks': {'dev': 'vda'}}, 'disks', 'expected a list'),
    ({'disks': ['vda']}, 'disks[0]', 'expected a dict'),
    ({'disks': [{'path': '/a'}]}, 'disks[0].dev', 'required'),
    ({'disks': [{'path': '/a', 'dev': 'eth0'}]}, 'disks[0].dev', 'not a valid target'),
    ({'disks': [{'path': 'a.img', 'dev': 'vda'}]}, 'disks[0].source', 'absolute path'),
    ({'disks': [{'dev': 'vda'}]}, 'disks[0].source', 'needs a source'),
    ({'disks': [{'pool': 'p', 'dev': 'vda'}]}, 'disks[0].source', 'both pool and volume'),
    ({'disks': [{'pool': 'p', 'volume': 'v', 'path': '/a', 'dev': 'vda'}]}, 'disks[0].source', 'not both'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'bus': 'floppy'}]}, 'disks[0].bus', 'not one of'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'format': 'vmdk'}]}, 'disks[0].format', 'not one of'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'readonly': 'yes'}]}, 'disks[0].readonly', 'boolean'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'serial': 'a<b'}]}, 'disks[0].serial', 'may only contain'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'device': 'floppy'}]}, 'disks[0].device', 'not one of'),
    ({'disks': [{'path': '/a', 'dev': 'vda', 'device': 'cdrom'}]}, 'disks[0].bus', 'virtio'),
    ({'disks': [{'path': '/a', 'dev': 'vda'}, {'path': '/b', 'dev': 'vda'}]}, 'disks', 'more than once'),
    ({'interfaces': [{}]}, 'interfaces[0]', 'exactly one of network or bridge'),
    ({'interfaces': [{'network': 'a', 'bridge': 'b'}]}, 'interfaces[0]', 'exactly one'),
    ({'interfaces': [{'network': 'a', 'model': 'ne2k'}]}, 'interfaces[0].model', 'not one of'),
    ({'interfaces': [{'network': 'a', 'mac': '52:54:00:zz:00:01'}]}, 'interfaces[0].mac', 'not a MAC'),
    ({'interfaces': [{'network': 'a', 'mac': '01:00:5e:00:00:01'}]}, 'interfaces[0].mac', 'multicast'),
    ({'interfaces': [{'network': 'a', 'mac': '52:54:00:00:00:01'}, {'network': 'b', 'mac': '52:54:00:00:00:01'}]}, 'interfaces', 'more than once'),
])
def test_spec_validation(changes, field, reason):
    with pytest.raises(ValueError) as exc:
        build_domain_xml(_with(BASE, **changes))
    message = str(exc.value)
    assert message.startswith(field + ':') or message.startswith(field + '.'), message
    assert reason in message


def test_normalize_spec_only_declared_and_ignores_foreign_keys():
    spec = normalize_spec({'name': 'a', 'memory': None, 'state': 'running', 'uri': 'qemu:///system'})
    assert spec == {'name': 'a'}


# ---------------------------------------------------------------------------------------------------------------------
# desired_vs_actual
# ---------------------------------------------------------------------------------------------------------------------

def test_full_spec_against_qemu_normalised_xml_is_empty():
    diff = desired_vs_actual(FULL, QEMU_FULL)
    assert not diff, diff
    assert len(diff) == 0 and diff.paths == [] and not diff.needs_restart


def test_built_xml_against_itself_is_empty():
    assert not desired_vs_actual(FULL, build_domain_xml(FULL))
    assert not desired_vs_actual(build_domain_xml(FULL), build_domain_xml(FULL))


@pytest.mark.parametrize('changes, path, before, after, kind', [
    ({'title': 'New'}, 'title', 'Full & <complete>', 'New', LIVE),
    ({'title': ''}, 'title', 'Full & <complete>', '', LIVE),
    ({'description': 'other'}, 'description', 'line one\nline "two"', 'other', LIVE),
    ({'vcpus': 8}, 'vcpus', 4, 8, RESTART),
    ({'memory': '4GiB'}, 'memory', 2097152, 4194304, RESTART),
    ({'memory': 4096}, 'memory', 2097152, 4194304, RESTART),
    ({'machine': 'q35'}, 'machine', 'pc-i440fx-7.2', 'q35', RESTART),
    ({'machine': 'pc-i440fx-6.2'}, 'machine', 'pc-i440fx-7.2', 'pc-i440fx-6.2', RESTART),
    ({'domain_type': 'qemu'}, 'domain_type', 'kvm', 'qemu', RESTART),
    ({'firmware': 'efi'}, 'firmware', 'bios', 'efi', RESTART),
    ({'uuid': '11111111-2222-3333-4444-555555555555'}, 'uuid', UUID, '11111111-2222-3333-4444-555555555555', RECREATE),
    ({'on_crash': 'restart'}, 'on_crash', 'destroy', 'restart', RESTART),
    ({'serial': '/var/log/full.log'}, 'serial', 'pty', '/var/log/full.log', RESTART),
    ({'graphics': 'vnc'}, 'graphics', 'none', 'vnc', RESTART),
    ({'guest_agent': True}, 'guest_agent', False, True, RESTART),
])
def test_single_change_classification(changes, path, before, after, kind):
    diff = desired_vs_actual(_with(FULL, **changes), QEMU_FULL)
    assert diff.changes == [Change(path, before, after, kind)]


@pytest.mark.parametrize('boot, paths', [
    ({'kernel': '/boot/other', 'initrd': '/boot/initrd.img', 'cmdline': 'console=ttyS0 root=/dev/vda1 quiet'}, ['kernel']),
    ({'kernel': '/boot/vmlinuz', 'initrd': '/boot/initrd.img', 'cmdline': 'quiet'}, ['cmdline']),
    ({'kernel': '/boot/vmlinuz'}, ['initrd', 'cmdline']),
    ({}, ['kernel', 'initrd', 'cmdline']),
])
def test_boot_changes_need_restart(boot, paths):
    diff = desired_vs_actual(_with(FULL, boot=boot), QEMU_FULL)
    assert diff.paths == paths
    assert diff.needs_restart and not diff.live


def _disks(*extra, **replace):
    disks = [dict(d) for d in FULL['disks']]
    for index, changes in replace.items():
        disks[int(index[1:])].update(changes)
    return disks + list(extra)


@pytest.mark.parametrize('disks, expected', [
    (_disks({'path': '/img/new.raw', 'dev': 'vdc'}), [('disks[vdc]', LIVE)]),
    (_disks({'path': '/img/new.raw', 'dev': 'sdb'}), [('disks[sdb]', RESTART)]),
    (_disks()[:2], [('disks[sda]', RESTART)]),
    ([_disks()[0], _disks()[2]], [('disks[vdb]', LIVE)]),
    (_disks(d0={'format': 'raw'}), [('disks[vda].format', RESTART)]),
    (_disks(d0={'serial': 'other'}), [('disks[vda].serial', RESTART)]),
    (_disks(d1={'readonly': False}), [('disks[vdb].readonly', RESTART)]),
    (_disks(d1={'bus': 'scsi'}), [('disks[vdb].bus', RESTART)]),
    (_disks(d0={'source': {'pool': 'default', 'volume': 'other.qcow2'}}), [('disks[vda].source', RESTART)]),
    (_disks(d2={'source': '/srv/iso/other.iso'}), [('disks[sda].source', LIVE)]),
    (_disks(d2={'source': None}), [('disks[sda].source', LIVE)]),
])
def test_disk_changes(disks, expected):
    diff = desired_vs_actual(_with(FULL, disks=disks), QEMU_FULL)
    assert [(c.path, c.kind) for c in diff] == expected


def test_disk_change_values():
    diff = desired_vs_actual(_with(FULL, disks=_disks(d0={'source': {'pool': 'default', 'volume': 'other.qcow2'}})), QEMU_FULL)
    assert diff.changes[0].before == {'type': 'volume', 'pool': 'default', 'volume': 'full-root.qcow2'}
    assert diff.changes[0].after == {'type': 'volume', 'pool': 'default', 'volume': 'other.qcow2'}
    added = desired_vs_actual(_with(FULL, disks=_disks({'path': '/img/new.raw', 'dev': 'vdc'})), QEMU_FULL).changes[0]
    assert added.before is None
    assert added.after == {'dev': 'vdc', 'bus': 'virtio', 'device': 'disk', 'type': 'file', 'path': '/img/new.raw'}


@pytest.mark.parametrize('interfaces, expected', [
    ([{'network': 'default'}, {'bridge': 'br0', 'model': 'e1000'}], []),
    ([{'network': 'default', 'mac': '52:54:00:6B:1E:0A'}, {'bridge': 'br0', 'model': 'e1000'}], []),
    ([{'network': 'default', 'mac': '52:54:00:00:00:01'}, {'bridge': 'br0', 'model': 'e1000'}], [('interfaces[0].mac', RESTART)]),
    ([{'network': 'other'}, {'bridge': 'br0', 'model': 'e1000'}], [('interfaces[0].source', LIVE)]),
    ([{'bridge': 'br1'}, {'bridge': 'br0', 'model': 'e1000'}], [('interfaces[0].type', LIVE), ('interfaces[0].source', LIVE)]),
    ([{'network': 'default'}, {'bridge': 'br0'}], [('interfaces[1].model', RESTART)]),
    ([{'network': 'default'}], [('interfaces[1]', LIVE)]),
    ([{'network': 'default'}, {'bridge': 'br0', 'model': 'e1000'}, {'network': 'third'}], [('interfaces[2]', LIVE)]),
    ([], [('interfaces[0]', LIVE), ('interfaces[1]', LIVE)]),
])
def test_interface_changes(interfaces, expected):
    diff = desired_vs_actual(_with(FULL, interfaces=interfaces), QEMU_FULL)
    assert [(c.path, c.kind) for c in diff] == expected


def test_undeclared_fields_are_not_compared():
    assert not desired_vs_actual({'name': 'full'}, QEMU_FULL)
    assert not desired_vs_actual({'name': 'full', 'memory': '2GiB'}, QEMU_FULL)
    # undeclared disk format/serial/readonly are not compared
    assert not desired_vs_actual({'name': 'full', 'disks': [{'pool': 'default', 'volume': 'full-root.qcow2', 'dev': 'vda'},
                                                            {'path': '/var/lib/libvirt/images/data.raw', 'dev': 'vdb'},
                                                            {'path': '/srv/iso/install.iso', 'dev': 'sda', 'device': 'cdrom'}]}, QEMU_FULL)


def test_name_change_is_recreate():
    diff = desired_vs_actual(_with(FULL, name='other'), QEMU_FULL)
    assert diff.changes == [Change('name', 'full', 'other', RECREATE)]
    assert diff.recreate and not diff.needs_restart


def test_diff_helpers():
    diff = desired_vs_actual(_with(FULL, title='T', vcpus=1), QEMU_FULL)
    assert bool(diff) and len(diff) == 2
    assert [c.path for c in diff.live] == ['title']
    assert [c.path for c in diff.restart] == ['vcpus']
    assert diff.needs_restart
    assert diff.get('vcpus').after == 1 and diff.get('nope') is None
    assert diff.as_list()[0] == {'path': 'title', 'before': 'Full & <complete>', 'after': 'T', 'kind': LIVE}
    assert diff.as_ansible_diff() == {'before': {'title': 'Full & <complete>', 'vcpus': 4}, 'after': {'title': 'T', 'vcpus': 1}}
    assert not Diff() and repr(Diff()) == 'Diff([])'
    assert Change('a', 1, 2, LIVE) != Change('a', 1, 3, LIVE)


def test_ignored_noise():
    """Everything libvirt adds or reformats is ignored."""
    noisy = QEMU_FULL.replace("<memory unit='KiB'>2097152</memory>", "<memory unit='MiB'>2048</memory>")
    noisy = noisy.replace("<currentMemory unit='KiB'>2097152</currentMemory>", '')
    noisy = noisy.replace("<interface type='network'>", "<interface type='network'><alias name='net0'/>")
    noisy = noisy.replace("<vcpu placement='static'>4</vcpu>", "<vcpu current='2' placement='static'>4</vcpu>")
    noisy = noisy.replace('<converge:vm_state>running</converge:vm_state>', '<converge:vm_state>stopped</converge:vm_state>')
    assert not desired_vs_actual(FULL, noisy)
    squashed = ''.join(line.strip() for line in QEMU_FULL.splitlines()).replace('line oneline', 'line one\nline')
    assert not desired_vs_actual(FULL, squashed)


@pytest.mark.parametrize('desired, actual, expected', [
    ('pc', 'pc-i440fx-7.2', True), ('q35', 'pc-q35-7.2', True), ('pc', 'pc-q35-7.2', False), ('q35', 'pc-i440fx-7.2', False),
    ('virt', 'virt-7.2', True), ('virt', 'virtual', False), ('pc-q35-7.2', 'pc-q35-7.2', True), ('pc-q35-6.2', 'pc-q35-7.2', False),
    ('pc', None, False),
])
def test_machine_matches(desired, actual, expected):
    assert machine_matches(desired, actual) is expected


# ---------------------------------------------------------------------------------------------------------------------
# Raw xml option
# ---------------------------------------------------------------------------------------------------------------------

RAW = """<domain type='kvm'>
  <name>full</name>
  <title>Full &amp; &lt;complete&gt;</title>
  <description>line one
line "two"</description>
  <memory unit='GiB'>2</memory>
  <vcpu>4</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>/boot/vmlinuz</kernel>
    <initrd>/boot/initrd.img</initrd>
    <cmdline>console=ttyS0 root=/dev/vda1 quiet</cmdline>
  </os>
  <features><acpi/><apic/></features>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source pool='default' volume='full-root.qcow2'/>
      <target dev='vda' bus='virtio'/>
      <serial>root-1</serial>
    </disk>
    <disk type='file' device='disk'>
      <source file='/var/lib/libvirt/images/data.raw'/>
      <target dev='vdb' bus='virtio'/>
      <readonly/>
    </disk>
    <disk type='file' device='cdrom'>
      <source file='/srv/iso/install.iso'/>
      <target dev='sda' bus='sata'/>
    </disk>
    <controller type='usb'/>
    <interface type='network'><source network='default'/><model type='virtio'/></interface>
    <interface type='bridge'><mac address='52:54:00:12:34:56'/><source bridge='br0'/><model type='e1000'/></interface>
    <console type='pty'/>
    <memballoon model='virtio'/>
  </devices>
</domain>"""


def test_raw_xml_normalised_by_libvirt_is_not_a_change():
    assert not desired_vs_actual(RAW, QEMU_FULL)
    assert not desired_vs_actual({'xml': RAW, 'autostart': True}, QEMU_FULL)


@pytest.mark.parametrize('old, new, path, kind', [
    ("<vcpu>4</vcpu>", "<vcpu>6</vcpu>", 'vcpus', RESTART),
    ("<memory unit='GiB'>2</memory>", "<memory unit='GiB'>3</memory>", 'memory', RESTART),
    ("<title>Full &amp; &lt;complete&gt;</title>", '', 'title', LIVE),
    ("<features><acpi/><apic/></features>", "<features><acpi/><apic/><hyperv/></features>", 'features[0]', RESTART),
    ("<memballoon model='virtio'/>", "<memballoon model='none'/>", 'devices/memballoon[0]', RESTART),
    ("<memballoon model='virtio'/>", "<rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>", 'devices/rng[0]', RESTART),
    ("<driver name='qemu' type='qcow2'/>", "<driver name='qemu' type='qcow2' cache='none'/>", 'disks[vda].xml', RESTART),
    ("<driver name='qemu' type='qcow2'/>", "<driver name='qemu' type='raw'/>", 'disks[vda].format', RESTART),
    ("<source network='default'/>", "<source network='other'/>", 'interfaces[0].source', LIVE),
    ("<console type='pty'/>", "", 'serial', RESTART),
    ("<type arch='x86_64' machine='pc'>hvm</type>", "<type arch='x86_64' machine='pc'>hvm</type><boot dev='cdrom'/>", 'os/boot[0]', RESTART),
])
def test_raw_xml_changes(old, new, path, kind):
    assert old in RAW
    diff = desired_vs_actual(RAW.replace(old, new, 1), QEMU_FULL)
    assert [(c.path, c.kind) for c in diff] == [(path, kind)]


def test_raw_xml_declared_uuid_and_mac_are_compared():
    raw = RAW.replace('<name>full</name>', '<name>full</name><uuid>11111111-2222-3333-4444-555555555555</uuid>')
    assert desired_vs_actual(raw, QEMU_FULL).paths == ['uuid']
    raw = RAW.replace("<source network='default'/>", "<mac address='52:54:00:6B:1E:0A'/><source network='default'/>")
    assert not desired_vs_actual(raw, QEMU_FULL)
    raw = RAW.replace("<source network='default'/>", "<mac address='52:54:00:6b:1e:0b'/><source network='default'/>")
    assert desired_vs_actual(raw, QEMU_FULL).paths == ['interfaces[0].mac']


def test_raw_xml_invalid():
    with pytest.raises(ValueError, match='xml: invalid XML'):
        desired_vs_actual('<domain><name>x</domain>', QEMU_FULL)


# ---------------------------------------------------------------------------------------------------------------------
# Converge metadata
# ---------------------------------------------------------------------------------------------------------------------

META = {'vm_state': 'running', 'task_state': 'migrating <&>', 'task_id': 'b2c3', 'task_started_at': '2026-01-02T03:04:05Z',
        'last_action': 'start', 'pending_restart': True, 'lease_until': '1790000000.5', 'previous_vm_state': 'ACTIVE',
        'owner': 'ctl-1:4242', 'generation': '7', 'stop_grace_period': '0.0'}


def test_metadata_fragment_round_trip():
    fragment = converge_metadata_element(META)
    root = _root(fragment)
    assert root.tag == 'vm'
    assert [c.tag for c in root] == list(METADATA_FIELDS)
    assert read_converge_metadata(fragment) == META


def test_metadata_in_domain_xml_round_trip():
    xml = build_domain_xml(BASE, metadata=META)
    assert read_converge_metadata(xml) == META
    assert read_converge_metadata(QEMU_FULL)['vm_state'] == 'running'
    assert read_converge_metadata(QEMU_FULL)['pending_restart'] is False


def test_metadata_defaults_and_partial():
    empty = read_converge_metadata(build_domain_xml(BASE))
    assert empty == {'vm_state': None, 'task_state': None, 'task_id': None, 'task_started_at': None, 'last_action': None, 'pending_restart': False,
                     'lease_until': None, 'previous_vm_state': None, 'owner': None, 'generation': None, 'stop_grace_period': None}
    fragment = converge_metadata_element({'vm_state': 'stopped', 'task_id': None, 'pending_restart': False})
    assert [c.tag for c in _root(fragment)] == ['vm_state', 'pending_restart']
    assert read_converge_metadata(fragment)['pending_restart'] is False


def test_metadata_is_ignored_by_diff():
    assert not desired_vs_actual(BASE, build_domain_xml(BASE, metadata=META))
    assert not desired_vs_actual(build_domain_xml(BASE), build_domain_xml(BASE, metadata=META))


# ---------------------------------------------------------------------------------------------------------------------
# merge_into_inactive
# ---------------------------------------------------------------------------------------------------------------------

def _addresses(xml):
    return [ET.tostring(a) for a in _root(xml).iter('address')]


def test_merge_unchanged_keeps_everything():
    merged = merge_into_inactive(QEMU_FULL, FULL)
    assert not desired_vs_actual(FULL, merged)
    assert _root(merged).findtext('uuid') == UUID
    assert [n['mac'] for n in interfaces_in(merged)] == ['52:54:00:6b:1e:0a', '52:54:00:12:34:56']
    assert _addresses(merged) == _addresses(QEMU_FULL)
    assert read_converge_metadata(merged)['vm_state'] == 'running'
    assert _root(merged).find('seclabel') is not None
    assert len(_root(merged).findall('devices/controller')) == 3


def test_merge_changes_only_declared_fields():
    spec = _with(FULL, memory='4GiB', vcpus=8, title='New', machine='pc-i440fx-6.2', firmware='efi', on_crash='restart',
                 boot={'kernel': '/boot/vmlinuz-2'}, serial='/var/log/f.log', graphics='vnc',
                 interfaces=[{'network': 'other'}, {'bridge': 'br0', 'model': 'virtio'}],
                 disks=_disks({'path': '/img/new.qcow2', 'dev': 'vdc', 'format': 'qcow2'}, d0={'serial': 'root-2'})[0:1] + _disks()[2:] +
                 [{'path': '/img/new.qcow2', 'dev': 'vdc', 'format': 'qcow2'}])
    before = desired_vs_actual(spec, QEMU_FULL)
    assert set(before.paths) == set(['title', 'machine', 'memory', 'vcpus', 'firmware', 'initrd', 'cmdline', 'kernel', 'on_crash', 'serial',
                                     'graphics', 'disks[vda].serial', 'disks[vdc]', 'disks[vdb]', 'interfaces[0].source', 'interfaces[1].model'])
    merged = merge_into_inactive(QEMU_FULL, spec)
    assert not desired_vs_actual(spec, merged), desired_vs_actual(spec, merged)
    root = _root(merged)
    assert root.findtext('uuid') == UUID
    assert root.findtext('currentMemory') == str(4 * 1024 * 1024)
    assert [n['mac'] for n in interfaces_in(merged)] == ['52:54:00:6b:1e:0a', '52:54:00:12:34:56']
    vda = [d for d in root.findall('devices/disk') if d.find('target').get('dev') == 'vda'][0]
    assert vda.find('address').get('slot') == '0x04'
    assert root.find('devices/memballoon/address') is not None
    assert root.find('cpu').get('mode') == 'custom'


def test_merge_undeclared_keeps_actual():
    merged = merge_into_inactive(QEMU_FULL, {'name': 'full', 'title': ''})
    assert _root(merged).find('title') is None
    assert domain_model(merged)['disks'] == domain_model(QEMU_FULL)['disks']
    assert domain_model(merged)['interfaces'] == domain_model(QEMU_FULL)['interfaces']
    assert domain_model(merged)['kernel'] == '/boot/vmlinuz'


def test_merge_machine_family_change_drops_controllers_and_addresses():
    merged = merge_into_inactive(QEMU_FULL, _with(FULL, machine='q35'))
    root = _root(merged)
    assert root.find('os/type').get('machine') == 'q35'
    assert root.findall('devices/controller') == []
    assert not list(root.iter('address'))
    assert [n['mac'] for n in interfaces_in(merged)] == ['52:54:00:6b:1e:0a', '52:54:00:12:34:56']
    same_family = merge_into_inactive(QEMU_FULL, _with(FULL, machine='pc-i440fx-6.2'))
    assert _addresses(same_family) == _addresses(QEMU_FULL)


def test_merge_disk_bus_change_drops_address():
    merged = merge_into_inactive(QEMU_FULL, _with(FULL, disks=_disks(d1={'bus': 'scsi', 'dev': 'vdb'})))
    vdb = [d for d in _root(merged).findall('devices/disk') if d.find('target').get('dev') == 'vdb'][0]
    assert vdb.find('address') is None
    assert vdb.find('target').get('bus') == 'scsi'


def test_merge_refuses_uuid_or_name_change():
    with pytest.raises(ValueError, match='uuid'):
        merge_into_inactive(QEMU_FULL, _with(FULL, uuid='11111111-2222-3333-4444-555555555555'))
    with pytest.raises(ValueError, match='name'):
        merge_into_inactive(QEMU_FULL, _with(FULL, name='other'))


def test_merge_raw_xml_keeps_uuid_macs_addresses_controllers_metadata():
    merged = merge_into_inactive(QEMU_FULL, RAW.replace("<vcpu>4</vcpu>", "<vcpu>6</vcpu>"))
    root = _root(merged)
    assert root.findtext('uuid') == UUID
    assert root.findtext('vcpu') == '6'
    assert [n['mac'] for n in interfaces_in(merged)] == ['52:54:00:6b:1e:0a', '52:54:00:12:34:56']
    assert len(root.findall('devices/controller')) == 3
    assert root.find('devices/disk/address').get('slot') == '0x04'
    assert read_converge_metadata(merged)['vm_state'] == 'running'
    assert desired_vs_actual(RAW, merged).paths == ['vcpus']


# ---------------------------------------------------------------------------------------------------------------------
# Hot-plug helpers
# ---------------------------------------------------------------------------------------------------------------------

def test_disk_device_xml_and_disks_in():
    xml = disk_device_xml({'source': {'pool': 'p', 'volume': 'v&1'}, 'dev': 'vdc', 'format': 'qcow2', 'serial': 'x1', 'readonly': True})
    root = _root(xml)
    assert root.tag == 'disk' and root.find('source').get('volume') == 'v&1'
    assert disks_in('<domain><devices>%s</devices></domain>' % xml) == [
        {'dev': 'vdc', 'bus': 'virtio', 'device': 'disk', 'type': 'volume', 'path': None, 'pool': 'p', 'volume': 'v&1',
         'format': 'qcow2', 'readonly': True, 'serial': 'x1'}]


def test_disks_in_and_interfaces_in_qemu_xml():
    disks = disks_in(QEMU_FULL)
    assert [d['dev'] for d in disks] == ['vda', 'vdb', 'sda']
    assert disks[1] == {'dev': 'vdb', 'bus': 'virtio', 'device': 'disk', 'type': 'file', 'path': '/var/lib/libvirt/images/data.raw',
                        'pool': None, 'volume': None, 'format': 'raw', 'readonly': True, 'serial': None}
    assert disks[2]['readonly'] is True and disks[2]['device'] == 'cdrom'
    assert interfaces_in(QEMU_FULL) == [
        {'type': 'network', 'source': 'default', 'model': 'virtio', 'mac': '52:54:00:6b:1e:0a'},
        {'type': 'bridge', 'source': 'br0', 'model': 'e1000', 'mac': '52:54:00:12:34:56'}]


def test_interface_device_xml():
    root = _root(interface_device_xml({'bridge': 'br0', 'mac': '52:54:00:AA:00:01'}))
    assert root.get('type') == 'bridge'
    assert root.find('mac').get('address') == '52:54:00:aa:00:01'
    assert root.find('model').get('type') == 'virtio'


def test_disk_device_xml_invalid():
    with pytest.raises(ValueError, match='disk.dev'):
        disk_device_xml({'path': '/a'})


# ---------------------------------------------------------------------------------------------------------------------
# Property test
# ---------------------------------------------------------------------------------------------------------------------

_NAME_CHARS = st.characters(blacklist_categories=('Cs', 'Cc'), blacklist_characters='/\ufffe\uffff')
_NAMES = st.text(alphabet=st.one_of(st.sampled_from('<>&"\' ;]]>-_.é漢🚀'), _NAME_CHARS), min_size=1, max_size=40)
_MEMORY = st.one_of(
    st.integers(min_value=1, max_value=65536),
    st.builds(lambda n, u: '%d%s' % (n, u), st.integers(min_value=1, max_value=64), st.sampled_from(['GiB', 'G', 'g', 'gib'])),
    st.builds(lambda n, u: '%d%s' % (n, u), st.integers(min_value=2, max_value=65536), st.sampled_from(['MiB', 'M', 'MB', 'mib', 'mb'])),
    st.builds(lambda n: '%dKiB' % (n * 1024), st.integers(min_value=1, max_value=4096)),
)


@settings(max_examples=200, deadline=None)
@given(name=_NAMES, title=st.one_of(st.none(), _NAMES), description=st.one_of(st.none(), st.text(alphabet=_NAME_CHARS, max_size=40)),
       memory=_MEMORY, vcpus=st.integers(min_value=1, max_value=64), serial=st.sampled_from([None, 'pty', 'none', '/var/log/<&>.log']))
def test_property_build_parse_diff_is_empty(name, title, description, memory, vcpus, serial):
    spec = {'name': name, 'title': title, 'description': description, 'memory': memory, 'vcpus': vcpus, 'serial': serial,
            'disks': [{'path': '/img/' + name.replace('/', '_'), 'dev': 'vda'}], 'interfaces': [{'network': name}]}
    xml = build_domain_xml(spec)
    assert domain_model(xml)['name'] == name
    assert not desired_vs_actual(spec, xml)
    assert not desired_vs_actual(xml, xml)
    assert not desired_vs_actual(spec, merge_into_inactive(xml, spec))


# ---------------------------------------------------------------------------------------------------------------------
# Real libvirt normalisation (test driver, no daemon)
# ---------------------------------------------------------------------------------------------------------------------

@pytest.fixture(name='conn')
def conn_fixture():
    libvirt.registerErrorHandler(lambda *args: None, None)
    conn = libvirt.open('test:///default')
    yield conn
    conn.close()


def _define(conn, xml):
    dom = conn.defineXML(xml)
    return dom, dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)


def _test_driver_spec(name):
    return _with(FULL, name=name, uuid=None, boot={'kernel': '/boot/vmlinuz', 'initrd': '/boot/initrd.img', 'cmdline': 'console=ttyS0 a&b "c"'},
                 disks=_disks({'path': '/dev/vg0/lv', 'dev': 'vdc'}, {'dev': 'sdb', 'device': 'cdrom'}))


@needs_libvirt
def test_libvirt_define_then_diff_is_empty(conn):
    spec = _test_driver_spec(_uniq('full <&> é'))
    dom, actual = _define(conn, build_domain_xml(spec, metadata=META))
    try:
        assert not desired_vs_actual(spec, actual), desired_vs_actual(spec, actual)
        assert not desired_vs_actual(build_domain_xml(spec), actual)
        assert dom.name() == spec['name']
        assert read_converge_metadata(actual) == META
        assert all(n['mac'] for n in interfaces_in(actual))
    finally:
        dom.undefine()


@needs_libvirt
@pytest.mark.parametrize('changes, path, kind', [
    ({'title': 'changed'}, 'title', LIVE),
    ({'description': ''}, 'description', LIVE),
    ({'vcpus': 3}, 'vcpus', RESTART),
    ({'memory': '3GiB'}, 'memory', RESTART),
    ({'machine': 'q35'}, 'machine', RESTART),
    ({'firmware': 'efi'}, 'firmware', RESTART),
    ({'on_reboot': 'destroy'}, 'on_reboot', RESTART),
    ({'graphics': 'vnc'}, 'graphics', RESTART),
    ({'serial': '/var/log/x.log'}, 'serial', RESTART),
    ({'interfaces': [{'network': 'default'}, {'bridge': 'br9', 'model': 'e1000'}]}, 'interfaces[1].source', LIVE),
    ({'disks': _disks({'path': '/dev/vg0/lv', 'dev': 'vdc'}, {'dev': 'sdb', 'device': 'cdrom'}, {'path': '/img/x.raw', 'dev': 'vdd'})}, 'disks[vdd]', LIVE),
    ({'disks': _disks({'dev': 'sdb', 'device': 'cdrom'})}, 'disks[vdc]', LIVE),
    ({'disks': _disks({'path': '/dev/vg0/lv', 'dev': 'vdc'}, {'dev': 'sdb', 'device': 'cdrom', 'path': '/iso/x.iso'})}, 'disks[sdb].source', LIVE),
])
def test_libvirt_one_change_then_merge(conn, changes, path, kind):
    spec = _test_driver_spec(_uniq())
    dom, actual = _define(conn, build_domain_xml(spec))
    try:
        changed = _with(spec, **changes)
        diff = desired_vs_actual(changed, actual)
        assert [(c.path, c.kind) for c in diff] == [(path, kind)]
        macs = [n['mac'] for n in interfaces_in(actual)]
        uuid = _root(actual).findtext('uuid')
        dom, redefined = _define(conn, merge_into_inactive(actual, changed))
        assert not desired_vs_actual(changed, redefined), desired_vs_actual(changed, redefined)
        assert _root(redefined).findtext('uuid') == uuid
        assert [n['mac'] for n in interfaces_in(redefined)][:len(changed['interfaces'])] == macs[:len(changed['interfaces'])]
    finally:
        dom.undefine()


@needs_libvirt
def test_libvirt_raw_xml_second_run_is_unchanged(conn):
    name = _uniq('raw')
    raw = RAW.replace('<name>full</name>', '<name>%s</name>' % name)
    dom, actual = _define(conn, raw)
    try:
        assert not desired_vs_actual(raw, actual), desired_vs_actual(raw, actual)
        dom, again = _define(conn, merge_into_inactive(actual, raw))
        assert not desired_vs_actual(raw, again)
        assert interfaces_in(again) == interfaces_in(actual)
        changed = raw.replace('<vcpu>4</vcpu>', '<vcpu>2</vcpu>')
        assert desired_vs_actual(changed, again).paths == ['vcpus']
    finally:
        dom.undefine()


@needs_libvirt
def test_libvirt_set_metadata_round_trip(conn):
    dom, _xml = _define(conn, build_domain_xml({'name': _uniq('meta')}))
    try:
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, converge_metadata_element(META), 'converge', CONVERGE_NS,
                        libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        assert read_converge_metadata(dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, CONVERGE_NS, libvirt.VIR_DOMAIN_AFFECT_CONFIG)) == META
        actual = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert read_converge_metadata(actual) == META
        assert not desired_vs_actual({'name': dom.name()}, actual)
    finally:
        dom.undefine()


def test_the_guest_agent_channel_is_built_read_back_merged_and_removed():
    with_agent = build_domain_xml(_with(FULL, guest_agent=True))
    targets = [t.attrib for t in ET.fromstring(with_agent).findall('./devices/channel/target')]
    assert targets == [{'type': 'virtio', 'name': 'org.qemu.guest_agent.0'}]
    assert domain_model(with_agent)['guest_agent'] and not domain_model(build_domain_xml(FULL))['guest_agent']
    assert not desired_vs_actual(_with(FULL, guest_agent=True), with_agent)
    merged = merge_into_inactive(QEMU_FULL, {'name': 'full', 'guest_agent': True})
    assert domain_model(merged)['guest_agent'] and domain_model(merged)['serial'] == domain_model(QEMU_FULL)['serial']
    removed = merge_into_inactive(merged, {'name': 'full', 'guest_agent': False})
    assert not domain_model(removed)['guest_agent'] and ET.fromstring(removed).find('./devices/channel') is None
