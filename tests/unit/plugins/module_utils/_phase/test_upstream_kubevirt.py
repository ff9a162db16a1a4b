# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's own test cases, expressed in our tables.

Each case names the upstream test it restates (file, Ginkgo Context / DescribeTable / It description, Entry).
Read from kubevirt/kubevirt at d923fdb8 (2026-08):
- VM = pkg/virt-controller/watch/vm/vm_test.go, Context "VM printableStatus" (the printable status, through the same
  VirtualMachine/VMI/DataVolume/PVC mapping the KubeVirt backend uses);
- HANDLER = pkg/virt-handler/vm_test.go (the VMI phase from the domain, calculateVmPhaseForStatusReason);
- MIGRATION = pkg/virt-controller/watch/migration/migration_test.go (the migration controller).
A case our tables cannot express (no field for it) is left out; a case where we differ on purpose is pinned here and
named in :data:`deviations.DEVIATIONS` (docs/states.md lists them).
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import deviations
from ansible_collections.converge.virt.plugins.module_utils._phase import migration as m
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_state as ds
from ansible_collections.converge.virt.plugins.module_utils._libvirt import views as libvirt_views
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import views as kubevirt_views
from ansible_collections.converge.virt.plugins.module_utils._phase.migration import MigrationObservation as Obs

VM = 'vm_test.go VM printableStatus: '
HANDLER = 'virt-handler vm_test.go: '
MIGRATION = 'migration_test.go: '
NOW = '2026-01-01T00:00:00Z'


# ------------------------------------------------------------------ objects as the KubeVirt API returns them
def vm(run_strategy='Always', volumes=None, status=None, deleting=False):
    meta = {'name': 'testvmi', 'namespace': 'default', 'uid': 'vm-uid', 'generation': 1}
    if deleting:
        meta['deletionTimestamp'] = NOW
    return {'metadata': meta, 'spec': {'runStrategy': run_strategy, 'template': {'spec': {'volumes': volumes or []}}},
            'status': status or {}}


def vmi(phase='Running', conditions=(), deleting=False, migration=None):
    meta = {'name': 'testvmi', 'uid': 'vmi-uid'}
    if deleting:
        meta['deletionTimestamp'] = NOW
    status = {'phase': phase, 'conditions': list(conditions)}
    if migration is not None:
        status['migrationState'] = migration
    return {'metadata': meta, 'status': status}


def cond(ctype, status='True', reason=''):
    return {'type': ctype, 'status': status, 'reason': reason}


def dv(name, phase, *conditions):
    return {'metadata': {'name': name}, 'status': {'phase': phase, 'conditions': list(conditions)}}


def pvc(name, phase):
    return {'metadata': {'name': name}, 'status': {'phase': phase}}


DV1 = [{'name': 'test1', 'dataVolume': {'name': 'dv1'}}]
DV2 = DV1 + [{'name': 'test2', 'dataVolume': {'name': 'dv2'}}]
PVC1 = [{'name': 'test1', 'persistentVolumeClaim': {'claimName': 'pvc1'}}]
BOUND = cond('Bound')
FAIL_1 = {'startFailure': {'consecutiveFailCount': 1, 'retryAfterTimestamp': NOW}}

