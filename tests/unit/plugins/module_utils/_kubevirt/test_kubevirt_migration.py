"""The KubeVirt migration backend's pure parts: VMIM + VMI -> the phase machine's observation and failure reason,
node blockers (cordon, taints, tolerations, Ready), names with a namespace, and option validation."""

# pylint: disable=missing-function-docstring

import copy
import json

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kclient
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_observe, migration_options, node_drain
from ansible_collections.converge.virt.plugins.module_utils._phase import migration

UID = 'mig-uid'


def vmim(phase, deleting=False, conditions=(), state=None, phases=()):
    obj = {'metadata': {'name': 'm', 'uid': UID}, 'spec': {'vmiName': 'vm'},
           'status': {'phase': phase, 'conditions': list(conditions), 'migrationState': state or {}}}
    if phases:
        obj['status']['phaseTransitionTimestamps'] = [{'phase': p, 'phaseTransitionTimestamp': '2026-11-29T13:57:0%dZ' % i}
                                                      for i, p in enumerate(phases)]
    if deleting:
        obj['metadata']['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    return obj


def vmi(phase='Running', state=None, uid=UID):
    status = {'phase': phase, 'nodeName': 'node01'}
    if state is not None:
        status['migrationState'] = dict(state, migrationUid=uid)
    return {'metadata': {'name': 'vm'}, 'status': status}


@pytest.mark.parametrize('kphase', ['Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Succeeded'])
def test_every_kubevirt_phase_maps_to_the_same_phase(kphase):
    started = {'startTimestamp': 't'} if kphase in ('Running', 'Succeeded') else {}
    phase, reason, path = migration.run_to_phase(migration_observe.observation(migration.UNSET, vmim(kphase), vmi(state=started)))
    assert phase == kphase and reason is None
    assert path == ['', kphase]
    # one phase short of what KubeVirt reports is never reached: the mapping needs KubeVirt's own phase (or the VMI's state)
    before = migration.ORDER[migration.ORDER.index(kphase) - 1]
    if before:
        assert migration.run_to_phase(migration_observe.observation(migration.UNSET, vmim(before), vmi()))[0] == before


@pytest.mark.parametrize('obj, instance, reason', [
    (vmim('Failed', conditions=[{'type': 'Failed', 'status': 'True', 'message': 'target pod x failed'}]), vmi(), migration.TARGET_FAILED),
    (vmim('Failed', conditions=[{'type': 'PodScheduled', 'status': 'False', 'reason': 'Unschedulable'}]), vmi(), migration.PENDING_TIMEOUT),
    (vmim('Failed', deleting=True), vmi(), migration.ABORTED),
    (vmim('Failed', state={'abortStatus': 'Succeeded'}), vmi(), migration.ABORTED),
    (vmim('Failed'), vmi(state={'startTimestamp': 't', 'failed': True}), migration.SOURCE_FAILED),
    (vmim('Failed'), vmi(phase='Failed'), migration.VM_GONE),
    # KubeVirt deleted the target pod that stayed pending (its pending timeouts) and failed the migration, no condition
    # saying why: its record went from Scheduling straight to Failed (real virt-controller v1.8.0 on two nodes)
    (vmim('Failed', phases=('Pending', 'Scheduling', 'Failed')), vmi(), migration.PENDING_TIMEOUT),
    (vmim('Failed', phases=('Pending', 'Failed')), vmi(), migration.PENDING_TIMEOUT),
    # a target that was scheduled and then died is the target's failure, and one whose transfer started the source's
    (vmim('Failed', phases=('Pending', 'Scheduling', 'Scheduled', 'Failed')), vmi(), migration.TARGET_FAILED),
    (vmim('Failed', phases=('Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'Failed')), vmi(), migration.TARGET_FAILED),
    (vmim('Failed', phases=('Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Failed')),
     vmi(state={'startTimestamp': 't', 'failed': True}), migration.SOURCE_FAILED),
    # an abort asked for while the target was pending stays an abort
    (vmim('Failed', deleting=True, phases=('Pending', 'Scheduling', 'Failed')), vmi(), migration.ABORTED),
    (vmim('Failed'), None, migration.VM_GONE),
    (vmim('Succeeded'), vmi(), None),
])
def test_failure_reasons(obj, instance, reason):
    assert migration_observe.migration_reason(obj, instance) == reason


def test_a_vanished_migration_object():
    done = migration_observe.observation(migration.RUNNING, None, vmi(state={'startTimestamp': 't', 'completed': True}), uid=UID, vmim_gone=True)
    assert migration.next_phase(done) == (migration.SUCCEEDED, None)
    gone = migration_observe.observation(migration.SCHEDULING, None, vmi(), uid=UID, vmim_gone=True)
    assert migration.next_phase(gone) == (migration.FAILED, migration.ABORTED)


def test_deletion_requested_is_an_abort_request():
    # handed off and transferring: the source is asked to abort and its answer decides (KubeVirt migration_test.go
    # "should abort the migration": AbortRequested is set, the migration is not failed yet)
    obs = migration_observe.observation(migration.RUNNING, vmim('Running', deleting=True), vmi(state={'startTimestamp': 't'}))
    assert obs.abort_requested and migration.next_phase(obs) == (migration.RUNNING, None)
    # before the hand-off it fails at once ("Migration abortion before hand-off to virt-handler")
    obs = migration_observe.observation(migration.PENDING, vmim('Pending', deleting=True), vmi())
    assert migration.next_phase(obs) == (migration.FAILED, migration.ABORTED)


def test_the_vmi_state_of_another_migration_is_ignored():
    obs = migration_observe.observation(migration.PENDING, vmim('Pending'), vmi(state={'startTimestamp': 't', 'targetNode': 'n2'}, uid='other'))
    assert not obs.transfer_started and not obs.target_node_known


def node(unschedulable=False, taints=(), ready='True'):
    return {'metadata': {'name': 'n'}, 'spec': {'unschedulable': unschedulable, 'taints': list(taints)},
            'status': {'conditions': [{'type': 'Ready', 'status': ready}]}}


def test_node_blockers():
    assert node_drain.node_blockers(node()) == []
    assert node_drain.node_blockers(node(unschedulable=True)) == ['cordoned (spec.unschedulable)']
    taint = {'key': 'converge.virt/draining', 'value': 'true', 'effect': 'NoSchedule'}
    assert node_drain.node_blockers(node(taints=[taint])) == ['taint converge.virt/draining=true:NoSchedule']
    assert node_drain.node_blockers(node(taints=[taint]), [{'key': 'converge.virt/draining', 'operator': 'Exists'}]) == []
    assert node_drain.node_blockers(node(taints=[dict(taint, effect='PreferNoSchedule')])) == []
    assert node_drain.node_blockers(node(ready='False')) == ['not Ready']
    assert node_drain.node_draining(node(taints=[taint])) and node_drain.node_draining(node(unschedulable=True)) and not node_drain.node_draining(node())


def test_names_and_options():
    assert migration_options.split_name('a', 'default') == ('default', 'a')
    assert migration_options.split_name('prod/a', 'default') == ('prod', 'a')
    for bad in ('/a', 'prod/', 'a/b/c'):
        with pytest.raises(InvalidDeclaration) as err:
            migration_options.split_name(bad, 'default')
        assert err.value.field == 'names'
    for opts, field in ((migration_options.KubevirtMigrationOptions(wait_timeout=-1), 'wait_timeout'),
                        (migration_options.KubevirtMigrationOptions(pending_timeout=0), 'pending_timeout'),
                        (migration_options.KubevirtMigrationOptions(target_node='n1', source_node='n1'), 'target_node')):
        with pytest.raises(InvalidDeclaration) as err:
            migration_options.validate_options(opts)
        assert err.value.field == field


@pytest.mark.parametrize('name', ['..', '.', 'a/../b', 'Node1', '', 'n' * 254, 'node_1', '-node'])
def test_node_names_that_are_not_kubernetes_names_are_refused(name):
    with pytest.raises(InvalidDeclaration) as raised:
        kclient.check_node_name(name)
    assert raised.value.to_result()['msg'].startswith('node:')
    for field in ('target_node', 'source_node'):
        with pytest.raises(InvalidDeclaration) as raised:
            migration_options.validate_options(migration_options.KubevirtMigrationOptions(**{field: name}))
        assert raised.value.to_result()['msg'].startswith(field + ':')


@pytest.mark.parametrize('name', ['node01', 'worker-1.example.com', 'n' * 253])
def test_kubernetes_node_names_are_accepted(name):
    assert kclient.check_node_name(name) == name
    assert migration_options.validate_options(migration_options.KubevirtMigrationOptions(target_node=name)).target_node == name


@pytest.mark.parametrize('name', ['.', '..'])
def test_dot_segments_never_reach_an_api_path(name):
    from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
    with pytest.raises(BackendError):
        kclient.KubeClient.path(kclient.KUBEVIRT_API, 'default', 'virtualmachines', name)
    with pytest.raises(BackendError):
        kclient.KubeClient.path(kclient.KUBEVIRT_API, name, 'virtualmachines')
    with pytest.raises(BackendError):
        node_drain.node_path(name)
    assert kclient.KubeClient.path(kclient.KUBEVIRT_API, 'default', 'virtualmachines', 'a.b').endswith('/virtualmachines/a.b')


class _NodeClient:
    """A fake API client holding one Node: GET reads it, a merge patch (None deletes a key) writes it."""

    def __init__(self, node):
        self.node = node
        self.patches = []

    def request(self, method, path, body=None, content_type=None, what=None):  # pylint: disable=unused-argument
        assert path == '/api/v1/nodes/node01', path
        if method == 'GET':
            return copy.deepcopy(self.node)
        assert method == 'PATCH' and content_type == 'application/merge-patch+json', (method, content_type)
        self.patches.append(body)

        def merge(into, patch):
            for key, value in patch.items():
                if value is None:
                    into.pop(key, None)
                elif isinstance(value, dict):
                    merge(into.setdefault(key, {}), value)
                else:
                    into[key] = value
        merge(self.node, body)
        return copy.deepcopy(self.node)


def test_a_drain_after_an_uncordon_behind_our_back_records_its_own_reason():
    """A node uncordoned with kubectl keeps our old drain annotation: host reported it, and the next drain kept its reason and time."""
    stale = json.dumps({'reason': 'old maintenance', 'since': 1.0, 'by': 'someone'})
    client = _NodeClient({'metadata': {'name': 'node01', 'resourceVersion': '7', 'annotations': {node_drain.DRAIN_ANNOTATION: stale}},
                          'spec': {}, 'status': {}})
    assert node_drain.live_drain_mark(client.node) is None, 'a stale mark on a schedulable node is not a drain'
    assert node_drain.set_drain(client, 'node01', 'kernel update', taint=False, by='me') is True
    mark = node_drain.drain_mark(client.node)
    assert client.node['spec']['unschedulable'] is True and mark['reason'] == 'kernel update' and mark['since'] > 1.0, client.node
    # draining now: the same declaration again changes nothing and keeps the mark
    assert node_drain.set_drain(client, 'node01', 'kernel update', taint=False, by='me') is False
    assert node_drain.drain_mark(client.node) == mark


def test_the_failure_message_names_kubevirts_failure_reason_when_no_condition_says_why():
    # a migration failed on the source (QEMU's error, seen on two real nodes): no Failed condition message, only the
    # failureReason virt-handler writes into migrationState - the module's message must carry it
    vmim = {'metadata': {'uid': 'u1'}, 'status': {'phase': 'Failed', 'conditions': [], 'migrationState': {
        'failed': True, 'failureReason': 'Live migration failed error encountered during MigrateToURI3 libvirt api call'}}}
    assert migration_observe.failure_message(vmim) == (
        'failureReason: Live migration failed error encountered during MigrateToURI3 libvirt api call')
    # a condition's message still comes first; nothing to say gives None
    vmim['status']['conditions'] = [{'type': 'Failed', 'status': 'True', 'reason': 'FailedMigration', 'message': 'target pod lost'}]
    assert migration_observe.failure_message(vmim) == 'FailedMigration: target pod lost'
    assert migration_observe.failure_message({'metadata': {'uid': 'u1'}, 'status': {'phase': 'Failed'}}) is None


# -- KubeVirt's own time-out aborts (virt-launcher v1.8.0 live-migration-source.go processInflightMigration) ------------
STUCK = 'Live migration stuck for 150 seconds and has been aborted'
TOO_LONG = 'Live migration is not completed after 2400 seconds and has been aborted'


def timed_out(reason, **extra):
    """The migrationState virt-launcher leaves after its own abort: failed, abortStatus Succeeded, its failureReason."""
    return dict({'startTimestamp': 't', 'endTimestamp': 't2', 'completed': True, 'failed': True, 'abortStatus': 'Succeeded',
                 'failureReason': reason}, **extra)


@pytest.mark.parametrize('text', [STUCK, TOO_LONG])
def test_kubevirts_own_timeout_abort_is_not_a_users_abort(text):
    obj = vmim('Failed', state=timed_out(text))
    assert migration_observe.failure_kind(obj, vmi(state=timed_out(text))) == 'timeout'
    assert migration_observe.migration_reason(obj, vmi(state=timed_out(text))) == migration.TRANSFER_TIMED_OUT
    # the VMIM alone (the VMI's state already of another migration) or the VMI alone says it
    assert migration_observe.migration_reason(obj, vmi(state={'startTimestamp': 't'}, uid='other')) == migration.TRANSFER_TIMED_OUT
    assert migration_observe.migration_reason(vmim('Failed'), vmi(state=timed_out(text))) == migration.TRANSFER_TIMED_OUT
    # migration_info: a failure (not an abort), KubeVirt's own words in the message
    entry = migration_observe.migration_entry(obj, vmi(state=timed_out(text)))
    assert (entry['reason'], entry['outcome'], entry['message']) == (migration.TRANSFER_TIMED_OUT, 'failed', 'failureReason: ' + text)


@pytest.mark.parametrize('obj, state', [
    (vmim('Failed', deleting=True, state=timed_out(STUCK)), timed_out(STUCK)),                      # we deleted it (our abort)
    (vmim('Failed', conditions=[{'type': 'migrationAbortRequested', 'status': 'True'}], state=timed_out(STUCK)), timed_out(STUCK)),
    (vmim('Failed', conditions=[{'type': 'MigrationAbortRequested', 'status': 'True'}], state=timed_out(STUCK)), timed_out(STUCK)),
    (vmim('Failed', state=timed_out(STUCK)), timed_out(STUCK, abortRequested=True)),                 # virt-controller marked it
    (vmim('Failed', state=timed_out('Live migration aborted ')), timed_out('Live migration aborted ')),  # a job abort, no time-out
    (vmim('Failed', state=timed_out('Live migration failed virError(Code=1, Domain=10, Message=operation canceled by client)')),
     timed_out('Live migration failed virError(Code=1, Domain=10, Message=operation canceled by client)')),
])
def test_a_requested_abort_or_an_abort_without_kubevirts_timeout_words_stays_aborted(obj, state):
    assert migration_observe.migration_reason(obj, vmi(state=state)) == migration.ABORTED
    assert migration_observe.migration_entry(obj, vmi(state=state))['outcome'] == 'aborted'


def test_a_vanished_migration_after_kubevirts_timeout_abort():
    # garbage-collected after it failed: the VMI's state still says why
    gone = migration_observe.observation(migration.RUNNING, None, vmi(state=timed_out(STUCK)), uid=UID, vmim_gone=True)
    assert migration.next_phase(gone) == (migration.FAILED, migration.TRANSFER_TIMED_OUT)
    asked = migration_observe.observation(migration.RUNNING, None, vmi(state=timed_out(STUCK, abortRequested=True)), uid=UID, vmim_gone=True)
    assert migration.next_phase(asked) == (migration.FAILED, migration.ABORTED)


def test_a_followed_run_reads_the_timeout_word_and_keeps_the_vm_on_the_source():
    # the module's own loop (_FollowKubevirt.look) on a VMIM KubeVirt failed by its progress time-out
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend  # pylint: disable=import-outside-toplevel

    class Cluster:  # pylint: disable=too-few-public-methods
        def __init__(self):
            self.objs = {'virtualmachineinstancemigrations': vmim('Failed', state=timed_out(STUCK)),
                         'virtualmachineinstances': vmi(state=timed_out(STUCK))}
            self.objs['virtualmachineinstancemigrations']['metadata']['name'] = 'a-converge-x'
            self.deleted = []

        def get(self, api, namespace, plural, name, what=None):  # pylint: disable=unused-argument,too-many-arguments
            return self.objs[plural]

        def delete(self, api, namespace, plural, name):
            self.deleted.append((plural, name))

    cluster = Cluster()
    run = migration_backend.KubevirtMigration(cluster, 'ns', 'vm', migration_options.KubevirtMigrationOptions())
    run.vmim_name, run.phase = 'a-converge-x', migration.RUNNING
    hooks = migration_backend._FollowKubevirt(run, UID, None, False)  # pylint: disable=protected-access
    look = hooks.look()
    assert (run.phase, run.reason, look.over) == (migration.FAILED, migration.TRANSFER_TIMED_OUT, True)
    assert migration_observe.failure_message(hooks.vmim) == 'failureReason: ' + STUCK
    assert cluster.deleted == [], 'a migration KubeVirt already ended is not aborted again'


def test_the_failure_message_falls_back_to_the_vmis_state_of_the_same_migration():
    # two real nodes (2026-11-29 11:09): the VMIM went Failed before virt-controller copied the migrationState into it,
    # so the module's message carried no reason although the VMI's state said 'client socket is closed'
    lost = "Live migration failed virError(Code=1, Domain=7, Message='internal error: client socket is closed')"
    bare = vmim('Failed', state={'startTimestamp': 't'})
    assert migration_observe.failure_message(bare, vmi(state={'failed': True, 'failureReason': lost})) == 'failureReason: ' + lost
    assert migration_observe.failure_message(bare, vmi(state={'failed': True, 'failureReason': lost}, uid='other')) is None
    assert migration_observe.failure_message(None, vmi(state={'failureReason': lost}), uid=UID) == 'failureReason: ' + lost
    # the VMIM's own words come first
    own = vmim('Failed', state={'failureReason': 'from the VMIM'})
    assert migration_observe.failure_message(own, vmi(state={'failureReason': lost})) == 'failureReason: from the VMIM'
    entry = migration_observe.migration_entry(bare, vmi(state={'startTimestamp': 't', 'failed': True, 'failureReason': lost}))
    assert (entry['reason'], entry['message']) == (migration.SOURCE_FAILED, 'failureReason: ' + lost)


def test_a_followed_run_keeps_the_instance_it_read_for_the_message():
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend  # pylint: disable=import-outside-toplevel
    lost = 'Live migration failed: client socket is closed'

    class Cluster:  # pylint: disable=too-few-public-methods
        def get(self, api, namespace, plural, name, what=None):  # pylint: disable=unused-argument,too-many-arguments
            return {'virtualmachineinstancemigrations': vmim('Failed', state={'startTimestamp': 't'}),
                    'virtualmachineinstances': vmi(state={'startTimestamp': 't', 'failed': True, 'failureReason': lost})}[plural]

    run = migration_backend.KubevirtMigration(Cluster(), 'ns', 'vm', migration_options.KubevirtMigrationOptions())
    run.vmim_name, run.phase = 'm', migration.RUNNING
    hooks = migration_backend._FollowKubevirt(run, UID, None, False)  # pylint: disable=protected-access
    hooks.look()
    assert (run.phase, run.reason) == (migration.FAILED, migration.SOURCE_FAILED)
    assert migration_observe.failure_message(hooks.vmim, hooks.vmi, UID) == 'failureReason: ' + lost
