"""views.kubevirt_vm_view: the state words of a KubeVirt VirtualMachine from plain dicts (no kubernetes import)."""

# pylint: disable=missing-function-docstring

import sys

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import views


def vm(run_strategy='Halted', volumes=None, status=None, annotations=None, generation=1, deleting=False, running=None):
    spec = {'template': {'spec': {'domain': {'devices': {}}, 'volumes': volumes or []}}}
    if running is not None:
        spec['running'] = running
    else:
        spec['runStrategy'] = run_strategy
    meta = {'name': 'v', 'namespace': 'default', 'uid': 'vm-uid', 'generation': generation, 'annotations': annotations or {}}
    if deleting:
        meta['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    return {'metadata': meta, 'spec': spec, 'status': status or {}}


def vmi(phase='Running', conditions=None, uid='vmi-1', deleting=False, migration=None, generation='1'):
    meta = {'name': 'v', 'uid': uid, 'annotations': {'kubevirt.io/vm-generation': generation}}
    if deleting:
        meta['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    status = {'phase': phase, 'conditions': conditions or []}
    if migration is not None:
        status['migrationState'] = migration
    return {'metadata': meta, 'status': status}


def cond(ctype, status, reason=''):
    return {'type': ctype, 'status': status, 'reason': reason}


PVC_VOL = [{'name': 'd', 'persistentVolumeClaim': {'claimName': 'c1'}}]
DV_VOL = [{'name': 'd', 'dataVolume': {'name': 'dv1'}}]


def pvc(name, phase):
    return {'metadata': {'name': name}, 'status': {'phase': phase}}


def dv(name, phase, running=None):
    obj = {'metadata': {'name': name}, 'status': {'phase': phase}}
    if running:
        obj['status']['conditions'] = [cond('Running', 'False', running)]
    return obj


# (name, vm, vmi, datavolumes, pvcs) -> (status, power_state, vm_state (no record), phase)
CASES = [
    ('halted, no instance', vm(), None, [], [], ('Stopped', 'SHUTDOWN', 'STOPPED', None)),
    ('running', vm('Always'), vmi(), [], [], ('Running', 'RUNNING', 'ACTIVE', 'Running')),
    ('paused', vm('Always'), vmi(conditions=[cond('Paused', 'True', 'PausedByUser')]), [], [], ('Paused', 'PAUSED', 'PAUSED', 'Running')),
    ('migrating', vm('Always'), vmi(migration={'startTimestamp': 't0'}), [], [], ('Migrating', 'RUNNING', 'ACTIVE', 'Running')),
    ('migration ended', vm('Always'), vmi(migration={'startTimestamp': 't0', 'endTimestamp': 't1', 'completed': True}), [], [],
     ('Running', 'RUNNING', 'ACTIVE', 'Running')),
    ('starting: scheduling', vm('Always'), vmi('Scheduling'), [], [], ('Starting', 'NOSTATE', 'ACTIVE', 'Scheduling')),
    ('always, no instance yet', vm('Always'), None, [], [], ('Starting', 'SHUTDOWN', 'ACTIVE', None)),
    ('legacy running: true', vm(running=True), vmi(), [], [], ('Running', 'RUNNING', 'ACTIVE', 'Running')),
    ('stopping: halted with live instance', vm('Halted'), vmi(), [], [], ('Stopping', 'RUNNING', 'STOPPED', 'Running')),
    ('stopping: instance deleted', vm('Always'), vmi(deleting=True), [], [], ('Stopping', 'RUNNING', 'STOPPED', 'Running')),
    ('terminating', vm('Always', deleting=True), vmi(deleting=True), [], [], ('Terminating', 'RUNNING', 'STOPPED', 'Running')),
    ('unschedulable', vm('Always'), vmi('Scheduling', [cond('PodScheduled', 'False', 'Unschedulable')]), [], [],
     ('ErrorUnschedulable', 'NOSTATE', 'ACTIVE', 'Scheduling')),
    ('image pull', vm('Always'), vmi('Scheduling', [cond('Synchronized', 'False', 'ErrImagePull')]), [], [],
     ('ErrImagePull', 'NOSTATE', 'ACTIVE', 'Scheduling')),
    ('image pull backoff', vm('Always'), vmi('Scheduling', [cond('Synchronized', 'False', 'ImagePullBackOff')]), [], [],
     ('ImagePullBackOff', 'NOSTATE', 'ACTIVE', 'Scheduling')),
    ('pvc not found', vm('Always', PVC_VOL), vmi('Pending', [cond('Synchronized', 'False', 'FailedPvcNotFound')]), [], [],
     ('ErrorPvcNotFound', 'NOSTATE', 'ACTIVE', 'Pending')),
    ('dv not found', vm('Always', DV_VOL), vmi('Pending', [cond('Synchronized', 'False', 'FailedDataVolumeNotFound')]), [], [],
     ('ErrorDataVolumeNotFound', 'NOSTATE', 'ACTIVE', 'Pending')),
    ('dv failed', vm('Always', DV_VOL), None, [dv('dv1', 'Failed')], [], ('DataVolumeError', 'SHUTDOWN', 'ACTIVE', None)),
    ('dv running error', vm('Always', DV_VOL), None, [dv('dv1', 'ImportInProgress', 'Error')], [],
     ('DataVolumeError', 'SHUTDOWN', 'ACTIVE', None)),
    ('dv provisioning', vm('Always', DV_VOL), None, [dv('dv1', 'ImportInProgress')], [], ('Provisioning', 'SHUTDOWN', 'ACTIVE', None)),
    ('dv done, halted', vm('Halted', DV_VOL), None, [dv('dv1', 'Succeeded')], [pvc('dv1', 'Bound')], ('Stopped', 'SHUTDOWN', 'STOPPED', None)),
    ('claim unbound, set to start', vm('Always', PVC_VOL), None, [], [pvc('c1', 'Pending')],
     ('WaitingForVolumeBinding', 'SHUTDOWN', 'ACTIVE', None)),
    ('claim unbound, halted', vm('Halted', PVC_VOL), None, [], [pvc('c1', 'Pending')], ('Stopped', 'SHUTDOWN', 'STOPPED', None)),
    ('crash loop', vm('Always', status={'startFailure': {'consecutiveFailCount': 2}}), None, [], [],
     ('CrashLoopBackOff', 'SHUTDOWN', 'ACTIVE', None)),
    ('crash loop, failed instance', vm('Always', status={'startFailure': {'consecutiveFailCount': 1}}), vmi('Failed'), [], [],
     ('CrashLoopBackOff', 'SHUTDOWN', 'ACTIVE', 'Failed')),
    ('manual, failures do not loop', vm('Manual', status={'startFailure': {'consecutiveFailCount': 1}}), vmi('Failed'), [], [],
     ('Stopped', 'SHUTDOWN', 'STOPPED', 'Failed')),
    ('manual start requested', vm('Manual', status={'stateChangeRequests': [{'action': 'Start'}]}), None, [], [],
     ('Starting', 'SHUTDOWN', 'ACTIVE', None)),
    ('manual stop requested', vm('Manual', status={'stateChangeRequests': [{'action': 'Stop', 'uid': 'vmi-1'}]}), vmi(), [], [],
     ('Stopping', 'RUNNING', 'STOPPED', 'Running')),
    ('succeeded instance', vm('Manual'), vmi('Succeeded'), [], [], ('Stopped', 'SHUTDOWN', 'STOPPED', 'Succeeded')),
    ('unknown phase', vm('Always'), vmi('Unknown'), [], [], ('Unknown', 'NOSTATE', 'ERROR', 'Unknown')),
]


@pytest.mark.parametrize('label, the_vm, the_vmi, dvs, pvcs, expected', CASES, ids=[c[0] for c in CASES])
def test_words(label, the_vm, the_vmi, dvs, pvcs, expected):
    view = views.kubevirt_vm_view(the_vm, the_vmi, dvs, pvcs)
    assert (view['status'], view['power_state'], view['vm_state'], view['phase']) == expected, label
    assert view['effective_vm_state'] == expected[2]


def test_record_in_annotations_is_read_and_corrected_by_the_observation():
    ann = {'converge.virt/vm-state': 'ACTIVE', 'converge.virt/task-state': None, 'converge.virt/task-id': None}
    view = views.kubevirt_vm_view(vm('Always', annotations=ann), vmi())
    assert (view['vm_state'], view['effective_vm_state'], view['task_state']) == ('ACTIVE', 'ACTIVE', None)
    # the guest stopped itself with run strategy Manual: the record says ACTIVE, the observation STOPPED
    view = views.kubevirt_vm_view(vm('Manual', annotations=ann), vmi('Succeeded'))
    assert (view['vm_state'], view['effective_vm_state']) == ('ACTIVE', 'STOPPED')
    # a task in flight keeps the record
    busy = dict(ann, **{'converge.virt/task-state': 'STARTING', 'converge.virt/task-id': 't1'})
    view = views.kubevirt_vm_view(vm('Manual', annotations=busy), None)
    assert (view['effective_vm_state'], view['task_state'], view['task_id']) == ('ACTIVE', 'STARTING', 't1')
    # sticky ERROR is kept
    view = views.kubevirt_vm_view(vm('Always', annotations={'converge.virt/vm-state': 'ERROR'}), vmi())
    assert view['effective_vm_state'] == 'ERROR'
    assert views.kubevirt_metadata(vm(annotations=busy))['task_id'] == 't1'


def test_printable_status_is_reported_next_to_ours():
    the_vm = vm('Always', status={'printableStatus': 'Running'})
    view = views.kubevirt_vm_view(the_vm, vmi())
    assert view['status'] == 'Running' and view['printable_status'] == 'Running'
    assert views.kubevirt_vm_view(vm(), None)['printable_status'] is None
    # ours is computed independently: a stale printableStatus does not change it
    assert views.kubevirt_vm_view(vm('Halted', status={'printableStatus': 'Running'}), None)['status'] == 'Stopped'


def test_pending_restart_from_generation_and_condition():
    assert views.kubevirt_vm_view(vm('Always', generation=3), vmi(generation='2'))['pending_restart'] is True
    assert views.kubevirt_vm_view(vm('Always', generation=2), vmi(generation='2'))['pending_restart'] is False
    assert views.kubevirt_vm_view(vm('Halted', generation=3), None)['pending_restart'] is False
    restart = vm('Always', status={'conditions': [cond('RestartRequired', 'True')]})
    assert views.kubevirt_vm_view(restart, vmi())['pending_restart'] is True


def test_claims_and_datavolumes_by_name_or_list():
    claims, dvs = views.kubevirt_volume_claims(vm('Always', PVC_VOL + [{'name': 'e', 'dataVolume': {'name': 'dv1'}}]))
    assert (claims, dvs) == (['c1'], ['dv1'])
    as_map = views.kubevirt_vm_view(vm('Always', DV_VOL), None, {'dv1': dv('dv1', 'Failed')}, {})
    assert as_map['status'] == 'DataVolumeError'


def test_garbage_never_raises():
    for the_vm, the_vmi in (({}, None), ({'spec': None, 'status': None, 'metadata': None}, {'status': None}),
                            (vm(volumes=[None, 'x', {'persistentVolumeClaim': None}]), {'metadata': {}, 'status': {'conditions': [None]}})):
        view = views.kubevirt_vm_view(the_vm, the_vmi, None, None)
        assert view['status'] in ('Stopped', 'Starting', 'Stopping', 'Unknown') and view['power_state'] in ('SHUTDOWN', 'NOSTATE')


def test_views_is_pure():
    assert 'kubernetes' not in sys.modules or 'kubernetes' not in views.__dict__
    assert views.kubevirt_run_strategy({'spec': {'running': False}}) == 'Halted'
    assert views.kubevirt_run_strategy({'spec': {}}) == 'Halted'
