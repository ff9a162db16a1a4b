# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain mark of a libvirt host: a persistent private libvirt secret on that host with usage :data:`DRAIN_USAGE`
and a JSON description (reason, since, by). Every controller that connects to the host sees it, it survives daemon
restarts, and creating it twice fails (the usage is unique). Placement never chooses a draining host.
"""

from __future__ import annotations

import json
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks

DRAIN_USAGE = 'converge-virt-host-drain'


def _drain_secret(conn):
    try:
        return conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_VOLUME, DRAIN_USAGE)
    except libvirt.libvirtError:
        return None


def drain_mark(conn):
    """The drain mark of the host of ``conn`` (a dict: reason, since, by) or None."""
    secret = _drain_secret(conn)
    if secret is None:
        return None
    try:
        desc = ET.fromstring(secret.XMLDesc(0)).findtext('description') or '{}'
        mark = json.loads(desc)
    except (libvirt.libvirtError, ValueError, ET.ParseError):
        mark = {}
    return mark if isinstance(mark, dict) else {}


def set_drain_mark(conn, reason, by):
    """Mark the host draining; return True when the mark was created."""
    if _drain_secret(conn) is not None:
        return False
    with journal.Interval(_host_name(conn), tasks.new_task_id(), 'drain', kind='host', target='draining'):
        return _define_drain_mark(conn, reason, by)


def _host_name(conn):
    try:
        return redact_uri(conn.getURI())
    except libvirt.libvirtError:
        return 'unknown'


def _define_drain_mark(conn, reason, by):
    root = ET.Element('secret', {'ephemeral': 'no', 'private': 'yes'})
    ET.SubElement(root, 'uuid').text = str(uuidlib.uuid4())
    ET.SubElement(root, 'description').text = json.dumps({'reason': reason or '', 'since': time.time(), 'by': by}, sort_keys=True)
    usage = ET.SubElement(root, 'usage', {'type': 'volume'})
    ET.SubElement(usage, 'volume').text = DRAIN_USAGE
    try:
        conn.secretDefineXML(ET.tostring(root, encoding='unicode'), 0)
    except libvirt.libvirtError:
        if _drain_secret(conn) is not None:  # somebody else marked it at the same time
            return False
        raise
    return True


def clear_drain_mark(conn):
    """Remove the drain mark; return True when there was one."""
    secret = _drain_secret(conn)
    if secret is None:
        return False
    with journal.Interval(_host_name(conn), tasks.new_task_id(), 'undrain', kind='host', target='schedulable'):
        secret.undefine()
    return True
