"""KubeVirt VM/VMI behaviour of the emulation (vm.go, vmi.go, lifecycle.go semantics) through the kubernetes client."""

# pylint: disable=missing-function-docstring,missing-class-docstring,redefined-outer-name
# pylint: disable=consider-using-f-string,too-many-arguments,too-many-positional-arguments

import time

import pytest
from kubernetes import client, watch
from kubernetes.dynamic.exceptions import DynamicApiError

from kubeapi_helpers import pvc_body, status_of, sub, vm_body, wait_until

VM_API = 'kubevirt.io/v1'


@pytest.fixture
def kv(kube_dyn, kube_server):
    """Namespace of handy accessors."""
    class KV:  # pylint: disable=too-few-public-methods
        dyn = kube_dyn
        srv = kube_server
        ctrl = kube_server.controller
        vms = kube_dyn.resources.get(api_version=VM_API, kind='VirtualMachine')
        vmis = kube_dyn.resources.get(api_version=VM_API, kind='VirtualMachineInstance')
        pvcs = kube_dyn.resources.get(api_version='v1', kind='PersistentVolumeClaim')
        dvs = kube_dyn.resources.get(api_version='cdi.kubevirt.io/v1beta1', kind='DataVolume')

        @staticmethod
        def vm(name, ns='default'):
            return kube_dyn.resources.get(api_version=VM_API, kind='VirtualMachine').get(namespace=ns, name=name).to_dict()

        @staticmethod
        def vmi(name, ns='default'):
            try:
                return kube_dyn.resources.get(api_version=VM_API, kind='VirtualMachineInstance').get(namespace=ns, name=name).to_dict()
            except DynamicApiError as err:
                if err.status == 404:
                    return None
                raise

        @staticmethod
        def create(body, ns='default'):
            return kube_dyn.resources.get(api_version=VM_API, kind='VirtualMachine').create(namespace=ns, body=body).to_dict()
    return KV


def printable(kv, name):
    """VM printableStatus."""
    return (kv.vm(name).get('status') or {}).get('printableStatus')


def cond(obj, ctype):
    """Condition dict or {}."""
    for c in (obj.get('status') or {}).get('conditions') or []:
        if c['type'] == ctype:
            return c
    return {}


def expect_409(kv, kind, name, action, text, body=None):
    """A subresource call that must fail with 409 and ``text`` in the message."""
    with pytest.raises(DynamicApiError) as err:
        sub(kv.dyn, kind, name, action, body)
    assert err.value.status == 409, err.value.body
    msg = status_of(err.value)['message']
    assert text in msg, msg
    assert status_of(err.value)['reason'] == 'Conflict'


def test_always_runs_with_upstream_status(kv):
    kv.create(vm_body('vm1'))
    kv.ctrl.settle()
    vm, vmi = kv.vm('vm1'), kv.vmi('vm1')
    assert vm['status']['printableStatus'] == 'Running'
    assert vm['status']['created'] is True and vm['status']['ready'] is True and vm['status']['runStrategy'] == 'Always'
    assert cond(vm, 'Ready')['status'] == 'True' and cond(vm, 'LiveMigratable')['status'] == 'True'
    assert 'kubevirt.io/virtualMachineControllerFinalize' in vm['metadata']['finalizers']
    ref = vmi['metadata']['ownerReferences'][0]
    assert ref['kind'] == 'VirtualMachine' and ref['uid'] == vm['metadata']['uid'] and ref['controller'] is True
    assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'].startswith('node0')
    assert vmi['status']['interfaces'][0]['ipAddress'].startswith('10.244.')
    assert cond(vmi, 'Ready')['status'] == 'True'
    assert vmi['metadata']['labels']['kubevirt.io/nodeName'] == vmi['status']['nodeName']
    v1 = client.CoreV1Api(kv.dyn.client)
    pods = v1.list_namespaced_pod('default', label_selector='kubevirt.io=virt-launcher').items
    assert len(pods) == 1 and pods[0].spec.node_name == vmi['status']['nodeName']
    # every emulated core object deserializes with the typed client models
    reasons = {e.reason for e in v1.list_namespaced_event('default', field_selector='involvedObject.name=vm1').items}
    assert {'SuccessfulCreate', 'Started'} <= reasons
    assert len(v1.list_node().items) == 3 and v1.list_persistent_volume().items == []
    assert {c.metadata.name for c in client.StorageV1Api(kv.dyn.client).list_storage_class().items} == {'standard', 'local-wffc'}


