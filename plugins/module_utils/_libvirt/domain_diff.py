# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compare a spec (or raw ``xml``) with libvirt's normalised inactive domain XML.

:func:`desired_vs_actual` compares a spec with ``dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)`` and returns a
:class:`Diff` restricted to what the user declared, each :class:`Change` classified ``live`` / ``restart`` /
``recreate``.  :func:`machine_matches` tells whether a declared machine type is the one libvirt expanded.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import copy
import re

from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_read import model_from_xml
from ansible_collections.converge.virt.plugins.module_utils._libvirt.domain_spec import HOTPLUG_BUSES, normalize_spec
from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import parse_xml, to_string

LIVE = 'live'
RESTART = 'restart'
RECREATE = 'recreate'

MACHINE_ALIASES = {'pc': 'pc-i440fx-', 'q35': 'pc-q35-'}


class Change:
    """One field-level difference: ``path`` (e.g. ``memory``, ``disks[vdb]``, ``disks[vda].format``,
    ``interfaces[0].source``), ``before`` (actual), ``after`` (desired), ``kind`` (``live``, ``restart``, ``recreate``)."""

    __slots__ = ('path', 'before', 'after', 'kind')

    def __init__(self, path, before, after, kind):
        self.path = path
        self.before = before
        self.after = after
        self.kind = kind

    def as_dict(self):
        """Return the change as a plain dict (for module results)."""
        return {'path': self.path, 'before': self.before, 'after': self.after, 'kind': self.kind}

    def __eq__(self, other):
        return isinstance(other, Change) and self.as_dict() == other.as_dict()

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((self.path, self.kind))

    def __repr__(self):
        return 'Change(%r, %r, %r, %r)' % (self.path, self.before, self.after, self.kind)


class Diff:
    """Ordered list of :class:`Change`; falsy when there is nothing to do."""

    def __init__(self, changes=None):
        self.changes = list(changes or [])

    def __iter__(self):
        return iter(self.changes)

    def __len__(self):
        return len(self.changes)

    def __bool__(self):
        return bool(self.changes)

    __nonzero__ = __bool__

    def __repr__(self):
        return 'Diff(%r)' % (self.changes,)

    @property
    def paths(self):
        """List of the changed paths."""
        return [c.path for c in self.changes]

    @property
    def live(self):
        """Changes that can be applied to a running domain."""
        return [c for c in self.changes if c.kind == LIVE]

    @property
    def restart(self):
        """Changes that take effect only after the domain is restarted (applied to the persistent config)."""
        return [c for c in self.changes if c.kind == RESTART]

    @property
    def recreate(self):
        """Changes that cannot be made by redefining (uuid / name)."""
        return [c for c in self.changes if c.kind == RECREATE]

    @property
    def needs_restart(self):
        """True if any change needs a restart of a running domain."""
        return any(c.kind == RESTART for c in self.changes)

    def get(self, path):
        """Return the change at ``path`` or None."""
        for change in self.changes:
            if change.path == path:
                return change
        return None

    def as_list(self):
        """Return the changes as a list of dicts."""
        return [c.as_dict() for c in self.changes]

    def as_ansible_diff(self):
        """Return ``{'before': {path: value}, 'after': {path: value}}`` for Ansible's ``--diff`` output."""
        return {'before': dict((c.path, c.before) for c in self.changes), 'after': dict((c.path, c.after) for c in self.changes)}


def machine_matches(desired, actual):
    """True if the declared machine type ``desired`` is what libvirt normalised to ``actual``
    (``pc`` -> ``pc-i440fx-7.2``, ``q35`` -> ``pc-q35-7.2``, ``virt`` -> ``virt-7.2``)."""
    if desired == actual or actual is None:
        return desired == actual
    prefix = MACHINE_ALIASES.get(desired)
    if prefix:
        return actual.startswith(prefix)
    rest = actual[len(desired) + 1:] if actual.startswith(desired + '-') else ''
    return bool(rest) and rest[0].isdigit()


def machine_family(machine):
    if not machine:
        return None
    for alias, prefix in MACHINE_ALIASES.items():
        if machine == alias or machine.startswith(prefix):
            return alias
    return re.sub(r'-[0-9][0-9.]*$', '', machine)