# (upstream test, VirtualMachine, VMI or None, DataVolumes, PVCs, expected printable status)
PRINTABLE_STATUS = [
    ("Should set a Stopped status when running=false and VMI doesn't exist", vm('Halted'), None, [], [], 'Stopped'),
    ('should set a Stopped status when VMI exists but stopped / in Succeeded state', vm(), vmi('Succeeded'), [], [], 'Stopped'),
    ('should set a Stopped status when VMI exists but stopped / in Succeeded state with a deletionTimestamp', vm(),
     vmi('Succeeded', deleting=True), [], [], 'Stopped'),
    ('should set a Stopped status when VMI exists but stopped / in Failed state', vm(), vmi('Failed'), [], [], 'Stopped'),
    ('should set a Stopped status when VMI exists but stopped / in Failed state with a deletionTimestamp', vm(),
     vmi('Failed', deleting=True), [], [], 'Stopped'),
    ("Should set a Starting status when running=true and VMI doesn't exist", vm(), None, [], [], 'Starting'),
    ('Should set a Starting status when VMI is in a startup phase / VMI has no phase set', vm(), vmi(''), [], [], 'Starting'),
    ('Should set a Starting status when VMI is in a startup phase / VMI is in Pending phase', vm(), vmi('Pending'), [], [], 'Starting'),
    ('Should set a Starting status when VMI is in a startup phase / VMI is in Scheduling phase', vm(), vmi('Scheduling'), [], [], 'Starting'),
    ('Should set a Starting status when VMI is in a startup phase / VMI is in Scheduled phase', vm(), vmi('Scheduled'), [], [], 'Starting'),
    ('Should set a CrashLoop status when VMI is deleted and VM is in crash loop backoff / vm with runStrategy always and crash loop',
     vm('Always', status=FAIL_1), None, [], [], 'CrashLoopBackOff'),
    ('Should set a CrashLoop status ... / vm with runStrategy rerun on failure and crash loop',
     vm('RerunOnFailure', status=FAIL_1), None, [], [], 'CrashLoopBackOff'),
    ('Should set a CrashLoop status ... / vm with runStrategy halt should not report crash loop',
     vm('Halted', status=FAIL_1), None, [], [], 'Stopped'),
    ('Should set a CrashLoop status ... / vm with runStrategy manual should not report crash loop',
     vm('Manual', status=FAIL_1), None, [], [], 'Stopped'),
    ('Should set a CrashLoop status ... / vm with runStrategy once should not report crash loop',
     vm('Once', status=FAIL_1), vmi('Running'), [], [], 'Running'),
    ('Should set a CrashLoop status ... / vm with runStrategy always and VMI still exists should not report crash loop',
     vm('Always', status=FAIL_1), vmi('Running'), [], [], 'Running'),
    ('VM with DataVolumes: Should set a appropriate status when DataVolume exists but not bound / Started VM PendingPopulation',
     vm('Always', DV1), None, [dv('dv1', 'PendingPopulation')], [pvc('dv1', 'Pending')], 'WaitingForVolumeBinding'),
    ('... DataVolume exists but not bound / Started VM WFFC',
     vm('Always', DV1), None, [dv('dv1', 'WaitForFirstConsumer')], [pvc('dv1', 'Pending')], 'WaitingForVolumeBinding'),
    ('... DataVolume exists but not bound / Stopped VM PendingPopulation',
     vm('Halted', DV1), None, [dv('dv1', 'PendingPopulation')], [pvc('dv1', 'Pending')], 'Stopped'),
    ('... DataVolume exists but not bound / Stopped VM',
     vm('Halted', DV1), None, [dv('dv1', 'WaitForFirstConsumer')], [pvc('dv1', 'Pending')], 'Stopped'),
    ('Should set a Provisioning status when DataVolume bound but not ready / DataVolume is in ImportScheduled phase',
     vm('Always', DV1), None, [dv('dv1', 'ImportScheduled', BOUND)], [], 'Provisioning'),
    ('Should set a Provisioning status when DataVolume bound but not ready / DataVolume is in ImportInProgress phase',
     vm('Always', DV1), None, [dv('dv1', 'ImportInProgress', BOUND)], [], 'Provisioning'),
    ('Should set a Provisioning status when DataVolume bound but not ready / DataVolume is in WaitForFirstConsumer phase',
     vm('Always', DV1), None, [dv('dv1', 'WaitForFirstConsumer', BOUND)], [], 'Provisioning'),
    ('Should set a DataVolumeError status when DataVolume reports an error / DataVolume is in Failed phase',
     vm('Always', DV1), None, [dv('dv1', 'Failed')], [], 'DataVolumeError'),
    ('Should set a DataVolumeError status when DataVolume reports an error / DataVolume Running condition is in error',
     vm('Always', DV1), None, [dv('dv1', '', cond('Running', 'False', 'Error'))], [], 'DataVolumeError'),
    ('Should clear a DataVolumeError status when the DataVolume error is gone',
     vm('Always', DV1, status={'printableStatus': 'DataVolumeError'}), None, [dv('dv1', 'CloneInProgress', BOUND)], [], 'Provisioning'),
    ("Should set a Provisioning status when one DataVolume is ready and another isn't",
     vm('Always', DV2), None, [dv('dv1', 'Succeeded', BOUND), dv('dv2', 'ImportInProgress', BOUND)], [], 'Provisioning'),
    ('should set a Provisioning status and add a Failure condition if DV PVC creation fails due to exceeded quota',
     vm('Always', DV1), None, [dv('dv1', 'Pending', cond('Bound', 'Unknown', 'ErrExceededQuota'))], [], 'Provisioning'),
    ('VM with PersistentVolumeClaims: Should set a WaitingForVolumeBinding status when PersistentVolumeClaim exists but unbound / '
     'PersistentVolumeClaim is in Pending phase', vm('Always', PVC1), None, [], [pvc('pvc1', 'Pending')], 'WaitingForVolumeBinding'),
    ('... PersistentVolumeClaim exists but unbound / PersistentVolumeClaim is in Lost phase',
     vm('Always', PVC1), None, [], [pvc('pvc1', 'Lost')], 'WaitingForVolumeBinding'),
    ('Should NOT set WaitingForVolumeBinding when RerunOnFailure VM was stopped and PVC is unbound',
     vm('RerunOnFailure', PVC1, status={'runStrategy': 'RerunOnFailure'}), None, [], [pvc('pvc1', 'Pending')], 'Stopped'),
    ('should set a Running status when VMI is running but not paused', vm(), vmi('Running'), [], [], 'Running'),
    ('should set a Paused status when VMI is running but is paused', vm(), vmi('Running', [cond('Paused')]), [], [], 'Paused'),
    ('should set a Stopping status when VMI has a deletion timestamp set / when VMI is pending', vm(), vmi('Pending', deleting=True),
     [], [], 'Stopping'),
    ('... Stopping ... / when VMI is provisioning', vm(), vmi('Pending', [cond('Provisioning')], deleting=True), [], [], 'Stopping'),
    ('... Stopping ... / when VMI is scheduling', vm(), vmi('Scheduling', deleting=True), [], [], 'Stopping'),
    ('... Stopping ... / when VMI is scheduled', vm(), vmi('Scheduled', deleting=True), [], [], 'Stopping'),
    ('... Stopping ... / when VMI is running', vm(), vmi('Running', deleting=True), [], [], 'Stopping'),
    ('... Stopping ... / when VMI is paused', vm(), vmi('Running', [cond('Paused')], deleting=True), [], [], 'Stopping'),
    ('should set a Terminating status when VM has a deletion timestamp set / when VMI exists / when VMI is pending',
     vm(deleting=True), vmi('Pending'), [], [], 'Terminating'),
    ('... Terminating ... / when VMI exists / when VMI is provisioning', vm(deleting=True), vmi('Pending', [cond('Provisioning')]), [], [],
     'Terminating'),
    ('... Terminating ... / when VMI exists / when VMI is scheduling', vm(deleting=True), vmi('Scheduling'), [], [], 'Terminating'),
    ('... Terminating ... / when VMI exists / when VMI is scheduled', vm(deleting=True), vmi('Scheduled'), [], [], 'Terminating'),
    ('... Terminating ... / when VMI exists / when VMI is running', vm(deleting=True), vmi('Running'), [], [], 'Terminating'),
    ('... Terminating ... / when VMI exists / when VMI is paused', vm(deleting=True), vmi('Running', [cond('Paused')]), [], [],
     'Terminating'),
    ('... Terminating ... / when VMI exists and has a deletion timestamp set', vm(deleting=True), vmi('Running', deleting=True), [], [],
     'Terminating'),
    ('... Terminating ... / when VMI does not exist / with running: true', vm('Always', deleting=True), None, [], [], 'Terminating'),
    ('... Terminating ... / when VMI does not exist / with running: false', vm('Halted', deleting=True), None, [], [], 'Terminating'),
    ('should set a Migrating status when VMI is migrating', vm(), vmi('Running', migration={'startTimestamp': NOW}), [], [], 'Migrating'),
    ('should set an Unknown status when VMI is in unknown phase', vm(), vmi('Unknown'), [], [], 'Unknown'),
    ('should set a failure status in accordance to VMI condition / FailedUnschedulable', vm(),
     vmi('Scheduling', [cond('PodScheduled', 'False', 'Unschedulable')]), [], [], 'ErrorUnschedulable'),
    ('should set a failure status in accordance to VMI condition / FailedPvcNotFound', vm(),
     vmi('Scheduling', [cond('Synchronized', 'False', 'FailedPvcNotFound')]), [], [], 'ErrorPvcNotFound'),
    ('should set an ImagePullBackOff/ErrPullImage statuses according to VMI Synchronized condition / Reason: ErrImagePull', vm(),
     vmi('Scheduling', [cond('Synchronized', 'False', 'ErrImagePull')]), [], [], 'ErrImagePull'),
    ('should set an ImagePullBackOff/ErrPullImage statuses according to VMI Synchronized condition / Reason: ImagePullBackOff', vm(),
     vmi('Scheduling', [cond('Synchronized', 'False', 'ImagePullBackOff')]), [], [], 'ImagePullBackOff'),
]


