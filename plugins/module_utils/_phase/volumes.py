# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The volume planner: desired and actual state of the world (kubelet VolumeManager, seed 003).

kubelet keeps a desiredStateOfWorld (populated from pods) and an
actualStateOfWorld (what is attached and mounted), and its reconciler makes
one pass at a time: first tear down what is not desired (unmount, unmount
device, detach), then set up what is (attach, mount device, set up). The same
shape serves libvirt pools/domains and KubeVirt claims/hotplug:

1. teardown first: detach from the guest (live), then from the persistent
   config, then delete volumes declared absent;
2. then set up: provision (create / clone / import / grow), then plug into
   the guest: live and config for a running guest, config only for a stopped one;
3. at most one operation in flight per volume; a failed operation backs off
   exponentially (0.5 s, doubling, capped at about 2 minutes);
4. never detach from a running guest unless forced, never delete a volume
   that a definition (live or persistent) still references, never shrink;
5. what cannot be confirmed is uncertain and is left alone.

:func:`plan_volumes` is pure: it returns a :class:`VolumePlan`, which the
volume module and the vm module's ``disks`` both execute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple, cast

# Operation kinds, in the order a pass may emit them.
DETACH_LIVE = 'detach_live'
DETACH_CONFIG = 'detach_config'
DELETE = 'delete_volume'
CREATE = 'create_volume'
GROW = 'grow_volume'
ATTACH_CONFIG = 'attach_config'
ATTACH_LIVE = 'attach_live'
TEARDOWN_KINDS = (DETACH_LIVE, DETACH_CONFIG, DELETE)
SETUP_KINDS = (CREATE, GROW, ATTACH_CONFIG, ATTACH_LIVE)

BACKOFF_INITIAL = 0.5
BACKOFF_CAP = 122.0


@dataclass(frozen=True)
class DesiredVolume:
    """A volume the user declared. ``capacity`` in bytes (None: keep whatever exists)."""

    key: str
    present: bool = True
    capacity: Optional[int] = None
    fmt: Optional[str] = None
    source: Optional[str] = None      # None: empty; 'clone:<key>' or 'import:<path>' otherwise


@dataclass(frozen=True)
class ActualVolume:
    """A volume that exists, with who references it (VM names, live or persistent)."""

    key: str
    capacity: int = 0
    fmt: Optional[str] = None
    used_by: FrozenSet[str] = frozenset()
    busy: bool = False                # an operation on it is still in flight
    uncertain: bool = False


@dataclass(frozen=True)
class Attachment:
    """A volume plugged into a VM at a target device.

    For the actual world, ``live`` / ``persistent`` say where the disk is found
    and ``vm_running`` whether the guest runs. For the desired world only the
    identity fields matter.
    """

    vm: str
    target: str
    volume: str
    readonly: bool = False
    bus: Optional[str] = None
    serial: Optional[str] = None
    live: bool = False
    persistent: bool = False
    vm_running: bool = False
    uncertain: bool = False

    def identity(self) -> Tuple[Any, ...]:
        """What makes two attachments the same one."""
        return (self.vm, self.target, self.volume, self.readonly, self.bus, self.serial)


@dataclass(frozen=True)
class Operation:
    """One step for a backend to execute."""

    kind: str
    volume: str
    vm: Optional[str] = None
    target: Optional[str] = None
    detail: Tuple[Tuple[str, object], ...] = ()

    def as_dict(self) -> Dict[str, Any]:
        """Plain dict for module results."""
        result: Dict[str, Any] = {'op': self.kind, 'volume': self.volume}
        if self.vm is not None:
            result['vm'] = self.vm
            result['target'] = self.target
        result.update(dict(self.detail))
        return result


