# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt domain XML for the ``converge.virt.vm`` module: build, compare, merge, converge metadata.

Pure Python (``xml.etree.ElementTree`` only, no libvirt import).  XML is always built as an element tree:
user-supplied values are data (element text and attribute values) and are escaped by the serialiser.

* :func:`build_domain_xml` turns the simple, documented options (a *spec*) into domain XML.
* :func:`desired_vs_actual` compares a spec (or raw ``xml``) with libvirt's normalised inactive XML
  (``dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)``) and returns a :class:`Diff` restricted to what the user
  declared, each change classified ``live`` / ``restart`` / ``recreate``.
* :func:`merge_into_inactive` produces the XML to redefine with, keeping what libvirt added (uuid, MACs, addresses).
* :func:`read_converge_metadata` / :func:`converge_metadata_element` handle the converge ``<metadata>`` block.
* :func:`disk_device_xml`, :func:`disks_in`, :func:`interfaces_in` help with hot-plug.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import copy
import re
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._common.units import KIB, MIB, TIB, parse_size, from_libvirt
# the metadata record and the XML helpers live in metadata.py (modules that only read or write the record - migration,
# the task store, host - do not load the domain builder); re-exported here for the modules that build domains
from ansible_collections.converge.virt.plugins.module_utils._libvirt.metadata import (  # noqa: F401 pylint: disable=unused-import
    CONVERGE_NS, CONVERGE_PREFIX, METADATA_FIELDS, _metadata_vm_element, _parse, _sub, _text, _to_string, converge_metadata_element,
    read_converge_metadata)

QEMU_NS = 'http://libvirt.org/schemas/domain/qemu/1.0'

LIVE = 'live'
RESTART = 'restart'
RECREATE = 'recreate'

ET.register_namespace('qemu', QEMU_NS)

SPEC_KEYS = ('name', 'uuid', 'title', 'description', 'vcpus', 'memory', 'machine', 'arch', 'domain_type', 'firmware', 'boot',
             'disks', 'interfaces', 'serial', 'graphics', 'on_poweroff', 'on_reboot', 'on_crash', 'autostart', 'xml')

DEFAULTS = {
    'arch': 'x86_64', 'domain_type': 'kvm', 'vcpus': 1, 'memory': 1024 * KIB,  # memory in KiB (1 GiB)
    'firmware': 'bios', 'serial': 'pty', 'graphics': 'none',
    'on_poweroff': 'destroy', 'on_reboot': 'restart', 'on_crash': 'destroy',
}

MEMORY_MIN = MIB
MEMORY_MAX = 64 * TIB
VCPUS_MAX = 4096
LIFECYCLE_ACTIONS = ('destroy', 'restart', 'preserve', 'rename-restart')
CRASH_ACTIONS = LIFECYCLE_ACTIONS + ('coredump-destroy', 'coredump-restart')
DISK_BUSES = ('virtio', 'sata', 'scsi', 'ide', 'usb')
HOTPLUG_BUSES = ('virtio', 'scsi', 'usb')
DISK_FORMATS = ('raw', 'qcow2')
NIC_MODELS = ('virtio', 'e1000', 'e1000e', 'rtl8139', 'vmxnet3')
MACHINE_ALIASES = {'pc': 'pc-i440fx-', 'q35': 'pc-q35-'}

_DEV_RE = re.compile(r'^(vd|sd|hd|xvd)[a-z]{1,3}\Z')
_MAC_RE = re.compile(r'^([0-9a-f]{2}:){5}[0-9a-f]{2}\Z')
_TOKEN_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._+-]*\Z')
_SERIAL_RE = re.compile(r'^[A-Za-z0-9_.+ -]{1,64}\Z')
# what a pool or volume name of a disk source can never contain (a slash would leave the pool's directory)
_CONTROL_RE = re.compile(r'[\x00-\x1f\x7f]')


# ---------------------------------------------------------------------------------------------------------------------
# Diff
# ---------------------------------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------------------------------
# Spec validation
# ---------------------------------------------------------------------------------------------------------------------

def _token(value, field):
    value = _text(value, field)
    if not _TOKEN_RE.match(value):
        raise ValueError('%s: %r is not a valid identifier' % (field, value))
    return value


