# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read libvirt domain XML back into the shape of a spec (the read model).

:func:`domain_model` reads a domain XML into the canonical spec form (memory in KiB, disks and interfaces as
dicts); :func:`disks_in` / :func:`interfaces_in` list the devices (hot-plug, the fleet listing).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import re

from ansible_collections.converge.virt.plugins.module_utils._common.units import KIB, from_libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_spec import DEFAULTS
from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import parse_xml

# the volume of a VM's cloud-init seed (written by .cloud_init): named here, where every run reads the domain XML, so that
# a run without cloud_init never loads the seed's code
SEED_SUFFIX = '-cidata.iso'


def _findtext(elem, path, default=''):
    if elem is None:
        return default
    found = elem.find(path)
    if found is None:
        return default
    return found.text or ''


def _disk_from_element(elem):
    target = elem.find('target')
    source = elem.find('source')
    driver = elem.find('driver')
    serial = elem.find('serial')
    kind = elem.get('type', 'file')
    device = elem.get('device', 'disk')
    out = {'dev': target.get('dev') if target is not None else None,
           'bus': target.get('bus') if target is not None else None,
           'device': device, 'type': kind, 'path': None, 'pool': None, 'volume': None,
           'format': driver.get('type') if driver is not None else None,
           'readonly': elem.find('readonly') is not None or device == 'cdrom',
           'serial': serial.text if serial is not None else None}
    if source is not None:
        if kind == 'volume':
            out['pool'], out['volume'] = source.get('pool'), source.get('volume')
        else:
            out['path'] = source.get('file') or source.get('dev') or source.get('dir') or source.get('name')
    return out


def interface_from_element(elem):
    source = elem.find('source')
    mac = elem.find('mac')
    model = elem.find('model')
    kind = elem.get('type')
    src = None
    if source is not None:
        src = source.get('network') or source.get('bridge') or source.get('dev') or source.get('path')
    return {'type': kind, 'source': src, 'model': model.get('type') if model is not None else None,
            'mac': mac.get('address').lower() if mac is not None and mac.get('address') else None}


def disks_in(xml):
    """Return the disks of a domain XML as dicts ``{dev, bus, device, type, path, pool, volume, format, readonly, serial}``."""
    root = parse_xml(xml)
    return [_disk_from_element(d) for d in root.findall('./devices/disk')]


def interfaces_in(xml):
    """Return the interfaces of a domain XML as dicts ``{type, source, model, mac}``."""
    root = parse_xml(xml)
    return [interface_from_element(n) for n in root.findall('./devices/interface')]


def _memory_kib(elem):
    if elem is None or not (elem.text or '').strip():
        return None
    return from_libvirt(elem.text, elem.get('unit')) // KIB


def _firmware_of(os_elem):
    if os_elem is None:
        return 'bios'
    if os_elem.get('firmware') == 'efi':
        return 'efi'
    loader = os_elem.find('loader')
    if loader is not None and (loader.get('type') == 'pflash' or re.search(r'OVMF|edk2|AAVMF', loader.text or '')):
        return 'efi'
    return 'bios'


def _serial_of(devices):
    ser = devices.find('serial') if devices is not None else None
    if ser is None:
        return 'none'
    kind = ser.get('type', 'pty')
    if kind == 'file':
        source = ser.find('source')
        return source.get('path') if source is not None else 'file'
    return kind


def guest_agent_channel(root):
    """The ``<target>`` of the QEMU guest agent's channel in a domain XML (its ``state`` is ``connected`` while the agent
    in the guest has the port open, in the live XML of a running domain), or None."""
    for target in root.findall('./devices/channel/target'):
        if target.get('type') == 'virtio' and target.get('name') == 'org.qemu.guest_agent.0':
            return target
    return None


def model_from_xml(root):
    os_elem = root.find('os')
    os_type = os_elem.find('type') if os_elem is not None else None
    devices = root.find('devices')
    graphics = devices.find('graphics') if devices is not None else None
    uuid_text = _findtext(root, 'uuid').strip().lower()
    model = {
        'name': _findtext(root, 'name'),
        'uuid': uuid_text or None,
        'title': _findtext(root, 'title'),
        'description': _findtext(root, 'description'),
        'memory': _memory_kib(root.find('memory')),
        'current_memory': _memory_kib(root.find('currentMemory')),
        'vcpus': int(_findtext(root, 'vcpu', '0').strip() or 0) or None,
        'machine': os_type.get('machine') if os_type is not None else None,
        'arch': os_type.get('arch') if os_type is not None else None,
        'domain_type': root.get('type'),
        'firmware': _firmware_of(os_elem),
        'kernel': _findtext(os_elem, 'kernel'),
        'initrd': _findtext(os_elem, 'initrd'),
        'cmdline': _findtext(os_elem, 'cmdline'),
        'on_poweroff': _findtext(root, 'on_poweroff') or DEFAULTS['on_poweroff'],
        'on_reboot': _findtext(root, 'on_reboot') or DEFAULTS['on_reboot'],
        'on_crash': _findtext(root, 'on_crash') or DEFAULTS['on_crash'],
        'disks': [_disk_from_element(d) for d in root.findall('./devices/disk')],
        'interfaces': [interface_from_element(n) for n in root.findall('./devices/interface')],
        'serial': _serial_of(devices),
        'graphics': graphics.get('type') if graphics is not None else 'none',
        'guest_agent': guest_agent_channel(root) is not None,
    }
    return model


def domain_model(xml):
    """Return the comparable fields of a domain XML as a dict (memory in KiB; disks/interfaces as lists of dicts)."""
    return model_from_xml(parse_xml(xml))


def seed_volume_name(name):
    """The seed volume of VM ``name``."""
    return name + SEED_SUFFIX


def seed_in_domain(xml, name):
    """``(pool, volume)`` of the VM's seed cdrom in its domain XML, or None (user volumes never match)."""
    root = parse_xml(xml)
    for disk in root.findall('devices/disk'):
        source = disk.find('source')
        if disk.get('device') != 'cdrom' or disk.get('type') != 'volume' or source is None:
            continue
        if source.get('volume') == seed_volume_name(name) and source.get('pool'):
            return source.get('pool'), source.get('volume')
    return None
