# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The converge record kept in a libvirt domain's ``<metadata>`` (vm_state, task_state, task id, lease, owner...).

Pure Python (``xml.etree.ElementTree`` only).  Apart from the domain modules (``domain_spec``, ``domain_build``, ...)
so that what only reads or writes the record (the task store, migration, host, the fleet listing) does not load the
domain builder: every module file is parsed by ansible on the controller and loaded on the managed host for each task.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import checked_text, parse_xml, sub_element, to_string

CONVERGE_NS = 'https://converge.virt/xmlns/vm/1'
CONVERGE_PREFIX = 'converge'
METADATA_FIELDS = ('vm_state', 'task_state', 'task_id', 'task_started_at', 'last_action', 'pending_restart', 'lease_until', 'previous_vm_state',
                   'owner', 'generation', 'stop_grace_period')

ET.register_namespace(CONVERGE_PREFIX, CONVERGE_NS)


def metadata_vm_element(values, namespaced):
    """The ``<vm>`` element of the record (``namespaced``: its tags in :data:`CONVERGE_NS`, as inside a domain XML)."""
    def tag(name):
        return '{%s}%s' % (CONVERGE_NS, name) if namespaced else name
    root = ET.Element(tag('vm'))
    for key in METADATA_FIELDS:
        value = (values or {}).get(key)
        if value is None:
            continue
        if isinstance(value, bool):
            value = 'true' if value else 'false'
        sub_element(root, tag(key), checked_text(str(value), 'metadata.' + key, allow_empty=True))
    return root


def converge_metadata_element(values):
    """Return the converge metadata fragment for ``dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, fragment,
    'converge', CONVERGE_NS, flags)``.

    ``values`` may hold :data:`METADATA_FIELDS` (``pending_restart`` as a bool); None values are left out.
    The fragment is not namespaced: libvirt puts it (root and children) into the namespace given by ``uri``.
    """
    return to_string(metadata_vm_element(values, namespaced=False))


def _metadata_root(xml):
    root = parse_xml(xml, 'metadata')
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