def _choice(value, field, choices):
    if value not in choices:
        raise ValueError('%s: %r is not one of %s' % (field, value, ', '.join(choices)))
    return value


def _bool(value, field):
    if not isinstance(value, bool):
        raise ValueError('%s: expected a boolean, got %r' % (field, value))
    return value


def _abs_path(value, field):
    value = _text(value, field)
    if not value.startswith('/'):
        raise ValueError('%s: %r must be an absolute path' % (field, value))
    return value


def _int(value, field, minimum, maximum):
    if isinstance(value, bool):
        raise ValueError('%s: expected an integer, got %r' % (field, value))
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int):
        raise ValueError('%s: expected an integer, got %r' % (field, value))
    if value < minimum:
        raise ValueError('%s: must be at least %d, got %d' % (field, minimum, value))
    if value > maximum:
        raise ValueError('%s: must be at most %d, got %d' % (field, maximum, value))
    return value


def parse_memory(value, field='memory'):
    """Parse a memory size (``'512MiB'``, ``'1GiB'``, ``'1G'``, ``'2GB'``; a bare integer counts MiB) and return KiB.

    Sizes that are not a whole number of KiB (decimal units) are rounded up to the next KiB, as libvirt does.
    """
    size = parse_size(value, field=field, default_unit='MiB', minimum=MEMORY_MIN, maximum=MEMORY_MAX)
    return (size + KIB - 1) // KIB


def _default_bus(dev, device):
    if dev.startswith('vd'):
        return 'virtio'
    if dev.startswith('hd'):
        return 'ide'
    return 'sata' if device == 'cdrom' or dev.startswith('sd') else 'virtio'


def normalize_disk(disk, field='disks[0]'):
    """Validate one disk option and return the canonical disk dict.

    Accepted keys: ``source`` (a path string or a ``{pool, volume}``/``{path}`` dict), or ``pool`` + ``volume``,
    or ``path``; ``dev`` (alias ``target``), ``bus``, ``format``, ``readonly``, ``serial``, ``device`` (``disk``/``cdrom``).
    Keys with value None are not declared; other keys are ignored (they may belong to the volume options).
    Returns ``{dev, bus, device, type, path, pool, volume, format, readonly, serial}`` where undeclared
    ``format``/``readonly``/``serial`` are None.
    """
    if not isinstance(disk, dict):
        raise ValueError('%s: expected a dict, got %s' % (field, type(disk).__name__))
    device = _choice(disk.get('device') or 'disk', field + '.device', ('disk', 'cdrom'))
    dev = disk.get('dev') if disk.get('dev') is not None else disk.get('target')
    if dev is None:
        raise ValueError('%s.dev: the target device name (vda, sda, ...) is required' % field)
    dev = _text(dev, field + '.dev')
    if not _DEV_RE.fullmatch(dev):
        raise ValueError('%s.dev: %r is not a valid target device name (vda, sdb, hdc, ...)' % (field, dev))
    bus = _choice(disk.get('bus') or _default_bus(dev, device), field + '.bus', DISK_BUSES)
    if device == 'cdrom' and bus == 'virtio':
        raise ValueError('%s.bus: a cdrom cannot use the virtio bus (use sata or scsi)' % field)
    source = disk.get('source')
    path, pool, volume = disk.get('path'), disk.get('pool'), disk.get('volume')
    if isinstance(source, dict):
        path, pool, volume = source.get('path', path), source.get('pool', pool), source.get('volume', volume)
    elif source is not None:
        path = source
    out = {'dev': dev, 'bus': bus, 'device': device, 'type': None, 'path': None, 'pool': None, 'volume': None,
           'format': None, 'readonly': None, 'serial': None}
    if path is not None and (pool is not None or volume is not None):
        raise ValueError('%s.source: give either a path or a pool and volume, not both' % field)
    if path is not None:
        out['path'] = _abs_path(path, field + '.source')
        out['type'] = 'block' if out['path'].startswith('/dev/') else 'file'
    elif pool is not None or volume is not None:
        if pool is None or volume is None:
            raise ValueError('%s.source: a volume source needs both pool and volume' % field)
        out['pool'] = _text(pool, field + '.source.pool')
        out['volume'] = _text(volume, field + '.source.volume')
        for key in ('pool', 'volume'):
            if '/' in out[key] or _CONTROL_RE.search(out[key]) or out[key] in ('.', '..'):
                raise ValueError('%s.source.%s: %r is not a pool or volume name (no slash, no control character, not . or ..)' % (field, key, out[key]))
        out['type'] = 'volume'
    elif device == 'cdrom':
        out['type'] = 'file'  # empty drive
    else:
        raise ValueError('%s.source: a disk needs a source (a file path or a pool and volume)' % field)
    if disk.get('format') is not None:
        out['format'] = _choice(disk['format'], field + '.format', DISK_FORMATS)
    if disk.get('readonly') is not None:
        out['readonly'] = _bool(disk['readonly'], field + '.readonly')
    if device == 'cdrom':
        out['readonly'] = True
    if disk.get('serial') is not None:
        out['serial'] = _text(disk['serial'], field + '.serial')
        if not _SERIAL_RE.match(out['serial']):
            raise ValueError('%s.serial: %r may only contain letters, digits, space and _.+-' % (field, out['serial']))
    return out