@dataclass
class VolumePlan:
    """Ordered operations plus what was refused, deferred or left uncertain."""

    operations: List[Operation] = field(default_factory=list)
    refusals: List[Dict[str, object]] = field(default_factory=list)
    deferred: List[Dict[str, object]] = field(default_factory=list)
    uncertain: List[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the world already matches (nothing to do, nothing refused)."""
        return not self.operations and not self.refusals and not self.deferred


def backoff_delay(failures: int) -> float:
    """Seconds to wait after ``failures`` consecutive failures: 0.5, 1, 2, ... capped near 2 min."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_CAP, BACKOFF_INITIAL * (2 ** (failures - 1)))


def plan_volumes(desired_volumes: Iterable[DesiredVolume], actual_volumes: Iterable[ActualVolume],  # pylint: disable=too-many-arguments
                 desired_attachments: Iterable[Attachment], actual_attachments: Iterable[Attachment], force_detach: bool = False,
                 failures: Optional[Dict[str, int]] = None, last_failure: Optional[Dict[str, float]] = None, now: float = 0.0,
                 managed_vms: Optional[Iterable[str]] = None, vms_running: Optional[Dict[str, bool]] = None) -> VolumePlan:
    """Plan one reconciliation pass; pure.

    ``desired_volumes`` / ``actual_volumes``: iterables of :class:`DesiredVolume`
    / :class:`ActualVolume`. ``desired_attachments`` / ``actual_attachments``:
    iterables of :class:`Attachment`. ``managed_vms``: the VMs whose attachments
    the caller declares completely (an actual attachment of another VM is
    never torn down); None means every VM named in ``desired_attachments``.
    ``failures`` / ``last_failure``: per volume key, for backoff.
    ``vms_running``: VM name -> whether its guest runs (for VMs that have no
    actual attachment yet).
    """
    plan = VolumePlan()
    failures = failures or {}
    last_failure = last_failure or {}
    actual_by_key = {v.key: v for v in actual_volumes}
    desired_list = list(desired_volumes)
    wanted = {a.identity(): a for a in desired_attachments}
    actual_att = list(actual_attachments)
    if managed_vms is None:
        managed_vms = {a.vm for a in wanted.values()}
    touched = set()

    def blocked(key: str) -> bool:
        # at most one operation in flight per volume, and backoff after failures
        vol = actual_by_key.get(key)
        if vol is not None and vol.busy:
            plan.deferred.append({'volume': key, 'reason': 'an operation on this volume is still in flight'})
            return True
        wait = backoff_delay(failures.get(key, 0))
        if wait and now < last_failure.get(key, 0.0) + wait:
            plan.deferred.append({'volume': key, 'reason': 'backing off after %d failure(s)' % failures[key],
                                  'retry_in': round(last_failure.get(key, 0.0) + wait - now, 3)})
            return True
        return False

    # references after the teardown below: volume -> {(vm, target)}; a VM that
    # uses a volume without a known attachment counts as (vm, None)
    remaining_refs: Dict[str, Set[Tuple[str, Optional[str]]]] = {}
    for att in actual_att:
        remaining_refs.setdefault(att.volume, set()).add((att.vm, att.target))
    for key, vol in actual_by_key.items():
        known = {vm for vm, _target in remaining_refs.get(key, ())}
        remaining_refs.setdefault(key, set()).update((vm, None) for vm in vol.used_by if vm not in known)

    # ---- 1. teardown: attachments that are not desired
    for att in actual_att:
        if att.vm not in managed_vms or att.identity() in wanted:
            continue
        if att.uncertain or (att.volume in actual_by_key and actual_by_key[att.volume].uncertain):
            plan.uncertain.append('%s:%s' % (att.vm, att.target))
            continue
        if att.live and att.vm_running and not force_detach:
            plan.refusals.append({'volume': att.volume, 'vm': att.vm, 'target': att.target,
                                  'reason': 'attached to running VM %s at %s; detaching from a running guest needs force' % (att.vm, att.target)})
            continue
        if blocked(att.volume):
            continue
        if att.live and att.vm_running:
            plan.operations.append(Operation(DETACH_LIVE, att.volume, att.vm, att.target))
        if att.persistent:
            plan.operations.append(Operation(DETACH_CONFIG, att.volume, att.vm, att.target))
        touched.add(att.volume)
        remaining_refs.get(att.volume, set()).discard((att.vm, att.target))

    # ---- 1b. teardown: volumes declared absent
    for want in desired_list:
        if want.present or want.key not in actual_by_key:
            continue
        have: Any = actual_by_key[want.key]
        users = {vm for vm, _target in remaining_refs.get(want.key, ())}
        if have.uncertain:
            plan.uncertain.append(want.key)
            continue
        if users or any(a.volume == want.key for a in wanted.values()):
            names = sorted(users | {a.vm for a in wanted.values() if a.volume == want.key})
            plan.refusals.append({'volume': want.key, 'reason': 'in use by %s; detach it first' % ', '.join(names), 'used_by': names})
            continue
        if want.key in touched or not blocked(want.key):
            plan.operations.append(Operation(DELETE, want.key))
            touched.add(want.key)

    # ---- 2. setup: provision
    for want in desired_list:
        if not want.present:
            continue
        have = actual_by_key.get(want.key)
        if have is None:
            if not blocked(want.key):
                detail = (('capacity', want.capacity), ('format', want.fmt), ('source', want.source))
                plan.operations.append(Operation(CREATE, want.key, detail=detail))
                touched.add(want.key)
            continue
        if have.uncertain:
            plan.uncertain.append(want.key)
            continue
        if want.capacity is None or want.capacity == have.capacity:
            continue
        if want.capacity < have.capacity:
            plan.refusals.append({'volume': want.key, 'reason': 'shrinking from %d to %d bytes would lose data; volumes are never shrunk'
                                  % (have.capacity, want.capacity), 'capacity': have.capacity, 'requested': want.capacity})
            continue
        if want.key in touched or not blocked(want.key):
            online = any(a.volume == want.key and a.live and a.vm_running for a in actual_att)
            plan.operations.append(Operation(GROW, want.key, detail=(('from', have.capacity), ('to', want.capacity), ('online', online))))
            touched.add(want.key)

    # ---- 2b. setup: plug desired attachments
    actual_by_identity = {a.identity(): a for a in actual_att}
    running = dict(vms_running or {})
    running.update({a.vm: a.vm_running for a in actual_att})
    created = {op.volume for op in plan.operations if op.kind == CREATE}
    declared_absent = {want.key for want in desired_list if not want.present}
    for ident, att in wanted.items():
        have = actual_by_identity.get(ident)
        if att.volume in declared_absent or (att.volume not in actual_by_key and att.volume not in created):
            if not (have and have.persistent):
                plan.refusals.append({'volume': att.volume, 'vm': att.vm, 'target': att.target,
                                      'reason': 'volume %s does not exist and is not declared present' % att.volume})
                continue
        vm_running = have.vm_running if have else running.get(att.vm, False)
        occupied = [a for a in actual_att if a.vm == att.vm and a.target == att.target and a.identity() != ident
                    and a.identity() not in _torn_down(plan, a)]
        if occupied:
            plan.refusals.append({'volume': att.volume, 'vm': att.vm, 'target': att.target,
                                  'reason': 'target %s of %s is occupied by %s' % (att.target, att.vm, occupied[0].volume)})
            continue
        needs_config = not (have and have.persistent)
        needs_live = vm_running and not (have and have.live)
        if not (needs_config or needs_live):
            continue
        if att.volume not in touched and blocked(att.volume):
            continue
        detail = (('readonly', att.readonly), ('bus', att.bus), ('serial', att.serial))
        if needs_config:
            plan.operations.append(Operation(ATTACH_CONFIG, att.volume, att.vm, att.target, detail))
        if needs_live:
            plan.operations.append(Operation(ATTACH_LIVE, att.volume, att.vm, att.target, detail))
        touched.add(att.volume)
    return plan


def _torn_down(plan: VolumePlan, att: Attachment) -> FrozenSet[Tuple[Any, ...]]:
    """Identities of attachments this plan already detaches (so their target is free)."""
    gone: Set[Tuple[Any, ...]] = set()
    for op in plan.operations:
        if op.kind in (DETACH_LIVE, DETACH_CONFIG) and (op.vm, op.target, op.volume) == (att.vm, att.target, att.volume):
            gone.add(att.identity())
    return frozenset(gone)


def apply_operation(actual_volumes: Iterable[ActualVolume], actual_attachments: Iterable[Attachment], op: Operation,
                    vms_running: Optional[Dict[str, bool]] = None) -> Tuple[List[ActualVolume], List[Attachment]]:
    """Model of the world: what the world looks like after ``op`` succeeds.

    Used by the property tests (a plan applied to the model yields an empty
    plan) and by check mode to predict the result. Returns new lists.
    ``vms_running``: VM name -> whether its guest runs, as given to
    :func:`plan_volumes` (a VM's first attachment has no other to tell).
    """
    vols = {v.key: v for v in actual_volumes}
    atts = list(actual_attachments)
    if op.kind == CREATE:
        detail: Dict[str, Any] = dict(op.detail)
        vols[op.volume] = ActualVolume(op.volume, capacity=detail.get('capacity') or 0, fmt=detail.get('format'))
    elif op.kind == GROW:
        old = vols[op.volume]
        grown: Dict[str, Any] = dict(op.detail)
        vols[op.volume] = ActualVolume(old.key, grown['to'], old.fmt, old.used_by)
    elif op.kind == DELETE:
        vols.pop(op.volume, None)
    elif op.kind in (DETACH_LIVE, DETACH_CONFIG):
        new_atts = []
        for a in atts:
            if a.vm == op.vm and a.target == op.target:
                a = Attachment(**dict(a.__dict__, live=a.live and op.kind != DETACH_LIVE, persistent=a.persistent and op.kind != DETACH_CONFIG))
                if not (a.live or a.persistent):
                    continue
            new_atts.append(a)
        atts = new_atts
    elif op.kind in (ATTACH_CONFIG, ATTACH_LIVE):
        detail = dict(op.detail)
        # a live attach proves the guest runs; otherwise the VM's other attachments (or vms_running) tell
        running = op.kind == ATTACH_LIVE or next((a.vm_running for a in atts if a.vm == op.vm), bool((vms_running or {}).get(cast(str, op.vm))))
        existing = [a for a in atts if a.vm == op.vm and a.target == op.target and a.volume == op.volume]
        base = existing[0] if existing else Attachment(cast(str, op.vm), cast(str, op.target), op.volume, detail.get('readonly', False), detail.get('bus'),
                                                       detail.get('serial'))
        atts = [a for a in atts if a is not base]
        atts.append(Attachment(**dict(base.__dict__, live=base.live or op.kind == ATTACH_LIVE,
                                      persistent=base.persistent or op.kind == ATTACH_CONFIG, vm_running=base.vm_running or running)))
    users: Dict[str, Set[str]] = {}
    for a in atts:
        users.setdefault(a.volume, set()).add(a.vm)
    vols = {k: ActualVolume(v.key, v.capacity, v.fmt, frozenset(users.get(k, set())), v.busy, v.uncertain) for k, v in vols.items()}
    return list(vols.values()), atts