@pytest.mark.parametrize('upstream, the_vm, the_vmi, dvs, pvcs, expected', PRINTABLE_STATUS, ids=[c[0] for c in PRINTABLE_STATUS])
def test_printable_status_as_kubevirt_tests_it(upstream, the_vm, the_vmi, dvs, pvcs, expected):
    assert kubevirt_views.kubevirt_vm_view(the_vm, the_vmi, dvs, pvcs)['status'] == expected, VM + upstream


def test_a_datavolume_waiting_for_its_first_consumer_is_provisioning_once_its_claim_is_bound():
    # storagetypes.HasDataVolumeProvisioning: "WFFC + plus unbound is not provisioning"; bound, it is
    assert kubevirt_views.kubevirt_vm_view(vm('Halted', DV1), None, [dv('dv1', 'WaitForFirstConsumer')], [])['status'] == 'Stopped'
    assert kubevirt_views.kubevirt_vm_view(vm('Halted', DV1), None, [dv('dv1', 'WaitForFirstConsumer', BOUND)], [])['status'] == 'Provisioning'


def test_a_stopped_rerun_on_failure_vm_with_an_unbound_claim_is_stopped_a_listed_deviation():
    # v1.8.0 says WaitingForVolumeBinding (isSetToStart true without an instance); kubevirt/kubevirt PR #18787 (after
    # v1.8.0) made it Stopped, which is what the table above restates; a Start request makes it set to start in both
    stopped = vm('RerunOnFailure', PVC1, status={'runStrategy': 'RerunOnFailure'})
    assert kubevirt_views.kubevirt_vm_view(stopped, None, [], [pvc('pvc1', 'Pending')])['status'] == 'Stopped'
    started = vm('RerunOnFailure', PVC1, status={'runStrategy': 'RerunOnFailure', 'stateChangeRequests': [{'action': 'Start'}]})
    assert kubevirt_views.kubevirt_vm_view(started, None, [], [pvc('pvc1', 'Pending')])['status'] == 'WaitingForVolumeBinding'
    assert deviations.by_key('rerun-set-to-start')


