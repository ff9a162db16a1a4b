# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt volume declaration: sizes as Kubernetes quantities, the normalised volume and attachment declarations
(with their refusals, naming the field), and the manifests they become (PersistentVolumeClaim, DataVolume, the
hotplug volume and disk).
"""

from __future__ import annotations

import copy
import re

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._common.units import parse_size
# which option belongs to which backend, and the KubeVirt choices (written once, beside the argument spec)
from ansible_collections.converge.virt.plugins.module_utils._common.volume_options import ACCESS_MODES, LIBVIRT_ONLY, VOLUME_MODES

MANAGED_BY = {'app.kubernetes.io/managed-by': 'converge.virt'}
BUSES = ('scsi', 'virtio', 'sata')
DEFAULT_BUS = 'scsi'
CAPACITY_MAX = 64 * 1024 ** 5   # as on libvirt: 64 PiB
_NAME = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z')
_SERIAL = re.compile(r'^[A-Za-z0-9_.+-]{1,64}\Z')
_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z')
_QUANTITY = re.compile(r'^([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?\Z')
_FACTORS = {None: 1, 'Ki': 1024, 'Mi': 1024 ** 2, 'Gi': 1024 ** 3, 'Ti': 1024 ** 4, 'Pi': 1024 ** 5, 'Ei': 1024 ** 6,
            'k': 1000, 'M': 1000 ** 2, 'G': 1000 ** 3, 'T': 1000 ** 4, 'P': 1000 ** 5, 'E': 1000 ** 6}


# ------------------------------------------------------------------ sizes
def quantity_bytes(value):
    """Bytes of a Kubernetes quantity string ('10Gi', '1G', '1073741824'), or None when it is not a whole one."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    return int(match.group(1)) * _FACTORS[match.group(2)]


def capacity_of(value, field='capacity'):
    """``(bytes, quantity)`` of a declared capacity.

    A Kubernetes quantity (``10Gi``, ``512Mi``, ``1G`` = 10^9) is read as
    Kubernetes reads it and written as given; a size with a B unit (``10GiB``,
    ``1GB``) or a bare number of bytes is converted to the largest exact binary
    unit.
    """
    if isinstance(value, str) and _QUANTITY.match(value.strip()) and not value.strip().isdigit():
        size = quantity_bytes(value.strip())
        if not size:
            raise InvalidDeclaration(field, 'size must be greater than zero, got %r' % value)
        if size > CAPACITY_MAX:
            raise InvalidDeclaration(field, 'size must be at most 64PiB, got %r' % value)
        return size, value.strip()
    try:
        size = parse_size(value, field=field, maximum=CAPACITY_MAX)
    except ValueError as exc:
        raise InvalidDeclaration(field, str(exc).split(':', 1)[-1].strip()) from None
    return size, bytes_quantity(size)