_SCALAR_KINDS = (
    ('name', RECREATE), ('uuid', RECREATE), ('domain_type', RESTART), ('arch', RESTART), ('machine', RESTART),
    ('title', LIVE), ('description', LIVE), ('memory', RESTART), ('current_memory', RESTART), ('vcpus', RESTART),
    ('firmware', RESTART), ('kernel', RESTART), ('initrd', RESTART), ('cmdline', RESTART),
    ('on_poweroff', RESTART), ('on_reboot', RESTART), ('on_crash', RESTART), ('serial', RESTART), ('graphics', RESTART),
    ('guest_agent', RESTART),
)
_DISK_FIELDS = ('device', 'bus', 'source', 'format', 'readonly', 'serial')
_NIC_FIELDS = ('type', 'source', 'model', 'mac')


def _disk_source(disk):
    if disk.get('type') == 'volume':
        return {'type': 'volume', 'pool': disk.get('pool'), 'volume': disk.get('volume')}
    return {'type': disk.get('type'), 'path': disk.get('path')}


def _public_disk(disk):
    return dict((k, v) for k, v in disk.items() if v is not None)


def _compare_disks(desired, actual, changes):
    by_dev = dict((d['dev'], d) for d in actual)
    wanted = set(d['dev'] for d in desired)
    for disk in desired:
        path = 'disks[%s]' % disk['dev']
        cur = by_dev.get(disk['dev'])
        if cur is None:
            changes.append(Change(path, None, _public_disk(disk), LIVE if disk['bus'] in HOTPLUG_BUSES else RESTART))
            continue
        for field in _DISK_FIELDS:
            if field == 'source':
                want, have = _disk_source(disk), _disk_source(cur)
            else:
                want, have = disk.get(field), cur.get(field)
            if want is None or want == have:
                continue
            live = field == 'source' and disk['device'] == 'cdrom' and cur.get('device') == 'cdrom'
            changes.append(Change('%s.%s' % (path, field), have, want, LIVE if live else RESTART))
    for cur in actual:
        if cur['dev'] not in wanted:
            changes.append(Change('disks[%s]' % cur['dev'], _public_disk(cur), None, LIVE if cur.get('bus') in HOTPLUG_BUSES else RESTART))


def _compare_interfaces(desired, actual, changes):
    for index, nic in enumerate(desired):
        path = 'interfaces[%d]' % index
        if index >= len(actual):
            changes.append(Change(path, None, _public_disk(nic), LIVE))
            continue
        cur = actual[index]
        for field in _NIC_FIELDS:
            want, have = nic.get(field), cur.get(field)
            if want is None or want == have:
                continue
            changes.append(Change('%s.%s' % (path, field), have, want, LIVE if field in ('type', 'source') else RESTART))
    for index in range(len(desired), len(actual)):
        changes.append(Change('interfaces[%d]' % index, _public_disk(actual[index]), None, LIVE))


def _compare_models(desired, actual, changes):
    for key, kind in _SCALAR_KINDS:
        if key not in desired or desired[key] is None:
            continue
        want, have = desired[key], actual.get(key)
        if key == 'machine' and machine_matches(want, have):
            continue
        if key == 'current_memory' and have is None:
            continue
        if want != have:
            changes.append(Change(key, have, want, kind))
    if desired.get('disks') is not None:
        _compare_disks(desired['disks'], actual['disks'], changes)
    if desired.get('interfaces') is not None:
        _compare_interfaces(desired['interfaces'], actual['interfaces'], changes)


# Generic subset comparison for raw XML: every element/attribute/text the user wrote must be present in the
# actual XML; whatever libvirt added (defaults, addresses, aliases, auto devices) is ignored.
_IGNORED_CHILDREN = ('address', 'alias')
_MODELED_TOP = ('name', 'uuid', 'title', 'description', 'metadata', 'memory', 'currentMemory', 'vcpu', 'os', 'devices',
                'on_poweroff', 'on_reboot', 'on_crash', 'resource', 'seclabel')
_MODELED_OS = ('type', 'kernel', 'initrd', 'cmdline')
_MODELED_DEVICES = ('disk', 'interface', 'serial', 'console', 'graphics')


def _subset(want, have):
    if want.tag != have.tag:
        return False
    for key, value in want.attrib.items():
        if have.get(key) != value:
            return False
    text = (want.text or '').strip()
    if text and text != (have.text or '').strip():
        return False
    used = set()
    for child in want:
        if child.tag in _IGNORED_CHILDREN:
            continue
        for index, candidate in enumerate(have):
            if index not in used and _subset(child, candidate):
                used.add(index)
                break
        else:
            return False
    return True


