# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the KubeVirt volume backend reads: a namespace's claims, DataVolumes, VirtualMachines and instances turned into
the planner's actual world (:class:`NamespaceVolumes`: volumes, their users and attachments, hotplug phases), and
the volume_info report.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.data import dig as _get
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import CDI_API, CORE_API, KUBEVIRT_API
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.volume_spec import quantity_bytes
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import ActualVolume, Attachment

# the size the user asked for, kept on a claim we grew (a DataVolume's spec is immutable)
REQUESTED_ANNOTATION = 'converge.virt/requested-storage'
HOTPLUG_PHASES = ('Pending', 'Bound', 'AttachedToNode', 'MountedToPod', 'Ready')
VMI_FINAL_PHASES = ('Succeeded', 'Failed')


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


def report(client, namespace, names=None):
    """``volume_info``: every claim / DataVolume of the namespace (or the named ones; a missing one has exists=false)."""
    world = NamespaceVolumes(client, namespace)
    return [world.public(name) for name in (names if names else world.names())]