def test_the_datavolume_not_found_status_is_a_listed_deviation():
    # removed upstream (ef62cbfd13); kept for KubeVirt before v0.56, which still reports the reason
    the_vmi = vmi('Pending', [cond('Synchronized', 'False', 'FailedDataVolumeNotFound')])
    assert kubevirt_views.kubevirt_vm_view(vm('Always', DV1), the_vmi)['status'] == 'ErrorDataVolumeNotFound'
    assert deviations.by_key('datavolume-not-found')


# ------------------------------------------------------------------ virt-handler: the VMI phase from the domain
# (upstream test, libvirt (state, reason) or None for no domain, previous phase, launcher answers, expected phase)
HANDLER_CASES = [
    ('should not delete a Shutoff domain while the VMI is still Scheduled / with empty reason', (5, 0), 'Scheduled', True, 'Scheduled'),
    ('should not delete a Shutoff domain while the VMI is still Scheduled / with Unknown reason', (5, 0), 'Scheduled', True, 'Scheduled'),
    ('should silently retry if the command socket is not yet ready', None, 'Scheduled', True, 'Scheduled'),
    ('should fail if the command socket is not ready after the suppress timeout of three minutes', None, 'Scheduled', False, 'Failed'),
    ('When a Running VMI has no domain / should re-enqueue if the launcher client is not yet initialized', None, 'Running', True,
     'Running'),
    ('When a Running VMI has no domain / should move to Failed if the launcher client is unresponsive', None, 'Running', False, 'Failed'),
    ('When a Running VMI has no domain / should stay Running if the launcher client is responsive', None, 'Running', True, 'Running'),
    ('should move VirtualMachineInstance from Scheduled to Failed if watchdog file is missing', None, 'Scheduled', False, 'Failed'),
    ('should move VirtualMachineInstance from Running to Failed if domain does not exist in cache', None, 'Running', False, 'Failed'),
    ('on post-copy migration failure / should fail the VMI', (3, 13), 'Running', True, 'Failed'),
    ('should cleanup if vmi is finalized and domain does not exist', None, 'Succeeded', True, 'Succeeded'),
]


