# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VirtualMachine manifest of a vm declaration on KubeVirt (pure): the declared VM (memory and CPU as Kubernetes
quantities, disks and volumes, interfaces and networks, labels), its create manifest, the differences from what
the API server has, and the merge patch of an update. Refusals name the field; libvirt's options are refused.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.units import parse_size
# the options of the vm module that only the libvirt backend understands
from ansible_collections.converge.virt.plugins.module_utils._common.vm_args import LIBVIRT_DEFINITION_KEYS as LIBVIRT_ONLY
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import DNS_LABEL as _DNS_LABEL, DNS_SUBDOMAIN as _DNS_SUBDOMAIN

API_VERSION = 'kubevirt.io/v1'
DISK_LIBVIRT_ONLY = ('dev', 'target', 'source', 'pool', 'volume', 'path', 'format', 'device')
_QUANTITY = re.compile(r'^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\Z')
MEMORY_MAX = 64 * 1024 ** 4  # as on libvirt (domain_spec.MEMORY_MAX)
_LABEL_VALUE = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z')
_QUANTITY_FACTORS = {None: 1, 'Ki': 1024, 'Mi': 1024 ** 2, 'Gi': 1024 ** 3, 'Ti': 1024 ** 4, 'Pi': 1024 ** 5, 'Ei': 1024 ** 6,
                     'k': 1000, 'M': 1000 ** 2, 'G': 1000 ** 3, 'T': 1000 ** 4, 'P': 1000 ** 5, 'E': 1000 ** 6, 'm': 0.001}


