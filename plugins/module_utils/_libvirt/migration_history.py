# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The short history of a VM's recent migrations: a JSON list in a metadata element of the domain (namespace
:data:`MIGRATION_NS`), so it travels with the domain and never collides with the task record's compare-and-swap.
Informative: a history that cannot be read is empty, one that cannot be written is skipped.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import metadata_flags

MIGRATION_NS = 'https://converge.virt/xmlns/migration/1'
MIGRATION_PREFIX = 'convergemig'
HISTORY_LENGTH = 5


def read_history(dom):
    """The recent migrations recorded on ``dom`` (newest last); [] when none."""
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG if dom.isPersistent() else libvirt.VIR_DOMAIN_AFFECT_LIVE
    try:
        fragment = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, MIGRATION_NS, flags)
        entries = json.loads(ET.fromstring(fragment).text or '[]')
    except (libvirt.libvirtError, ValueError, ET.ParseError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def write_history(dom, entries):
    """Store the last :data:`HISTORY_LENGTH` entries on ``dom`` (errors are ignored: history is informative)."""
    root = ET.Element('migrations')
    root.text = json.dumps(entries[-HISTORY_LENGTH:], sort_keys=True)
    try:
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, ET.tostring(root, encoding='unicode'), MIGRATION_PREFIX, MIGRATION_NS,
                        metadata_flags(dom))
    except libvirt.libvirtError:
        pass


def upsert_history(entries, entry):
    """``entries`` with ``entry`` replacing the one of the same id (or appended)."""
    out = [e for e in entries if e.get('id') != entry.get('id')]
    out.append(entry)
    return out[-HISTORY_LENGTH:]