@pytest.mark.parametrize('upstream, domain, previous, launcher, expected', HANDLER_CASES, ids=[c[0] for c in HANDLER_CASES])
def test_vmi_phase_as_virt_handler_tests_it(upstream, domain, previous, launcher, expected):
    if domain is None:
        phase = s.phase_without_domain(True, launcher_present=launcher, previous=previous)
    else:
        phase = ds.phase_from_domain(*ds.libvirt_state_words(*domain), previous=previous)
    assert phase == expected, HANDLER + upstream


def test_a_running_instance_whose_domain_is_briefly_not_found_stays_running():
    # "When a Running VMI has no domain / should stay Running if the launcher client is responsive": never backwards
    assert s.phase_without_domain(True, launcher_present=True, previous='Running') == 'Running'
    assert s.phase_without_domain(True, launcher_present=True, previous='Pending') == 'Scheduled'
    assert s.phase_without_domain(True, launcher_present=False, previous='Pending') == 'Scheduled'


def test_an_unreachable_host_is_unknown_a_listed_deviation():
    # "should propagate error from IsLauncherClientUnresponsive and keep the current phase": ours says Unknown
    assert s.phase_without_domain(False, previous='Running') == 'Unknown'
    assert deviations.by_key('host-unreachable')


@pytest.mark.parametrize('upstream, reason, job, expected', [
    ('when domain is paused / by user should add and remove paused condition', 1, False, 'Paused'),
    ('when domain is paused / by qemu during migration should skip paused condition', 2, True, 'Migrating'),
], ids=['by user', 'by qemu during migration'])
def test_paused_condition_as_virt_handler_tests_it(upstream, reason, job, expected):
    assert libvirt_views.libvirt_vm_view(3, reason, job_active=job)['status'] == expected, HANDLER + upstream