def normalize_interface(nic, field='interfaces[0]'):
    """Validate one interface option (``network`` or ``bridge``, ``model``, ``mac``) and return
    ``{type, source, model, mac}`` (``mac`` None when not declared, otherwise lower case)."""
    if not isinstance(nic, dict):
        raise ValueError('%s: expected a dict, got %s' % (field, type(nic).__name__))
    network, bridge = nic.get('network'), nic.get('bridge')
    if (network is None) == (bridge is None):
        raise ValueError('%s: give exactly one of network or bridge' % field)
    out = {'type': 'network' if network is not None else 'bridge',
           'source': _text(network if network is not None else bridge, field + ('.network' if network is not None else '.bridge')),
           'model': _choice(nic.get('model') or 'virtio', field + '.model', NIC_MODELS), 'mac': None}
    if nic.get('mac') is not None:
        mac = _text(nic['mac'], field + '.mac').lower()
        if not _MAC_RE.match(mac):
            raise ValueError('%s.mac: %r is not a MAC address (aa:bb:cc:dd:ee:ff)' % (field, nic['mac']))
        if int(mac[:2], 16) & 1:
            raise ValueError('%s.mac: %r is a multicast address' % (field, nic['mac']))
        out['mac'] = mac
    return out


def normalize_spec(spec):
    """Validate a VM spec and return its canonical form, containing only the declared keys.

    Keys whose value is None are not declared; keys not in :data:`SPEC_KEYS` are ignored (module options such as
    ``state``).  Raises ``ValueError`` naming the field.  ``memory`` becomes KiB; ``boot`` becomes the flat keys
    ``kernel``, ``initrd``, ``cmdline``; ``disks``/``interfaces`` become lists of canonical dicts.
    """
    if not isinstance(spec, dict):
        raise ValueError('spec: expected a dict, got %s' % type(spec).__name__)
    get = spec.get
    out = {}
    if get('xml') is not None:
        out['xml'] = _text(get('xml'), 'xml')
        if get('autostart') is not None:
            out['autostart'] = _bool(get('autostart'), 'autostart')
        return out
    if get('name') is None:
        raise ValueError('name: is required')
    out['name'] = _text(get('name'), 'name', single_line=True)
    if '/' in out['name']:
        raise ValueError("name: must not contain '/'")
    if get('uuid') is not None:
        import uuid  # pylint: disable=import-outside-toplevel  # only when a uuid is declared
        try:
            out['uuid'] = str(uuid.UUID(str(get('uuid'))))
        except ValueError:
            raise ValueError('uuid: %r is not a UUID' % (get('uuid'),)) from None
    if get('title') is not None:
        out['title'] = _text(get('title'), 'title', allow_empty=True, single_line=True)
    if get('description') is not None:
        # XML parsers turn CR LF and CR into LF: normalise so that the description round-trips.
        out['description'] = _text(get('description'), 'description', allow_empty=True).replace('\r\n', '\n').replace('\r', '\n')
    if get('vcpus') is not None:
        out['vcpus'] = _int(get('vcpus'), 'vcpus', 1, VCPUS_MAX)
    if get('memory') is not None:
        out['memory'] = parse_memory(get('memory'))
    if get('machine') is not None:
        out['machine'] = _token(get('machine'), 'machine')
    if get('arch') is not None:
        out['arch'] = _token(get('arch'), 'arch')
    if get('domain_type') is not None:
        out['domain_type'] = _choice(get('domain_type'), 'domain_type', ('kvm', 'qemu'))
    if get('firmware') is not None:
        out['firmware'] = _choice(get('firmware'), 'firmware', ('bios', 'efi'))
    boot = get('boot')
    if boot is not None:
        if not isinstance(boot, dict):
            raise ValueError('boot: expected a dict with kernel, initrd, cmdline')
        unknown = sorted(set(k for k, v in boot.items() if v is not None) - set(('kernel', 'initrd', 'cmdline')))
        if unknown:
            raise ValueError('boot: unknown option(s) %s (expected kernel, initrd, cmdline)' % ', '.join(unknown))
        out['kernel'] = _abs_path(boot['kernel'], 'boot.kernel') if boot.get('kernel') is not None else ''
        out['initrd'] = _abs_path(boot['initrd'], 'boot.initrd') if boot.get('initrd') is not None else ''
        out['cmdline'] = _text(boot['cmdline'], 'boot.cmdline', allow_empty=True, single_line=True) if boot.get('cmdline') is not None else ''
        if (out['initrd'] or out['cmdline']) and not out['kernel']:
            raise ValueError('boot: initrd and cmdline need boot.kernel')
    for key, actions in (('on_poweroff', LIFECYCLE_ACTIONS), ('on_reboot', LIFECYCLE_ACTIONS), ('on_crash', CRASH_ACTIONS)):
        if get(key) is not None:
            out[key] = _choice(get(key), key, actions)
    if get('serial') is not None:
        serial = _text(get('serial'), 'serial')
        out['serial'] = serial if serial in ('pty', 'none') else _abs_path(serial, 'serial')
    if get('graphics') is not None:
        out['graphics'] = _choice(get('graphics'), 'graphics', ('none', 'vnc', 'spice'))
    if get('disks') is not None:
        if not isinstance(get('disks'), list):
            raise ValueError('disks: expected a list')
        out['disks'] = [normalize_disk(d, 'disks[%d]' % i) for i, d in enumerate(get('disks'))]
        devs = [d['dev'] for d in out['disks']]
        dup = sorted(set(d for d in devs if devs.count(d) > 1))
        if dup:
            raise ValueError('disks: target device(s) used more than once: %s' % ', '.join(dup))
    if get('interfaces') is not None:
        if not isinstance(get('interfaces'), list):
            raise ValueError('interfaces: expected a list')
        out['interfaces'] = [normalize_interface(n, 'interfaces[%d]' % i) for i, n in enumerate(get('interfaces'))]
        macs = [n['mac'] for n in out['interfaces'] if n['mac']]
        if len(macs) != len(set(macs)):
            raise ValueError('interfaces: the same mac is used more than once')
    if get('autostart') is not None:
        out['autostart'] = _bool(get('autostart'), 'autostart')
    return out


