"""Hotplug volumes of a VM template that the instance starts with (declarative hotplug of the emulation)."""

# pylint: disable=missing-function-docstring,redefined-outer-name

from kubernetes.dynamic.exceptions import DynamicApiError

from kubeapi_helpers import pvc_body, sub, vm_body


def _get(resource, name):
    try:
        return resource.get(namespace='default', name=name).to_dict()
    except DynamicApiError as err:
        if err.status == 404:
            return None
        raise


def test_hotplug_volume_in_the_template_at_start_is_unplugged_when_removed_from_the_vm(kube_dyn, kube_server):
    ctrl = kube_server.controller
    ctrl.pause()
    vms = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    vmis = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachineInstance')
    pvcs = kube_dyn.resources.get(api_version='v1', kind='PersistentVolumeClaim')
    pvcs.create(namespace='default', body=pvc_body('warm'))
    hot = {'name': 'warm', 'persistentVolumeClaim': {'claimName': 'warm', 'hotpluggable': True}}
    vms.create(namespace='default', body=vm_body('boot-hp', volumes=[hot], disks=[{'name': 'warm', 'disk': {'bus': 'scsi'}}]))
    ctrl.settle()
    vmi = _get(vmis, 'boot-hp')
    assert vmi['status']['phase'] == 'Running'
    status = [s for s in vmi['status']['volumeStatus'] if s['name'] == 'warm']
    assert status and status[0]['phase'] == 'Ready' and status[0]['hotplugVolume']['attachPodName'].startswith('hp-volume-')
    assert sub(kube_dyn, 'vm', 'boot-hp', 'removevolume', {'name': 'warm'}) == 202
    ctrl.settle()
    vmi = _get(vmis, 'boot-hp')
    assert 'warm' not in [v['name'] for v in vmi['spec']['volumes']]
    assert 'warm' not in [d['name'] for d in vmi['spec']['domain']['devices']['disks']]
    assert not [s for s in vmi['status'].get('volumeStatus') or [] if s['name'] == 'warm'] and vmi['status']['phase'] == 'Running'


def test_volume_added_to_the_instance_only_stays_when_the_vm_changes(kube_dyn, kube_server):
    ctrl = kube_server.controller
    ctrl.hotplug_volumes_gate = True    # KubeVirt's HotplugVolumes gate: ephemeral hot-plug into a VM's instance
    ctrl.pause()
    vms = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    vmis = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachineInstance')
    pvcs = kube_dyn.resources.get(api_version='v1', kind='PersistentVolumeClaim')
    pvcs.create(namespace='default', body=pvc_body('eph'))
    vms.create(namespace='default', body=vm_body('only-vmi'))
    ctrl.settle()
    body = {'name': 'eph', 'disk': {'disk': {'bus': 'scsi'}}, 'volumeSource': {'persistentVolumeClaim': {'claimName': 'eph'}}}
    assert sub(kube_dyn, 'vmi', 'only-vmi', 'addvolume', body) == 202
    ctrl.settle()
    vms.patch(namespace='default', name='only-vmi', body={'metadata': {'labels': {'touched': 'yes'}}}, content_type='application/merge-patch+json')
    ctrl.settle()
    vmi = _get(vmis, 'only-vmi')
    assert [s['phase'] for s in vmi['status']['volumeStatus'] if s['name'] == 'eph'] == ['Ready']


def test_clone_datavolume_phases_and_size_of_the_source(kube_dyn, kube_server):
    ctrl = kube_server.controller
    ctrl.pause()
    pvcs = kube_dyn.resources.get(api_version='v1', kind='PersistentVolumeClaim')
    dvs = kube_dyn.resources.get(api_version='cdi.kubevirt.io/v1beta1', kind='DataVolume')
    pvcs.create(namespace='default', body=pvc_body('golden', size='3Gi'))
    dvs.create(namespace='default', body={'apiVersion': 'cdi.kubevirt.io/v1beta1', 'kind': 'DataVolume', 'metadata': {'name': 'copy'},
                                          'spec': {'source': {'pvc': {'namespace': 'default', 'name': 'golden'}}, 'storage': {}}})
    seen = []
    for _unused in range(20):
        ctrl.tick()
        current = ((_get(dvs, 'copy') or {}).get('status') or {}).get('phase')
        if current and (not seen or seen[-1] != current):
            seen.append(current)
    assert seen == ['Pending', 'CloneScheduled', 'CloneInProgress', 'Succeeded']
    claim = _get(pvcs, 'copy')
    assert claim['spec']['resources']['requests']['storage'] == '3Gi' and claim['status']['phase'] == 'Bound'
    assert claim['metadata']['ownerReferences'][0]['kind'] == 'DataVolume'
