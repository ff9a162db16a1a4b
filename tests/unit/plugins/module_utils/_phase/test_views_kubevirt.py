"""kubevirt_views.kubevirt_vm_view: the state words of a KubeVirt VirtualMachine from plain dicts (no kubernetes import)."""

# pylint: disable=missing-function-docstring

import sys

import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import views as kubevirt_views


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
    view = kubevirt_views.kubevirt_vm_view(the_vm, the_vmi, dvs, pvcs)
    assert (view['status'], view['power_state'], view['vm_state'], view['phase']) == expected, label
    assert view['effective_vm_state'] == expected[2]


def test_record_in_annotations_is_read_and_corrected_by_the_observation():
    ann = {'converge.virt/vm-state': 'ACTIVE', 'converge.virt/task-state': None, 'converge.virt/task-id': None}
    view = kubevirt_views.kubevirt_vm_view(vm('Always', annotations=ann), vmi())
    assert (view['vm_state'], view['effective_vm_state'], view['task_state']) == ('ACTIVE', 'ACTIVE', None)
    # the guest stopped itself with run strategy Manual: the record says ACTIVE, the observation STOPPED
    view = kubevirt_views.kubevirt_vm_view(vm('Manual', annotations=ann), vmi('Succeeded'))
    assert (view['vm_state'], view['effective_vm_state']) == ('ACTIVE', 'STOPPED')
    # a task in flight keeps the record
    busy = dict(ann, **{'converge.virt/task-state': 'STARTING', 'converge.virt/task-id': 't1'})
    view = kubevirt_views.kubevirt_vm_view(vm('Manual', annotations=busy), None)
    assert (view['effective_vm_state'], view['task_state'], view['task_id']) == ('ACTIVE', 'STARTING', 't1')
    # sticky ERROR is kept
    view = kubevirt_views.kubevirt_vm_view(vm('Always', annotations={'converge.virt/vm-state': 'ERROR'}), vmi())
    assert view['effective_vm_state'] == 'ERROR'
    assert kubevirt_views.kubevirt_metadata(vm(annotations=busy))['task_id'] == 't1'


def test_printable_status_is_reported_next_to_ours():
    the_vm = vm('Always', status={'printableStatus': 'Running'})
    view = kubevirt_views.kubevirt_vm_view(the_vm, vmi())
    assert view['status'] == 'Running' and view['printable_status'] == 'Running'
    assert kubevirt_views.kubevirt_vm_view(vm(), None)['printable_status'] is None
    # ours is computed independently: a stale printableStatus does not change it
    assert kubevirt_views.kubevirt_vm_view(vm('Halted', status={'printableStatus': 'Running'}), None)['status'] == 'Stopped'


def test_pending_restart_from_generation_and_condition():
    assert kubevirt_views.kubevirt_vm_view(vm('Always', generation=3), vmi(generation='2'))['pending_restart'] is True
    assert kubevirt_views.kubevirt_vm_view(vm('Always', generation=2), vmi(generation='2'))['pending_restart'] is False
    assert kubevirt_views.kubevirt_vm_view(vm('Halted', generation=3), None)['pending_restart'] is False
    restart = vm('Always', status={'conditions': [cond('RestartRequired', 'True')]})
    assert kubevirt_views.kubevirt_vm_view(restart, vmi())['pending_restart'] is True


def test_claims_and_datavolumes_by_name_or_list():
    claims, dvs = kubevirt_views.kubevirt_volume_claims(vm('Always', PVC_VOL + [{'name': 'e', 'dataVolume': {'name': 'dv1'}}]))
    assert (claims, dvs) == (['c1'], ['dv1'])
    as_map = kubevirt_views.kubevirt_vm_view(vm('Always', DV_VOL), None, {'dv1': dv('dv1', 'Failed')}, {})
    assert as_map['status'] == 'DataVolumeError'