# calculateVmPhaseForStatusReason itself, branch by branch (pkg/virt-handler/vm.go), with isACPIEnabled:
# ACPI counts only with a grace period above zero (vmiHasTerminationGracePeriod).
# (libvirt state, reason, acpi, grace period, expected phase from previous Running)
DOMAIN_CODE_CASES = [
    ((5, 3), True, None, 'Failed'),          # Shutoff, ReasonCrashed
    ((6, 1), True, None, 'Failed'),          # Crashed, ReasonPanicked
    ((5, 2), True, 30, 'Failed'),            # Destroyed, ACPI, grace period: the graceful stop ran out of time
    ((5, 2), True, None, 'Failed'),          # grace period not set: KubeVirt's default one applies
    ((5, 2), True, 0, 'Succeeded'),          # terminationGracePeriodSeconds 0: an immediate power-off
    ((5, 2), False, 30, 'Succeeded'),        # no ACPI feature
    ((5, 1), True, None, 'Succeeded'),       # ReasonShutdown
    ((5, 5), True, None, 'Succeeded'),       # ReasonSaved
    ((5, 7), True, None, 'Succeeded'),       # ReasonFromSnapshot
    ((5, 4), True, None, 'Running'),         # ReasonMigrated: unchanged
    ((5, 6), True, None, 'Running'),         # ReasonFailed: not in the switch, unchanged
    ((5, 8), True, None, 'Running'),         # daemon: unchanged
    ((3, 13), True, None, 'Failed'),         # Paused, ReasonPausedPostcopyFailed
    ((3, 5), True, None, 'Running'),         # Paused, any other reason
    ((1, 1), True, None, 'Running'),
    ((2, 0), True, None, 'Running'),
    ((7, 0), True, None, 'Running'),
    ((4, 1), True, None, 'Running'),         # Shutdown (shutting down): not in the switch, unchanged
    ((0, 0), True, None, 'Running'),         # NoState: unchanged
]


@pytest.mark.parametrize('domain, acpi, grace, expected', DOMAIN_CODE_CASES)
def test_vmi_phase_as_virt_handler_computes_it(domain, acpi, grace, expected):
    assert ds.phase_from_domain(*ds.libvirt_state_words(*domain), acpi=acpi, previous='Running', grace_period=grace) == expected


def test_a_crashed_domain_with_an_unknown_reason_is_failed_a_listed_deviation():
    # KubeVirt keeps the previous phase (the switch names only Crashed and Panicked); ours fails it
    assert ds.phase_from_domain(*ds.libvirt_state_words(6, 0), previous='Running') == 'Failed'
    assert deviations.by_key('crashed-unknown-reason')


def test_an_immediate_forced_stop_of_an_acpi_guest_is_succeeded_and_says_why():
    forced = libvirt_views.libvirt_vm_view(5, 2, acpi=True, grace_period=0)
    assert (forced['phase'], forced['status']) == ('Succeeded', 'Stopped')
    assert forced['phase_reason'].startswith('powered off at once')
    timed_out = libvirt_views.libvirt_vm_view(5, 2, acpi=True, grace_period=60)
    assert (timed_out['phase'], timed_out['status']) == ('Failed', 'Stopped')
    assert 'did not finish within the grace period' in timed_out['phase_reason']
    # the record may carry the grace period of the last stop
    recorded = libvirt_views.libvirt_vm_view(5, 2, {'vm_state': 'STOPPED', 'stop_grace_period': '0'}, acpi=True)
    assert recorded['phase'] == 'Succeeded'
    # not known: read as KubeVirt's default, and the reason says it is read, not known
    unknown = libvirt_views.libvirt_vm_view(5, 2, acpi=True)
    assert unknown['phase'] == 'Failed' and unknown['phase_reason'] == ds.DESTROYED_GRACE_UNKNOWN
    assert deviations.by_key('destroyed-grace-unknown')


# ------------------------------------------------------------------ the migration controller
UNSCHEDULABLE = m.UNSCHEDULABLE_TIMEOUT_SECONDS
CATCH_ALL = m.PENDING_TIMEOUT_SECONDS