def test_vmi_phases_observable_with_background_thread(kv):
    api = client.CustomObjectsApi(kv.dyn.client)
    rv = api.list_namespaced_custom_object('kubevirt.io', 'v1', 'default', 'virtualmachineinstances')['metadata']['resourceVersion']
    api.create_namespaced_custom_object('kubevirt.io', 'v1', 'default', 'virtualmachines', vm_body('obs'))
    phases = []
    for ev in watch.Watch().stream(api.list_namespaced_custom_object, 'kubevirt.io', 'v1', 'default', 'virtualmachineinstances',
                                   resource_version=rv, timeout_seconds=10):
        phase = (ev['object'].get('status') or {}).get('phase')
        if phase and (not phases or phases[-1] != phase):
            phases.append(phase)
        if phase == 'Running':
            break
    assert phases == ['Pending', 'Scheduling', 'Scheduled', 'Running']
    got = api.get_namespaced_custom_object('kubevirt.io', 'v1', 'default', 'virtualmachines', 'obs')
    assert got['status']['printableStatus'] == 'Running'


def test_halted_start_stop_and_conflicts(kv):
    kv.create(vm_body('h', 'Halted'))
    kv.ctrl.settle()
    vm = kv.vm('h')
    assert vm['status']['printableStatus'] == 'Stopped' and vm['status']['created'] is False and kv.vmi('h') is None
    assert cond(vm, 'Ready')['reason'] == 'VMINotExists'
    expect_409(kv, 'vm', 'h', 'stop', 'VM is not running')
    assert sub(kv.dyn, 'vm', 'h', 'start') == 202
    assert kv.vm('h')['spec']['runStrategy'] == 'Always'
    kv.ctrl.settle()
    assert printable(kv, 'h') == 'Running'
    expect_409(kv, 'vm', 'h', 'start', 'VM is already running')
    uid = kv.vmi('h')['metadata']['uid']
    kv.ctrl.pause()
    assert sub(kv.dyn, 'vm', 'h', 'stop') == 202
    assert kv.vm('h')['spec']['runStrategy'] == 'Halted'
    kv.ctrl.tick()
    assert printable(kv, 'h') == 'Stopping' and kv.vmi('h')['metadata'].get('deletionTimestamp')
    kv.ctrl.settle()
    assert printable(kv, 'h') == 'Stopped' and kv.vmi('h') is None
    expect_409(kv, 'vm', 'h', 'restart', 'RunStategy Halted does not support manual restart requests')
    sub(kv.dyn, 'vm', 'h', 'start')
    kv.ctrl.settle()
    assert kv.vmi('h')['metadata']['uid'] != uid


def test_always_restart_creates_new_vmi(kv):
    kv.ctrl.pause()
    kv.create(vm_body('r'))
    kv.ctrl.settle()
    expect_409(kv, 'vm', 'r', 'start', 'VM is already running')
    old = kv.vmi('r')['metadata']['uid']
    assert sub(kv.dyn, 'vm', 'r', 'restart') == 202
    reqs = kv.vm('r')['status']['stateChangeRequests']
    assert reqs == [{'action': 'Stop', 'uid': old}, {'action': 'Start'}]
    kv.ctrl.settle()
    vm = kv.vm('r')
    assert kv.vmi('r')['metadata']['uid'] != old and vm['status']['printableStatus'] == 'Running'
    assert 'stateChangeRequests' not in vm['status']


def test_manual_uses_state_change_requests(kv):
    kv.ctrl.pause()
    kv.create(vm_body('m', 'Manual'))
    kv.ctrl.settle()
    assert printable(kv, 'm') == 'Stopped' and kv.vmi('m') is None
    expect_409(kv, 'vm', 'm', 'stop', 'VM is not running')
    sub(kv.dyn, 'vm', 'm', 'start')
    assert kv.vm('m')['status']['stateChangeRequests'] == [{'action': 'Start'}]
    assert kv.vm('m')['spec']['runStrategy'] == 'Manual'
    kv.ctrl.settle()
    assert printable(kv, 'm') == 'Running' and 'stateChangeRequests' not in kv.vm('m')['status']
    uid = kv.vmi('m')['metadata']['uid']
    sub(kv.dyn, 'vm', 'm', 'stop')
    assert kv.vm('m')['status']['stateChangeRequests'] == [{'action': 'Stop', 'uid': uid}]
    kv.ctrl.settle()
    assert kv.vmi('m') is None and printable(kv, 'm') == 'Stopped' and kv.vm('m')['spec']['runStrategy'] == 'Manual'