def test_garbage_never_raises():
    for the_vm, the_vmi in (({}, None), ({'spec': None, 'status': None, 'metadata': None}, {'status': None}),
                            (vm(volumes=[None, 'x', {'persistentVolumeClaim': None}]), {'metadata': {}, 'status': {'conditions': [None]}})):
        view = kubevirt_views.kubevirt_vm_view(the_vm, the_vmi, None, None)
        assert view['status'] in ('Stopped', 'Starting', 'Stopping', 'Unknown') and view['power_state'] in ('SHUTDOWN', 'NOSTATE')


def test_views_is_pure():
    assert 'kubernetes' not in sys.modules or 'kubernetes' not in kubevirt_views.__dict__
    assert kubevirt_views.kubevirt_run_strategy({'spec': {'running': False}}) == 'Halted'
    assert kubevirt_views.kubevirt_run_strategy({'spec': {}}) == 'Halted'


def fresh(word):
    """The same text in a new string object (the API's words are never the module's constants)."""
    return ''.join(list(word))


def status_of(the_vm, the_vmi=None, dvs=(), pvcs=()):
    return kubevirt_views.kubevirt_vm_view(the_vm, the_vmi, list(dvs), list(pvcs))['status']


@pytest.mark.parametrize('strategy, status, the_vmi, expected', [
    # RerunOnFailure starts on its own only right after the strategy was switched to it, and restarts a Failed instance
    ('RerunOnFailure', {}, None, 'Starting'),
    ('RerunOnFailure', {'runStrategy': 'Always'}, None, 'Starting'),
    ('RerunOnFailure', {'runStrategy': 'RerunOnFailure'}, None, 'Stopped'),
    ('RerunOnFailure', {'runStrategy': 'RerunOnFailure', 'stateChangeRequests': [{'action': 'Start'}]}, None, 'Starting'),
    ('RerunOnFailure', {'runStrategy': 'RerunOnFailure'}, 'Failed', 'Stopped'),
    ('RerunOnFailure', {'runStrategy': 'RerunOnFailure'}, 'Succeeded', 'Stopped'),
    ('Once', {}, None, 'Starting'), ('Once', {}, 'Succeeded', 'Stopped'),
    ('Always', {}, 'Failed', 'Stopped'), ('Always', {}, None, 'Starting'),
    ('Manual', {}, None, 'Stopped'), ('Halted', {}, None, 'Stopped'),
    ('Halted', {'stateChangeRequests': [{'action': 'Start'}]}, None, 'Starting'),
    ('Manual', {'stateChangeRequests': [{'action': 'Stop'}]}, None, 'Stopped'),
    ('WaitAsReceiver', {}, None, 'Stopped'), ('WaitAsReceiver', {}, 'WaitingForSync', 'WaitingForReceiver'),
])
def test_run_strategies(strategy, status, the_vmi, expected):
    assert status_of(vm(fresh(strategy), status=status), None if the_vmi is None else vmi(fresh(the_vmi))) == expected


@pytest.mark.parametrize('strategy, status, the_vmi, binding', [
    ('Always', {}, None, True), ('Halted', {}, None, False),
    ('Manual', {}, None, False), ('Manual', {'stateChangeRequests': [{'action': 'Start'}]}, None, True),
    ('Manual', {}, 'Succeeded', True),
    ('RerunOnFailure', {'runStrategy': 'RerunOnFailure'}, None, False), ('RerunOnFailure', {}, None, True),
    ('RerunOnFailure', {'runStrategy': 'RerunOnFailure'}, 'Failed', True), ('RerunOnFailure', {'runStrategy': 'RerunOnFailure'}, 'Succeeded', False),
    ('Once', {}, None, True), ('Once', {}, 'Succeeded', False),
])
def test_waiting_for_volume_binding_follows_is_set_to_start(strategy, status, the_vmi, binding):
    words = status_of(vm(strategy, PVC_VOL, status=status), None if the_vmi is None else vmi(the_vmi), [], [pvc('c1', 'Pending')])
    assert (words == 'WaitingForVolumeBinding') is binding, words


