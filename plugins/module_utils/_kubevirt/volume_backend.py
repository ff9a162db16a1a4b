# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt backend of the volume modules: PersistentVolumeClaims, DataVolumes and hotplug.

The same planner as libvirt decides (``_phase.volumes.plan_volumes``): this
file turns a namespace's claims, DataVolumes, VirtualMachines and instances
into the planner's actual world, and runs the operations it returns:

* ``create_volume``: a PersistentVolumeClaim, or a CDI DataVolume (source
  http, registry, pvc clone or blank), waiting for Bound / Succeeded;
* ``grow_volume``: ``spec.resources.requests.storage`` of the claim, waiting
  for the resizer (``status.capacity``); never a smaller size (the planner
  refuses it, naming the current size);
* ``delete_volume``: the DataVolume (its claim is garbage collected) or the
  claim; refused by the planner while a VM or instance references it;
* ``attach_config`` / ``attach_live``: the ``addvolume`` subresource of the
  VirtualMachine (persisted in ``spec.template`` and plugged into the running
  instance), or of the instance alone; for a stopped VM a JSON patch of
  ``spec.template`` guarded by ``resourceVersion``; a hotplug is waited for
  through the volume phases Pending, Bound, AttachedToNode, MountedToPod, Ready;
* ``detach_live`` / ``detach_config``: ``removevolume`` likewise, waiting for
  the instance to release the volume.

Attach and detach take the VM's task (``attach_volume`` / ``detach_volume`` of
the action table, record in the VM's annotations), as on libvirt. Check mode
sends every write with ``dryRun=All``, so the API server validates the plan,
and predicts the result with ``apply_operation``.
"""

from __future__ import annotations

import copy
import re
import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, InvalidDeclaration, WaitTimeout
from ansible_collections.converge.virt.plugins.module_utils._common import journal, volume_driver
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import CDI_API, CORE_API, KUBEVIRT_API, SUBRESOURCE_API, ApiStatusError, Conflict
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import retry_unavailable
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._common.units import parse_size
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import ActualVolume, Attachment
from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
# which option belongs to which backend, and the KubeVirt choices (written once, beside the argument spec)
from ansible_collections.converge.virt.plugins.module_utils._common.volume_options import ACCESS_MODES, LIBVIRT_ONLY, VOLUME_MODES
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_id

STORAGE_API = '/apis/storage.k8s.io/v1'
MANAGED_BY = {'app.kubernetes.io/managed-by': 'converge.virt'}
# the size the user asked for, kept on a claim we grew (a DataVolume's spec is immutable)
REQUESTED_ANNOTATION = 'converge.virt/requested-storage'
HOTPLUG_PHASES = ('Pending', 'Bound', 'AttachedToNode', 'MountedToPod', 'Ready')
DV_DONE_PHASES = ('Succeeded', 'WaitForFirstConsumer', 'PendingPopulation')
VMI_FINAL_PHASES = ('Succeeded', 'Failed')
BUSES = ('scsi', 'virtio', 'sata')
DEFAULT_BUS = 'scsi'
DEFAULT_WAIT_TIMEOUT = 300
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


# ------------------------------------------------------------------ observation
def volume_claim(volume):
    """Claim name of a VM/VMI volume (persistentVolumeClaim or dataVolume), or None."""
    if isinstance(volume.get('persistentVolumeClaim'), dict):
        return volume['persistentVolumeClaim'].get('claimName')
    if isinstance(volume.get('dataVolume'), dict):
        return volume['dataVolume'].get('name')
    return None


def is_hotpluggable(volume):
    """The volume is a hotplug volume."""
    return bool(_get(volume, 'persistentVolumeClaim', 'hotpluggable') or _get(volume, 'dataVolume', 'hotpluggable'))


def _disk_fields(disks, name):
    disk = next((d for d in disks or [] if isinstance(d, dict) and d.get('name') == name), None) or {}
    target = disk.get('disk') or disk.get('lun') or disk.get('cdrom') or {}
    return target.get('bus'), bool(target.get('readonly')), disk.get('serial')


def instance_running(vmi):
    """The instance exists and is not final nor being deleted (its volumes are live)."""
    return vmi is not None and _get(vmi, 'status', 'phase') not in VMI_FINAL_PHASES and not _get(vmi, 'metadata', 'deletionTimestamp')


def hotplug_phase(vmi, dev):
    """The hotplug phase of disk ``dev`` in the instance's volumeStatus, or None."""
    for entry in _get(vmi, 'status', 'volumeStatus') or []:
        if entry.get('name') == dev:
            return entry.get('phase') or ('Ready' if not entry.get('hotplugVolume') else 'Pending')
    return None


