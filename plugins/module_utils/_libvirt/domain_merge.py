# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The XML to redefine a domain with: the declared spec merged into libvirt's inactive XML.

:func:`merge_into_inactive` keeps what libvirt added (uuid, MAC addresses, PCI addresses, controllers) and what
the user did not declare.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import copy
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_build import (
    disk_element, graphics_element, guest_agent_element, interface_element, serial_elements)
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_diff import machine_family, machine_matches
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_read import interface_from_element, model_from_xml
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_spec import normalize_spec
from ansible_collections.converge.virt.plugins.module_utils._libvirt.metadata import CONVERGE_NS
from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import parse_xml, to_string


def _set_child_text(root, tag, text, before=None, **attrs):
    elem = root.find(tag)
    if elem is None:
        elem = ET.Element(tag)
        anchor = None
        for name in before or ():
            anchor = root.find(name)
            if anchor is not None:
                break
        if anchor is not None:
            root.insert(list(root).index(anchor), elem)
        else:
            root.append(elem)
    elem.text = text
    for key, value in attrs.items():
        elem.set(key, value)
    return elem


def _remove_children(parent, tag):
    for child in parent.findall(tag):
        parent.remove(child)


def _insert_device(devices, elem, after_tag):
    children = list(devices)
    last = max([i for i, c in enumerate(children) if c.tag == after_tag] or [-1])
    if last < 0:
        devices.append(elem)
    else:
        devices.insert(last + 1, elem)


def _update_disk(elem, disk):
    elem.set('type', disk['type'])
    elem.set('device', disk['device'])
    built = disk_element(disk)
    old_source = elem.find('source')
    new_source = built.find('source')
    if old_source is not None:
        if new_source is not None and dict(old_source.attrib) == dict(new_source.attrib):
            new_source = old_source
        else:
            elem.remove(old_source)
            old_source = None
    if new_source is not None and old_source is None:
        elem.insert(0 if elem.find('driver') is None else 1, new_source)
    target = elem.find('target')
    if target.get('bus') != disk['bus']:
        target.set('bus', disk['bus'])
        _remove_children(elem, 'address')
    if disk.get('format'):
        driver = elem.find('driver')
        if driver is None:
            driver = ET.Element('driver', {'name': 'qemu'})
            elem.insert(0, driver)
        driver.set('type', disk['format'])
    if disk.get('readonly') is not None:
        if disk['readonly'] and elem.find('readonly') is None:
            ET.SubElement(elem, 'readonly')
        elif not disk['readonly']:
            _remove_children(elem, 'readonly')
    if disk.get('serial') is not None:
        _set_child_text(elem, 'serial', disk['serial'])


def _update_interface(elem, nic):
    if elem.get('type') != nic['type'] or interface_from_element(elem)['source'] != nic['source']:
        elem.set('type', nic['type'])
        _remove_children(elem, 'source')
        built = interface_element(nic).find('source')
        elem.insert(1 if elem.find('mac') is not None else 0, built)
    model = elem.find('model')
    if model is None:
        ET.SubElement(elem, 'model', {'type': nic['model']})
    else:
        model.set('type', nic['model'])
    if nic.get('mac'):
        mac = elem.find('mac')
        if mac is None:
            elem.insert(0, ET.Element('mac', {'address': nic['mac']}))
        else:
            mac.set('address', nic['mac'])


def _merge_devices(root, spec, actual):
    devices = root.find('devices')
    if devices is None:
        devices = ET.SubElement(root, 'devices')
    if spec.get('disks') is not None:
        wanted = dict((d['dev'], d) for d in spec['disks'])
        present = set()
        for elem in devices.findall('disk'):
            dev = elem.find('target').get('dev') if elem.find('target') is not None else None
            if dev not in wanted:
                devices.remove(elem)
                continue
            present.add(dev)
            _update_disk(elem, wanted[dev])
        for disk in spec['disks']:
            if disk['dev'] not in present:
                _insert_device(devices, disk_element(disk), 'disk')
    if spec.get('interfaces') is not None:
        elems = devices.findall('interface')
        for index, nic in enumerate(spec['interfaces']):
            if index < len(elems):
                _update_interface(elems[index], nic)
            else:
                _insert_device(devices, interface_element(nic), 'interface')
        for elem in elems[len(spec['interfaces']):]:
            devices.remove(elem)
    if spec.get('serial') is not None and spec['serial'] != actual['serial']:
        _remove_children(devices, 'serial')
        for con in devices.findall('console'):
            target = con.find('target')
            if target is None or target.get('type', 'serial') == 'serial':
                devices.remove(con)
        for elem in serial_elements(spec['serial']):
            devices.append(elem)
    if spec.get('graphics') is not None and spec['graphics'] != actual['graphics']:
        _remove_children(devices, 'graphics')
        if spec['graphics'] != 'none':
            devices.append(graphics_element(spec['graphics']))
    if spec.get('guest_agent') is not None and spec['guest_agent'] != actual['guest_agent']:
        for channel in devices.findall('channel'):
            target = channel.find('target')
            if target is not None and target.get('name') == 'org.qemu.guest_agent.0':
                devices.remove(channel)
        if spec['guest_agent']:
            devices.append(guest_agent_element())