def spec_autostart(spec):
    """Return the declared ``autostart`` (True/False) or None; autostart is not part of the domain XML."""
    value = spec.get('autostart') if isinstance(spec, dict) else None
    return None if value is None else _bool(value, 'autostart')


# ---------------------------------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------------------------------

def _disk_element(disk):
    elem = ET.Element('disk', {'type': disk['type'], 'device': disk['device']})
    if disk.get('format'):
        _sub(elem, 'driver', name='qemu', type=disk['format'])
    if disk['type'] == 'volume':
        _sub(elem, 'source', pool=disk['pool'], volume=disk['volume'])
    elif disk['type'] == 'block' and disk.get('path'):
        _sub(elem, 'source', dev=disk['path'])
    elif disk.get('path'):
        _sub(elem, 'source', file=disk['path'])
    _sub(elem, 'target', dev=disk['dev'], bus=disk['bus'])
    if disk.get('readonly'):
        _sub(elem, 'readonly')
    if disk.get('serial'):
        _sub(elem, 'serial', disk['serial'])
    return elem


def _interface_element(nic):
    elem = ET.Element('interface', {'type': nic['type']})
    if nic.get('mac'):
        _sub(elem, 'mac', address=nic['mac'])
    if nic['type'] == 'network':
        _sub(elem, 'source', network=nic['source'])
    else:
        _sub(elem, 'source', bridge=nic['source'])
    _sub(elem, 'model', type=nic.get('model') or 'virtio')
    return elem