def actual_attachments(vms, vmis):
    """Every claim plugged into a VM of the namespace: (Attachment list, extra facts per (vm, dev)).

    ``persistent``: in ``spec.template`` of the VirtualMachine; ``live``: in the
    spec of its running instance. Extra facts: hotpluggable, hotplug phase.
    """
    found, extra = {}, {}
    for name, vm in vms.items():
        vmi = vmis.get(name)
        if vmi is not None:
            refs = _get(vmi, 'metadata', 'ownerReferences') or []
            if refs and not any(r.get('uid') == _get(vm, 'metadata', 'uid') for r in refs):
                vmi = None
        running = instance_running(vmi)
        tspec = _get(vm, 'spec', 'template', 'spec') or {}
        tdisks = _get(tspec, 'domain', 'devices', 'disks')
        for vol in tspec.get('volumes') or []:
            claim = volume_claim(vol) if isinstance(vol, dict) else None
            if claim:
                bus, readonly, serial = _disk_fields(tdisks, vol.get('name'))
                found[(name, vol['name'], claim)] = dict(vm=name, target=vol['name'], volume=claim, readonly=readonly, bus=bus, serial=serial,
                                                         persistent=True, live=False, vm_running=running)
                extra[(name, vol['name'])] = {'hotpluggable': is_hotpluggable(vol), 'hotplug_phase': None}
        if not running:
            continue
        ispec = vmi.get('spec') or {}
        idisks = _get(ispec, 'domain', 'devices', 'disks')
        for vol in ispec.get('volumes') or []:
            claim = volume_claim(vol) if isinstance(vol, dict) else None
            if not claim:
                continue
            key = (name, vol['name'], claim)
            if key not in found:
                bus, readonly, serial = _disk_fields(idisks, vol.get('name'))
                found[key] = dict(vm=name, target=vol['name'], volume=claim, readonly=readonly, bus=bus, serial=serial,
                                  persistent=False, vm_running=running)
            found[key]['live'] = True
            facts = extra.setdefault((name, vol['name']), {'hotpluggable': is_hotpluggable(vol)})
            facts['hotpluggable'] = facts['hotpluggable'] or is_hotpluggable(vol)
            facts['hotplug_phase'] = hotplug_phase(vmi, vol['name']) if is_hotpluggable(vol) else None
    return [Attachment(**found[k]) for k in sorted(found)], extra


class NamespaceVolumes:
    """Claims, DataVolumes, VMs and instances of a namespace, each read with one list call."""

    def __init__(self, client, namespace):
        self.client = client
        self.namespace = namespace
        self.refresh()

    def refresh(self):
        """Read everything again."""
        ns, client = self.namespace, self.client
        self.pvcs = dict((_get(o, 'metadata', 'name'), o) for o in client.list(CORE_API, ns, 'persistentvolumeclaims'))
        self.dvs = dict((_get(o, 'metadata', 'name'), o) for o in client.list(CDI_API, ns, 'datavolumes'))
        self.vms = dict((_get(o, 'metadata', 'name'), o) for o in client.list(KUBEVIRT_API, ns, 'virtualmachines'))
        self.vmis = dict((_get(o, 'metadata', 'name'), o) for o in client.list(KUBEVIRT_API, ns, 'virtualmachineinstances'))
        self.attachments, self.facts = actual_attachments(self.vms, self.vmis)
        return self

    def claim_exists(self, namespace, name):
        """Whether claim ``name`` exists in ``namespace`` (this namespace from the snapshot, another one asked)."""
        if namespace in (None, self.namespace):
            return name in self.pvcs
        return self.client.get(CORE_API, namespace, 'persistentvolumeclaims', name) is not None

    def datasource_exists(self, namespace, name):
        """Whether CDI DataSource ``name`` exists in ``namespace`` (this namespace when None); read only when a clone needs it."""
        return self.client.get(CDI_API, namespace or self.namespace, 'datasources', name) is not None

    def names(self):
        """Every claim or DataVolume name of the namespace."""
        return sorted(set(self.pvcs) | set(self.dvs))

    def users(self, key):
        """VM names referencing claim ``key`` (template or instance)."""
        return frozenset(a.vm for a in self.attachments if a.volume == key)

    def capacity(self, key):
        """The size the claim was asked for, in bytes (what a declaration is compared with), or None."""
        pvc, dv = self.pvcs.get(key), self.dvs.get(key)
        noted = quantity_bytes(_get(pvc, 'metadata', 'annotations', REQUESTED_ANNOTATION))
        if noted:
            return noted
        if dv is not None:
            # CDI may add file system overhead to the claim it creates: the DataVolume holds the declared size
            size = quantity_bytes(_get(dv, 'spec', 'storage', 'resources', 'requests', 'storage') or
                                  _get(dv, 'spec', 'pvc', 'resources', 'requests', 'storage'))
            if size:
                return size
        return quantity_bytes(_get(pvc, 'spec', 'resources', 'requests', 'storage')) or quantity_bytes(_get(pvc, 'status', 'capacity', 'storage'))

    def actual_volume(self, key):
        """The planner's :class:`ActualVolume` of ``key``, or None when neither a claim nor a DataVolume exists."""
        pvc, dv = self.pvcs.get(key), self.dvs.get(key)
        if pvc is None and dv is None:
            return None
        deleting = bool(_get(pvc, 'metadata', 'deletionTimestamp') or _get(dv, 'metadata', 'deletionTimestamp'))
        return ActualVolume(key, self.capacity(key) or 0, None, self.users(key), uncertain=deleting)

    def running(self):
        """VM name -> whether its instance runs."""
        return dict((name, instance_running(self.vmis.get(name))) for name in self.vms)

    def vm_observation(self, name):
        """The vm module's observation of VM ``name`` (for its task record)."""
        return kobserve.build(name, self.namespace, self.vms.get(name), self.vmis.get(name), list(self.dvs.values()), list(self.pvcs.values()))

    def public(self, key):
        """The volume as the modules report it."""
        pvc, dv = self.pvcs.get(key), self.dvs.get(key)
        out = {'key': '%s/%s' % (self.namespace, key), 'name': key, 'namespace': self.namespace, 'exists': pvc is not None or dv is not None}
        if not out['exists']:
            return out
        atts = []
        for att in self.attachments:
            if att.volume != key:
                continue
            facts = self.facts.get((att.vm, att.target)) or {}
            atts.append({'vm': att.vm, 'dev': att.target, 'bus': att.bus, 'readonly': att.readonly, 'serial': att.serial, 'live': att.live,
                         'persistent': att.persistent, 'vm_running': att.vm_running, 'hotpluggable': bool(facts.get('hotpluggable')),
                         'hotplug_phase': facts.get('hotplug_phase')})
        out.update({
            'kind': 'DataVolume' if dv is not None else 'PersistentVolumeClaim',
            'capacity': self.capacity(key),
            'bound_capacity': quantity_bytes(_get(pvc, 'status', 'capacity', 'storage')),
            'phase': _get(pvc, 'status', 'phase') if pvc is not None else None,
            'dv_phase': _get(dv, 'status', 'phase') if dv is not None else None,
            'progress': _get(dv, 'status', 'progress') if dv is not None else None,
            'storage_class': _get(pvc, 'spec', 'storageClassName') or _get(dv, 'spec', 'storage', 'storageClassName'),
            'access_modes': _get(pvc, 'spec', 'accessModes') or _get(pvc, 'status', 'accessModes'),
            'volume_mode': _get(pvc, 'spec', 'volumeMode'),
            'resizing': any(c.get('type') in ('Resizing', 'FileSystemResizePending') and c.get('status') == 'True'
                            for c in _get(pvc, 'status', 'conditions') or []),
            'message': dv_message(dv),
            'used_by': sorted(self.users(key)),
            'attachments': atts,
        })
        return out