def _merge_os(root, spec, actual):
    os_elem = root.find('os')
    if os_elem is None:
        os_elem = ET.SubElement(root, 'os')
    os_type = os_elem.find('type')
    if os_type is None:
        os_type = ET.Element('type')
        os_type.text = 'hvm'
        os_elem.insert(0, os_type)
    if spec.get('machine') is not None and not machine_matches(spec['machine'], actual['machine']):
        os_type.set('machine', spec['machine'])
        if machine_family(spec['machine']) != machine_family(actual['machine']):
            # Another chipset (i440fx <-> q35): its controllers and PCI addresses do not fit, let libvirt redo them.
            devices = root.find('devices')
            for ctrl in devices.findall('controller') if devices is not None else []:
                devices.remove(ctrl)
            for parent in root.iter():
                for address in parent.findall('address'):
                    if address.get('type') in ('pci', 'drive'):
                        parent.remove(address)
    if spec.get('arch') is not None:
        os_type.set('arch', spec['arch'])
    if spec.get('firmware') is not None and spec['firmware'] != actual['firmware']:
        if spec['firmware'] == 'efi':
            os_elem.set('firmware', 'efi')
        else:
            os_elem.attrib.pop('firmware', None)
            for tag in ('loader', 'nvram', 'firmware'):
                _remove_children(os_elem, tag)
    for key in ('kernel', 'initrd', 'cmdline'):
        if key not in spec:
            continue
        if spec[key]:
            _set_child_text(os_elem, key, spec[key])
        else:
            _remove_children(os_elem, key)


def _merge_raw(have_root, want_root):
    """Raw XML: the user's XML, plus the uuid, MACs, device addresses, controllers and converge metadata libvirt has."""
    if want_root.find('uuid') is None and have_root.find('uuid') is not None:
        want_root.insert(list(want_root).index(want_root.find('name')) + 1 if want_root.find('name') is not None else 0,
                         copy.deepcopy(have_root.find('uuid')))
    want_devices, have_devices = want_root.find('devices'), have_root.find('devices')
    if want_devices is not None and have_devices is not None:
        have_disks = dict((d.find('target').get('dev'), d) for d in have_devices.findall('disk') if d.find('target') is not None)
        for disk in want_devices.findall('disk'):
            target = disk.find('target')
            have = have_disks.get(target.get('dev')) if target is not None else None
            if have is not None and disk.find('address') is None and have.find('address') is not None \
                    and have.find('target').get('bus') == target.get('bus'):
                disk.append(copy.deepcopy(have.find('address')))
        have_nics = have_devices.findall('interface')
        for index, nic in enumerate(want_devices.findall('interface')):
            if index >= len(have_nics):
                break
            if nic.find('mac') is None and have_nics[index].find('mac') is not None:
                nic.insert(0, copy.deepcopy(have_nics[index].find('mac')))
            if nic.find('address') is None and have_nics[index].find('address') is not None:
                nic.append(copy.deepcopy(have_nics[index].find('address')))
        declared = set((c.get('type'), c.get('index', '0')) for c in want_devices.findall('controller'))
        for ctrl in have_devices.findall('controller'):
            if (ctrl.get('type'), ctrl.get('index', '0')) not in declared:
                _insert_device(want_devices, copy.deepcopy(ctrl), 'controller')
    have_meta = have_root.find('./metadata/{%s}vm' % CONVERGE_NS)
    if have_meta is not None and want_root.find('./metadata/{%s}vm' % CONVERGE_NS) is None:
        meta = want_root.find('metadata')
        if meta is None:
            meta = ET.Element('metadata')
            want_root.insert(len([c for c in want_root if c.tag in ('name', 'uuid', 'title', 'description')]), meta)
        meta.append(copy.deepcopy(have_meta))
    return to_string(want_root)


def merge_into_inactive(actual_inactive_xml, spec):
    """Return the XML to redefine the domain with (``conn.defineXML``).

    Starts from libvirt's inactive XML and changes only the fields declared in ``spec``, so the uuid, MACs, PCI
    addresses, controllers, converge metadata and libvirt defaults are kept and a redefine never churns them.
    For raw XML (a string or ``spec['xml']``) the user's XML is used, completed with the uuid, MACs, addresses,
    controllers and converge metadata from the actual XML.  Raises ``ValueError`` if a declared uuid or name differs
    (that needs a new domain, not a redefine).
    """
    root = parse_xml(actual_inactive_xml, 'actual XML')
    if isinstance(spec, str):
        spec = {'xml': spec}
    spec = normalize_spec(spec)
    if 'xml' in spec:
        return _merge_raw(root, parse_xml(spec['xml'], 'xml'))
    actual = model_from_xml(root)
    if spec['name'] != actual['name']:
        raise ValueError('name: cannot rename %r to %r by redefining' % (actual['name'], spec['name']))
    if spec.get('uuid') and actual['uuid'] and spec['uuid'] != actual['uuid']:
        raise ValueError('uuid: the domain %r has uuid %s, not %s' % (actual['name'], actual['uuid'], spec['uuid']))
    if spec.get('domain_type'):
        root.set('type', spec['domain_type'])
    for key in ('title', 'description'):
        if key not in spec:
            continue
        if spec[key]:
            _set_child_text(root, key, spec[key], before=('metadata', 'maxMemory', 'memory'))
        else:
            _remove_children(root, key)
    if spec.get('memory') is not None:
        if actual['memory'] != spec['memory']:
            _set_child_text(root, 'memory', str(spec['memory']), before=('currentMemory', 'vcpu', 'os'), unit='KiB')
        _set_child_text(root, 'currentMemory', str(spec['memory']), before=('vcpu', 'os'), unit='KiB')
    if spec.get('vcpus') is not None and actual['vcpus'] != spec['vcpus']:
        vcpu = _set_child_text(root, 'vcpu', str(spec['vcpus']), before=('os',))
        vcpu.attrib.pop('current', None)
    _merge_os(root, spec, actual)
    for key in ('on_poweroff', 'on_reboot', 'on_crash'):
        if spec.get(key) is not None:
            _set_child_text(root, key, spec[key], before=('pm', 'devices'))
    _merge_devices(root, spec, actual)
    return to_string(root)
