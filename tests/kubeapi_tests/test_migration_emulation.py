"""Migration details of the emulation: addedNodeSelector, pending timeouts of the target pod, a migration that does not converge."""

# pylint: disable=missing-function-docstring,redefined-outer-name,consider-using-f-string

import pytest

from kubeapi_helpers import sub, vm_body

NS = 'default'


@pytest.fixture
def ctl(kube_dyn, kube_server):
    """(server, controller, dynamic client) with the background controller paused: tests step with settle()/advance()."""
    kube_server.controller.pause()
    return kube_server, kube_server.controller, kube_dyn


def running(srv, ctrl, name):
    srv.store.create(ctrl.t_vm, NS, vm_body(name))
    ctrl.settle()
    vmi = srv.store.peek(ctrl.t_vmi, NS, name)
    assert vmi['status']['phase'] == 'Running'
    return vmi['status']['nodeName']


def create_mig(srv, ctrl, vmi_name, name='mig', annotations=None):
    body = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstanceMigration', 'metadata': {'name': name}, 'spec': {'vmiName': vmi_name}}
    if annotations:
        body['metadata']['annotations'] = annotations
    return srv.store.create(ctrl.t_mig, NS, body)


def mig(srv, ctrl, name='mig'):
    return srv.store.peek(ctrl.t_mig, NS, name)


def cordon_all_but(ctrl, node):
    for other in ctrl.node_names:
        if other != node:
            ctrl.set_node(other, schedulable=False)


def test_added_node_selector_places_the_target(ctl):
    srv, ctrl, dyn = ctl
    source = running(srv, ctrl, 'sel')
    wanted = sorted(n for n in ctrl.node_names if n != source)[-1]
    assert sub(dyn, 'vm', 'sel', 'migrate', {'addedNodeSelector': {'kubernetes.io/hostname': wanted}}) == 202
    ctrl.settle()
    item = srv.store.items(ctrl.t_mig, NS)[0]
    assert item['status']['phase'] == 'Succeeded' and item['status']['migrationState']['targetNode'] == wanted
    assert srv.store.peek(ctrl.t_vmi, NS, 'sel')['status']['nodeName'] == wanted
    pods = [p for p in srv.store.items(ctrl.t_pod, NS) if p['spec'].get('nodeName') == wanted]
    assert pods and pods[0]['spec']['nodeSelector']['kubernetes.io/hostname'] == wanted


def test_added_node_selector_naming_a_cordoned_node_stays_unschedulable(ctl):
    srv, ctrl, dyn = ctl
    source = running(srv, ctrl, 'selc')
    wanted = sorted(n for n in ctrl.node_names if n != source)[0]
    ctrl.set_node(wanted, schedulable=False)
    sub(dyn, 'vm', 'selc', 'migrate', {'addedNodeSelector': {'kubernetes.io/hostname': wanted}})
    ctrl.settle()
    item = srv.store.items(ctrl.t_mig, NS)[0]
    assert item['status']['phase'] == 'Scheduling'
    assert [c['reason'] for c in item['status']['conditions'] if c['type'] == 'PodScheduled'] == ['Unschedulable']


def test_unschedulable_target_fails_after_the_pending_timeout(ctl):
    srv, ctrl, _dyn = ctl
    source = running(srv, ctrl, 'pt')
    cordon_all_but(ctrl, source)
    create_mig(srv, ctrl, 'pt')
    ctrl.settle()
    assert mig(srv, ctrl)['status']['phase'] == 'Scheduling'
    target_pod = mig(srv, ctrl)['status']['migrationState']['targetPod']
    ctrl.advance(ctrl.migration_unschedulable_timeout - 10)
    ctrl.settle()
    assert mig(srv, ctrl)['status']['phase'] == 'Scheduling'
    ctrl.advance(12)
    ctrl.settle()
    failed = mig(srv, ctrl)
    assert failed['status']['phase'] == 'Failed'
    assert [c for c in failed['status']['conditions'] if c['type'] == 'Failed'][0]['message'] == \
        'Migration target pod was removed during active migration.'
    assert srv.store.peek(ctrl.t_pod, NS, target_pod) is None
    reasons = [e['reason'] for e in srv.store.items(ctrl.t_event, NS) if e['involvedObject']['name'] == 'mig']
    assert 'MigrationTargetPodUnschedulable' in reasons and 'FailedMigration' in reasons
    vmi = srv.store.peek(ctrl.t_vmi, NS, 'pt')
    assert vmi['status']['nodeName'] == source and vmi['status']['phase'] == 'Running'


@pytest.mark.parametrize('annotation', ['kubevirt.io/migrationUnschedulablePodTimeoutSeconds', 'kubevirt.io/migrationPendingPodTimeoutSeconds'])
def test_pending_timeout_annotations_override_the_default(ctl, annotation):
    srv, ctrl, _dyn = ctl
    source = running(srv, ctrl, 'pa')
    cordon_all_but(ctrl, source)
    create_mig(srv, ctrl, 'pa', annotations={annotation: '30'})
    ctrl.settle()
    ctrl.advance(20)
    ctrl.settle()
    assert mig(srv, ctrl)['status']['phase'] == 'Scheduling'
    ctrl.advance(12)
    ctrl.settle()
    assert mig(srv, ctrl)['status']['phase'] == 'Failed'


def test_a_migration_that_does_not_converge_runs_until_aborted(ctl):
    srv, ctrl, _dyn = ctl
    source = running(srv, ctrl, 'nc')
    srv.faults.inject('migration_no_converge', NS, 'nc')
    create_mig(srv, ctrl, 'nc')
    ctrl.settle()
    item = mig(srv, ctrl)
    assert item['status']['phase'] == 'Running'
    state = item['status']['migrationState']
    assert state['startTimestamp'] and not state.get('endTimestamp') and state['sourceNode'] == source and state['mode'] == 'PreCopy'
    assert state == srv.store.peek(ctrl.t_vmi, NS, 'nc')['status']['migrationState']
    srv.store.delete(ctrl.t_mig, NS, 'mig')
    ctrl.settle()
    assert mig(srv, ctrl) is None
    vmi = srv.store.peek(ctrl.t_vmi, NS, 'nc')
    assert vmi['status']['migrationState']['abortStatus'] == 'Succeeded' and vmi['status']['nodeName'] == source