def test_stop_requests_for_another_instance_are_not_ours():
    other = {'stateChangeRequests': [{'action': 'Stop', 'uid': 'other-vmi'}]}
    assert status_of(vm('Manual', status=other), vmi()) == 'Running'
    mine = {'stateChangeRequests': [{'action': 'Stop', 'uid': fresh('vmi-1')}]}
    assert status_of(vm('Manual', status=mine), vmi()) == 'Stopping'
    anyone = {'stateChangeRequests': [{'action': 'Stop'}, {'action': 'Start'}]}
    assert status_of(vm('Manual', status=anyone), vmi()) == 'Stopping'
    later = {'stateChangeRequests': [{'action': 'Start'}, {'action': 'Stop'}]}
    assert status_of(vm('Manual', status=later), vmi()) == 'Running'
    assert status_of(vm('Manual', status={'stateChangeRequests': ['garbage']}), None) == 'Stopped'


@pytest.mark.parametrize('dv_phase, conditions, expected', [
    ('WaitForFirstConsumer', [], 'Starting'),
    ('WaitForFirstConsumer', [cond('Bound', 'True')], 'Provisioning'),
    ('WaitForFirstConsumer', [cond('Bound', 'False')], 'Starting'),
    ('PendingPopulation', [cond('Bound', 'True')], 'Starting'),
    ('ImportInProgress', [cond('Running', 'False', 'ImagePullFailed')], 'DataVolumeError'),
    ('ImportInProgress', [cond('Running', 'False', 'Pending')], 'Provisioning'),
    ('ImportInProgress', [cond('Running', 'True', 'Error')], 'Provisioning'),
])
def test_datavolume_conditions(dv_phase, conditions, expected):
    the_dv = {'metadata': {'name': 'dv1'}, 'status': {'phase': dv_phase, 'conditions': conditions}}
    assert status_of(vm('Always', DV_VOL), None, [the_dv]) == expected


def test_claims_of_datavolumes_and_missing_objects():
    # a DataVolume's claim has its name; claims that are not found are not unbound
    assert status_of(vm('Always', DV_VOL), None, [dv('dv1', 'Succeeded')], [pvc('dv1', 'Pending')]) == 'WaitingForVolumeBinding'
    assert status_of(vm('Always', DV_VOL), None, [dv('dv1', 'Succeeded')], [pvc('dv1', 'Bound')]) == 'Starting'
    assert status_of(vm('Always', PVC_VOL), None, [], []) == 'Starting'
    assert status_of(vm('Always', DV_VOL), None, [], []) == 'Starting'


@pytest.mark.parametrize('the_vmi, power', [
    (None, 'SHUTDOWN'), ('Succeeded', 'SHUTDOWN'), ('Failed', 'SHUTDOWN'), ('Running', 'RUNNING'), ('Scheduled', 'NOSTATE'),
    ('', 'NOSTATE'), ('Unknown', 'NOSTATE'),
])
def test_power_state(the_vmi, power):
    assert kubevirt_views.kubevirt_power_state(None if the_vmi is None else vmi(fresh(the_vmi))) == power
    if the_vmi == 'Running':
        assert kubevirt_views.kubevirt_power_state(vmi('Running', [cond('Paused', 'True')])) == 'PAUSED'
        assert kubevirt_views.kubevirt_power_state(vmi('Running', [cond('Paused', 'False')])) == 'RUNNING'