def dv_message(dv):
    """The message of a DataVolume's failing Running condition, or None."""
    for cond in _get(dv, 'status', 'conditions') or []:
        if cond.get('type') == 'Running' and cond.get('status') == 'False' and cond.get('reason') not in (None, '', 'Completed') and cond.get('message'):
            return '%s: %s' % (cond['reason'], cond['message'])
    return None


# ------------------------------------------------------------------ planning
def desired_world(specs, world):
    """``(desired volumes, desired attachments)`` for the planner.

    A declared attachment that does not name a bus or serial takes the one of
    the existing attachment (so what the server reports is never a change).
    """
    vols, atts = [], []
    for spec in specs:
        vols.append(phase.DesiredVolume(spec['key'], spec['state'] == 'present', spec['capacity']))
        for att in spec['attachments'] or []:
            have = next((a for a in world.attachments if a.vm == att['vm'] and a.target == att['dev'] and a.volume == spec['key']), None)
            bus = att['bus'] or (have.bus if have is not None else None) or DEFAULT_BUS
            serial = att['serial'] if att['serial'] is not None else (have.serial if have is not None else None)
            atts.append(Attachment(att['vm'], att['dev'], spec['key'], att['readonly'], bus, serial))
    return vols, atts


def plan(specs, world, force=False):
    """Plan one pass; return ``(plan, refusals, operations)``: every operation of a refused volume is dropped."""
    refusals = []
    desired_vols, desired_atts = desired_world(specs, world)
    kept = []
    for att in desired_atts:
        if att.vm not in world.vms:
            refusals.append({'volume': att.volume, 'vm': att.vm, 'field': 'attachments',
                             'reason': 'VirtualMachine %s does not exist in namespace %s' % (att.vm, world.namespace)})
        else:
            kept.append(att)
    by_key = dict((s['key'], s) for s in specs)
    actual_vols = [v for v in (world.actual_volume(s['key']) for s in specs) if v is not None]
    managed = set(s['key'] for s in specs if s['attachments'] is not None)
    plan_atts = [a for a in world.attachments if a.volume in managed]
    managed_vms = set(a.vm for a in plan_atts) | set(a.vm for a in kept)
    result = phase.plan_volumes(desired_vols, actual_vols, kept, plan_atts, force_detach=force, managed_vms=managed_vms,
                                vms_running=world.running())
    for op in result.operations:
        spec = by_key.get(op.volume)
        if op.kind == phase.CREATE and spec is not None:
            missing = check_create(spec)
            if missing:
                refusals.append(missing)
            clone = (spec['source'] or {}).get('pvc')
            if clone and not world.claim_exists(clone.get('namespace'), clone['name']):
                refusals.append({'volume': spec['key'], 'field': 'clone_from',
                                 'reason': 'clone_from: claim %s does not exist in namespace %s' % (clone['name'], clone.get('namespace') or world.namespace)})
            ref = spec.get('source_ref')
            if ref and not world.datasource_exists(ref.get('namespace'), ref['name']):
                refusals.append({'volume': spec['key'], 'field': 'clone_from_datasource',
                                 'reason': 'clone_from_datasource: DataSource %s does not exist in namespace %s'
                                           % (ref['name'], ref.get('namespace') or world.namespace)})
        if op.kind == phase.DETACH_LIVE and not (world.facts.get((op.vm, op.target)) or {}).get('hotpluggable'):
            refusals.append({'volume': op.volume, 'vm': op.vm, 'target': op.target,
                             'reason': 'disk %s of running VM %s was not hotplugged and cannot be unplugged live; stop the VM first' % (op.target, op.vm)})
    refusals.extend(result.refusals)
    refused = set(r['volume'] for r in refusals)
    operations = [op for op in result.operations if op.volume not in refused]
    return result, refusals, operations


