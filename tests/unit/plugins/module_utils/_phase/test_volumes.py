# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The volume planner.

Source: kubelet pkg/kubelet/volumemanager/reconciler (seed 003): teardown
(unmount -> unmount device -> detach) before setup (attach -> mount device ->
set up), exponential backoff of failed operations, one operation per volume.
"""

from __future__ import annotations

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
                vol = draw(st.sampled_from(VOLS))
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
                desired_atts.append(Attachment(vm, target, draw(st.sampled_from(VOLS))))
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