@pytest.mark.parametrize('the_vm, the_vmi, vm_state', [
    (vm('Always'), vmi('Scheduling'), 'ACTIVE'),                        # being started
    (vm('Always'), None, 'ACTIVE'),                                     # expected to start
    (vm('Always', status={'startFailure': {'consecutiveFailCount': 1}}), None, 'ACTIVE'),     # crash looping: it keeps trying
    (vm('Manual', status={'startFailure': {'consecutiveFailCount': 1}}), None, 'STOPPED'),
    (vm('Halted'), vmi('Running'), 'STOPPED'),                          # being stopped
    (vm('Always'), vmi('Running', deleting=True), 'STOPPED'),
    (vm('Manual'), vmi('Running'), 'ACTIVE'),
    (vm('Manual'), vmi('Running', [cond('Paused', 'True')]), 'PAUSED'),
    (vm('Manual'), vmi('Scheduled'), 'ACTIVE'),                         # live and not yet running reads as started
    (vm('Manual'), vmi('Unknown'), 'ERROR'),
    (vm('Manual'), vmi('Succeeded'), 'STOPPED'),
])
def test_intended_power_decides_the_inferred_vm_state(the_vm, the_vmi, vm_state):
    assert kubevirt_views.kubevirt_vm_view(the_vm, the_vmi)['vm_state'] == vm_state


def test_metadata_run_strategy_and_migration_state():
    annotations = {'converge.virt/vm-state': 'ACTIVE', 'converge.virt/task-state': 'STOPPING', 'converge.virt/task-id': 't1',
                   'converge.virt/task-action': 'stop', 'converge.virt/task-started-at': '1.0', 'converge.virt/lease-until': '2.0',
                   'converge.virt/previous-vm-state': 'PAUSED', 'converge.virt/task-owner': 'h:1'}
    assert kubevirt_views.kubevirt_metadata(vm(annotations=annotations)) == {
        'vm_state': 'ACTIVE', 'task_state': 'STOPPING', 'task_id': 't1', 'last_action': 'stop', 'task_started_at': '1.0',
        'lease_until': '2.0', 'previous_vm_state': 'PAUSED', 'owner': 'h:1'}
    assert kubevirt_views.kubevirt_run_strategy(vm('Manual')) == 'Manual'
    assert kubevirt_views.kubevirt_run_strategy({'spec': {'running': True}}) == 'Always'
    assert kubevirt_views.kubevirt_run_strategy({'spec': {'runStrategy': '', 'running': True}}) == 'Always'
    assert kubevirt_views.kubevirt_instance_migrating(vmi(migration={'startTimestamp': 't'}))
    assert not kubevirt_views.kubevirt_instance_migrating(vmi(migration={'startTimestamp': 't', 'completed': True}))
    assert not kubevirt_views.kubevirt_instance_migrating(vmi(migration={'startTimestamp': 't', 'endTimestamp': 'u'}))
    assert not kubevirt_views.kubevirt_instance_migrating(vmi(migration={}))
    assert not kubevirt_views.kubevirt_instance_migrating(vmi(migration='garbage'))
    assert not kubevirt_views.kubevirt_instance_migrating(None)


def test_view_keys_reason_and_generation_garbage():
    the_vmi = vmi('Failed')
    the_vmi['status']['reason'] = 'NodeUnresponsive'
    view = kubevirt_views.kubevirt_vm_view(vm('Manual'), the_vmi)
    assert (view['phase'], view['phase_reason']) == ('Failed', 'NodeUnresponsive')
    assert kubevirt_views.kubevirt_vm_view(vm('Manual'), vmi('Running'))['phase_reason'] is None
    assert kubevirt_views.kubevirt_vm_view(vm('Manual'), None)['phase_reason'] is None
    assert sorted(kubevirt_views.kubevirt_vm_view(vm(), None)) == sorted([
        'power_state', 'vm_state', 'effective_vm_state', 'task_state', 'task_id', 'status', 'printable_status', 'phase', 'phase_reason',
        'run_strategy', 'start_failures', 'pending_restart'])
    assert kubevirt_views.kubevirt_vm_view(vm('Always', generation='x'), vmi(generation='1'))['pending_restart'] is False
    assert kubevirt_views.kubevirt_vm_view(vm('Always', generation=2), vmi(generation=None))['pending_restart'] is False
    assert kubevirt_views.kubevirt_vm_view(vm('Always', generation=2), vmi('Succeeded', generation='1'))['pending_restart'] is False
    assert kubevirt_views.kubevirt_vm_view(vm('Always', status={'startFailure': {'consecutiveFailCount': '3'}}), None)['start_failures'] == 3


