# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simple, documented options of a VM (a *spec*): validation and canonical form.

Pure Python, no XML.  :func:`normalize_spec` validates a spec and returns its canonical form (``ValueError``
naming the field on bad input); :func:`normalize_disk` / :func:`normalize_interface` do the same for one device.
The option tables (buses, formats, models, lifecycle actions, limits) live here too.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import re

from ansible_collections.converge.virt.plugins.module_utils._common.units import KIB, MIB, TIB, parse_size
from ansible_collections.converge.virt.plugins.module_utils._libvirt.xml_util import checked_text


SPEC_KEYS = ('name', 'uuid', 'title', 'description', 'vcpus', 'memory', 'machine', 'arch', 'domain_type', 'firmware', 'boot',
             'disks', 'interfaces', 'serial', 'graphics', 'on_poweroff', 'on_reboot', 'on_crash', 'autostart', 'xml', 'guest_agent')

# where a declaration carries its cloud-init seed (a .cloud_init.Seed, set by vm_converge): not in SPEC_KEYS, so
# normalize_spec ignores it
SEED_KEY = 'cloud_init'

DEFAULTS = {
    'arch': 'x86_64', 'domain_type': 'kvm', 'vcpus': 1, 'memory': 1024 * KIB,  # memory in KiB (1 GiB)
    'firmware': 'bios', 'serial': 'pty', 'graphics': 'none', 'guest_agent': False,
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

_DEV_RE = re.compile(r'^(vd|sd|hd|xvd)[a-z]{1,3}\Z')
_MAC_RE = re.compile(r'^([0-9a-f]{2}:){5}[0-9a-f]{2}\Z')
_TOKEN_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._+-]*\Z')
_SERIAL_RE = re.compile(r'^[A-Za-z0-9_.+ -]{1,64}\Z')
# what a pool or volume name of a disk source can never contain (a slash would leave the pool's directory)
_CONTROL_RE = re.compile(r'[\x00-\x1f\x7f]')


def _token(value, field):
    value = checked_text(value, field)
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
    value = checked_text(value, field)
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
    dev = checked_text(dev, field + '.dev')
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
        out['pool'] = checked_text(pool, field + '.source.pool')
        out['volume'] = checked_text(volume, field + '.source.volume')
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
        out['serial'] = checked_text(disk['serial'], field + '.serial')
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
           'source': checked_text(network if network is not None else bridge, field + ('.network' if network is not None else '.bridge')),
           'model': _choice(nic.get('model') or 'virtio', field + '.model', NIC_MODELS), 'mac': None}
    if nic.get('mac') is not None:
        mac = checked_text(nic['mac'], field + '.mac').lower()
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
        out['xml'] = checked_text(get('xml'), 'xml')
        if get('autostart') is not None:
            out['autostart'] = _bool(get('autostart'), 'autostart')
        return out
    if get('name') is None:
        raise ValueError('name: is required')
    out['name'] = checked_text(get('name'), 'name', single_line=True)
    if '/' in out['name']:
        raise ValueError("name: must not contain '/'")
    if get('uuid') is not None:
        import uuid  # pylint: disable=import-outside-toplevel  # only when a uuid is declared
        try:
            out['uuid'] = str(uuid.UUID(str(get('uuid'))))
        except ValueError:
            raise ValueError('uuid: %r is not a UUID' % (get('uuid'),)) from None
    if get('title') is not None:
        out['title'] = checked_text(get('title'), 'title', allow_empty=True, single_line=True)
    if get('description') is not None:
        # XML parsers turn CR LF and CR into LF: normalise so that the description round-trips.
        out['description'] = checked_text(get('description'), 'description', allow_empty=True).replace('\r\n', '\n').replace('\r', '\n')
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
        out['cmdline'] = checked_text(boot['cmdline'], 'boot.cmdline', allow_empty=True, single_line=True) if boot.get('cmdline') is not None else ''
        if (out['initrd'] or out['cmdline']) and not out['kernel']:
            raise ValueError('boot: initrd and cmdline need boot.kernel')
    for key, actions in (('on_poweroff', LIFECYCLE_ACTIONS), ('on_reboot', LIFECYCLE_ACTIONS), ('on_crash', CRASH_ACTIONS)):
        if get(key) is not None:
            out[key] = _choice(get(key), key, actions)
    if get('serial') is not None:
        serial = checked_text(get('serial'), 'serial')
        out['serial'] = serial if serial in ('pty', 'none') else _abs_path(serial, 'serial')
    if get('graphics') is not None:
        out['graphics'] = _choice(get('graphics'), 'graphics', ('none', 'vnc', 'spice'))
    if get('guest_agent') is not None:
        out['guest_agent'] = _bool(get('guest_agent'), 'guest_agent')
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