def bytes_quantity(size):
    """A quantity string for ``size`` bytes (``10Gi``, or plain bytes when no binary unit divides it)."""
    for unit in ('Ti', 'Gi', 'Mi', 'Ki'):
        if size % _FACTORS[unit] == 0:
            return '%d%s' % (size // _FACTORS[unit], unit)
    return str(size)


# ------------------------------------------------------------------ declarations
def _ref(value, field, what):
    """``name`` or ``namespace/name`` -> {'name': ..., 'namespace': ...} (namespace only when given)."""
    if not isinstance(value, str):
        raise InvalidDeclaration(field, 'expected a %s name or namespace/name, got %r' % (what, value))
    namespace, _sep, name = value.rpartition('/')
    if not _NAME.match(name) or (namespace and not _LABEL.match(namespace)):
        raise InvalidDeclaration(field, 'expected a %s name or namespace/name, got %r' % (what, value))
    ref = {'name': name}
    if namespace:
        ref['namespace'] = namespace
    return ref


def source_ref(spec, field):
    """The CDI ``sourceRef`` of a declaration (a DataSource to clone), or None."""
    value = spec.get('clone_from_datasource')
    if value is None:
        return None
    given = [key for key in ('import_from', 'clone_from') if spec.get(key)]
    if given:
        raise InvalidDeclaration(field + 'clone_from_datasource', 'give only one of import_from, clone_from and clone_from_datasource '
                                 '(%s is set too)' % given[0])
    ref = _ref(value, field + 'clone_from_datasource', 'DataSource')
    return dict(kind='DataSource', **ref)


def _source(spec, field):
    """The CDI source of a declaration (dict), or None for a plain claim (or a DataSource clone: see :func:`source_ref`)."""
    url, clone = spec.get('import_from'), spec.get('clone_from')
    if url and clone:
        raise InvalidDeclaration(field + 'import_from', 'give only one of import_from and clone_from')
    if url:
        if url.startswith(('http://', 'https://')):
            return {'http': {'url': url}}
        if url.startswith('docker://'):
            return {'registry': {'url': url}}
        raise InvalidDeclaration(field + 'import_from', 'on kubevirt this is an http(s):// URL or a docker:// registry image, got %r' % redact_uri(url))
    if clone:
        return {'pvc': _ref(clone, field + 'clone_from', 'claim')}
    return None


def normalize_attachment(att, index, field):
    """One declared attachment: vm, dev (the disk and volume name in the VM), bus, readonly, serial."""
    where = '%sattachments[%d]' % (field, index)
    vm, dev = att.get('vm'), att.get('dev')
    if not vm or not _NAME.match(vm):
        raise InvalidDeclaration(where + '.vm', 'must be the name of a VirtualMachine, got %r' % vm)
    if not dev or not _LABEL.match(dev):
        raise InvalidDeclaration(where + '.dev', 'on kubevirt this is the disk name in the VM, a DNS label (a-z, 0-9, -), got %r' % dev)
    bus = att.get('bus')
    if bus is not None and bus not in BUSES:
        raise InvalidDeclaration(where + '.bus', 'hotplugged disks on kubevirt take bus %s, got %r' % (', '.join(BUSES), bus))
    serial = att.get('serial')
    if serial is not None and not (isinstance(serial, str) and _SERIAL.match(serial)):
        raise InvalidDeclaration(where + '.serial', 'may only contain letters, digits and _.+- (at most 64), got %r' % (serial,))
    return {'vm': vm, 'dev': dev, 'bus': bus, 'readonly': bool(att.get('readonly')), 'serial': serial}


def normalize_volume(decl, field='', defaults=None):
    """A validated declaration: name, state, capacity (bytes), quantity, kind, source, storage options, attachments.

    ``field``: prefix of field names in errors (``volumes[2].``). Raises
    :class:`InvalidDeclaration` naming the field; nothing is read or written.
    """
    spec = dict(defaults or {})
    spec.update(dict((k, v) for k, v in decl.items() if v is not None))
    for key in LIBVIRT_ONLY:
        if spec.get(key) is not None:
            raise InvalidDeclaration(field + key, 'is a libvirt option and is not supported with backend kubevirt')
    name = spec.get('name')
    if not name or len(name) > 253 or not _NAME.match(name):
        raise InvalidDeclaration(field + 'name', 'must be a claim name (lower case letters, digits, - and .), got %r' % name)
    state = spec.get('state') or 'present'
    capacity = quantity = None
    if spec.get('capacity') is not None:
        capacity, quantity = capacity_of(spec['capacity'], field + 'capacity')
    ref = source_ref(spec, field)
    source = _source(spec, field)
    data_volume = spec.get('data_volume')
    if data_volume is False and (source is not None or ref is not None):
        raise InvalidDeclaration(field + 'data_volume', 'import_from, clone_from and clone_from_datasource need a DataVolume (data_volume must not be false)')
    kind = 'DataVolume' if (data_volume or source is not None or ref is not None) else 'PersistentVolumeClaim'
    if kind == 'DataVolume' and source is None and ref is None:
        source = {'blank': {}}
    modes = spec.get('access_modes')
    if modes is not None:
        bad = [m for m in modes if m not in ACCESS_MODES]
        if bad or not modes:
            raise InvalidDeclaration(field + 'access_modes', 'each must be one of %s, got %s' % (', '.join(ACCESS_MODES), modes))
    if spec.get('volume_mode') is not None and spec['volume_mode'] not in VOLUME_MODES:
        raise InvalidDeclaration(field + 'volume_mode', 'must be Filesystem or Block, got %r' % spec['volume_mode'])
    attachments = None
    if spec.get('attachments') is not None:
        attachments = [normalize_attachment(a, i, field) for i, a in enumerate(spec['attachments'])]
        seen = set()
        for att in attachments:
            if att['vm'] in seen:
                raise InvalidDeclaration(field + 'attachments', 'volume %s is declared twice for VM %s' % (name, att['vm']))
            seen.add(att['vm'])
    return {'name': name, 'key': name, 'state': state, 'capacity': capacity, 'quantity': quantity, 'kind': kind, 'source': source, 'source_ref': ref,
            'storage_class': spec.get('storage_class'), 'access_modes': list(modes) if modes else None,
            'volume_mode': spec.get('volume_mode'), 'attachments': attachments}


def check_create(spec, field=''):
    """What a new claim or DataVolume needs (checked when the plan creates it)."""
    # a clone (of a claim or of a DataSource) takes the size of its source when none is declared (CDI storage API)
    if spec['capacity'] is None and 'pvc' not in (spec['source'] or {}) and not spec.get('source_ref'):
        return {'volume': spec['key'], 'field': field + 'capacity', 'reason': 'capacity is required to create %s %s' % (spec['kind'], spec['key'])}
    return None


# ------------------------------------------------------------------ manifests
def claim_manifest(spec, namespace):
    """The PersistentVolumeClaim to create."""
    body = {'accessModes': spec['access_modes'] or ['ReadWriteOnce'], 'resources': {'requests': {'storage': spec['quantity']}}}
    if spec['storage_class']:
        body['storageClassName'] = spec['storage_class']
    if spec['volume_mode']:
        body['volumeMode'] = spec['volume_mode']
    return {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim',
            'metadata': {'name': spec['name'], 'namespace': namespace, 'labels': dict(MANAGED_BY)}, 'spec': body}


def datavolume_manifest(spec, namespace):
    """The CDI DataVolume to create (``spec.storage``: CDI fills in what is not declared from the storage profile)."""
    storage = {}
    if spec['quantity']:
        storage['resources'] = {'requests': {'storage': spec['quantity']}}
    if spec['access_modes']:
        storage['accessModes'] = spec['access_modes']
    if spec['storage_class']:
        storage['storageClassName'] = spec['storage_class']
    if spec['volume_mode']:
        storage['volumeMode'] = spec['volume_mode']
    if spec.get('source_ref'):
        # CDI resolves the DataSource to its claim (or snapshot) and clones it; the source is only read
        ref = dict(spec['source_ref'])
        ref.setdefault('namespace', namespace)
        body = {'sourceRef': ref, 'storage': storage}
    else:
        source = copy.deepcopy(spec['source'])
        if 'pvc' in source and 'namespace' not in source['pvc']:
            source['pvc']['namespace'] = namespace
        body = {'source': source, 'storage': storage}
    return {'apiVersion': 'cdi.kubevirt.io/v1beta1', 'kind': 'DataVolume',
            'metadata': {'name': spec['name'], 'namespace': namespace, 'labels': dict(MANAGED_BY)}, 'spec': body}


def hotplug_volume(claim, kind, dev):
    """The VM volume of a hotplugged claim."""
    if kind == 'DataVolume':
        return {'name': dev, 'dataVolume': {'name': claim, 'hotpluggable': True}}
    return {'name': dev, 'persistentVolumeClaim': {'claimName': claim, 'hotpluggable': True}}


def hotplug_disk(dev, bus, readonly, serial):
    """The VM disk of a hotplugged claim."""
    target = {'bus': bus or DEFAULT_BUS}
    if readonly:
        target['readonly'] = True
    disk = {'name': dev, 'disk': target}
    if serial:
        disk['serial'] = serial
    return disk
