# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converge record kept in a libvirt domain's ``<metadata>`` (vm_state, task_state, task id, lease, owner...).

Pure Python (``xml.etree.ElementTree`` only).  Split from :mod:`domain_xml` so that what only reads or writes the
record (the task store, migration, host, the fleet listing) does not load the domain builder: every module file is
parsed by ansible on the controller and loaded on the managed host for each task.  Also the XML helpers both share.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import re
import xml.etree.ElementTree as ET

CONVERGE_NS = 'https://converge.virt/xmlns/vm/1'
CONVERGE_PREFIX = 'converge'
METADATA_FIELDS = ('vm_state', 'task_state', 'task_id', 'task_started_at', 'last_action', 'pending_restart', 'lease_until', 'previous_vm_state',
                   'owner', 'generation', 'stop_grace_period')

ET.register_namespace(CONVERGE_PREFIX, CONVERGE_NS)

_XML_BAD_CHARS = re.compile('[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]')


def _text(value, field, allow_empty=False, single_line=False):
    if not isinstance(value, str):
        raise ValueError('%s: expected a string, got %s' % (field, type(value).__name__))
    if not allow_empty and not value:
        raise ValueError('%s: must not be empty' % field)
    if _XML_BAD_CHARS.search(value):
        raise ValueError('%s: contains characters that cannot be represented in XML' % field)
    if single_line and ('\n' in value or '\r' in value):
        raise ValueError('%s: must be a single line' % field)
    return value


def _sub(parent, tag, text=None, **attrs):
    elem = ET.SubElement(parent, tag, dict((k, v) for k, v in attrs.items() if v is not None))
    if text is not None:
        elem.text = text
    return elem


def _to_string(elem):
    return ET.tostring(elem, encoding='unicode')


def _parse(xml, what='domain XML'):
    if isinstance(xml, ET.Element):
        return xml
    if not isinstance(xml, str):
        raise ValueError('%s: expected an XML string' % what)
    try:
        return ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ValueError('%s: invalid XML: %s' % (what, exc)) from None


def _metadata_vm_element(values, namespaced):
    def tag(name):
        return '{%s}%s' % (CONVERGE_NS, name) if namespaced else name
    root = ET.Element(tag('vm'))
    for key in METADATA_FIELDS:
        value = (values or {}).get(key)
        if value is None:
            continue
        if isinstance(value, bool):
            value = 'true' if value else 'false'
        _sub(root, tag(key), _text(str(value), 'metadata.' + key, allow_empty=True))
    return root


def converge_metadata_element(values):
    """Return the converge metadata fragment for ``dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, fragment,
    'converge', CONVERGE_NS, flags)``.

    ``values`` may hold :data:`METADATA_FIELDS` (``pending_restart`` as a bool); None values are left out.
    The fragment is not namespaced: libvirt puts it (root and children) into the namespace given by ``uri``.
    """
    return _to_string(_metadata_vm_element(values, namespaced=False))


def _metadata_root(xml):
    root = _parse(xml, 'metadata')
    if root.tag in ('{%s}vm' % CONVERGE_NS, 'vm'):
        return root
    return root.find('./metadata/{%s}vm' % CONVERGE_NS)


def read_converge_metadata(xml):
    """Read the converge metadata from a domain XML or from the fragment returned by ``dom.metadata(...)``.

    Returns a dict with all :data:`METADATA_FIELDS` (None when absent; ``pending_restart`` is a bool, False when absent).
    """
    out = dict((key, None) for key in METADATA_FIELDS)
    out['pending_restart'] = False
    vm_elem = _metadata_root(xml)
    if vm_elem is None:
        return out
    for child in vm_elem:
        local = child.tag.split('}', 1)[-1]
        if local in out:
            out[local] = child.text or ''
    if isinstance(out['pending_restart'], str):
        out['pending_restart'] = out['pending_restart'].strip().lower() in ('true', 'yes', '1')
    return out