def test_conditions_are_read_by_exact_type_status_and_reason():
    # other conditions around the one read, sorting before and after it
    around = [cond('Agent', 'True'), cond('Ready', 'True'), cond(fresh('Paused'), fresh('False'))]
    assert status_of(vm('Always'), vmi('Running', around)) == 'Running'
    assert status_of(vm('Always'), vmi('Running', [cond('Agent', 'True'), cond(fresh('Paused'), fresh('True'))])) == 'Paused'
    assert status_of(vm('Always'), vmi('Scheduling', [cond('PodScheduled', 'False', 'ZzzOther')])) == 'Starting'
    assert status_of(vm('Always'), vmi('Scheduling', [cond('PodScheduled', 'False', 'AaaOther')])) == 'Starting'
    assert status_of(vm('Always'), vmi('Scheduling', [cond('PodScheduled', fresh('False'), fresh('Unschedulable'))])) == 'ErrorUnschedulable'
    assert status_of(vm('Always'), vmi('Scheduling', [cond('Synchronized', fresh('False'), 'ErrImagePull')])) == 'ErrImagePull'
    assert status_of(vm('Always'), vmi('Scheduling', [cond('Synchronized', 'True', 'ErrImagePull')])) == 'Starting'


def test_volumes_and_requests_that_are_not_objects_are_skipped():
    assert kubevirt_views.kubevirt_volume_claims(vm(volumes=['x', None] + PVC_VOL + [{'dataVolume': {'name': 'dv1'}}])) == (['c1'], ['dv1'])
    assert status_of(vm('Manual', status={'stateChangeRequests': [{'action': 'Start'}, 'garbage']})) == 'Starting'
    assert status_of(vm('Manual', status={'stateChangeRequests': [{'action': fresh('Stop')}]}), vmi()) == 'Stopping'


@pytest.mark.parametrize('the_vm, the_vmi, vm_state', [
    (vm('RerunOnFailure', status={'runStrategy': 'RerunOnFailure'}), vmi(fresh('Failed')), 'ACTIVE'),    # it is restarted
    (vm('RerunOnFailure', status={'runStrategy': 'RerunOnFailure'}), vmi('Succeeded'), 'STOPPED'),      # it is not
    (vm('WaitAsReceiver'), vmi('Failed'), 'STOPPED'), (vm('Zzz'), vmi('Failed'), 'STOPPED'), (vm('Halted'), vmi('Failed'), 'STOPPED'),
    (vm('Once'), vmi('Succeeded'), 'STOPPED'), (vm('Once'), None, 'ACTIVE'),
    (vm('Always', status={'startFailure': {'consecutiveFailCount': -1}}), None, 'ACTIVE'),              # Always, whatever the count
    (vm('Manual', status={'startFailure': {'consecutiveFailCount': -1}}), None, 'STOPPED'),             # garbage is no failure
])
def test_automatic_starts(the_vm, the_vmi, vm_state):
    assert kubevirt_views.kubevirt_vm_view(the_vm, the_vmi)['vm_state'] == vm_state


def test_claims_without_a_phase_are_unbound():
    assert status_of(vm('Always', PVC_VOL), None, [], [{'metadata': {'name': 'c1'}, 'status': {}}]) == 'WaitingForVolumeBinding'
    assert status_of(vm('Always', PVC_VOL), None, [], [pvc('c1', fresh('Bound'))]) == 'Starting'