def pending(phase, seconds, unschedulable, **timeouts):
    return Obs(phase=phase, target_exists=True, pending_seconds=seconds, target_unschedulable=unschedulable, **timeouts)


# (upstream entry, observation, expected (phase, reason))
MIGRATION_CASES = [
    ('should handle pod stuck in unschedulable state / in pending state', pending('Pending', UNSCHEDULABLE, True),
     ('Failed', m.UNSCHEDULABLE_TIMEOUT)),
    ('... unschedulable state / in scheduling state', pending('Scheduling', UNSCHEDULABLE, True), ('Failed', m.UNSCHEDULABLE_TIMEOUT)),
    ('... unschedulable state / in scheduled state', pending('Scheduled', UNSCHEDULABLE, True), ('Scheduled', None)),
    ('... unschedulable state / in pending state but timeout not hit', pending('Pending', UNSCHEDULABLE - 10, True), ('Scheduling', None)),
    ('... unschedulable state / in pending state with custom timeout', pending('Pending', 10, True, unschedulable_timeout=10),
     ('Failed', m.UNSCHEDULABLE_TIMEOUT)),
    ('... unschedulable state / in pending state with custom timeout not hit', pending('Pending', 8, True, unschedulable_timeout=11),
     ('Scheduling', None)),
    ('... unschedulable state / in scheduling state but timeout not hit', pending('Scheduling', UNSCHEDULABLE - 10, True),
     ('Scheduling', None)),
    ('should handle pod stuck in pending phase for extended period of time / in pending state', pending('Pending', CATCH_ALL, False),
     ('Failed', m.PENDING_TIMEOUT)),
    ('... extended period of time / in scheduling state', pending('Scheduling', CATCH_ALL, False), ('Failed', m.PENDING_TIMEOUT)),
    ('... extended period of time / in scheduled state', pending('Scheduled', CATCH_ALL, False), ('Scheduled', None)),
    ('... extended period of time / in pending state but timeout not hit', pending('Pending', CATCH_ALL - 10, False), ('Scheduling', None)),
    ('... extended period of time / in pending state with custom timeout', pending('Pending', 10, False, pending_timeout=10),
     ('Failed', m.PENDING_TIMEOUT)),
    ('... extended period of time / in pending state with custom timeout not hit', pending('Pending', 8, False, pending_timeout=11),
     ('Scheduling', None)),
    ('... extended period of time / in scheduling state but timeout not hit', pending('Scheduling', CATCH_ALL - 10, False),
     ('Scheduling', None)),
    ('should place migration in scheduling state if pod exists', Obs(phase='Pending', target_exists=True), ('Scheduling', None)),
    ('should hand pod over to target virt-handler if pod is ready and running', Obs(phase='Scheduling', target_ready=True),
     ('Scheduled', None)),
    ('should not hand pod over to target virt-handler if pod is not ready and running', Obs(phase='Scheduling', target_exists=True),
     ('Scheduling', None)),
    ('should transition to preparing target phase', Obs(phase='Scheduled', target_node_known=True), ('PreparingTarget', None)),
    ('should transition to target prepared phase', Obs(phase='PreparingTarget', target_address_known=True), ('TargetReady', None)),
    ('should transition to running phase', Obs(phase='TargetReady', transfer_started=True), ('Running', None)),
    ('should transition to completed phase', Obs(phase='Running', transfer_started=True, transfer_completed=True), ('Succeeded', None)),
    ('should abort the migration (handed off: the source is asked, the migration goes on)',
     Obs(phase='Running', transfer_started=True, abort_requested=True), ('Running', None)),
    ('Migration abortion before hand-off to virt-handler / expect failure phase', Obs(phase='Pending', abort_requested=True),
     ('Failed', m.ABORTED)),
    ('should finalize migration on VMI if target pod fails before migration starts / in preparing target state',
     Obs(phase='PreparingTarget', target_failed=True), ('Failed', m.TARGET_FAILED)),
    ('... target pod fails before migration starts / in target ready state', Obs(phase='TargetReady', target_failed=True),
     ('Failed', m.TARGET_FAILED)),
    ('... target pod fails before migration starts / in failed state', Obs(phase='Failed', target_failed=True), ('Failed', None)),
    ('should fail the migration if the attachment pod goes to final state', Obs(phase='Scheduling', target_failed=True),
     ('Failed', m.TARGET_FAILED)),
]
for _phase in ('Running', '', 'Pending', 'Scheduled', 'Scheduling', 'TargetReady'):
    MIGRATION_CASES += [
        ('Migration should immediately fail if / vmi moves to final state / in %s state' % (_phase or 'unset'),
         Obs(phase=_phase, vm_running=False, transfer_started=_phase == 'Running'), ('Failed', m.VM_GONE)),
        ('Migration should immediately fail if / Pod moves to final state / in %s state' % (_phase or 'unset'),
         Obs(phase=_phase, target_failed=True, transfer_started=_phase == 'Running'), ('Failed', m.TARGET_FAILED)),
        ("Migration should immediately fail if / VMI's migrate state moves to final state / in %s state" % (_phase or 'unset'),
         Obs(phase=_phase, source_failed=True, transfer_started=True), ('Failed', m.SOURCE_FAILED)),
    ]