def _compare_children(want_parent, have_parent, skip, prefix, changes):
    used = set()
    have_children = list(have_parent) if have_parent is not None else []
    counts = {}
    for child in want_parent:
        if not isinstance(child.tag, str) or child.tag in skip:
            continue
        index = counts.get(child.tag, 0)
        counts[child.tag] = index + 1
        match = None
        for pos, candidate in enumerate(have_children):
            if pos not in used and _subset(child, candidate):
                match = pos
                break
        if match is not None:
            used.add(match)
            continue
        same_tag = [c for c in have_children if c.tag == child.tag]
        before = to_string(same_tag[0]).strip() if same_tag else None
        changes.append(Change('%s%s[%d]' % (prefix, child.tag, index), before, to_string(child).strip(), RESTART))


def _disk_dev(elem):
    target = elem.find('target')
    return target.get('dev') if target is not None else None


def _residual(elem, drop_children, drop_attrs=()):
    elem = copy.deepcopy(elem)
    for child in list(elem):
        if child.tag in drop_children:
            elem.remove(child)
    driver = elem.find('driver')
    if driver is not None:
        for attr in drop_attrs:
            driver.attrib.pop(attr, None)
    return elem


def _compare_raw_devices(want_root, have_root, changes):
    have_devices = have_root.find('devices')
    want_devices = want_root.find('devices')
    if want_devices is None:
        return
    have_disks = dict((_disk_dev(d), d) for d in (have_devices.findall('disk') if have_devices is not None else []))
    for disk in want_devices.findall('disk'):
        dev = _disk_dev(disk)
        have = have_disks.get(dev)
        if have is None:
            continue
        want = _residual(disk, ('source', 'target', 'readonly', 'serial'), ('type',))
        if not _subset(want, _residual(have, ('source', 'target', 'readonly', 'serial'), ('type',))):
            changes.append(Change('disks[%s].xml' % dev, to_string(have).strip(), to_string(disk).strip(), RESTART))
    have_nics = have_devices.findall('interface') if have_devices is not None else []
    for index, nic in enumerate(want_devices.findall('interface')):
        if index >= len(have_nics):
            break
        drop = ('source', 'mac', 'model', 'target')
        if not _subset(_residual(nic, drop), _residual(have_nics[index], drop)):
            changes.append(Change('interfaces[%d].xml' % index, to_string(have_nics[index]).strip(), to_string(nic).strip(), RESTART))
    _compare_children(want_devices, have_devices, _MODELED_DEVICES, 'devices/', changes)


def _raw_desired_model(root):
    desired = model_from_xml(root)
    if root.find('currentMemory') is None or desired['current_memory'] == desired['memory']:
        desired['current_memory'] = None
    if root.find('vcpu') is None:
        desired['vcpus'] = None
    if root.find('os/type') is None or root.find('os/type').get('machine') is None:
        desired['machine'] = None
    if root.find('os/type') is None or root.find('os/type').get('arch') is None:
        desired['arch'] = None
    if root.find('devices/serial') is None and root.find('devices/console') is not None:
        desired['serial'] = None  # a console alone makes libvirt add a serial
    return desired


def desired_vs_actual(desired, actual_inactive_xml):
    """Compare what the user declared with libvirt's inactive XML (``dom.XMLDesc(VIR_DOMAIN_XML_INACTIVE)``).

    ``desired`` is a spec dict (only declared keys are compared), a spec dict with ``xml``, or a raw XML string
    (everything it contains is declared; what libvirt adds is ignored).  Never compared: uuid/MAC unless declared,
    ``<address>``, ``<alias>``, controllers and other auto-added devices, seclabel, ``<resource>``, undeclared cpu/features,
    ``<currentMemory>`` equal to memory, units (memory is compared in KiB), ordering, whitespace, the converge metadata.
    Returns a :class:`Diff` whose changes are classified ``live``, ``restart`` or ``recreate``.
    """
    have_root = parse_xml(actual_inactive_xml, 'actual XML')
    actual = model_from_xml(have_root)
    changes = []
    raw = desired if isinstance(desired, str) else None
    if isinstance(desired, dict):
        spec = normalize_spec(desired)
        raw = spec.get('xml')
        if raw is None:
            _compare_models(spec, actual, changes)
            return Diff(changes)
    want_root = parse_xml(raw, 'xml')
    _compare_models(_raw_desired_model(want_root), actual, changes)
    _compare_children(want_root, have_root, _MODELED_TOP, '', changes)
    want_os = want_root.find('os')
    if want_os is not None:
        _compare_children(want_os, have_root.find('os'), _MODELED_OS, 'os/', changes)
    _compare_raw_devices(want_root, have_root, changes)
    return Diff(changes)