def quantity_bytes(value):
    """Bytes of a Kubernetes quantity ('64Mi', '1G', 1073741824), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    match = _QUANTITY.match(str(value).strip()) if value is not None else None
    if not match:
        return None
    return float(match.group(1)) * _QUANTITY_FACTORS[match.group(2)]


def memory_quantity(value, field='memory'):
    """The declared memory as a Kubernetes quantity: a quantity is kept, '2GiB' / 512 (MiB) are converted."""
    if isinstance(value, str) and _QUANTITY.match(value.strip()) and value.strip()[-1:] == 'i':
        if not 1024 * 1024 <= quantity_bytes(value) <= MEMORY_MAX:
            raise InvalidDeclaration(field, '%r is out of range (1Mi to 64Ti)' % (value,))
        return value.strip()
    try:
        size = parse_size(value, field=field, default_unit='MiB', minimum=1024 * 1024, maximum=MEMORY_MAX)
    except ValueError as exc:
        raise InvalidDeclaration(field, str(exc).split(':', 1)[-1].strip())
    for unit, factor in (('Gi', 1024 ** 3), ('Mi', 1024 ** 2), ('Ki', 1024)):
        if size % factor == 0:
            return '%d%s' % (size // factor, unit)
    return str(size)


def _clean(item):
    return dict((k, v) for k, v in (item or {}).items() if v is not None)


def _disk_and_volume(index, disk):
    field = 'disks[%d]' % index
    disk = _clean(disk)
    for key in DISK_LIBVIRT_ONLY:
        if key in disk:
            raise InvalidDeclaration('%s.%s' % (field, key), 'is a libvirt option; on kubevirt a disk takes name, bus, readonly, serial and '
                                     'one of image, claim or data_volume')
    sources = [k for k in ('image', 'claim', 'data_volume') if disk.get(k)]
    if len(sources) != 1:
        raise InvalidDeclaration(field, 'give exactly one of image (containerDisk), claim (persistentVolumeClaim) or data_volume')
    name = disk.get('name') or 'disk%d' % index
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
        raise InvalidDeclaration('%s.name' % field, 'must be a DNS label of at most 63 characters (lower case letters, digits, -), got %r' % (name,))
    target = {'bus': disk.get('bus') or 'virtio'}
    if disk.get('readonly') is not None:
        target['readonly'] = bool(disk['readonly'])
    device = {'name': name, 'disk': target}
    if disk.get('serial'):
        device['serial'] = disk['serial']
    source = sources[0]
    if source == 'image':
        volume = {'name': name, 'containerDisk': {'image': disk['image']}}
    elif source == 'claim':
        volume = {'name': name, 'persistentVolumeClaim': {'claimName': disk['claim']}}
    else:
        volume = {'name': name, 'dataVolume': {'name': disk['data_volume']}}
    return device, volume


def _interface_and_network(index, iface):
    iface = _clean(iface)
    if iface.get('bridge') or iface.get('network') not in (None, 'pod', 'default'):
        raise InvalidDeclaration('interfaces[%d]' % index, 'on kubevirt the simple form supports the pod network (masquerade); '
                                 'put other networks in spec')
    name = iface.get('name') or ('default' if index == 0 else 'net%d' % index)
    device = {'name': name, 'masquerade': {}}
    if iface.get('model'):
        device['model'] = iface['model']
    if iface.get('mac'):
        device['macAddress'] = iface['mac']
    return device, {'name': name, 'pod': {}}


def _deep_merge(base, extra):
    result = copy.deepcopy(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def declared_vm(spec, namespace):
    """The VirtualMachine the user declared: only the fields they set (plus the name/kind).

    ``spec``: name, vcpus, memory, disks, interfaces, instancetype, preference,
    data_volume_templates, labels, spec (a passthrough merged into spec).
    Raises :class:`InvalidDeclaration` naming the field.
    """
    name = spec.get('name')
    # at most 63: the name is also the value of the kubevirt.io/vm label of the instance
    if not isinstance(name, str) or len(name) > 63 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise InvalidDeclaration('name', 'must be a DNS subdomain name of at most 63 characters (lower case letters, digits, - and .), got %r' % (name,))
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        raise InvalidDeclaration('namespace', 'must be a DNS label (lower case letters, digits, -), got %r' % (namespace,))
    for key in LIBVIRT_ONLY:
        if spec.get(key) is not None:
            raise InvalidDeclaration(key, 'is a libvirt option and is not supported with backend kubevirt')
    body = {}
    template = {}
    domain = {}
    if spec.get('vcpus') is not None:
        if spec['vcpus'] < 1:
            raise InvalidDeclaration('vcpus', 'must be at least 1, got %d' % spec['vcpus'])
        domain['cpu'] = {'cores': spec['vcpus']}
    if spec.get('memory') is not None:
        domain['resources'] = {'requests': {'memory': memory_quantity(spec['memory'])}}
    volumes = []
    if spec.get('disks') is not None:
        pairs = [_disk_and_volume(i, d) for i, d in enumerate(spec['disks'])]
        names = [d['name'] for d, _v in pairs]
        if len(set(names)) != len(names):
            raise InvalidDeclaration('disks', 'disk names must be unique, got %s' % ', '.join(names))
        domain.setdefault('devices', {})['disks'] = [d for d, _v in pairs]
        volumes = [v for _d, v in pairs]
    if spec.get('interfaces') is not None:
        pairs = [_interface_and_network(i, n) for i, n in enumerate(spec['interfaces'])]
        domain.setdefault('devices', {})['interfaces'] = [d for d, _n in pairs]
        template['networks'] = [n for _d, n in pairs]
    if domain:
        template['domain'] = domain
    if spec.get('disks') is not None:
        template['volumes'] = volumes
    if template:
        body['template'] = {'spec': template}
    if spec.get('instancetype'):
        body['instancetype'] = {'name': spec['instancetype'], 'kind': 'VirtualMachineClusterInstancetype'}
    if spec.get('preference'):
        body['preference'] = {'name': spec['preference'], 'kind': 'VirtualMachineClusterPreference'}
    if spec.get('data_volume_templates') is not None:
        dvts = []
        for index, dvt in enumerate(spec['data_volume_templates']):
            if not isinstance(dvt, dict) or not (dvt.get('metadata') or {}).get('name') or not isinstance(dvt.get('spec'), dict):
                raise InvalidDeclaration('data_volume_templates[%d]' % index, 'needs metadata.name and spec')
            dvts.append(dvt)
        body['dataVolumeTemplates'] = dvts
    if spec.get('spec') is not None:
        if not isinstance(spec['spec'], dict):
            raise InvalidDeclaration('spec', 'must be a dict (merged into the VirtualMachine spec)')
        for key in ('runStrategy', 'running'):
            if key in spec['spec']:
                raise InvalidDeclaration('spec.%s' % key, 'power is declared with state, not in spec')
        body = _deep_merge(body, spec['spec'])
    manifest = {'apiVersion': API_VERSION, 'kind': 'VirtualMachine', 'metadata': {'name': name, 'namespace': namespace}, 'spec': body}
    if spec.get('labels'):
        for key, value in spec['labels'].items():
            prefix, _slash, short = key.rpartition('/') if isinstance(key, str) else ('', '', None)
            if not short or len(short) > 63 or not _LABEL_VALUE.fullmatch(short) or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))):
                raise InvalidDeclaration('labels', '%r is not a valid label key ([prefix/]name: letters, digits, -_. ; at most 63)' % (key,))
            if not isinstance(value, str) or len(value) > 63 or (value and not _LABEL_VALUE.fullmatch(value)):
                raise InvalidDeclaration('labels.%s' % key, '%r is not a valid label value (letters, digits, -_. ; at most 63)' % (value,))
        manifest['metadata']['labels'] = dict(spec['labels'])
    return manifest


def manifest_for_create(declared):
    """The VirtualMachine to create: the declaration plus what KubeVirt needs (Halted, a template, labels)."""
    body = copy.deepcopy(declared)
    spec = body['spec']
    spec['runStrategy'] = 'Halted'
    template = spec.setdefault('template', {})
    template.setdefault('metadata', {}).setdefault('labels', {}).setdefault('kubevirt.io/vm', body['metadata']['name'])
    tspec = template.setdefault('spec', {})
    domain = tspec.setdefault('domain', {})
    domain.setdefault('devices', {})
    if not spec.get('instancetype') and 'memory' not in domain and 'resources' not in domain:
        raise InvalidDeclaration('memory', 'is required to create a VM without an instancetype')
    return body


def _named(items):
    return isinstance(items, list) and all(isinstance(i, dict) and 'name' in i for i in items)


def _same_scalar(want, have):
    if want == have:
        return True
    if isinstance(want, (str, int)) and isinstance(have, (str, int)) and not isinstance(want, bool):
        want_q, have_q = quantity_bytes(want), quantity_bytes(have)
        return want_q is not None and have_q is not None and want_q == have_q
    return False


def declared_differences(want, have, path='spec'):
    """Changes between the declared fields and the object: list of {path, before, after}.

    Only what is declared is compared: keys the user did not set, and items a
    webhook added inside a declared dict, are never changes. Lists of named
    items are compared by name (an item that is not declared is kept).
    """
    changes = []
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [{'path': path, 'before': have, 'after': want}]
        for key in sorted(want):
            changes.extend(declared_differences(want[key], have.get(key), '%s.%s' % (path, key)))
        return changes
    if _named(want) and (have is None or _named(have)):
        existing = dict((i['name'], i) for i in have or [])
        for item in want:
            changes.extend(declared_differences(item, existing.get(item['name']), '%s[%s]' % (path, item['name'])))
        return changes
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return [{'path': path, 'before': have, 'after': want}]
        for index, (one, other) in enumerate(zip(want, have)):
            changes.extend(declared_differences(one, other, '%s[%d]' % (path, index)))
        return changes
    if not _same_scalar(want, have):
        return [{'path': path, 'before': have, 'after': want}]
    return []


def merged_for_patch(want, have):
    """The merge-patch value of ``want`` over ``have``: named lists merged by name (JSON merge patch replaces lists)."""
    if isinstance(want, dict):
        have = have if isinstance(have, dict) else {}
        return dict((k, merged_for_patch(v, have.get(k))) for k, v in want.items())
    if _named(want) and _named(have or []):
        declared = dict((i['name'], i) for i in want)
        result = []
        for item in have or []:
            if item['name'] in declared:
                result.append(_deep_merge(item, declared.pop(item['name'])))
            else:
                result.append(item)
        result.extend(i for i in want if i['name'] in declared)
        return result
    return copy.deepcopy(want)