def test_a_newer_instance_generation_is_no_pending_restart():
    assert kubevirt_views.kubevirt_vm_view(vm('Always', generation=2), vmi(generation='3'))['pending_restart'] is False


def test_condition_status_unknown_is_not_true():
    assert status_of(vm('Always'), vmi('Running', [cond('Paused', 'Unknown')])) == 'Running'
    running_unknown = {'metadata': {'name': 'dv1'}, 'status': {'phase': 'ImportInProgress',
                                                               'conditions': [cond('Running', fresh('False'), 'Error')]}}
    assert status_of(vm('Always', DV_VOL), None, [running_unknown]) == 'DataVolumeError'


def test_requests_and_strategies_as_the_api_spells_them():
    assert status_of(vm('Manual', status={'stateChangeRequests': [{'action': fresh('Start')}]})) == 'Starting'
    assert status_of(vm('Manual', status={'stateChangeRequests': [{'action': 'Stop', 'uid': 'zz-other-vmi'}]}), vmi()) == 'Running'
    assert status_of(vm(fresh('Halted')), vmi()) == 'Stopping'
    # switched to RerunOnFailure from any other strategy, sorting before or after it: a start is expected
    assert status_of(vm('RerunOnFailure', status={'runStrategy': 'WaitAsReceiver'})) == 'Starting'
    assert status_of(vm('RerunOnFailure', status={'runStrategy': 'Always'})) == 'Starting'
    # a strategy KubeVirt does not know starts nothing
    assert status_of(vm('Aaa')) == 'Stopped' and status_of(vm('Zzz')) == 'Stopped'


# ------------------------------------------------------------------ issue 34: the two words that disagreed with virt-controller
# KubeVirt v1.8.0 isVMIStartExpected counts only a create in flight: a Start request waiting out a backoff, or a create the
# API server refused, is no start expected. Each situation as virt-controller v1.8.0 wrote it on `up --controllers real`.
FUTURE = '2999-01-01T00:00:00Z'
BACKOFF_4 = {'consecutiveFailCount': 4, 'retryAfterTimestamp': FUTURE, 'lastFailedVMIUID': 'vmi-0'}
REFUSED = cond('Failure', 'True', 'FailedCreate')


def rerun_in_backoff(**extra):
    """A RerunOnFailure VM whose launcher kept crashing: the Start request virt-controller added on its RerunOnFailure
    path, four start failures, a retry in the future, no VMI."""
    status = {'runStrategy': 'RerunOnFailure', 'startFailure': dict(BACKOFF_4), 'stateChangeRequests': [{'action': 'Start'}],
              'printableStatus': 'CrashLoopBackOff'}
    status.update(extra)
    return vm('RerunOnFailure', status=status)


def refused(strategy='Always', **extra):
    """A VM whose VMI create the API server refused (a ResourceQuota allowing no VirtualMachineInstance)."""
    status = {'conditions': [dict(REFUSED, message='Failure while starting VMI: exceeded quota')], 'printableStatus': 'Stopped'}
    status.update(extra)
    return vm(strategy, status=status)


