"""Migrations, hotplug volumes, PVC binding/resize and DataVolume phases of the emulation."""

# pylint: disable=missing-function-docstring,missing-class-docstring,redefined-outer-name,consider-using-f-string,consider-using-in

import pytest
from kubernetes.dynamic.exceptions import DynamicApiError

from kubeapi_helpers import pvc_body, status_of, sub, vm_body


@pytest.fixture
def env(kube_dyn, kube_server):
    """Accessors; the background controller is paused so tests step deterministically with tick()/settle()."""
    kube_server.controller.pause()

    def res(api_version, kind):
        return kube_dyn.resources.get(api_version=api_version, kind=kind)

    class Env:  # pylint: disable=too-few-public-methods
        dyn = kube_dyn
        srv = kube_server
        ctrl = kube_server.controller
        vms = res('kubevirt.io/v1', 'VirtualMachine')
        vmis = res('kubevirt.io/v1', 'VirtualMachineInstance')
        migs = res('kubevirt.io/v1', 'VirtualMachineInstanceMigration')
        pvcs = res('v1', 'PersistentVolumeClaim')
        pvs = res('v1', 'PersistentVolume')
        dvs = res('cdi.kubevirt.io/v1beta1', 'DataVolume')

        @staticmethod
        def get(resource, name, ns='default'):
            try:
                return resource.get(namespace=ns, name=name).to_dict()
            except DynamicApiError as err:
                if err.status == 404:
                    return None
                raise

        @classmethod
        def running_vm(cls, name, **kw):
            cls.vms.create(namespace='default', body=vm_body(name, **kw))
            cls.ctrl.settle()
            vmi = cls.get(cls.vmis, name)
            assert vmi['status']['phase'] == 'Running'
            return vmi

        @classmethod
        def record(cls, getter, ticks=30):
            seen = []
            for _unused0 in range(ticks):
                cls.ctrl.tick()
                value = getter()
                if not seen or seen[-1] != value:
                    seen.append(value)
            return seen
    return Env


def only_migration(env):
    """The single migration object in default."""
    items = env.migs.get(namespace='default').to_dict()['items']
    assert len(items) == 1
    return items[0]


def test_migration_success(env):
    vmi = env.running_vm('mig')
    source = vmi['status']['nodeName']
    assert sub(env.dyn, 'vm', 'mig', 'migrate') == 202
    mig = only_migration(env)
    assert mig['metadata']['name'].startswith('kubevirt-migrate-vm-') and mig['spec']['vmiName'] == 'mig'
    name = mig['metadata']['name']
    printable = []

    def phase():
        vm = env.get(env.vms, 'mig')
        if not printable or printable[-1] != vm['status']['printableStatus']:
            printable.append(vm['status']['printableStatus'])
        return (env.get(env.migs, name).get('status') or {}).get('phase')
    phases = env.record(phase)
    assert phases == ['Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Succeeded']
    assert printable == ['Running', 'Migrating', 'Running']
    vmi = env.get(env.vmis, 'mig')
    state = vmi['status']['migrationState']
    assert state['completed'] is True and state['failed'] is False and state['sourceNode'] == source
    assert vmi['status']['nodeName'] == state['targetNode'] != source
    assert state['migrationUid'] == env.get(env.migs, name)['metadata']['uid']
    assert state['startTimestamp'] and state['endTimestamp']


def test_one_migration_per_vmi_and_pause_refused(env):
    env.running_vm('one')
    sub(env.dyn, 'vm', 'one', 'migrate')
    with pytest.raises(DynamicApiError) as err:
        env.migs.create(namespace='default', body={'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstanceMigration',
                                                   'metadata': {'name': 'second'}, 'spec': {'vmiName': 'one'}})
    assert err.value.status == 422 and 'in-flight migration detected' in status_of(err.value)['message']
    for _unused0 in range(3):
        env.ctrl.tick()
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vmi', 'one', 'pause')
    assert err.value.status == 409 and 'currently being migrated' in status_of(err.value)['message']