def _serial_elements(serial):
    if serial == 'none':
        return []
    kind = 'pty' if serial == 'pty' else 'file'
    ser = ET.Element('serial', {'type': kind})
    con = ET.Element('console', {'type': kind})
    if kind == 'file':
        _sub(ser, 'source', path=serial)
        _sub(con, 'source', path=serial)
    _sub(ser, 'target', port='0')
    _sub(con, 'target', type='serial', port='0')
    return [ser, con]


def _graphics_element(graphics):
    return ET.Element('graphics', {'type': graphics, 'autoport': 'yes', 'listen': '127.0.0.1'})


def disk_device_xml(disk_spec):
    """Return the ``<disk>`` device XML for one disk option (for ``attachDeviceFlags``/``detachDeviceFlags``)."""
    return _to_string(_disk_element(normalize_disk(disk_spec, 'disk')))


def interface_device_xml(nic_spec):
    """Return the ``<interface>`` device XML for one interface option (for hot-plug)."""
    return _to_string(_interface_element(normalize_interface(nic_spec, 'interface')))


def build_domain_xml(spec, metadata=None):
    """Build domain XML from a VM spec (see :func:`normalize_spec`); ``spec['xml']`` (raw XML) is returned re-serialised.

    ``metadata`` (a dict of :data:`METADATA_FIELDS`) adds the converge metadata element.  ``autostart`` is not
    part of the XML: use :func:`spec_autostart`.  Raises ``ValueError`` for invalid options.
    """
    spec = normalize_spec(spec)
    if 'xml' in spec:
        return _to_string(_parse(spec['xml'], 'xml'))
    val = dict(DEFAULTS)
    val.update(spec)
    root = ET.Element('domain', {'type': val['domain_type']})
    _sub(root, 'name', val['name'])
    if val.get('uuid'):
        _sub(root, 'uuid', val['uuid'])
    if val.get('title'):
        _sub(root, 'title', val['title'])
    if val.get('description'):
        _sub(root, 'description', val['description'])
    if metadata:
        _sub(root, 'metadata').append(_metadata_vm_element(metadata, namespaced=True))
    _sub(root, 'memory', str(val['memory']), unit='KiB')
    _sub(root, 'currentMemory', str(val['memory']), unit='KiB')
    _sub(root, 'vcpu', str(val['vcpus']), placement='static')
    os_elem = _sub(root, 'os', firmware='efi' if val['firmware'] == 'efi' else None)
    _sub(os_elem, 'type', 'hvm', arch=val['arch'], machine=val.get('machine'))
    for key in ('kernel', 'initrd', 'cmdline'):
        if val.get(key):
            _sub(os_elem, key, val[key])
    if val['arch'] in ('x86_64', 'i686'):
        features = _sub(root, 'features')
        _sub(features, 'acpi')
        _sub(features, 'apic')
    for key in ('on_poweroff', 'on_reboot', 'on_crash'):
        _sub(root, key, val[key])
    devices = _sub(root, 'devices')
    for disk in val.get('disks') or []:
        devices.append(_disk_element(disk))
    for nic in val.get('interfaces') or []:
        devices.append(_interface_element(nic))
    for elem in _serial_elements(val['serial']):
        devices.append(elem)
    if val['graphics'] != 'none':
        devices.append(_graphics_element(val['graphics']))
    return _to_string(root)


# ---------------------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------------------

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


def _interface_from_element(elem):
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
    root = _parse(xml)
    return [_disk_from_element(d) for d in root.findall('./devices/disk')]


def interfaces_in(xml):
    """Return the interfaces of a domain XML as dicts ``{type, source, model, mac}``."""
    root = _parse(xml)
    return [_interface_from_element(n) for n in root.findall('./devices/interface')]


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


def _model_from_xml(root):
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
        'interfaces': [_interface_from_element(n) for n in root.findall('./devices/interface')],
        'serial': _serial_of(devices),
        'graphics': graphics.get('type') if graphics is not None else 'none',
    }
    return model


def domain_model(xml):
    """Return the comparable fields of a domain XML as a dict (memory in KiB; disks/interfaces as lists of dicts)."""
    return _model_from_xml(_parse(xml))


