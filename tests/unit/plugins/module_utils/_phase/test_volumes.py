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


@settings(max_examples=300, deadline=None)
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


@settings(max_examples=300, deadline=None)
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