def test_migration_abort_by_delete(env):
    vmi = env.running_vm('ab')
    source = vmi['status']['nodeName']
    sub(env.dyn, 'vm', 'ab', 'migrate')
    name = only_migration(env)['metadata']['name']
    while (env.get(env.migs, name).get('status') or {}).get('phase') != 'Running':
        env.ctrl.tick()
    assert env.get(env.vms, 'ab')['status']['printableStatus'] == 'Migrating'
    env.migs.delete(namespace='default', name=name)
    mig = env.get(env.migs, name)
    assert mig['metadata']['deletionTimestamp'] and 'kubevirt.io/migrationJobFinalize' in mig['metadata']['finalizers']
    env.ctrl.tick()
    assert env.get(env.migs, name)['status']['phase'] == 'Failed'
    env.ctrl.settle()
    assert env.get(env.migs, name) is None
    vmi = env.get(env.vmis, 'ab')
    state = vmi['status']['migrationState']
    assert state['abortStatus'] == 'Succeeded' and state['failed'] is True and state['completed'] is True
    assert vmi['status']['nodeName'] == source and env.get(env.vms, 'ab')['status']['printableStatus'] == 'Running'


def test_migration_target_pod_failure(env):
    vmi = env.running_vm('tf')
    env.srv.faults.inject('migration_target_fail', 'default', 'tf', count=1)
    sub(env.dyn, 'vm', 'tf', 'migrate')
    env.ctrl.settle()
    mig = only_migration(env)
    assert mig['status']['phase'] == 'Failed'
    after = env.get(env.vmis, 'tf')
    assert after['status']['nodeName'] == vmi['status']['nodeName'] and after['status']['migrationState']['failed'] is True
    # a new migration afterwards succeeds
    env.migs.create(namespace='default', body={'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstanceMigration',
                                               'metadata': {'name': 'retry'}, 'spec': {'vmiName': 'tf'}})
    env.ctrl.settle()
    assert env.get(env.migs, 'retry')['status']['phase'] == 'Succeeded'


def test_migration_waits_for_schedulable_target(env):
    vmi = env.running_vm('cord')
    for node in ('node01', 'node02', 'node03'):
        if node != vmi['status']['nodeName']:
            env.ctrl.set_node(node, schedulable=False)
    sub(env.dyn, 'vm', 'cord', 'migrate')
    env.ctrl.settle()
    mig = only_migration(env)
    assert mig['status']['phase'] == 'Scheduling'
    assert [c for c in mig['status']['conditions'] if c['type'] == 'PodScheduled'][0]['reason'] == 'Unschedulable'
    env.ctrl.set_node('node03' if vmi['status']['nodeName'] != 'node03' else 'node02', schedulable=True)
    env.ctrl.settle()
    assert only_migration(env)['status']['phase'] == 'Succeeded'


def test_migrate_refused_when_not_running_or_not_migratable(env):
    env.vms.create(namespace='default', body=vm_body('off', 'Halted'))
    env.ctrl.settle()
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vm', 'off', 'migrate')
    assert err.value.status == 404
    env.pvcs.create(namespace='default', body=pvc_body('rwo'))
    env.running_vm('rwovm', volumes=[{'name': 'd', 'persistentVolumeClaim': {'claimName': 'rwo'}}])
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vm', 'rwovm', 'migrate')
    assert err.value.status == 500 and 'DisksNotLiveMigratable' in status_of(err.value)['message']