# ---------------------------------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------------------------------

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


def _machine_family(machine):
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
        before = _to_string(same_tag[0]).strip() if same_tag else None
        changes.append(Change('%s%s[%d]' % (prefix, child.tag, index), before, _to_string(child).strip(), RESTART))


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
            changes.append(Change('disks[%s].xml' % dev, _to_string(have).strip(), _to_string(disk).strip(), RESTART))
    have_nics = have_devices.findall('interface') if have_devices is not None else []
    for index, nic in enumerate(want_devices.findall('interface')):
        if index >= len(have_nics):
            break
        drop = ('source', 'mac', 'model', 'target')
        if not _subset(_residual(nic, drop), _residual(have_nics[index], drop)):
            changes.append(Change('interfaces[%d].xml' % index, _to_string(have_nics[index]).strip(), _to_string(nic).strip(), RESTART))
    _compare_children(want_devices, have_devices, _MODELED_DEVICES, 'devices/', changes)


def _raw_desired_model(root):
    desired = _model_from_xml(root)
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
    have_root = _parse(actual_inactive_xml, 'actual XML')
    actual = _model_from_xml(have_root)
    changes = []
    raw = desired if isinstance(desired, str) else None
    if isinstance(desired, dict):
        spec = normalize_spec(desired)
        raw = spec.get('xml')
        if raw is None:
            _compare_models(spec, actual, changes)
            return Diff(changes)
    want_root = _parse(raw, 'xml')
    _compare_models(_raw_desired_model(want_root), actual, changes)
    _compare_children(want_root, have_root, _MODELED_TOP, '', changes)
    want_os = want_root.find('os')
    if want_os is not None:
        _compare_children(want_os, have_root.find('os'), _MODELED_OS, 'os/', changes)
    _compare_raw_devices(want_root, have_root, changes)
    return Diff(changes)


# ---------------------------------------------------------------------------------------------------------------------
# Merging
# ---------------------------------------------------------------------------------------------------------------------

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
    built = _disk_element(disk)
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
    if elem.get('type') != nic['type'] or _interface_from_element(elem)['source'] != nic['source']:
        elem.set('type', nic['type'])
        _remove_children(elem, 'source')
        built = _interface_element(nic).find('source')
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
                _insert_device(devices, _disk_element(disk), 'disk')
    if spec.get('interfaces') is not None:
        elems = devices.findall('interface')
        for index, nic in enumerate(spec['interfaces']):
            if index < len(elems):
                _update_interface(elems[index], nic)
            else:
                _insert_device(devices, _interface_element(nic), 'interface')
        for elem in elems[len(spec['interfaces']):]:
            devices.remove(elem)
    if spec.get('serial') is not None and spec['serial'] != actual['serial']:
        _remove_children(devices, 'serial')
        for con in devices.findall('console'):
            target = con.find('target')
            if target is None or target.get('type', 'serial') == 'serial':
                devices.remove(con)
        for elem in _serial_elements(spec['serial']):
            devices.append(elem)
    if spec.get('graphics') is not None and spec['graphics'] != actual['graphics']:
        _remove_children(devices, 'graphics')
        if spec['graphics'] != 'none':
            devices.append(_graphics_element(spec['graphics']))


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
        if _machine_family(spec['machine']) != _machine_family(actual['machine']):
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
    return _to_string(want_root)


def merge_into_inactive(actual_inactive_xml, spec):
    """Return the XML to redefine the domain with (``conn.defineXML``).

    Starts from libvirt's inactive XML and changes only the fields declared in ``spec``, so the uuid, MACs, PCI
    addresses, controllers, converge metadata and libvirt defaults are kept and a redefine never churns them.
    For raw XML (a string or ``spec['xml']``) the user's XML is used, completed with the uuid, MACs, addresses,
    controllers and converge metadata from the actual XML.  Raises ``ValueError`` if a declared uuid or name differs
    (that needs a new domain, not a redefine).
    """
    root = _parse(actual_inactive_xml, 'actual XML')
    if isinstance(spec, str):
        spec = {'xml': spec}
    spec = normalize_spec(spec)
    if 'xml' in spec:
        return _merge_raw(root, _parse(spec['xml'], 'xml'))
    actual = _model_from_xml(root)
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
    return _to_string(root)