@pytest.mark.parametrize('upstream, obs, expected', MIGRATION_CASES, ids=[c[0] for c in MIGRATION_CASES])
def test_migration_as_the_migration_controller_tests_it(upstream, obs, expected):
    assert m.next_phase(obs) == expected, MIGRATION + upstream


@pytest.mark.parametrize('phase, plan', [
    ('', 'fail'), ('Pending', 'fail'), ('Scheduling', 'fail'), ('Scheduled', 'fail'),
    ('PreparingTarget', 'ask source to abort'), ('TargetReady', 'ask source to abort'), ('Running', 'ask source to abort'),
    ('Succeeded', 'nothing'), ('Failed', 'nothing'),
])
def test_abort_plan_follows_the_hand_off(phase, plan):
    # migration.go updateStatus: "DeletionTimestamp != nil && !isMigrationHandedOff" fails at once; TargetIsHandedOff
    # is every phase from PreparingTarget on
    assert m.abort_plan(phase) == plan


@pytest.mark.parametrize('phase', m.HANDED_OFF)
def test_an_abort_after_the_hand_off_agrees_with_abort_plan(phase):
    # the source is asked; while the transfer runs the phase stays, then the source's answer decides
    running = Obs(phase=phase, transfer_started=True, abort_requested=True)
    assert m.abort_plan(phase) == 'ask source to abort' and m.next_phase(running)[1] is None
    assert m.next_phase(running._replace(source_failed=True)) == ('Failed', m.ABORTED)
    if phase == 'Running':
        assert m.next_phase(running._replace(transfer_completed=True)) == ('Succeeded', None)
    # the guest gone is never reported as aborted (the abort promises the guest keeps running on the source)
    assert m.next_phase(running._replace(vm_running=False)) == ('Failed', m.VM_GONE)


def test_an_abort_after_the_hand_off_with_no_transfer_fails_at_once_a_listed_deviation():
    assert m.next_phase(Obs(phase='PreparingTarget', abort_requested=True)) == ('Failed', m.ABORTED)
    assert deviations.by_key('abort-handed-off-not-started')


def test_a_draining_target_fails_the_migration_before_it_runs_a_listed_deviation():
    # no such rule in migration.go; seed 001 question 4 (keep the guest off the drained host)
    assert m.next_phase(Obs(phase='Scheduled', target_draining=True)) == ('Failed', m.DRAINING_TARGET)
    assert m.next_phase(Obs(phase='Running', target_draining=True)) == ('Running', None)
    assert deviations.by_key('draining-target')
