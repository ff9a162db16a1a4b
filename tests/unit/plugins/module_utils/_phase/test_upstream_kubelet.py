# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubelet's volume reconciler test cases, expressed in our volume planner.

Each case names the test of kubernetes pkg/kubelet/volumemanager/reconciler/reconciler_test.go it restates. Their
mapping: a pod's volume is a VM's disk; attach (to the node) + mount device + set up is our config attach + live
attach; tear down + unmount device + detach is our live detach + config detach; an uncertain mount is an
uncertain attachment. The reconciler's operation backoff is nestedpendingoperations' exponential backoff
(initialDurationBeforeRetry 500 ms, maxDurationBeforeRetry 2 min 2 s).
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import deviations
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as v
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import ActualVolume, Attachment, DesiredVolume

GiB = 1024 ** 3


def kinds(plan):
    return [(op.kind, op.volume, op.vm) for op in plan.operations]


def run(desired_vols, actual_vols, desired_atts, actual_atts, **kwargs):
    """One pass, applied to the model: (first plan, the world after it, the plan of the next pass)."""
    plan = v.plan_volumes(desired_vols, actual_vols, desired_atts, actual_atts, **kwargs)
    vols, atts = actual_vols, actual_atts
    for op in plan.operations:
        vols, atts = v.apply_operation(vols, atts, op, kwargs.get('vms_running'))
    return plan, (vols, atts), v.plan_volumes(desired_vols, vols, desired_atts, atts, **kwargs)


def test_run_positive_do_nothing():
    # Test_Run_Positive_DoNothing: nothing desired, nothing attached -> no attach, mount, teardown or detach call
    assert v.plan_volumes([], [], [], []).empty


def test_run_positive_volume_attach_and_mount():
    # Test_Run_Positive_VolumeAttachAndMount: one attach, one mount device, one set up, no teardown, no detach
    plan, (_vols, atts), again = run([], [ActualVolume('vol', GiB)], [Attachment('pod1', 'vdb', 'vol')], [], vms_running={'pod1': True})
    assert kinds(plan) == [('attach_config', 'vol', 'pod1'), ('attach_live', 'vol', 'pod1')]
    assert again.empty and [(a.live, a.persistent, a.vm_running) for a in atts] == [(True, True, True)]


def test_run_positive_volume_attach_mount_unmount_detach():
    # Test_Run_Positive_VolumeAttachMountUnmountDetach: once the pod is deleted from the desired state, one tear down
    # and one detach (ours: the running guest's disk goes only when forced, live before config)
    _plan, (vols, atts), _again = run([], [ActualVolume('vol', GiB)], [Attachment('pod1', 'vdb', 'vol')], [], vms_running={'pod1': True})
    refused = v.plan_volumes([], vols, [], atts, managed_vms={'pod1'})
    assert refused.operations == [] and 'needs force' in refused.refusals[0]['reason']
    plan, (_vols, atts), again = run([], vols, [], atts, managed_vms={'pod1'}, force_detach=True)
    assert kinds(plan) == [('detach_live', 'vol', 'pod1'), ('detach_config', 'vol', 'pod1')]
    assert atts == [] and again.empty


def test_run_positive_volume_fs_resize_controller_attach_enabled():
    # Test_Run_Positive_VolumeFSResizeControllerAttachEnabled / expand-fs-volume: a mounted volume grows in place
    actual = [Attachment('pod1', 'vdb', 'pv', live=True, persistent=True, vm_running=True)]
    plan, (vols, _atts), again = run([DesiredVolume('pv', capacity=15 * GiB)], [ActualVolume('pv', 10 * GiB, used_by=frozenset({'pod1'}))],
                                     [Attachment('pod1', 'vdb', 'pv')], actual)
    assert [op.as_dict() for op in plan.operations] == [{'op': 'grow_volume', 'volume': 'pv', 'from': 10 * GiB, 'to': 15 * GiB, 'online': True}]
    assert vols[0].capacity == 15 * GiB and again.empty


def test_uncertain_device_global_mounts_failed_operation_leaves_nothing_to_tear_down():
    # Test_UncertainDeviceGlobalMounts / "failed operation should result in not-mounted device": no unmount call
    assert v.plan_volumes([], [ActualVolume('pv', GiB)], [], [], managed_vms={'pod1'}).empty


def test_uncertain_mounts_are_left_alone_a_listed_deviation():
    # Test_UncertainDeviceGlobalMounts / "timed out operations should result in device marked as uncertain" and
    # Test_UncertainVolumeMountState / "timed out operations should result in volume marked as uncertain": kubelet
    # unmounts once the pod is gone; ours leaves an attachment it cannot confirm alone and says so
    actual = [Attachment('pod1', 'vdb', 'pv', persistent=True, uncertain=True)]
    plan = v.plan_volumes([], [ActualVolume('pv', GiB, used_by=frozenset({'pod1'}))], [], actual, managed_vms={'pod1'}, force_detach=True)
    assert plan.operations == [] and plan.uncertain == ['pod1:vdb']
    assert deviations.by_key('uncertain-attachments')


def test_operation_backoff_as_nestedpendingoperations_does_it():
    # exponentialBackoff: 500 ms, doubled after each failure, capped at 2 min 2 s
    assert [v.backoff_delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert v.backoff_delay(8) == 64.0 and v.backoff_delay(9) == 122.0 and v.backoff_delay(50) == 122.0