def test_hotplug_volume_phases_add_and_remove(env):
    env.running_vm('hp')
    env.pvcs.create(namespace='default', body=pvc_body('extra'))
    env.ctrl.settle()
    body = {'name': 'extra', 'disk': {'disk': {'bus': 'scsi'}}, 'volumeSource': {'persistentVolumeClaim': {'claimName': 'extra'}}}
    assert sub(env.dyn, 'vm', 'hp', 'addvolume', body) == 202
    vol = [v for v in env.get(env.vms, 'hp')['spec']['template']['spec']['volumes'] if v['name'] == 'extra'][0]
    assert vol['persistentVolumeClaim']['hotpluggable'] is True

    def phase():
        statuses = env.get(env.vmis, 'hp')['status'].get('volumeStatus') or []
        return next((s.get('phase') for s in statuses if s['name'] == 'extra'), None)
    assert env.record(phase, 12) == [None, 'Pending', 'Bound', 'AttachedToNode', 'MountedToPod', 'Ready'] or \
        env.record(phase, 1) == ['Ready']
    ready = [s for s in env.get(env.vmis, 'hp')['status']['volumeStatus'] if s['name'] == 'extra'][0]
    assert ready['target'].startswith('sd') and ready['hotplugVolume']['attachPodName'].startswith('hp-volume-')
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vm', 'hp', 'addvolume', body)
    assert err.value.status == 409 and 'already exists' in status_of(err.value)['message']
    assert sub(env.dyn, 'vm', 'hp', 'removevolume', {'name': 'extra'}) == 202
    seen = env.record(phase, 6)
    assert seen == ['Ready', 'Detaching', None] or seen == ['Detaching', None]
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vm', 'hp', 'removevolume', {'name': 'extra'})
    assert err.value.status == 409 and 'does not exist' in status_of(err.value)['message']


def test_hotplug_errors_and_no_ephemeral_hotplug_into_a_vm_owned_instance(env):
    env.pvcs.create(namespace='default', body=pvc_body('root'))
    env.pvcs.create(namespace='default', body=pvc_body('eph'))
    env.running_vm('hv', volumes=[{'name': 'root', 'persistentVolumeClaim': {'claimName': 'root'}}],
                   disks=[{'name': 'root', 'disk': {'bus': 'virtio'}}])
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vm', 'hv', 'removevolume', {'name': 'root'})
    assert err.value.status == 409 and 'not hotpluggable' in status_of(err.value)['message']
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vm', 'hv', 'addvolume', {'name': 'x'})
    assert err.value.status == 400 and 'requires disk' in status_of(err.value)['message']
    body = {'name': 'eph', 'disk': {'disk': {'bus': 'scsi'}}, 'volumeSource': {'persistentVolumeClaim': {'claimName': 'eph'}}}
    # DeclarativeHotplugVolumes without HotplugVolumes (as the real lab runs KubeVirt 1.8): no ephemeral hot-plug into an
    # instance a VM owns (virt-api's vmiVolumePatch)
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vmi', 'hv', 'addvolume', body)
    assert err.value.status == 400 and status_of(err.value)['message'] == 'VMI default/hv is owned by a VM'
    with pytest.raises(DynamicApiError) as err:
        sub(env.dyn, 'vmi', 'hv', 'removevolume', {'name': 'root'})
    assert err.value.status == 400 and 'is owned by a VM' in status_of(err.value)['message']
    assert [v['name'] for v in env.get(env.vmis, 'hv')['spec']['volumes']] == ['root']


def test_pvc_immediate_binding_and_resize(env):
    env.pvcs.create(namespace='default', body=pvc_body('imm', size='1Gi'))
    phases = env.record(lambda: (env.get(env.pvcs, 'imm').get('status') or {}).get('phase'), 3)
    assert phases == ['Pending', 'Bound'] or phases == ['Bound']
    pvc = env.get(env.pvcs, 'imm')
    assert pvc['spec']['storageClassName'] == 'standard' and pvc['status']['capacity']['storage'] == '1Gi'
    pv = env.get(env.pvs, pvc['spec']['volumeName'], ns=None)
    assert pv['spec']['claimRef']['name'] == 'imm' and pv['status']['phase'] == 'Bound'
    env.pvcs.patch(namespace='default', name='imm', body={'spec': {'resources': {'requests': {'storage': '2Gi'}}}},
                   content_type='application/merge-patch+json')
    env.ctrl.tick()
    pvc = env.get(env.pvcs, 'imm')
    assert [c['type'] for c in pvc['status']['conditions']] == ['Resizing'] and pvc['status']['capacity']['storage'] == '1Gi'
    env.ctrl.settle()
    pvc = env.get(env.pvcs, 'imm')
    assert pvc['status']['capacity']['storage'] == '2Gi' and 'conditions' not in pvc['status']
    with pytest.raises(DynamicApiError) as err:
        env.pvcs.patch(namespace='default', name='imm', body={'spec': {'resources': {'requests': {'storage': '1Gi'}}}},
                       content_type='application/merge-patch+json')
    assert err.value.status == 422