@pytest.mark.parametrize('label, the_vm, the_vmi, expected', [
    ('rerun on failure in backoff, start request pending', rerun_in_backoff(), None, 'CrashLoopBackOff'),
    ('rerun on failure in backoff, retry already due', rerun_in_backoff(startFailure=dict(BACKOFF_4, retryAfterTimestamp='2000-01-01T00:00:00Z')),
     None, 'CrashLoopBackOff'),
    ('rerun on failure, failed instance still there, start request', rerun_in_backoff(), vmi('Failed', deleting=True), 'CrashLoopBackOff'),
    ('rerun on failure, start request, no failures',
     vm('RerunOnFailure', status={'runStrategy': 'RerunOnFailure', 'stateChangeRequests': [{'action': 'Start'}]}),
     None, 'Starting'),
    ('always in backoff', vm('Always', status={'startFailure': dict(BACKOFF_4)}), None, 'CrashLoopBackOff'),
    ('once does not wait out a backoff', vm('Once', status={'startFailure': dict(BACKOFF_4)}), None, 'Starting'),
    ('manual start request does not wait out a backoff', vm('Manual', status={'startFailure': dict(BACKOFF_4),
                                                                              'stateChangeRequests': [{'action': 'Start'}]}),
     None, 'Starting'),
    ('always, create refused', refused(), None, 'Stopped'),
    ('always, create refused after start failures', refused(startFailure=dict(BACKOFF_4)), None, 'CrashLoopBackOff'),
    ('manual start request, create refused', refused('Manual', stateChangeRequests=[{'action': 'Start'}]), None, 'Stopped'),
    ('rerun on failure just switched, create refused', refused('RerunOnFailure'), None, 'Stopped'),
    ('once, create refused', refused('Once'), None, 'Stopped'),
    ('always, a failure of another step does not stop a create', vm('Always', status={'conditions': [cond('Failure', 'True', 'HotPlugVolumeError')]}),
     None, 'Starting'),
    ('always, failure condition false', vm('Always', status={'conditions': [cond('Failure', 'False', 'FailedCreate')]}), None, 'Starting'),
    ('always, manual recovery required', vm('Always', status={'conditions': [cond('ManualRecoveryRequired', 'True')]}), None, 'Stopped'),
    ('refused, then the instance was created', refused(), vmi('Scheduling'), 'Starting'),
])
def test_start_expected_counts_only_a_create_that_happens(label, the_vm, the_vmi, expected):
    view = kubevirt_views.kubevirt_vm_view(the_vm, the_vmi)
    assert view['status'] == expected, label


def test_vm_info_words_agree_in_one_answer():
    # the answer: printable_status CrashLoopBackOff beside status Starting; and Starting beside Stopped for a refused create
    for the_vm in (rerun_in_backoff(), refused()):
        view = kubevirt_views.kubevirt_vm_view(the_vm, None)
        assert view['status'] == view['printable_status'], view


@pytest.mark.parametrize('the_vm, the_vmi, vm_state', [
    (rerun_in_backoff(), None, 'ACTIVE'),                  # it keeps trying: intended running, as before
    (refused(), None, 'ACTIVE'),                            # virt-controller retries the create
    (refused('Manual', stateChangeRequests=[{'action': 'Start'}]), None, 'ACTIVE'),
    (vm('Always', status={'startFailure': dict(BACKOFF_4)}), vmi('Failed'), 'ACTIVE'),
    (vm('Always'), vmi('Failed'), 'ACTIVE'),               # deleted and created again by virt-controller
    (vm('RerunOnFailure', status={'runStrategy': 'RerunOnFailure'}), None, 'STOPPED'),
    (vm('Manual'), vmi('Failed'), 'STOPPED'),
    (vm('Once', status={'startFailure': dict(BACKOFF_4)}), vmi('Failed'), 'ACTIVE'),
])
def test_intended_power_is_not_the_create_in_flight(the_vm, the_vmi, vm_state):
    assert kubevirt_views.kubevirt_vm_view(the_vm, the_vmi)['vm_state'] == vm_state


def test_rerun_on_failure_in_backoff_waits_for_its_claims():
    # set to start (its Start request): an unbound claim reads WaitingForVolumeBinding before the crash loop, as v1.8.0 does
    assert status_of(rerun_in_backoff(), None, [], [pvc('c1', 'Pending')]) == 'CrashLoopBackOff'    # no claim referenced
    the_vm = rerun_in_backoff()
    the_vm['spec']['template']['spec']['volumes'] = PVC_VOL
    assert status_of(the_vm, None, [], [pvc('c1', 'Pending')]) == 'WaitingForVolumeBinding'
    assert status_of(the_vm, None, [], [pvc('c1', 'Bound')]) == 'CrashLoopBackOff'