def test_rerun_on_failure(kv):
    kv.create(vm_body('rr', 'RerunOnFailure'))
    kv.ctrl.settle()
    first = kv.vmi('rr')['metadata']['uid']
    kv.ctrl.crash('default', 'rr')
    kv.ctrl.settle()
    vm = kv.vm('rr')
    assert kv.vmi('rr')['metadata']['uid'] != first and vm['status']['printableStatus'] == 'Running'
    assert 'startFailure' not in vm['status']
    kv.ctrl.shutdown('default', 'rr')
    kv.ctrl.settle()
    # vm.go deletes a Succeeded VMI for RerunOnFailure and does not restart it
    assert kv.vmi('rr') is None and printable(kv, 'rr') == 'Stopped'
    sub(kv.dyn, 'vm', 'rr', 'start')
    kv.ctrl.settle()
    assert printable(kv, 'rr') == 'Running'


def test_once(kv):
    kv.create(vm_body('once', 'Once'))
    kv.ctrl.settle()
    assert printable(kv, 'once') == 'Running'
    expect_409(kv, 'vm', 'once', 'restart', 'RunStategy Once does not support manual restart requests')
    kv.ctrl.shutdown('default', 'once')
    kv.ctrl.settle()
    assert kv.vmi('once')['status']['phase'] == 'Succeeded' and printable(kv, 'once') == 'Stopped'
    expect_409(kv, 'vm', 'once', 'start', 'Once does not support manual start requests')
    sub(kv.dyn, 'vm', 'once', 'stop')
    kv.ctrl.settle()
    assert kv.vm('once')['spec']['runStrategy'] == 'Halted' and kv.vmi('once') is None


def test_legacy_running_field_and_validation(kv):
    kv.create(vm_body('legacy', running=True))
    kv.ctrl.settle()
    assert printable(kv, 'legacy') == 'Running' and kv.vm('legacy')['status']['runStrategy'] == 'Always'
    sub(kv.dyn, 'vm', 'legacy', 'stop')
    assert kv.vm('legacy')['spec']['running'] is False and 'runStrategy' not in kv.vm('legacy')['spec']
    kv.ctrl.settle()
    assert printable(kv, 'legacy') == 'Stopped'
    both = vm_body('both')
    both['spec']['running'] = True
    with pytest.raises(DynamicApiError) as err:
        kv.create(both)
    assert err.value.status == 422 and 'mutually exclusive' in status_of(err.value)['message']
    with pytest.raises(DynamicApiError) as err:
        kv.create(vm_body('bad', 'Sometimes'))
    assert err.value.status == 422 and 'Invalid RunStrategy' in status_of(err.value)['message']


def test_pause_unpause(kv):
    kv.create(vm_body('p'))
    kv.ctrl.settle()
    assert sub(kv.dyn, 'vmi', 'p', 'pause') == 200
    kv.ctrl.settle()
    vm, vmi = kv.vm('p'), kv.vmi('p')
    assert vm['status']['printableStatus'] == 'Paused'
    assert cond(vmi, 'Paused')['reason'] == 'PausedByUser' and cond(vm, 'Paused')['status'] == 'True'
    expect_409(kv, 'vmi', 'p', 'pause', 'VMI is already paused')
    assert sub(kv.dyn, 'vmi', 'p', 'unpause') == 200
    kv.ctrl.settle()
    assert printable(kv, 'p') == 'Running' and not cond(kv.vm('p'), 'Paused')
    expect_409(kv, 'vmi', 'p', 'unpause', 'VMI is not paused')
    kv.create(vm_body('stopped', 'Halted'))
    with pytest.raises(DynamicApiError) as err:
        sub(kv.dyn, 'vmi', 'stopped', 'pause')
    assert err.value.status == 404


def test_start_paused(kv):
    kv.ctrl.pause()
    kv.create(vm_body('sp', 'Halted'))
    sub(kv.dyn, 'vm', 'sp', 'start', {'paused': True})
    assert kv.vm('sp')['status']['stateChangeRequests'] == [{'action': 'Start', 'data': {'paused': 'true'}}]
    kv.ctrl.settle()
    assert kv.vm('sp')['spec']['runStrategy'] == 'Always'
    assert printable(kv, 'sp') == 'Paused' and kv.vmi('sp')['spec']['startStrategy'] == 'Paused'


