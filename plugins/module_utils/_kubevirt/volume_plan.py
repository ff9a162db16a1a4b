# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt volume plan: the declared world against the actual one, planned by the shared planner
(``_phase.volumes.plan_volumes``), and the operations grouped for the executor (one VM task per VM).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._kubevirt.volume_spec import DEFAULT_BUS, check_create
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import Attachment


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
