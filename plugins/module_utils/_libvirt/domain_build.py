# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build libvirt domain XML from a spec (see :mod:`domain_spec`).

XML is always built as an element tree: user-supplied values are data (element text and attribute values) and
are escaped by the serialiser.  :func:`build_domain_xml` builds a whole domain, :func:`disk_device_xml` /
:func:`interface_device_xml` one device for hot-plug; the element builders are shared with :mod:`domain_merge`.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_spec import DEFAULTS, normalize_disk, normalize_interface, normalize_spec
from ansible_collections.converge.virt.plugins.module_utils._libvirt.metadata import metadata_vm_element
from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import parse_xml, sub_element, to_string


def disk_element(disk):
    elem = ET.Element('disk', {'type': disk['type'], 'device': disk['device']})
    if disk.get('format'):
        sub_element(elem, 'driver', name='qemu', type=disk['format'])
    if disk['type'] == 'volume':
        sub_element(elem, 'source', pool=disk['pool'], volume=disk['volume'])
    elif disk['type'] == 'block' and disk.get('path'):
        sub_element(elem, 'source', dev=disk['path'])
    elif disk.get('path'):
        sub_element(elem, 'source', file=disk['path'])
    sub_element(elem, 'target', dev=disk['dev'], bus=disk['bus'])
    if disk.get('readonly'):
        sub_element(elem, 'readonly')
    if disk.get('serial'):
        sub_element(elem, 'serial', disk['serial'])
    return elem


def interface_element(nic):
    elem = ET.Element('interface', {'type': nic['type']})
    if nic.get('mac'):
        sub_element(elem, 'mac', address=nic['mac'])
    if nic['type'] == 'network':
        sub_element(elem, 'source', network=nic['source'])
    else:
        sub_element(elem, 'source', bridge=nic['source'])
    sub_element(elem, 'model', type=nic.get('model') or 'virtio')
    return elem


# the virtio-serial port qemu-guest-agent opens in the guest (libvirt picks the host side's socket path)
GUEST_AGENT_CHANNEL = 'org.qemu.guest_agent.0'


def guest_agent_element():
    """The ``<channel>`` of the QEMU guest agent."""
    channel = ET.Element('channel', {'type': 'unix'})
    sub_element(channel, 'target', type='virtio', name=GUEST_AGENT_CHANNEL)
    return channel


def serial_elements(serial):
    if serial == 'none':
        return []
    kind = 'pty' if serial == 'pty' else 'file'
    ser = ET.Element('serial', {'type': kind})
    con = ET.Element('console', {'type': kind})
    if kind == 'file':
        sub_element(ser, 'source', path=serial)
        sub_element(con, 'source', path=serial)
    sub_element(ser, 'target', port='0')
    sub_element(con, 'target', type='serial', port='0')
    return [ser, con]


def graphics_element(graphics):
    return ET.Element('graphics', {'type': graphics, 'autoport': 'yes', 'listen': '127.0.0.1'})


def disk_device_xml(disk_spec):
    """Return the ``<disk>`` device XML for one disk option (for ``attachDeviceFlags``/``detachDeviceFlags``)."""
    return to_string(disk_element(normalize_disk(disk_spec, 'disk')))


def interface_device_xml(nic_spec):
    """Return the ``<interface>`` device XML for one interface option (for hot-plug)."""
    return to_string(interface_element(normalize_interface(nic_spec, 'interface')))


def build_domain_xml(spec, metadata=None):
    """Build domain XML from a VM spec (see :func:`normalize_spec`); ``spec['xml']`` (raw XML) is returned re-serialised.

    ``metadata`` (a dict of :data:`METADATA_FIELDS`) adds the converge metadata element.  ``autostart`` is not
    part of the XML: use :func:`spec_autostart`.  Raises ``ValueError`` for invalid options.
    """
    spec = normalize_spec(spec)
    if 'xml' in spec:
        return to_string(parse_xml(spec['xml'], 'xml'))
    val = dict(DEFAULTS)
    val.update(spec)
    root = ET.Element('domain', {'type': val['domain_type']})
    sub_element(root, 'name', val['name'])
    if val.get('uuid'):
        sub_element(root, 'uuid', val['uuid'])
    if val.get('title'):
        sub_element(root, 'title', val['title'])
    if val.get('description'):
        sub_element(root, 'description', val['description'])
    if metadata:
        sub_element(root, 'metadata').append(metadata_vm_element(metadata, namespaced=True))
    sub_element(root, 'memory', str(val['memory']), unit='KiB')
    sub_element(root, 'currentMemory', str(val['memory']), unit='KiB')
    sub_element(root, 'vcpu', str(val['vcpus']), placement='static')
    os_elem = sub_element(root, 'os', firmware='efi' if val['firmware'] == 'efi' else None)
    sub_element(os_elem, 'type', 'hvm', arch=val['arch'], machine=val.get('machine'))
    for key in ('kernel', 'initrd', 'cmdline'):
        if val.get(key):
            sub_element(os_elem, key, val[key])
    if val['arch'] in ('x86_64', 'i686'):
        features = sub_element(root, 'features')
        sub_element(features, 'acpi')
        sub_element(features, 'apic')
    for key in ('on_poweroff', 'on_reboot', 'on_crash'):
        sub_element(root, key, val[key])
    devices = sub_element(root, 'devices')
    for disk in val.get('disks') or []:
        devices.append(disk_element(disk))
    for nic in val.get('interfaces') or []:
        devices.append(interface_element(nic))
    for elem in serial_elements(val['serial']):
        devices.append(elem)
    if val['graphics'] != 'none':
        devices.append(graphics_element(val['graphics']))
    if val.get('guest_agent'):
        devices.append(guest_agent_element())
    return to_string(root)