def summary(vols, atts):
    """The diff view: volume -> exists, capacity, attachments (the same shape as on libvirt)."""
    out = {}
    for vol in vols:
        out[vol.key] = {'exists': True, 'capacity': vol.capacity,
                        'attachments': sorted('%s:%s%s%s' % (a.vm, a.target, ' live' if a.live else '', ' config' if a.persistent else '')
                                              for a in atts if a.volume == vol.key)}
    return out


def group_operations(operations):
    """Operations in order, with the config and live halves of one attach or detach joined (KubeVirt does both in one request)."""
    groups = []
    for op in operations:
        if groups and op.kind in (phase.ATTACH_LIVE, phase.DETACH_CONFIG):
            last = groups[-1]
            pair = {phase.ATTACH_LIVE: phase.ATTACH_CONFIG, phase.DETACH_CONFIG: phase.DETACH_LIVE}[op.kind]
            if last[-1].kind == pair and (last[-1].vm, last[-1].target, last[-1].volume) == (op.vm, op.target, op.volume):
                last.append(op)
                continue
        groups.append([op])
    return groups


# ------------------------------------------------------------------ execution
class Executor:
    """Runs the planned operations against the API server (``dry_run``: every write with dryRun=All)."""

    def __init__(self, client, namespace, world, specs, wait_timeout=DEFAULT_WAIT_TIMEOUT, dry_run=False, owner=None, clock=time.monotonic):
        self.client = client
        self.namespace = namespace
        self.world = world
        self.specs = dict((s['key'], s) for s in specs)
        self.wait_timeout = wait_timeout
        self.dry_run = dry_run
        self.owner = owner or owner_id()
        self.clock = clock
        self.writes = 0

    # -- helpers
    def _wait(self, observe, done, what, describe=None):
        if self.dry_run or self.wait_timeout <= 0:
            return observe()
        return wait_for(observe, done, self.wait_timeout, what, initial=0.02, factor=1.5, cap=0.25, describe=describe)

    def _pvc(self, name):
        return self.client.get(CORE_API, self.namespace, 'persistentvolumeclaims', name)

    def _dv(self, name):
        return self.client.get(CDI_API, self.namespace, 'datavolumes', name)

    def _binding_mode(self, class_name):
        if not class_name:
            return None
        try:
            sc = self.client.request('GET', '%s/storageclasses/%s' % (STORAGE_API, class_name), what='read storage class %s' % class_name)
        except ConvergeError:
            return None
        return (sc or {}).get('volumeBindingMode')

    # -- volumes
    def create(self, op):
        """Create the claim or DataVolume and wait until it is usable."""
        spec = self.specs[op.volume]
        if spec['kind'] == 'DataVolume':
            self.client.create(CDI_API, self.namespace, 'datavolumes', datavolume_manifest(spec, self.namespace), dry_run=self.dry_run)
            self.writes += 1
            if self.dry_run:
                return {}
            return self._wait_datavolume(op.volume)
        created = self.client.create(CORE_API, self.namespace, 'persistentvolumeclaims', claim_manifest(spec, self.namespace), dry_run=self.dry_run)
        self.writes += 1
        if self.dry_run:
            return {}
        return self._wait_claim(op.volume, _get(created, 'spec', 'storageClassName'))

    def _wait_datavolume(self, name):
        """Wait for a DataVolume's import / clone to end; a Failed one raises."""
        phases = []

        def observe():
            dv = self._dv(name)
            current = _get(dv, 'status', 'phase')
            if current and (not phases or phases[-1] != current):
                phases.append(current)
            return dv
        dv = self._wait(observe, lambda d: _get(d, 'status', 'phase') in DV_DONE_PHASES + ('Failed',),
                        'DataVolume %s/%s to be imported' % (self.namespace, name),
                        describe=lambda d: {'dv_phase': _get(d, 'status', 'phase'), 'progress': _get(d, 'status', 'progress'),
                                            'message': dv_message(d)})
        if _get(dv, 'status', 'phase') == 'Failed':
            raise BackendError('DataVolume %s/%s failed: %s' % (self.namespace, name, dv_message(dv) or 'phase Failed'),
                               volume=name, dv_phase='Failed', phases=phases)
        return {'phases': phases, 'dv_phase': _get(dv, 'status', 'phase')}

    def _wait_claim(self, name, class_name):
        """Wait for a claim to be Bound (not with a WaitForFirstConsumer storage class: its first pod binds it)."""
        if self._binding_mode(class_name) == 'WaitForFirstConsumer':
            return {'phase': _get(self._pvc(name), 'status', 'phase') or 'Pending', 'binding': 'WaitForFirstConsumer'}
        pvc = self._wait(lambda: self._pvc(name), lambda p: _get(p, 'status', 'phase') == 'Bound',
                         'PersistentVolumeClaim %s/%s to be Bound' % (self.namespace, name),
                         describe=lambda p: {'phase': _get(p, 'status', 'phase'), 'storage_class': _get(p, 'spec', 'storageClassName')})
        return {'phase': _get(pvc, 'status', 'phase')}

    def grow(self, op):
        """Raise the claim's storage request and wait for the resizer."""
        want = dict(op.detail)['to']
        spec = self.specs[op.volume]
        quantity = spec['quantity'] if spec['capacity'] == want else bytes_quantity(want)
        patch = {'spec': {'resources': {'requests': {'storage': quantity}}}}
        if op.volume in self.world.dvs:
            patch['metadata'] = {'annotations': {REQUESTED_ANNOTATION: quantity}}
        self.client.merge_patch(CORE_API, self.namespace, 'persistentvolumeclaims', op.volume, patch, dry_run=self.dry_run)
        self.writes += 1
        if self.dry_run:
            return {'online': self._online(op.volume)}
        pvc = self._wait(lambda: self._pvc(op.volume), lambda p: (quantity_bytes(_get(p, 'status', 'capacity', 'storage')) or 0) >= want,
                         'PersistentVolumeClaim %s/%s to be resized to %s' % (self.namespace, op.volume, quantity),
                         describe=lambda p: {'capacity': _get(p, 'status', 'capacity', 'storage'),
                                             'conditions': [c.get('type') for c in _get(p, 'status', 'conditions') or []]})
        return {'bound_capacity': quantity_bytes(_get(pvc, 'status', 'capacity', 'storage')), 'online': self._online(op.volume)}

    def _online(self, key):
        """A running instance uses the claim (KubeVirt expands the disk of the guest online)."""
        return any(a.volume == key and a.live and a.vm_running for a in self.world.attachments)

    def delete(self, op):
        """Delete the DataVolume (its claim goes with it) or the claim, and wait until it is gone."""
        if op.volume in self.world.dvs:
            self.client.delete(CDI_API, self.namespace, 'datavolumes', op.volume, propagation='Background', dry_run=self.dry_run)
        if op.volume in self.world.pvcs and (op.volume not in self.world.dvs or self.dry_run):
            self.client.delete(CORE_API, self.namespace, 'persistentvolumeclaims', op.volume, propagation='Background', dry_run=self.dry_run)
        self.writes += 1
        if not self.dry_run:
            self._wait(lambda: (self._dv(op.volume), self._pvc(op.volume)), lambda pair: pair == (None, None),
                       'volume %s/%s to be deleted' % (self.namespace, op.volume),
                       describe=lambda pair: {'dv_exists': pair[0] is not None, 'pvc_exists': pair[1] is not None,
                                              'finalizers': _get(pair[1], 'metadata', 'finalizers')})
        return {}

    # -- attachments
    def _vm(self, name):
        vm = self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachines', name)
        if vm is None:
            raise BackendError('VirtualMachine %s/%s vanished while its volumes were converged' % (self.namespace, name))
        return vm

    def _vmi(self, name):
        return self.client.get(KUBEVIRT_API, self.namespace, 'virtualmachineinstances', name)

    def _instance_only(self, op, action, body):
        """Only the running instance lacks (or still has) a disk the VM's spec already says: with KubeVirt's HotplugVolumes
        feature gate the instance's own ``addvolume`` / ``removevolume`` plugs it (an ephemeral hot-plug); under
        DeclarativeHotplugVolumes alone virt-api refuses those for an instance a VM owns ("VMI ... is owned by a VM": seen on
        the real stack after an interrupted hot-plug) and KubeVirt carries the VM's spec over to the instance by itself,
        so there is nothing to write: the wait that follows sees it through."""
        try:
            self._subresource('virtualmachineinstances', op.vm, action, body)
        except ApiStatusError as exc:
            if exc.code != 400 or 'is owned by a VM' not in (exc.details.get('api_message') or ''):
                raise

    def _subresource(self, plural, vm, action, body):
        if self.dry_run:
            body = dict(body, dryRun=['All'])
        path = self.client.path(SUBRESOURCE_API, self.namespace, plural, vm, action)
        what = '%s of %s %s/%s' % (action, plural.rstrip('s'), self.namespace, vm)
        # a 503 (virt-api just restarted, or down) is retried until wait_timeout from now: kube-apiserver's aggregator
        # answers it without passing the request on while the APIService is not Available. Before a retry the object is read:
        # a request virt-api carried out although its answer was a 503 is not sent again (a second addvolume of the same
        # name is refused by virt-api, which would fail a task whose change is in place)
        done = None if self.dry_run else (lambda: self._plugged(plural, vm, body.get('name')) == (action == 'addvolume'))
        retry_unavailable(lambda: self.client.request('PUT', path, body=body, what=what), time.monotonic() + max(self.wait_timeout, 0), done)
        self.writes += 1

    def _plugged(self, plural, name, volume):
        """Whether the VM's template (or the instance's spec) lists ``volume``; None when the object is gone."""
        obj = self.client.get(KUBEVIRT_API, self.namespace, plural, name)
        if obj is None:
            return None
        path = ('spec', 'template', 'spec', 'volumes') if plural == 'virtualmachines' else ('spec', 'volumes')
        return any(v.get('name') == volume for v in _get(obj, *path) or [])

    def _patch_template(self, vm_name, edit):
        """JSON patch of the VM's template built by ``edit(vm) -> ops``, guarded by resourceVersion (retried on a race)."""
        for _attempt in range(5):
            vm = self._vm(vm_name)
            ops = edit(vm)
            if not ops:
                return False
            body = [{'op': 'test', 'path': '/metadata/resourceVersion', 'value': vm['metadata']['resourceVersion']}] + ops
            try:
                self.client.request('PATCH', self.client.path(KUBEVIRT_API, self.namespace, 'virtualmachines', vm_name), body=body,
                                    content_type='application/json-patch+json', query={'dryRun': 'All' if self.dry_run else None},
                                    what='patch virtualmachines %s/%s' % (self.namespace, vm_name))
                self.writes += 1
                return True
            except (Conflict, BackendError) as exc:
                if 'test failed' not in str(exc) and not isinstance(exc, Conflict):
                    raise
        raise BackendError('VirtualMachine %s/%s kept changing while its template was edited; try again' % (self.namespace, vm_name))

    def _template_add(self, op, volume, disk):
        def edit(vm):
            tspec = _get(vm, 'spec', 'template', 'spec') or {}
            if any(v.get('name') == op.target for v in tspec.get('volumes') or []):
                return []
            ops = []
            if tspec.get('volumes') is None:
                ops.append({'op': 'add', 'path': '/spec/template/spec/volumes', 'value': [volume]})
            else:
                ops.append({'op': 'add', 'path': '/spec/template/spec/volumes/-', 'value': volume})
            devices = _get(tspec, 'domain', 'devices')
            if devices is None:
                ops.append({'op': 'add', 'path': '/spec/template/spec/domain/devices', 'value': {'disks': [disk]}})
            elif devices.get('disks') is None:
                ops.append({'op': 'add', 'path': '/spec/template/spec/domain/devices/disks', 'value': [disk]})
            elif not any(d.get('name') == op.target for d in devices['disks']):
                ops.append({'op': 'add', 'path': '/spec/template/spec/domain/devices/disks/-', 'value': disk})
            return ops
        return self._patch_template(op.vm, edit)

    def _template_remove(self, op):
        def edit(vm):
            tspec = _get(vm, 'spec', 'template', 'spec') or {}
            ops = []
            for index, vol in enumerate(tspec.get('volumes') or []):
                if vol.get('name') == op.target and volume_claim(vol) == op.volume:
                    ops.append({'op': 'remove', 'path': '/spec/template/spec/volumes/%d' % index})
                    break
            if not ops:
                return []
            for index, disk in enumerate(_get(tspec, 'domain', 'devices', 'disks') or []):
                if disk.get('name') == op.target:
                    ops.append({'op': 'remove', 'path': '/spec/template/spec/domain/devices/disks/%d' % index})
                    break
            return ops
        return self._patch_template(op.vm, edit)

    def settle(self):
        """Wait for what an earlier run started and failed waiting for (a read failed, a timeout): a DataVolume still importing,
        a claim not yet Bound, a declared hotplug on its way to Ready. The next run then ends where the first one would have."""
        running = self.world.running()
        for spec in self.specs.values():
            if spec['state'] != 'present':
                continue
            dv, pvc = self.world.dvs.get(spec['key']), self.world.pvcs.get(spec['key'])
            if dv is not None and _get(dv, 'status', 'phase') not in DV_DONE_PHASES + ('Failed',) and not _get(dv, 'metadata', 'deletionTimestamp'):
                self._wait_datavolume(spec['key'])
            elif dv is None and pvc is not None and _get(pvc, 'status', 'phase') == 'Pending' and not _get(pvc, 'metadata', 'deletionTimestamp'):
                self._wait_claim(spec['key'], _get(pvc, 'spec', 'storageClassName'))
            for att in spec['attachments'] or []:
                facts = self.world.facts.get((att['vm'], att['dev'])) or {}
                # on its way: a phase short of Ready, or none yet for a hot-pluggable disk the instance has not reported
                on_its_way = facts.get('hotplug_phase') not in (None, 'Ready') or (facts.get('hotplug_phase') is None and facts.get('hotpluggable'))
                if on_its_way and running.get(att['vm']):
                    self._wait_hotplug(phase.Operation(phase.ATTACH_LIVE, spec['key'], vm=att['vm'], target=att['dev']), True)

    def _wait_hotplug(self, op, present):
        """Wait for the instance to report disk ``op.target`` Ready (present) or gone; return the phases seen."""
        phases = []

        def observe():
            vmi = self._vmi(op.vm)
            in_spec = any(v.get('name') == op.target for v in _get(vmi, 'spec', 'volumes') or [])
            current = hotplug_phase(vmi, op.target)
            label = current if current else ('Detached' if not (in_spec or present) else None)
            if label and (not phases or phases[-1] != label):
                phases.append(label)
            return {'in_spec': in_spec, 'phase': current, 'running': instance_running(vmi)}

        def done(value):
            if not value['running']:
                return True
            return value['phase'] == 'Ready' if present else (not value['in_spec'] and value['phase'] is None)
        try:
            what = 'volume %s to be %s VM %s/%s (disk %s)' % (op.volume, 'Ready in' if present else 'released by', self.namespace, op.vm, op.target)
            self._wait(observe, done, what)
        except WaitTimeout as exc:
            exc.details.update(vm=op.vm, target=op.target, volume=op.volume, phases=phases)
            raise
        return phases

    def attach(self, group):
        """Plug a claim into a VM: addvolume (running VM) or a template edit (stopped VM)."""
        first = group[0]
        detail = dict(first.detail)
        kind = 'DataVolume' if first.volume in self.world.dvs or (self.specs.get(first.volume) or {}).get('kind') == 'DataVolume' else None
        volume = hotplug_volume(first.volume, kind, first.target)
        disk = hotplug_disk(first.target, detail.get('bus'), detail.get('readonly'), detail.get('serial'))
        kinds = [op.kind for op in group]
        source = dict((k, v) for k, v in volume.items() if k != 'name')
        body = {'name': first.target, 'disk': disk, 'volumeSource': source}
        if kinds == [phase.ATTACH_CONFIG]:
            self._template_add(first, volume, disk)
            return {}
        if not self._plug(first, phase.ATTACH_CONFIG in kinds, 'addvolume', body):
            return {}
        try:
            return {'phases': self._wait_hotplug(first, True)}
        except WaitTimeout as exc:
            raise _hotplug_not_ready(exc, first, phase.ATTACH_CONFIG in kinds, self.namespace) from None

    def detach(self, group):
        """Unplug a claim: removevolume (running VM) or a template edit (stopped VM)."""
        first = group[0]
        kinds = [op.kind for op in group]
        if kinds == [phase.DETACH_CONFIG]:
            self._template_remove(first)
            return {}
        body = {'name': first.target}
        if not self._plug(first, phase.DETACH_CONFIG in kinds, 'removevolume', body):
            return {}
        return {'phases': self._wait_hotplug(first, False)}

    def _plug(self, first, with_config, verb, body):
        """``verb`` (addvolume, removevolume) on the VM when the group also edits its template, else on the running instance
        only; False in a dry run (nothing to wait for)."""
        if with_config:
            self._subresource('virtualmachines', first.vm, verb, body)
        else:
            self._instance_only(first, verb, body)
        return not self.dry_run

    def run_group(self, group):
        """One volume operation, or one attach / detach under the VM's task."""
        op = group[0]
        if op.kind == phase.CREATE:
            return self.create(op)
        if op.kind == phase.GROW:
            return self.grow(op)
        if op.kind == phase.DELETE:
            return self.delete(op)
        action = 'detach_volume' if op.kind in (phase.DETACH_LIVE, phase.DETACH_CONFIG) else 'attach_volume'
        run = self.detach if action == 'detach_volume' else self.attach
        if self.dry_run:
            return run(group)
        obs = self.world.vm_observation(op.vm)
        store = KubevirtTaskStore(self.client, self.namespace, op.vm, inferred_vm_state=obs.get('effective_vm_state'), vm=None)
        task_id = tasks.new_task_id()
        tasks.take_task(store, action, task_id, time.time(), owner=self.owner, name=op.vm)
        # the VM's interval in the audit journal: begun once the task is ours, ended before it is released
        journal.append('begin', op.vm, task_id, action, target=op.volume)
        try:
            extra = run(group)
        except BaseException:
            journal.append('end', op.vm, task_id, action, target=op.volume, outcome='failed')
            try:
                release_task(store, task_id, op.vm, finish=False)
            except ConvergeError:
                pass
            raise
        journal.append('end', op.vm, task_id, action, target=op.volume, outcome='done')
        release_task(store, task_id, op.vm)
        return extra