def test_unschedulable_fault_and_recovery(kv):
    kv.srv.faults.inject('unschedulable', 'default', 'u')
    kv.create(vm_body('u'))
    kv.ctrl.settle()
    vm, vmi = kv.vm('u'), kv.vmi('u')
    assert vm['status']['printableStatus'] == 'ErrorUnschedulable'
    assert vmi['status']['phase'] == 'Scheduling'
    assert cond(vm, 'PodScheduled')['reason'] == 'Unschedulable' and cond(vm, 'PodScheduled')['status'] == 'False'
    expect_409(kv, 'vmi', 'u', 'pause', 'VM is not running')
    kv.srv.faults.clear('unschedulable')
    kv.ctrl.settle()
    assert printable(kv, 'u') == 'Running' and not cond(kv.vm('u'), 'PodScheduled')


def test_cordoned_and_tainted_nodes_get_no_vmis(kv):
    kv.ctrl.set_node('node01', schedulable=False)
    kv.ctrl.set_node('node02', taints=[{'key': 'maintenance', 'effect': 'NoSchedule'}])
    for i in range(3):
        kv.create(vm_body('n%d' % i))
    kv.ctrl.settle()
    assert {kv.vmi('n%d' % i)['status']['nodeName'] for i in range(3)} == {'node03'}
    kv.ctrl.set_node('node03', schedulable=False)
    kv.create(vm_body('none'))
    kv.ctrl.settle()
    vm = kv.vm('none')
    assert vm['status']['printableStatus'] == 'ErrorUnschedulable'
    assert '0/3 nodes are available' in cond(vm, 'PodScheduled')['message']
    body = vm_body('tolerant')
    body['spec']['template']['spec']['tolerations'] = [{'key': 'maintenance', 'operator': 'Exists', 'effect': 'NoSchedule'}]
    kv.create(body)
    kv.ctrl.settle()
    assert kv.vmi('tolerant')['status']['nodeName'] == 'node02'


def test_image_pull_errors(kv):
    kv.srv.faults.inject('image_pull', 'default', 'img')
    kv.ctrl.pause()
    kv.create(vm_body('img'))
    seen = []
    for _unused0 in range(8):
        kv.ctrl.tick()
        status = printable(kv, 'img')
        if not seen or seen[-1] != status:
            seen.append(status)
    assert seen[:3] == ['Starting', 'ErrImagePull', 'ImagePullBackOff']
    assert cond(kv.vm('img'), 'Synchronized')['reason'] in ('ErrImagePull', 'ImagePullBackOff')
    kv.srv.faults.clear('image_pull')
    kv.ctrl.settle()
    assert printable(kv, 'img') == 'Running' and not cond(kv.vm('img'), 'Synchronized')


def test_missing_pvc_then_created(kv):
    vol = [{'name': 'data', 'persistentVolumeClaim': {'claimName': 'later'}}]
    kv.create(vm_body('pv', volumes=vol, disks=[{'name': 'data', 'disk': {'bus': 'virtio'}}]))
    kv.ctrl.settle()
    vm = kv.vm('pv')
    assert vm['status']['printableStatus'] == 'ErrorPvcNotFound'
    assert cond(vm, 'Synchronized') == {**cond(vm, 'Synchronized'), 'status': 'False', 'reason': 'FailedPvcNotFound'}
    assert 'PVC default/later does not exist' in cond(vm, 'Synchronized')['message']
    kv.pvcs.create(namespace='default', body=pvc_body('later'))
    kv.ctrl.settle()
    vm = kv.vm('pv')
    assert vm['status']['printableStatus'] == 'Running'
    assert cond(vm, 'LiveMigratable')['status'] == 'False' and cond(vm, 'LiveMigratable')['reason'] == 'DisksNotLiveMigratable'


def test_missing_datavolume_condition(kv):
    vol = [{'name': 'dv', 'dataVolume': {'name': 'nodv'}}]
    kv.create(vm_body('mdv', volumes=vol))
    kv.ctrl.settle()
    vm = kv.vm('mdv')
    assert cond(vm, 'Synchronized')['reason'] == 'FailedDataVolumeNotFound'
    assert vm['status']['printableStatus'] == 'ErrorDataVolumeNotFound'


