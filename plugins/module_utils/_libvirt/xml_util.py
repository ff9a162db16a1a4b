# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The XML helpers every libvirt XML module shares: parse, build an element, check a text value, serialise.

Pure Python (``xml.etree.ElementTree`` only, no libvirt import).  Values are always data (element text and
attribute values), escaped by the serialiser; :func:`checked_text` refuses what XML cannot represent.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import re
import xml.etree.ElementTree as ET

QEMU_NS = 'http://libvirt.org/schemas/domain/qemu/1.0'

ET.register_namespace('qemu', QEMU_NS)

_XML_BAD_CHARS = re.compile('[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]')


def checked_text(value, field, allow_empty=False, single_line=False):
    """``value`` if it is a string XML can carry; ``ValueError`` naming ``field`` otherwise."""
    if not isinstance(value, str):
        raise ValueError('%s: expected a string, got %s' % (field, type(value).__name__))
    if not allow_empty and not value:
        raise ValueError('%s: must not be empty' % field)
    if _XML_BAD_CHARS.search(value):
        raise ValueError('%s: contains characters that cannot be represented in XML' % field)
    if single_line and ('\n' in value or '\r' in value):
        raise ValueError('%s: must be a single line' % field)
    return value


def sub_element(parent, tag, text=None, **attrs):
    """A new child ``tag`` of ``parent`` with ``text`` and the attributes that are not None."""
    elem = ET.SubElement(parent, tag, dict((k, v) for k, v in attrs.items() if v is not None))
    if text is not None:
        elem.text = text
    return elem


def to_string(elem):
    """``elem`` serialised as a str."""
    return ET.tostring(elem, encoding='unicode')


def parse_xml(xml, what='domain XML'):
    """The root element of ``xml`` (a string, or an element returned as it is); ``ValueError`` naming ``what`` otherwise."""
    if isinstance(xml, ET.Element):
        return xml
    if not isinstance(xml, str):
        raise ValueError('%s: expected an XML string' % what)
    try:
        return ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ValueError('%s: invalid XML: %s' % (what, exc)) from None
