# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt storage XML (pure): the volume and pool XML this backend defines, and what it reads back from theirs.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._common.units import unit_factor


def volume_xml(name, capacity, fmt, preallocation='off', backing=None):
    """``<volume>`` XML for createXML; ``backing`` is ``{path, format}`` for a qcow2 overlay."""
    root = ET.Element('volume')
    ET.SubElement(root, 'name').text = name
    ET.SubElement(root, 'capacity', {'unit': 'bytes'}).text = str(int(capacity))
    ET.SubElement(root, 'allocation', {'unit': 'bytes'}).text = str(int(capacity) if preallocation == 'full' else 0)
    target = ET.SubElement(root, 'target')
    ET.SubElement(target, 'format', {'type': fmt})
    if backing:
        store = ET.SubElement(root, 'backingStore')
        ET.SubElement(store, 'path').text = backing['path']
        ET.SubElement(store, 'format', {'type': backing['format'] or 'raw'})
    return ET.tostring(root, encoding='unicode')


def parse_volume_xml(xml):
    """``{name, path, capacity, allocation, format, backing: {path, format} or None}`` of a volume XML."""
    root = ET.fromstring(xml)

    def size(tag):
        elem = root.find(tag)
        if elem is None or not (elem.text or '').strip():
            return 0
        return int(elem.text.strip()) * _unit(elem.get('unit'))

    fmt = root.find('target/format')
    backing = None
    store = root.find('backingStore')
    if store is not None and (store.findtext('path') or '').strip():
        bfmt = store.find('format')
        backing = {'path': store.findtext('path').strip(), 'format': _data_format(bfmt.get('type') if bfmt is not None else None)}
    return {'name': root.findtext('name'), 'path': (root.findtext('target/path') or '').strip() or None,
            'capacity': size('capacity'), 'allocation': size('allocation'),
            'format': _data_format(fmt.get('type') if fmt is not None else None), 'backing': backing, 'type': root.get('type')}


# libvirt names a raw file by the content it probes (an ISO9660 file system is "iso"); to qemu, and to a guest, it is raw
# data: an overlay on it needs backing_fmt=raw (qemu-img has no "iso" driver) and a copy of it is a raw volume
RAW_CONTENT_FORMATS = ('iso',)


def _data_format(fmt):
    """The disk image format of a libvirt volume format (``raw`` for a raw file libvirt named by its content)."""
    return 'raw' if fmt in RAW_CONTENT_FORMATS else fmt


def _unit(unit):
    if not unit or unit in ('bytes', 'B', 'b'):
        return 1
    return unit_factor(unit)


def pool_xml(name, path):
    """``<pool type='dir'>`` XML."""
    root = ET.Element('pool', {'type': 'dir'})
    ET.SubElement(root, 'name').text = name
    target = ET.SubElement(root, 'target')
    ET.SubElement(target, 'path').text = path
    return ET.tostring(root, encoding='unicode')


def parse_pool_xml(xml):
    """``{name, type, path}`` of a pool XML."""
    root = ET.fromstring(xml)
    return {'name': root.findtext('name'), 'type': root.get('type'), 'path': (root.findtext('target/path') or '').strip() or None}