def _hotplug_not_ready(exc, op, persisted, namespace):
    """A hotplug that never reached Ready: the result says the VM spec keeps it (no rollback) and the next run finishes it.

    KubeVirt's ``addvolume`` writes ``spec.template`` and the instance in one request that either fails (nothing
    changed) or is accepted; a hotplug accepted but slow (a claim not bound yet, an attachment pod waiting) is still on
    its way, so unplugging it would undo what KubeVirt may finish a moment later. The declaration is kept and the next
    run, finding the volume in the VM and its instance, waits for the phase Ready again (or, declared away with
    ``force``, unplugs it).
    """
    where = "VM %s/%s's spec.template (its persistent definition) and its instance" if persisted else 'the instance of VM %s/%s'
    message = ('%s; the volume stays in %s (not rolled back: KubeVirt may still finish the hotplug), and the next run waits for it '
               'again' % (exc.message, where % (namespace, op.vm)))
    return WaitTimeout(message, **dict(exc.details, rolled_back=False))


RELEASE_ATTEMPTS = 3


def release_task(store, task_id, name, finish=True):
    """Finish (or abandon) our task on the VM, retried when the API server fails the write (5xx, timeout).

    The next run finds the volume plugged and has nothing to do, so a record
    left behind by one failed write would stay. A retry that finds the task
    gone means an earlier attempt went through (only its answer was lost).
    """
    for attempt in range(RELEASE_ATTEMPTS):
        try:
            if finish:
                tasks.finish_task(store, task_id, name=name)
            else:
                tasks.abandon_task(store, task_id, name=name, rolled_back=True)
            return
        except tasks.TaskPreempted:
            if attempt == 0:
                raise
            return
        except BackendError:
            if attempt == RELEASE_ATTEMPTS - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def converge_volumes(client, namespace, specs, force=False, check_mode=False, wait_timeout=DEFAULT_WAIT_TIMEOUT, owner=None):
    """Converge normalized declarations (:func:`normalize_volume`) in ``namespace``; return the result dict.

    The same shape as the libvirt backend's (one driver, :mod:`.._common.volume_driver`): operations, refusals,
    deferred, uncertain, volumes, diff, changed and error (the first failure, after which nothing else is run).
    """
    backend = KubevirtVolumes(client, namespace, wait_timeout, owner)
    return volume_driver.converge_volumes(backend, specs, force=force, check_mode=check_mode)