def test_waiting_for_volume_binding(kv):
    kv.srv.faults.inject('pvc_bind_stuck', 'default', 'slow')
    kv.pvcs.create(namespace='default', body=pvc_body('slow'))
    kv.create(vm_body('wb', 'Halted', volumes=[{'name': 'd', 'persistentVolumeClaim': {'claimName': 'slow'}}]))
    kv.ctrl.settle()
    assert printable(kv, 'wb') == 'Stopped'
    sub(kv.dyn, 'vm', 'wb', 'start')
    kv.ctrl.pause()
    kv.ctrl.tick()
    assert printable(kv, 'wb') == 'WaitingForVolumeBinding'
    kv.srv.faults.clear('pvc_bind_stuck')
    kv.ctrl.settle()
    assert printable(kv, 'wb') == 'Running'


def test_start_failure_backoff_and_crashloop(kv):
    kv.srv.faults.inject('guest_crash', 'default', 'crash', count=2)
    kv.ctrl.pause()
    kv.create(vm_body('crash'))
    kv.ctrl.settle()
    vm = kv.vm('crash')
    failure = vm['status']['startFailure']
    assert failure['consecutiveFailCount'] == 1
    left = kv.ctrl.backoff_left(vm)
    assert 8 <= left <= 16, left
    assert vm['status']['printableStatus'] == 'CrashLoopBackOff' and kv.vmi('crash') is None
    expect_409(kv, 'vm', 'crash', 'start', 'Always does not support manual start requests')
    kv.ctrl.advance(16)
    kv.ctrl.settle()
    vm = kv.vm('crash')
    assert vm['status']['startFailure']['consecutiveFailCount'] == 2
    assert 38 <= kv.ctrl.backoff_left(vm) <= 61
    kv.ctrl.advance(61)
    kv.ctrl.settle()
    vm = kv.vm('crash')
    assert vm['status']['printableStatus'] == 'Running' and 'startFailure' not in vm['status']


def test_backoff_formula_caps_at_300():
    from tests.kubeapi.kubevirt import backoff_seconds  # pylint: disable=import-outside-toplevel
    for count, low, high in [(1, 10, 15), (2, 40, 60), (3, 90, 135), (5, 250, 300), (9, 300, 300)]:
        for _unused0 in range(20):
            assert low <= backoff_seconds(count) <= high


def test_vm_delete_cascades_to_vmi(kv):
    kv.create(vm_body('del'))
    kv.ctrl.settle()
    kv.ctrl.pause()
    kv.vms.delete(namespace='default', name='del')
    kv.ctrl.tick()
    assert printable(kv, 'del') == 'Terminating'
    kv.ctrl.settle()
    with pytest.raises(DynamicApiError):
        kv.vm('del')
    assert kv.vmi('del') is None


def test_background_progress_is_quick_but_not_instant(kv):
    began = time.time()
    kv.create(vm_body('bg'))
    assert printable(kv, 'bg') in (None, 'Starting', 'Stopped')
    wait_until(lambda: printable(kv, 'bg') == 'Running', timeout=5)
    assert time.time() - began >= 3 * kv.ctrl.step_delay


def test_namespace_deletion_drains_vms(kv):
    v1 = client.CoreV1Api(kv.dyn.client)
    v1.create_namespace({'metadata': {'name': 'gone'}})
    kv.create(vm_body('inns'), ns='gone')
    kv.ctrl.settle()
    assert kv.vmi('inns', ns='gone')['status']['phase'] == 'Running'
    kv.ctrl.pause()
    v1.delete_namespace('gone')
    assert v1.read_namespace('gone').status.phase == 'Terminating'
    kv.ctrl.settle()
    assert 'gone' not in [n.metadata.name for n in v1.list_namespace().items]


def test_admin_http_endpoints(kv):
    import json  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    def admin(what, body=None):
        req = urllib.request.Request(kv.srv.http_url + '/__admin__/' + what, data=json.dumps(body or {}).encode(), method='POST')
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())
    admin('pause')
    admin('nodes/node01', {'schedulable': False})
    admin('nodes/node02', {'schedulable': False})
    admin('faults', {'cluster': [{'kind': 'guest_crash', 'namespace': 'default', 'name': 'adm', 'count': 1}]})
    kv.create(vm_body('adm'))
    assert admin('settle')['passes'] > 0
    vm = kv.vm('adm')
    assert vm['status']['printableStatus'] == 'CrashLoopBackOff'
    admin('advance', {'seconds': 20})
    admin('settle')
    assert printable(kv, 'adm') == 'Running' and kv.vmi('adm')['status']['nodeName'] == 'node03'
    assert admin('state')['errors'] == []