def test_pvc_wait_for_first_consumer(env):
    env.pvcs.create(namespace='default', body=pvc_body('wffc', storage_class='local-wffc'))
    env.ctrl.settle()
    assert env.get(env.pvcs, 'wffc')['status']['phase'] == 'Pending'
    env.running_vm('consumer', volumes=[{'name': 'd', 'persistentVolumeClaim': {'claimName': 'wffc'}}])
    pvc = env.get(env.pvcs, 'wffc')
    assert pvc['status']['phase'] == 'Bound'
    assert pvc['metadata']['annotations']['volume.kubernetes.io/selected-node'] == env.get(env.vmis, 'consumer')['status']['nodeName']


def dv_body(name, url='http://example.invalid/disk.img'):
    """DataVolume manifest."""
    return {'apiVersion': 'cdi.kubevirt.io/v1beta1', 'kind': 'DataVolume', 'metadata': {'name': name},
            'spec': {'source': {'http': {'url': url}}, 'storage': {'resources': {'requests': {'storage': '2Gi'}}}}}


def test_datavolume_phases_and_pvc(env):
    env.dvs.create(namespace='default', body=dv_body('dv1'))
    seen = env.record(lambda: ((env.get(env.dvs, 'dv1').get('status') or {}).get('phase'),
                               (env.get(env.dvs, 'dv1').get('status') or {}).get('progress')), 12)
    assert [p for p, _unused0 in seen][0] == 'Pending'
    phases = []
    for phase, _unused0 in seen:
        if phase not in phases:
            phases.append(phase)
    assert phases == ['Pending', 'ImportScheduled', 'ImportInProgress', 'Succeeded']
    assert ('ImportInProgress', '50.00%') in seen and seen[-1] == ('Succeeded', '100.0%')
    pvc = env.get(env.pvcs, 'dv1')
    assert pvc['metadata']['ownerReferences'][0]['kind'] == 'DataVolume' and pvc['status']['phase'] == 'Bound'
    assert pvc['spec']['resources']['requests']['storage'] == '2Gi'


def test_datavolume_failure_and_vm_dv_statuses(env):
    env.srv.faults.inject('dv_fail', 'default', 'bad')
    body = vm_body('dvvm', volumes=[{'name': 'root', 'dataVolume': {'name': 'bad'}}])
    body['spec']['dataVolumeTemplates'] = [{'metadata': {'name': 'bad'}, 'spec': dv_body('bad')['spec']}]
    env.vms.create(namespace='default', body=body)
    printable = env.record(lambda: env.get(env.vms, 'dvvm')['status']['printableStatus'], 10)
    assert printable == ['Provisioning', 'DataVolumeError']
    dv = env.get(env.dvs, 'bad')
    assert dv['status']['phase'] == 'Failed'
    running = [c for c in dv['status']['conditions'] if c['type'] == 'Running'][0]
    assert running['status'] == 'False' and running['reason'] == 'Error'
    assert dv['metadata']['ownerReferences'][0]['name'] == 'dvvm'
    assert env.get(env.vmis, 'dvvm') is None
    env.vms.delete(namespace='default', name='dvvm')
    env.ctrl.settle()
    assert env.get(env.dvs, 'bad') is None and env.get(env.vms, 'dvvm') is None


def test_vm_with_datavolume_template_provisions_then_runs(env):
    body = vm_body('good', volumes=[{'name': 'root', 'dataVolume': {'name': 'good-root'}}])
    body['spec']['dataVolumeTemplates'] = [{'metadata': {'name': 'good-root'}, 'spec': dv_body('good-root')['spec']}]
    env.vms.create(namespace='default', body=body)
    printable = env.record(lambda: env.get(env.vms, 'good')['status']['printableStatus'], 20)
    assert printable == ['Provisioning', 'Starting', 'Running']