class KubevirtVolumes(volume_driver.VolumeBackend):
    """The claims and DataVolumes of one namespace: the hooks of the shared volume driver.

    In check mode the executor runs too, without writing (``dry_run``): its answers are the returned operations.
    """

    executes_in_check_mode = True

    def __init__(self, client, namespace, wait_timeout=DEFAULT_WAIT_TIMEOUT, owner=None):
        self.client = client
        self.namespace = namespace
        self.wait_timeout = wait_timeout
        self.owner = owner
        self.world = self.executor = None
        self.by_key = {}

    def plan(self, specs, force, check_mode):
        world = self.world = NamespaceVolumes(self.client, self.namespace)
        result_plan, refusals, operations = plan(specs, world, force)
        self.by_key = dict((s['key'], s) for s in specs)
        actual_vols = [v for v in (world.actual_volume(s['key']) for s in specs) if v is not None]
        scoped = [a for a in world.attachments if a.volume in self.by_key]
        self.executor = Executor(self.client, self.namespace, world, specs, wait_timeout=self.wait_timeout, dry_run=check_mode, owner=self.owner)
        return volume_driver.PlannedVolumes(actual_vols, scoped, operations, refusals, result_plan.deferred, result_plan.uncertain)

    def summary(self, volumes, attachments):
        return summary(volumes, attachments)

    def execute(self, operations, check_mode):
        done = []
        for group in group_operations(operations):
            items = [op.as_dict() for op in group]
            try:
                extra = self.executor.run_group(group)
            except ConvergeError as exc:
                for item in items:
                    item['failed'] = True
                done.extend(items)
                return done, exc
            for item in items:
                item.update(extra)
            done.extend(items)
        return done, None

    def settle(self):
        try:
            self.executor.settle()
        except ConvergeError as exc:
            return exc
        return None

    def observe_after(self, specs, done):
        self.world.refresh()
        return ([v for v in (self.world.actual_volume(s['key']) for s in specs) if v is not None],
                [a for a in self.world.attachments if a.volume in self.by_key])

    def changed(self, done, planned):
        return self.executor.writes > 0

    def public(self, specs):
        return [self.world.public(s['key']) for s in specs]


def report(client, namespace, names=None):
    """``volume_info``: every claim / DataVolume of the namespace (or the named ones; a missing one has exists=false)."""
    world = NamespaceVolumes(client, namespace)
    return [world.public(name) for name in (names if names else world.names())]
