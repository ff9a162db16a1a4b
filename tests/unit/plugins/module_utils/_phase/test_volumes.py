# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The volume planner.

Source: kubelet pkg/kubelet/volumemanager/reconciler (seed 003): teardown
(unmount -> unmount device -> detach) before setup (attach -> mount device ->
set up), exponential backoff of failed operations, one operation per volume.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as v
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import ActualVolume, Attachment, DesiredVolume

GiB = 1024 ** 3


def kinds(plan):
    return [(op.kind, op.volume, op.vm) for op in plan.operations]


def test_create_and_attach_to_running_vm_hotplugs():
    plan = v.plan_volumes([DesiredVolume('data', capacity=GiB)], [], [Attachment('vm1', 'vdb', 'data')], [], vms_running={'vm1': True})
    assert kinds(plan) == [('create_volume', 'data', None), ('attach_config', 'data', 'vm1'), ('attach_live', 'data', 'vm1')]


def test_attach_to_stopped_vm_is_config_only():
    plan = v.plan_volumes([], [ActualVolume('data', GiB)], [Attachment('vm1', 'vdb', 'data')], [], vms_running={'vm1': False})
    assert kinds(plan) == [('attach_config', 'data', 'vm1')]


def test_teardown_before_setup_and_live_before_config():
    actual = [Attachment('vm1', 'vdb', 'old', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([], [ActualVolume('old', GiB, used_by=frozenset({'vm1'})), ActualVolume('new', GiB)],
                          [Attachment('vm1', 'vdc', 'new')], actual, force_detach=True)
    assert kinds(plan) == [('detach_live', 'old', 'vm1'), ('detach_config', 'old', 'vm1'),
                           ('attach_config', 'new', 'vm1'), ('attach_live', 'new', 'vm1')]


def test_never_detach_from_running_guest_without_force():
    actual = [Attachment('vm1', 'vdb', 'old', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([], [ActualVolume('old', GiB, used_by=frozenset({'vm1'}))], [], actual, managed_vms={'vm1'})
    assert plan.operations == [] and 'needs force' in plan.refusals[0]['reason']


def test_detach_from_stopped_vm_needs_no_force():
    actual = [Attachment('vm1', 'vdb', 'old', persistent=True, vm_running=False)]
    plan = v.plan_volumes([], [ActualVolume('old', GiB, used_by=frozenset({'vm1'}))], [], actual, managed_vms={'vm1'})
    assert kinds(plan) == [('detach_config', 'old', 'vm1')]


def test_delete_in_use_refused_naming_vms():
    plan = v.plan_volumes([DesiredVolume('data', present=False)], [ActualVolume('data', GiB, used_by=frozenset({'web', 'db'}))], [], [])
    assert plan.operations == [] and plan.refusals[0]['used_by'] == ['db', 'web']
    assert 'in use by db, web' in plan.refusals[0]['reason']


def test_delete_after_detach_in_the_same_pass():
    actual = [Attachment('vm1', 'vdb', 'data', persistent=True)]
    plan = v.plan_volumes([DesiredVolume('data', present=False)], [ActualVolume('data', GiB, used_by=frozenset({'vm1'}))], [], actual,
                          managed_vms={'vm1'})
    assert kinds(plan) == [('detach_config', 'data', 'vm1'), ('delete_volume', 'data', None)]


def test_never_shrink():
    plan = v.plan_volumes([DesiredVolume('data', capacity=GiB)], [ActualVolume('data', 2 * GiB)], [], [])
    assert plan.operations == [] and 'never shrunk' in plan.refusals[0]['reason']


def test_grow_online_when_attached_to_running_guest():
    actual = [Attachment('vm1', 'vdb', 'data', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([DesiredVolume('data', capacity=2 * GiB)], [ActualVolume('data', GiB, used_by=frozenset({'vm1'}))],
                          [Attachment('vm1', 'vdb', 'data')], actual)
    assert [op.as_dict() for op in plan.operations] == [{'op': 'grow_volume', 'volume': 'data', 'from': GiB, 'to': 2 * GiB, 'online': True}]


def test_backoff_defers_and_busy_defers():
    plan = v.plan_volumes([DesiredVolume('a', capacity=GiB)], [], [], [], failures={'a': 3}, last_failure={'a': 10.0}, now=11.0)
    assert plan.operations == [] and plan.deferred[0]['retry_in'] == 1.0
    plan = v.plan_volumes([DesiredVolume('a', capacity=GiB)], [], [], [], failures={'a': 3}, last_failure={'a': 10.0}, now=12.5)
    assert kinds(plan) == [('create_volume', 'a', None)]
    plan = v.plan_volumes([DesiredVolume('a', capacity=2 * GiB)], [ActualVolume('a', GiB, busy=True)], [], [])
    assert plan.operations == [] and 'in flight' in plan.deferred[0]['reason']


def test_backoff_delays():
    assert [v.backoff_delay(n) for n in range(0, 5)] == [0.0, 0.5, 1.0, 2.0, 4.0]
    assert v.backoff_delay(30) == 122.0


def test_uncertain_is_left_alone():
    actual = [Attachment('vm1', 'vdb', 'x', persistent=True, uncertain=True)]
    plan = v.plan_volumes([], [ActualVolume('x', GiB, used_by=frozenset({'vm1'}))], [], actual, managed_vms={'vm1'})
    assert plan.operations == [] and plan.uncertain == ['vm1:vdb']


def test_other_vms_attachments_untouched():
    actual = [Attachment('other', 'vdb', 'x', persistent=True)]
    plan = v.plan_volumes([], [ActualVolume('x', GiB, used_by=frozenset({'other'})), ActualVolume('y', GiB)], [Attachment('vm1', 'vdb', 'y')], actual,
                          vms_running={'vm1': False})
    assert kinds(plan) == [('attach_config', 'y', 'vm1')]


def test_occupied_target_refused():
    actual = [Attachment('vm1', 'vdb', 'x', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([], [ActualVolume('x', GiB), ActualVolume('y', GiB)], [Attachment('vm1', 'vdb', 'y')], actual, managed_vms=set())
    assert plan.operations == [] and 'occupied' in plan.refusals[0]['reason']


def test_already_converged_is_empty():
    actual = [Attachment('vm1', 'vdb', 'data', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([DesiredVolume('data', capacity=GiB)], [ActualVolume('data', GiB, used_by=frozenset({'vm1'}))],
                          [Attachment('vm1', 'vdb', 'data')], actual)
    assert plan.empty


# ---------------------------------------------------------------- properties
VMS = ['vm1', 'vm2']
VOLS = ['a', 'b', 'c']
TARGETS = ['vdb', 'vdc']


@st.composite
def worlds(draw):
    running = {vm: draw(st.booleans()) for vm in VMS}
    actual_atts = {}
    for vm in VMS:
        for target in TARGETS:
            if draw(st.booleans()):
                vol = fresh(draw(st.sampled_from(VOLS)))      # names as read from libvirt: new string objects
                live = running[vm] and draw(st.booleans())
                persistent = draw(st.booleans()) or not live
                actual_atts[(vm, target)] = Attachment(vm, target, vol, live=live, persistent=persistent, vm_running=running[vm])
    users = {}
    for att in actual_atts.values():
        users.setdefault(att.volume, set()).add(att.vm)
    actual_vols = [ActualVolume(k, draw(st.sampled_from([GiB, 2 * GiB])), used_by=frozenset(users.get(k, ())))
                   for k in VOLS if draw(st.booleans()) or k in users]
    desired_vols = [DesiredVolume(k, present=draw(st.booleans()), capacity=draw(st.sampled_from([None, GiB, 2 * GiB, 3 * GiB])))
                    for k in VOLS if draw(st.booleans())]
    desired_atts = []
    for vm in VMS:
        for target in TARGETS:
            if draw(st.booleans()):
                desired_atts.append(Attachment(fresh(vm), fresh(target), draw(st.sampled_from(VOLS))))
    return desired_vols, actual_vols, desired_atts, list(actual_atts.values()), running, draw(st.booleans())


@settings(settings.get_profile('converge-phase'))
@given(worlds())
def test_planner_safety_properties(world):
    desired_vols, actual_vols, desired_atts, actual_atts, running, force = world
    plan = v.plan_volumes(desired_vols, actual_vols, desired_atts, actual_atts, force_detach=force, vms_running=running)
    by_key = {vol.key: vol for vol in actual_vols}
    seen_setup = False
    live_detached = set()
    for op in plan.operations:
        if op.kind in v.SETUP_KINDS:
            seen_setup = True
        else:
            assert not seen_setup, 'teardown after setup'
        if op.kind == v.DETACH_LIVE:
            live_detached.add((op.vm, op.target))
            assert force, 'detached from a running guest without force'
        if op.kind == v.DETACH_CONFIG:
            att = next(a for a in actual_atts if (a.vm, a.target) == (op.vm, op.target))
            if att.live and att.vm_running:
                assert (op.vm, op.target) in live_detached, 'config detach before unplugging from the guest'
        if op.kind == v.GROW:
            assert dict(op.detail)['to'] > by_key[op.volume].capacity, 'shrink or no-op grow'
        if op.kind == v.DELETE:
            # nobody references it once the plan's detaches are done
            still = [a for a in actual_atts if a.volume == op.volume and (a.vm, a.target) not in
                     {(o.vm, o.target) for o in plan.operations if o.kind in (v.DETACH_CONFIG, v.DETACH_LIVE)}]
            assert not still, 'deleted a volume still in use'
            assert not any(a.volume == op.volume for a in desired_atts)


@settings(settings.get_profile('converge-phase'))
@given(worlds())
def test_planner_fixpoint(world):
    desired_vols, actual_vols, desired_atts, actual_atts, running, force = world
    plan = v.plan_volumes(desired_vols, actual_vols, desired_atts, actual_atts, force_detach=force, vms_running=running)
    vols, atts = actual_vols, actual_atts
    for op in plan.operations:
        vols, atts = v.apply_operation(vols, atts, op)
    again = v.plan_volumes(desired_vols, vols, desired_atts, atts, force_detach=force, vms_running=running)
    assert again.operations == [], 'second pass still has work: %r' % again.operations


def test_attach_of_missing_volume_refused():
    plan = v.plan_volumes([], [], [Attachment('vm1', 'vdb', 'ghost')], [], vms_running={'vm1': True})
    assert plan.operations == [] and 'does not exist' in plan.refusals[0]['reason']


def test_volume_used_twice_by_one_vm_stays_in_use_when_one_use_is_refused():
    # regression: detaching one of two attachments of a volume to the same VM
    # must not make the volume look unused while the other (refused) one stays
    actual = [Attachment('vm1', 'vdb', 'b', persistent=True, vm_running=True),
              Attachment('vm1', 'vdc', 'b', live=True, vm_running=True)]
    plan = v.plan_volumes([DesiredVolume('b', present=False)], [ActualVolume('b', GiB, used_by=frozenset({'vm1'}))], [], actual,
                          managed_vms={'vm1'})
    assert ('delete_volume', 'b', None) not in kinds(plan)
    assert any('in use by vm1' in r['reason'] for r in plan.refusals)


# ---------------------------------------------------------------- every rule, one at a time
def test_defaults_and_identity():
    assert DesiredVolume('a') == DesiredVolume('a', True, None, None, None)
    assert ActualVolume('a') == ActualVolume('a', 0, None, frozenset(), False, False)
    att = Attachment('vm1', 'vdb', 'a')
    observed = (att.readonly, att.bus, att.serial, att.live, att.persistent, att.vm_running, att.uncertain)
    assert observed == (False, None, None, False, False, False, False)
    assert att.identity() == ('vm1', 'vdb', 'a', False, None, None)
    assert Attachment('vm1', 'vdb', 'a', True, 'scsi', 's1', live=True).identity() == ('vm1', 'vdb', 'a', True, 'scsi', 's1')
    assert v.TEARDOWN_KINDS == ('detach_live', 'detach_config', 'delete_volume')
    assert v.SETUP_KINDS == ('create_volume', 'grow_volume', 'attach_config', 'attach_live')
    assert (v.BACKOFF_INITIAL, v.BACKOFF_CAP) == (0.5, 122.0)


def test_operation_and_plan_words():
    assert v.Operation('create_volume', 'a', detail=(('capacity', 1),)).as_dict() == {'op': 'create_volume', 'volume': 'a', 'capacity': 1}
    assert v.Operation('attach_live', 'a', 'vm1', 'vdb').as_dict() == {'op': 'attach_live', 'volume': 'a', 'vm': 'vm1', 'target': 'vdb'}
    assert v.VolumePlan().empty
    assert not v.VolumePlan(refusals=[{}]).empty and not v.VolumePlan(deferred=[{}]).empty
    assert not v.VolumePlan(operations=[v.Operation('delete_volume', 'a')]).empty
    assert v.VolumePlan(uncertain=['x']).empty           # what cannot be confirmed is reported, not done


def test_backoff_bounds():
    assert v.backoff_delay(0) == 0.0 and v.backoff_delay(-2) == 0.0
    assert v.backoff_delay(8) == 64.0 and v.backoff_delay(9) == 122.0


def test_backoff_window_edges():
    desired = [DesiredVolume('a', capacity=GiB)]
    # one failure at t=10: retry allowed from t=10.5
    plan = v.plan_volumes(desired, [], [], [], failures={'a': 1}, last_failure={'a': 10.0}, now=10.25)
    assert plan.operations == [] and plan.deferred == [{'volume': 'a', 'reason': 'backing off after 1 failure(s)', 'retry_in': 0.25}]
    assert kinds(v.plan_volumes(desired, [], [], [], failures={'a': 1}, last_failure={'a': 10.0}, now=10.5)) == [('create_volume', 'a', None)]
    # failures without a recorded time count from 0
    assert v.plan_volumes(desired, [], [], [], failures={'a': 2}, now=0.5).deferred[0]['retry_in'] == 0.5
    assert kinds(v.plan_volumes(desired, [], [], [], failures={'a': 2}, now=1.0)) == [('create_volume', 'a', None)]
    # another volume's failures do not hold this one back
    assert kinds(v.plan_volumes(desired, [], [], [], failures={'b': 5}, last_failure={'b': 0.0}, now=0.0)) == [('create_volume', 'a', None)]


def test_create_carries_its_detail():
    plan = v.plan_volumes([DesiredVolume('a', capacity=GiB, fmt='qcow2', source='clone:b')], [], [], [])
    assert [op.as_dict() for op in plan.operations] == [
        {'op': 'create_volume', 'volume': 'a', 'capacity': GiB, 'format': 'qcow2', 'source': 'clone:b'}]


def test_busy_volume_defers_every_kind():
    busy = ActualVolume('a', GiB, used_by=frozenset({'vm1'}), busy=True)
    actual = [Attachment('vm1', 'vdb', 'a', persistent=True)]
    plan = v.plan_volumes([DesiredVolume('a', present=False)], [busy], [], actual, managed_vms={'vm1'})
    assert plan.operations == [] and plan.deferred[0] == {'volume': 'a', 'reason': 'an operation on this volume is still in flight'}
    plan = v.plan_volumes([DesiredVolume('a', capacity=2 * GiB)], [ActualVolume('a', GiB, busy=True)], [Attachment('vm1', 'vdb', 'a')], [],
                          vms_running={'vm1': False})
    assert plan.operations == [] and [d['volume'] for d in plan.deferred] == ['a', 'a']      # the grow and the attach


def test_detach_from_a_running_guest_with_force_live_then_config():
    actual = [Attachment('vm1', 'vdb', 'a', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([], [ActualVolume('a', GiB, used_by=frozenset({'vm1'}))], [], actual, managed_vms={'vm1'}, force_detach=True)
    assert kinds(plan) == [('detach_live', 'a', 'vm1'), ('detach_config', 'a', 'vm1')]
    assert [op.as_dict() for op in plan.operations][0] == {'op': 'detach_live', 'volume': 'a', 'vm': 'vm1', 'target': 'vdb'}
    # a live-only (transient) disk of a running guest: only the live detach
    live_only = [Attachment('vm1', 'vdb', 'a', live=True, vm_running=True)]
    assert kinds(v.plan_volumes([], [ActualVolume('a', GiB)], [], live_only, managed_vms={'vm1'}, force_detach=True)) == [
        ('detach_live', 'a', 'vm1')]
    # a live record on a guest that does not run: nothing to unplug, the config is detached without force
    stale_live = [Attachment('vm1', 'vdb', 'a', live=True, persistent=True, vm_running=False)]
    assert kinds(v.plan_volumes([], [ActualVolume('a', GiB)], [], stale_live, managed_vms={'vm1'})) == [('detach_config', 'a', 'vm1')]


def test_refusal_words():
    actual = [Attachment('vm1', 'vdb', 'a', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([], [ActualVolume('a', GiB)], [], actual, managed_vms={'vm1'})
    assert plan.refusals == [{'volume': 'a', 'vm': 'vm1', 'target': 'vdb',
                              'reason': 'attached to running VM vm1 at vdb; detaching from a running guest needs force'}]
    plan = v.plan_volumes([DesiredVolume('a', capacity=GiB)], [ActualVolume('a', 2 * GiB)], [], [])
    assert plan.refusals == [{'volume': 'a', 'reason': 'shrinking from %d to %d bytes would lose data; volumes are never shrunk' % (2 * GiB, GiB),
                              'capacity': 2 * GiB, 'requested': GiB}]
    plan = v.plan_volumes([], [ActualVolume('x', GiB), ActualVolume('y', GiB)], [Attachment('vm1', 'vdb', 'y')],
                          [Attachment('vm1', 'vdb', 'x', persistent=True)], managed_vms=set())
    assert plan.refusals == [{'volume': 'y', 'vm': 'vm1', 'target': 'vdb', 'reason': 'target vdb of vm1 is occupied by x'}]
    plan = v.plan_volumes([], [], [Attachment('vm1', 'vdb', 'ghost')], [], vms_running={'vm1': False})
    assert plan.refusals == [{'volume': 'ghost', 'vm': 'vm1', 'target': 'vdb', 'reason': 'volume ghost does not exist and is not declared present'}]


def test_delete_is_refused_while_a_declared_attachment_wants_the_volume():
    plan = v.plan_volumes([DesiredVolume('a', present=False)], [ActualVolume('a', GiB)], [Attachment('vm2', 'vdb', 'a')], [],
                          vms_running={'vm2': False})
    assert plan.refusals[0] == {'volume': 'a', 'reason': 'in use by vm2; detach it first', 'used_by': ['vm2']}
    # and the attachment itself is refused: the volume is declared absent
    assert plan.refusals[1]['reason'] == 'volume a does not exist and is not declared present'
    assert plan.operations == []


def test_delete_of_a_missing_or_present_volume_does_nothing():
    assert v.plan_volumes([DesiredVolume('a', present=False)], [], [], []).empty
    assert v.plan_volumes([DesiredVolume('a')], [ActualVolume('a', GiB)], [], []).empty
    plan = v.plan_volumes([DesiredVolume('a', present=False)], [ActualVolume('a', GiB, uncertain=True)], [], [])
    assert plan.operations == [] and plan.uncertain == ['a']
    plan = v.plan_volumes([DesiredVolume('a', present=False)], [ActualVolume('a', GiB)], [], [], failures={'a': 3}, last_failure={'a': 0.0})
    assert plan.operations == [] and plan.deferred[0]['volume'] == 'a'


def test_uncertain_volumes_are_never_changed():
    plan = v.plan_volumes([DesiredVolume('a', capacity=2 * GiB)], [ActualVolume('a', GiB, uncertain=True)], [], [])
    assert plan.operations == [] and plan.uncertain == ['a']
    actual = [Attachment('vm1', 'vdb', 'a', persistent=True)]
    plan = v.plan_volumes([], [ActualVolume('a', GiB, used_by=frozenset({'vm1'}), uncertain=True)], [], actual, managed_vms={'vm1'})
    assert plan.operations == [] and plan.uncertain == ['vm1:vdb']


def test_grow_offline_and_in_the_same_pass_as_a_detach():
    plan = v.plan_volumes([DesiredVolume('a', capacity=2 * GiB)], [ActualVolume('a', GiB)], [], [])
    assert [op.as_dict() for op in plan.operations] == [{'op': 'grow_volume', 'volume': 'a', 'from': GiB, 'to': 2 * GiB, 'online': False}]
    # attached to a stopped guest: offline
    actual = [Attachment('vm1', 'vdb', 'a', persistent=True, vm_running=False)]
    plan = v.plan_volumes([DesiredVolume('a', capacity=2 * GiB)], [ActualVolume('a', GiB)], [Attachment('vm1', 'vdb', 'a')], actual)
    assert dict(plan.operations[0].detail)['online'] is False
    # detached in this pass after failures: the volume was touched, the grow is not held back by its backoff
    actual = [Attachment('vm1', 'vdb', 'a', persistent=True)]
    plan = v.plan_volumes([DesiredVolume('a', capacity=2 * GiB)], [ActualVolume('a', GiB)], [], actual, managed_vms={'vm1'},
                          failures={'a': 1}, last_failure={'a': 0.0}, now=1.0)
    assert kinds(plan) == [('detach_config', 'a', 'vm1'), ('grow_volume', 'a', None)]
    assert v.plan_volumes([DesiredVolume('a', capacity=2 * GiB)], [ActualVolume('a', GiB)], [], [], failures={'a': 3},
                          last_failure={'a': 0.0}, now=1.0).deferred


def test_attach_detail_and_running_map():
    desired = [Attachment('vm1', 'vdb', 'a', readonly=True, bus='scsi', serial='s1')]
    plan = v.plan_volumes([], [ActualVolume('a', GiB)], desired, [], vms_running={'vm1': True})
    assert [op.as_dict() for op in plan.operations] == [
        {'op': 'attach_config', 'volume': 'a', 'vm': 'vm1', 'target': 'vdb', 'readonly': True, 'bus': 'scsi', 'serial': 's1'},
        {'op': 'attach_live', 'volume': 'a', 'vm': 'vm1', 'target': 'vdb', 'readonly': True, 'bus': 'scsi', 'serial': 's1'}]
    # a VM not named in vms_running is taken as not running; another attachment of the VM says otherwise
    assert kinds(v.plan_volumes([], [ActualVolume('a', GiB)], [Attachment('vm1', 'vdb', 'a')], [])) == [('attach_config', 'a', 'vm1')]
    other = [Attachment('vm1', 'vda', 'root', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([], [ActualVolume('a', GiB), ActualVolume('root', GiB)], [Attachment('vm1', 'vdb', 'a')], other,
                          managed_vms=set(), vms_running={'vm1': False})
    assert kinds(plan) == [('attach_config', 'a', 'vm1'), ('attach_live', 'a', 'vm1')]


def test_half_attached_disks_are_completed():
    # in the config only, the guest runs: plug it live
    have = [Attachment('vm1', 'vdb', 'a', persistent=True, vm_running=True)]
    assert kinds(v.plan_volumes([], [ActualVolume('a', GiB)], [Attachment('vm1', 'vdb', 'a')], have)) == [('attach_live', 'a', 'vm1')]
    # plugged live only: write it to the config
    have = [Attachment('vm1', 'vdb', 'a', live=True, vm_running=True)]
    assert kinds(v.plan_volumes([], [ActualVolume('a', GiB)], [Attachment('vm1', 'vdb', 'a')], have)) == [('attach_config', 'a', 'vm1')]
    # a persistent attachment of a volume that is gone from the pool is kept, not refused
    have = [Attachment('vm1', 'vdb', 'gone', persistent=True)]
    assert v.plan_volumes([], [], [Attachment('vm1', 'vdb', 'gone')], have).empty


def test_a_target_freed_in_the_same_pass_can_be_reused():
    actual = [Attachment('vm1', 'vdb', 'old', persistent=True)]
    plan = v.plan_volumes([], [ActualVolume('old', GiB), ActualVolume('new', GiB)], [Attachment('vm1', 'vdb', 'new')], actual)
    assert kinds(plan) == [('detach_config', 'old', 'vm1'), ('attach_config', 'new', 'vm1')]
    # a freed target of another VM does not count
    actual = [Attachment('vm1', 'vdb', 'old', persistent=True), Attachment('vm2', 'vdb', 'x', persistent=True)]
    plan = v.plan_volumes([], [ActualVolume('old', GiB), ActualVolume('new', GiB), ActualVolume('x', GiB)],
                          [Attachment('vm2', 'vdb', 'new')], actual, managed_vms={'vm1', 'vm2'})
    assert ('attach_config', 'new', 'vm2') in kinds(plan)


def test_an_attachment_waits_for_its_volumes_backoff():
    plan = v.plan_volumes([], [ActualVolume('a', GiB)], [Attachment('vm1', 'vdb', 'a')], [], failures={'a': 2}, last_failure={'a': 0.0},
                          now=0.1)
    assert plan.operations == [] and plan.deferred[0]['volume'] == 'a'
    # created in this pass: attached in the same pass
    plan = v.plan_volumes([DesiredVolume('a', capacity=GiB)], [], [Attachment('vm1', 'vdb', 'a')], [])
    assert kinds(plan) == [('create_volume', 'a', None), ('attach_config', 'a', 'vm1')]


def test_references_without_a_known_attachment_keep_a_volume():
    # the pool says vm9 uses it, no attachment of vm9 is known: in use all the same
    plan = v.plan_volumes([DesiredVolume('a', present=False)], [ActualVolume('a', GiB, used_by=frozenset({'vm9'}))], [], [])
    assert plan.refusals[0]['used_by'] == ['vm9']
    # detached here, still referenced by another VM: kept
    actual = [Attachment('vm1', 'vdb', 'a', persistent=True)]
    plan = v.plan_volumes([DesiredVolume('a', present=False)], [ActualVolume('a', GiB, used_by=frozenset({'vm1', 'vm9'}))], [], actual,
                          managed_vms={'vm1'})
    assert kinds(plan) == [('detach_config', 'a', 'vm1')] and plan.refusals[0]['used_by'] == ['vm9']


# ---------------------------------------------------------------- the model of the world
def test_apply_operation_each_kind():
    vols, atts = v.apply_operation([], [], v.Operation('create_volume', 'a', detail=(('capacity', GiB), ('format', 'raw'))))
    assert vols == [ActualVolume('a', GiB, 'raw')] and atts == []
    vols, atts = v.apply_operation([], [], v.Operation('create_volume', 'b', detail=(('capacity', None),)))
    assert vols == [ActualVolume('b', 0)]
    vols, atts = v.apply_operation([ActualVolume('a', GiB, 'qcow2')], [Attachment('vm1', 'vdb', 'a', persistent=True)],
                                   v.Operation('grow_volume', 'a', detail=(('from', GiB), ('to', 2 * GiB), ('online', False))))
    assert vols == [ActualVolume('a', 2 * GiB, 'qcow2', frozenset({'vm1'}))]
    vols, atts = v.apply_operation([ActualVolume('a', GiB)], [], v.Operation('delete_volume', 'a'))
    assert vols == [] and v.apply_operation([], [], v.Operation('delete_volume', 'zz')) == ([], [])
    both = [Attachment('vm1', 'vdb', 'a', live=True, persistent=True, vm_running=True), Attachment('vm1', 'vdc', 'b', persistent=True)]
    vols, atts = v.apply_operation([ActualVolume('a', GiB), ActualVolume('b', GiB)], both, v.Operation('detach_live', 'a', 'vm1', 'vdb'))
    assert atts == [Attachment('vm1', 'vdb', 'a', live=False, persistent=True, vm_running=True), both[1]]
    assert vols == [ActualVolume('a', GiB, used_by=frozenset({'vm1'})), ActualVolume('b', GiB, used_by=frozenset({'vm1'}))]
    vols, atts = v.apply_operation(vols, atts, v.Operation('detach_config', 'a', 'vm1', 'vdb'))
    assert atts == [both[1]] and vols[0].used_by == frozenset()


def test_apply_operation_keeps_flags_of_untouched_volumes():
    vols, _atts = v.apply_operation([ActualVolume('a', GiB, busy=True, uncertain=True)], [], v.Operation('create_volume', 'b'))
    assert vols[0] == ActualVolume('a', GiB, busy=True, uncertain=True)


def test_a_first_attachment_of_a_running_vm_runs():
    # regression: the model gave a new attachment vm_running=False on a running VM, so a later detach needed no force
    desired = [Attachment('vm1', 'vdb', 'a')]
    plan = v.plan_volumes([], [ActualVolume('a', GiB)], desired, [], vms_running={'vm1': True})
    vols, atts = [ActualVolume('a', GiB)], []
    for op in plan.operations:
        vols, atts = v.apply_operation(vols, atts, op)
    assert atts == [Attachment('vm1', 'vdb', 'a', live=True, persistent=True, vm_running=True)]
    again = v.plan_volumes([], vols, [], atts, managed_vms={'vm1'})
    assert again.operations == [] and 'needs force' in again.refusals[0]['reason']
    # a config-only attach of a running VM: vms_running tells the model
    _vols, atts = v.apply_operation([ActualVolume('a', GiB)], [], v.Operation('attach_config', 'a', 'vm1', 'vdb'), {'vm1': True})
    assert atts[0].vm_running is True and atts[0].live is False
    _vols, atts = v.apply_operation([ActualVolume('a', GiB)], [], v.Operation('attach_config', 'a', 'vm1', 'vdb'))
    assert atts[0].vm_running is False
    # the VM's other attachments tell too
    other = [Attachment('vm1', 'vda', 'root', live=True, persistent=True, vm_running=True)]
    _vols, atts = v.apply_operation([ActualVolume('a', GiB)], other, v.Operation('attach_config', 'a', 'vm1', 'vdb'), {'vm1': False})
    assert atts[-1].vm_running is True


# ---------------------------------------------------------------- every loop goes on past an item it skips
def fresh(word):
    """The same text in a new string object (names read from libvirt or the API are never the test's literals)."""
    return ''.join(list(word))


def test_records_are_immutable_values():
    import dataclasses
    for record in (DesiredVolume('a'), ActualVolume('a'), Attachment('vm1', 'vdb', 'a'), v.Operation('create_volume', 'a')):
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.key = 'b'
        assert hash(record) == hash(dataclasses.replace(record))


def test_teardown_goes_on_past_skipped_attachments():
    vols = [ActualVolume(k, GiB) for k in ('a', 'b', 'c', 'd', 'e', 'f')]
    actual = [
        Attachment('vm1', 'vda', 'a', persistent=True),                                    # wanted: kept
        Attachment('vm1', 'vdb', 'b', persistent=True, uncertain=True),                    # uncertain: left alone
        Attachment('vm1', 'vdc', 'c', live=True, persistent=True, vm_running=True),        # running, no force: refused
        Attachment('vm1', 'vdd', 'd', persistent=True),                                    # backing off: deferred
        Attachment('vm1', 'vde', 'e', persistent=True),                                    # detached
        Attachment('vm2', 'vdb', 'f', persistent=True),                                    # another VM's: untouched
    ]
    plan = v.plan_volumes([], vols, [Attachment('vm1', 'vda', 'a')], actual, managed_vms={'vm1'}, failures={'d': 1},
                          last_failure={'d': 0.0}, now=0.1)
    assert kinds(plan) == [('detach_config', 'e', 'vm1')]
    assert plan.uncertain == ['vm1:vdb'] and [r['volume'] for r in plan.refusals] == ['c'] and [d['volume'] for d in plan.deferred] == ['d']
    # each skip on its own, with the detach after it
    for skipped in actual[:4] + actual[5:]:
        plan = v.plan_volumes([], vols, [Attachment('vm1', 'vda', 'a')], [skipped, actual[4]], managed_vms={'vm1'}, failures={'d': 1},
                              last_failure={'d': 0.0}, now=0.1)
        assert ('detach_config', 'e', 'vm1') in kinds(plan), skipped


def test_deletes_go_on_past_skipped_volumes():
    vols = [ActualVolume('a', GiB), ActualVolume('b', GiB, uncertain=True), ActualVolume('c', GiB, used_by=frozenset({'vm9'})),
            ActualVolume('z', GiB)]
    for first in (DesiredVolume('a'), DesiredVolume('missing', present=False), DesiredVolume('b', present=False),
                  DesiredVolume('c', present=False)):
        plan = v.plan_volumes([first, DesiredVolume('z', present=False)], vols, [], [])
        assert ('delete_volume', 'z', None) in kinds(plan), first


def test_provisioning_goes_on_past_skipped_volumes():
    vols = [ActualVolume('b', GiB, uncertain=True), ActualVolume('c', GiB), ActualVolume('d', 2 * GiB), ActualVolume('e', GiB),
            ActualVolume('z', GiB)]
    for first in (DesiredVolume('new', capacity=GiB), DesiredVolume('gone', present=False), DesiredVolume('b', capacity=2 * GiB),
                  DesiredVolume('c'), DesiredVolume('e', capacity=GiB), DesiredVolume('d', capacity=GiB)):
        plan = v.plan_volumes([first, DesiredVolume('z', capacity=2 * GiB)], vols, [], [])
        assert ('grow_volume', 'z', None) in kinds(plan), first


def test_attaching_goes_on_past_skipped_attachments():
    vols = [ActualVolume(k, GiB) for k in ('a', 'b', 'x', 'z')]
    actual = [Attachment('vm1', 'vdb', 'x', persistent=True), Attachment('vm1', 'vdc', 'a', persistent=True)]
    firsts = (Attachment('vm1', 'vdd', 'ghost'),        # missing volume: refused
              Attachment('vm1', 'vdb', 'b'),            # target occupied (vm1 is not managed here): refused
              Attachment('vm1', 'vdc', 'a'),            # already attached: nothing to do
              Attachment('vm1', 'vde', 'x'))            # x is backing off: deferred
    for first in firsts:
        plan = v.plan_volumes([], vols, [first, Attachment('vm1', 'vdz', 'z')], actual, managed_vms=set(), failures={'x': 1},
                              last_failure={'x': 0.0}, now=0.1)
        assert ('attach_config', 'z', 'vm1') in kinds(plan), first


def test_default_now_and_rounding_of_retry_in():
    plan = v.plan_volumes([DesiredVolume('a', capacity=GiB)], [], [], [], failures={'a': 1}, last_failure={'a': 0.0})
    assert plan.deferred[0]['retry_in'] == 0.5
    plan = v.plan_volumes([DesiredVolume('a', capacity=GiB)], [], [], [], failures={'a': 1}, last_failure={'a': 0.0}, now=0.12345)
    assert plan.deferred[0]['retry_in'] == 0.377


def test_volume_in_use_by_a_declared_attachment_is_named_once():
    # vm1 holds it and the declaration wants it on vm1 too: in use by vm1, named once
    actual = [Attachment('vm1', 'vdb', 'b', live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([DesiredVolume('b', present=False)], [ActualVolume('b', GiB, used_by=frozenset({'vm1'}))],
                          [Attachment('vm1', 'vdc', 'b')], actual, managed_vms={'vm1'})
    assert plan.refusals[1] == {'volume': 'b', 'reason': 'in use by vm1; detach it first', 'used_by': ['vm1']}
    # declared attachments of other volumes, sorting before and after it, do not hold it
    wanted = [Attachment('vm1', 'vdb', 'a'), Attachment('vm1', 'vdc', 'c')]
    plan = v.plan_volumes([DesiredVolume(fresh('b'), present=False)], [ActualVolume('a', GiB), ActualVolume('b', GiB), ActualVolume('c', GiB)],
                          wanted, [], vms_running={'vm1': False})
    assert ('delete_volume', 'b', None) in kinds(plan) and not plan.refusals
    plan = v.plan_volumes([DesiredVolume('b', present=False)], [ActualVolume(fresh('b'), GiB)], [Attachment('vm1', 'vdb', fresh('b'))], [],
                          vms_running={'vm1': False})
    assert plan.refusals[0]['used_by'] == ['vm1']


def test_online_grow_needs_this_volume_live_on_a_running_guest():
    others = [Attachment('vm1', 'vda', 'aa', live=True, persistent=True, vm_running=True),
              Attachment('vm1', 'vdc', 'zz', live=True, persistent=True, vm_running=True),
              Attachment('vm2', 'vdb', 'm', persistent=True, vm_running=True)]
    plan = v.plan_volumes([DesiredVolume('m', capacity=2 * GiB)], [ActualVolume('m', GiB)], [], others, managed_vms=set())
    assert dict(plan.operations[0].detail)['online'] is False
    live = [Attachment('vm2', 'vdb', fresh('m'), live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([DesiredVolume(fresh('m'), capacity=2 * GiB)], [ActualVolume('m', GiB)], [], live, managed_vms=set())
    assert dict(plan.operations[0].detail)['online'] is True


def test_a_volume_only_detached_in_this_pass_is_not_created():
    # the attachment of a volume missing from the pool is detached; attaching it elsewhere is still refused
    actual = [Attachment('vm1', 'vdb', 'gone', persistent=True)]
    plan = v.plan_volumes([], [], [Attachment('vm1', 'vdc', 'gone')], actual, managed_vms={'vm1'})
    assert kinds(plan) == [('detach_config', 'gone', 'vm1')]
    assert plan.refusals == [{'volume': 'gone', 'vm': 'vm1', 'target': 'vdc', 'reason': 'volume gone does not exist and is not declared present'}]


@pytest.mark.parametrize('occupant, refused', [
    (Attachment('vm2', 'vdb', 'x', persistent=True), False),       # the same target of another VM
    (Attachment('vm0', 'vdb', 'x', persistent=True), False),
    (Attachment('vm1', 'vdc', 'x', persistent=True), False),       # another target of the same VM
    (Attachment('vm1', 'vda', 'x', persistent=True), False),
    (Attachment('vm1', 'vdb', 'x', persistent=True), True),
    (Attachment('vm1', 'vdb', 'z', persistent=True), True),        # a volume sorting after the wanted one
    (Attachment(fresh('vm1'), fresh('vdb'), 'x', persistent=True), True),
])
def test_occupied_targets(occupant, refused):
    plan = v.plan_volumes([], [ActualVolume(k, GiB) for k in ('x', 'y', 'z')], [Attachment('vm1', 'vdb', 'y')], [occupant], managed_vms=set(),
                          vms_running={'vm1': False})
    assert bool(plan.refusals) is refused and (('attach_config', 'y', 'vm1') in kinds(plan)) is not refused


def test_the_first_occupant_is_named():
    occupants = [Attachment('vm1', 'vdb', 'x', persistent=True), Attachment('vm1', 'vdb', 'w', live=True, vm_running=True)]
    plan = v.plan_volumes([], [ActualVolume(k, GiB) for k in ('w', 'x', 'y')], [Attachment('vm1', 'vdb', 'y')], occupants, managed_vms=set())
    assert plan.refusals[0]['reason'] == 'target vdb of vm1 is occupied by x'


@pytest.mark.parametrize('other', [
    Attachment('vm1', 'vdc', 'w', persistent=True), Attachment('vm1', 'vda', 'w', persistent=True),
    Attachment('vm0', 'vdb', 'w', persistent=True), Attachment('vm2', 'vdb', 'w', persistent=True),
])
def test_only_a_detach_of_the_occupant_itself_frees_its_target(other):
    # the occupant stays (running, no force); detaching another attachment (of vm1 or at vdb) does not free vdb of vm1
    occupant = Attachment('vm1', 'vdb', 'x', live=True, persistent=True, vm_running=True)
    managed = {'vm0', 'vm1', 'vm2'}
    wanted = [Attachment('vm1', 'vdb', 'y')]
    plan = v.plan_volumes([], [ActualVolume(k, GiB) for k in ('w', 'x', 'y')], wanted, [occupant, other], managed_vms=managed)
    assert ('detach_config', 'w', other.vm) in kinds(plan)
    assert not any(op.kind.startswith('attach') for op in plan.operations)
    assert any('occupied by x' in r['reason'] for r in plan.refusals)
    # the occupant's own detach does free it
    plan = v.plan_volumes([], [ActualVolume(k, GiB) for k in ('w', 'x', 'y')], wanted, [occupant, other], managed_vms=managed,
                          force_detach=True)
    assert ('attach_config', 'y', 'vm1') in kinds(plan)


def test_apply_operation_matches_by_value_and_leaves_other_records():
    atts = [Attachment('vm1', 'vda', 'a', live=True, persistent=True, vm_running=True),
            Attachment('vm1', 'vdb', 'b', live=True, persistent=True, vm_running=True),
            Attachment('vm1', 'vdc', 'c', live=True, persistent=True, vm_running=True)]
    vols = [ActualVolume(k, GiB) for k in ('a', 'b', 'c')]
    # a config detach keeps the guest's live disk; a live detach keeps the config
    _vols, after = v.apply_operation(vols, atts, v.Operation(fresh('detach_config'), 'b', fresh('vm1'), fresh('vdb')))
    assert after == [atts[0], Attachment('vm1', 'vdb', 'b', live=True, persistent=False, vm_running=True), atts[2]]
    _vols, after = v.apply_operation(vols, atts, v.Operation(fresh('detach_live'), 'b', 'vm1', 'vdb'))
    assert after == [atts[0], Attachment('vm1', 'vdb', 'b', live=False, persistent=True, vm_running=True), atts[2]]
    # kinds read as words
    assert v.apply_operation([], [], v.Operation(fresh('create_volume'), 'n', detail=(('capacity', 1),)))[0] == [ActualVolume('n', 1)]
    assert v.apply_operation(vols, [], v.Operation(fresh('delete_volume'), 'a'))[0] == vols[1:]
    grown = v.apply_operation(vols, [], v.Operation(fresh('grow_volume'), 'a', detail=(('to', 2 * GiB),)))[0]
    assert grown[0].capacity == 2 * GiB


def test_apply_attach_alone_and_by_value():
    # a live attach alone is not persistent, a config attach alone is not live, and a detail-less one is read-write
    _vols, atts = v.apply_operation([ActualVolume('a', GiB)], [], v.Operation('attach_live', 'a', 'vm1', 'vdb'))
    assert atts == [Attachment('vm1', 'vdb', 'a', live=True, persistent=False, vm_running=True)]
    _vols, atts = v.apply_operation([ActualVolume('a', GiB)], [], v.Operation(fresh('attach_config'), 'a', 'vm1', 'vdb'))
    assert atts == [Attachment('vm1', 'vdb', 'a', live=False, persistent=True, vm_running=False)]
    _vols, atts = v.apply_operation([ActualVolume('a', GiB)], [], v.Operation(fresh('attach_live'), 'a', 'vm1', 'vdb'))
    assert atts[0].live and atts[0].vm_running
    # another volume at the same target, sorting before or after, is another record
    for other in ('A', 'a', 'z'):
        present = [Attachment('vm1', 'vdb', other, persistent=True)]
        _vols, atts = v.apply_operation([], present, v.Operation('attach_live', 'm', 'vm1', 'vdb'))
        assert atts == present + [Attachment('vm1', 'vdb', 'm', live=True, vm_running=True)], other
    # the same record, found by value, is completed
    present = [Attachment('vm1', 'vdb', 'm', persistent=True, vm_running=True)]
    _vols, atts = v.apply_operation([], present, v.Operation('attach_live', fresh('m'), fresh('vm1'), fresh('vdb')))
    assert atts == [Attachment('vm1', 'vdb', 'm', live=True, persistent=True, vm_running=True)]
    # the VM's other records tell whether it runs, found by value
    _vols, atts = v.apply_operation([], [Attachment('vm1', 'vda', 'r', vm_running=True, persistent=True)],
                                    v.Operation('attach_config', 'm', fresh('vm1'), 'vdb'))
    assert atts[-1].vm_running is True


def test_refusal_names_only_the_vms_that_hold_or_want_the_volume():
    actual = [Attachment('vm1', 'vdb', 'bb', live=True, persistent=True, vm_running=True)]
    wanted = [Attachment('vm1', 'vdb', 'bb'), Attachment('vm2', 'vdc', 'aa'), Attachment('vm3', 'vdd', 'cc')]
    plan = v.plan_volumes([DesiredVolume('bb', present=False)], [ActualVolume(k, GiB) for k in ('aa', 'bb', 'cc')], wanted, actual,
                          vms_running={'vm2': False, 'vm3': False})
    assert plan.refusals[0] == {'volume': 'bb', 'reason': 'in use by vm1; detach it first', 'used_by': ['vm1']}


def test_names_are_compared_by_value():
    # names of more than one character: CPython keeps one object per one-character string
    live = [Attachment('vm2', 'vdb', fresh('data'), live=True, persistent=True, vm_running=True)]
    plan = v.plan_volumes([DesiredVolume(fresh('data'), capacity=2 * GiB)], [ActualVolume('data', GiB)], [], live, managed_vms=set())
    assert dict(plan.operations[0].detail)['online'] is True
    occupant = Attachment(fresh('vm1'), fresh('vdb'), 'xx', live=True, persistent=True, vm_running=True)
    wanted = [Attachment('vm1', 'vdb', 'yy')]
    plan = v.plan_volumes([], [ActualVolume(k, GiB) for k in ('xx', 'yy')], wanted, [occupant], managed_vms={'vm1'}, force_detach=True)
    assert kinds(plan) == [('detach_live', 'xx', 'vm1'), ('detach_config', 'xx', 'vm1'), ('attach_config', 'yy', 'vm1'),
                           ('attach_live', 'yy', 'vm1')]


def test_a_target_is_free_only_when_every_disk_at_it_is_detached():
    # regression: detaching the config disk at vdb made vdb look free while another disk stayed plugged in live there
    config_only = Attachment('vm1', 'vdb', 'xx', persistent=True, vm_running=True)
    live_only = Attachment('vm1', 'vdb', 'ww', live=True, vm_running=True)
    vols = [ActualVolume(k, GiB) for k in ('ww', 'xx', 'yy')]
    plan = v.plan_volumes([], vols, [Attachment('vm1', 'vdb', 'yy')], [config_only, live_only])
    assert kinds(plan) == [('detach_config', 'xx', 'vm1')]
    assert [r['reason'] for r in plan.refusals] == ['attached to running VM vm1 at vdb; detaching from a running guest needs force',
                                                    'target vdb of vm1 is occupied by ww']
    # with force both go, and the target is free
    plan = v.plan_volumes([], vols, [Attachment('vm1', 'vdb', 'yy')], [config_only, live_only], force_detach=True)
    assert kinds(plan) == [('detach_config', 'xx', 'vm1'), ('detach_live', 'ww', 'vm1'), ('attach_config', 'yy', 'vm1'),
                           ('attach_live', 'yy', 'vm1')]
