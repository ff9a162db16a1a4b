"""converge.virt.volume and volume_info with backend kubevirt, through the ansible CLI, against the Kubernetes API test server.

The server (tests/kubeapi) binds claims, imports DataVolumes, resizes and
moves hotplug volumes through their phases the way Kubernetes, CDI and
KubeVirt do; the module plans with the same volume planner as on libvirt.
Covers create (claim and DataVolume, with their phases), grow, shrink refused,
delete in use refused then allowed after an explicit unplug, hotplug attach
to a running VM with the phases up to Ready, detach, attach to a stopped VM,
check mode, idempotence, injected faults, volume_info agreement, bad input
and the token never shown.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import functools
import json
import time

from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

NS = 'default'
GI = 1024 ** 3
HOTPLUG_ORDER = ['Pending', 'Bound', 'AttachedToNode', 'MountedToPod', 'Ready']


kv = functools.partial(kubevirt_args, {'namespace': NS, 'wait_timeout': 60})


def rtype(srv, group, plural):
    return srv.store.rtype(group, plural)


def pvc_obj(srv, name):
    return srv.store.peek(rtype(srv, '', 'persistentvolumeclaims'), NS, name)


def dv_obj(srv, name):
    return srv.store.peek(rtype(srv, 'cdi.kubevirt.io', 'datavolumes'), NS, name)


def vm_obj(srv, name):
    return srv.store.peek(rtype(srv, 'kubevirt.io', 'virtualmachines'), NS, name)


def vmi_obj(srv, name):
    return srv.store.peek(rtype(srv, 'kubevirt.io', 'virtualmachineinstances'), NS, name)


def failed(result):
    assert result.get('failed'), result
    return result


def ops(result):
    return [(o['op'], o.get('vm')) for o in result['operations']]


def make_vm(srv, name, state='running'):
    vm = dict(name=name, vcpus=1, memory='64Mi', state=state, disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}])
    ok(run_module('vm', kv(srv, **vm)))


def template_volumes(srv, vm):
    return dict((v['name'], v) for v in vm_obj(srv, vm)['spec']['template']['spec'].get('volumes') or [])


def vmi_volumes(srv, vm):
    return dict((v['name'], v) for v in (vmi_obj(srv, vm) or {}).get('spec', {}).get('volumes') or [])


def in_order(seen, order):
    """``seen`` is a subsequence of ``order`` (phases observed by polling, none out of order)."""
    positions = [order.index(p) for p in seen]
    return positions == sorted(positions) and len(set(positions)) == len(positions)


def test_claim_create_grow_shrink_refused_and_idempotent(kube_server):
    srv = kube_server
    created = ok(run_module('volume', kv(srv, name='data1', capacity='1Gi'), diff=True))
    assert created['changed'] and ops(created) == [('create_volume', None)]
    assert created['operations'][0]['phase'] == 'Bound'
    vol = created['volume']
    assert vol['exists'] and vol['kind'] == 'PersistentVolumeClaim' and vol['phase'] == 'Bound' and vol['capacity'] == GI
    assert vol['storage_class'] == 'standard' and vol['used_by'] == [] and vol['key'] == 'default/data1'
    assert created['diff']['before'] == {} and created['diff']['after']['data1']['capacity'] == GI
    pvc = pvc_obj(srv, 'data1')
    assert pvc['spec']['resources']['requests']['storage'] == '1Gi' and pvc['status']['phase'] == 'Bound'
    # idempotent: the server's additions (storage class, volumeMode, finalizer, volumeName) are no change; 1GiB is 1Gi
    for same in ('1Gi', '1GiB', GI):
        again = ok(run_module('volume', kv(srv, name='data1', capacity=same)))
        assert not again['changed'] and again['operations'] == [], same
    rv = pvc_obj(srv, 'data1')['metadata']['resourceVersion']
    grown = ok(run_module('volume', kv(srv, name='data1', capacity='2Gi')))
    assert grown['changed'] and ops(grown) == [('grow_volume', None)]
    assert grown['operations'][0]['from'] == GI and grown['operations'][0]['to'] == 2 * GI
    assert grown['volume']['capacity'] == 2 * GI and grown['volume']['bound_capacity'] == 2 * GI
    assert pvc_obj(srv, 'data1')['status']['capacity']['storage'] == '2Gi'
    assert not ok(run_module('volume', kv(srv, name='data1', capacity='2Gi')))['changed']
    rv = pvc_obj(srv, 'data1')['metadata']['resourceVersion']
    shrink = failed(run_module('volume', kv(srv, name='data1', capacity='1Gi')))
    assert 'shrinking from %d' % (2 * GI) in shrink['msg'] and 'never shrunk' in shrink['msg'] and 'data1' in shrink['msg']
    assert shrink['refusals'][0]['capacity'] == 2 * GI and shrink['operations'] == [] and not shrink['changed']
    assert pvc_obj(srv, 'data1')['metadata']['resourceVersion'] == rv
    gone = ok(run_module('volume', kv(srv, name='data1', state='absent')))
    assert gone['changed'] and ops(gone) == [('delete_volume', None)] and not gone['volume']['exists']
    assert pvc_obj(srv, 'data1') is None
    assert not ok(run_module('volume', kv(srv, name='data1', state='absent')))['changed']


def test_datavolume_import_phases_and_failure(kube_server):
    srv = kube_server
    url = 'https://images.example.com/fedora-40.qcow2'
    created = ok(run_module('volume', kv(srv, name='root1', import_from=url, capacity='5Gi')))
    op = created['operations'][0]
    assert op['op'] == 'create_volume' and op['dv_phase'] == 'Succeeded'
    assert op['phases'][-1] == 'Succeeded' and in_order(op['phases'], ['Pending', 'ImportScheduled', 'ImportInProgress', 'Succeeded'])
    vol = created['volume']
    assert vol['kind'] == 'DataVolume' and vol['dv_phase'] == 'Succeeded' and vol['phase'] == 'Bound' and vol['capacity'] == 5 * GI
    dv = dv_obj(srv, 'root1')
    assert dv['spec']['source'] == {'http': {'url': url}} and dv['spec']['storage']['resources']['requests']['storage'] == '5Gi'
    assert not ok(run_module('volume', kv(srv, name='root1', import_from=url, capacity='5Gi')))['changed']
    # a blank DataVolume and a registry import
    items = [{'name': 'scratch', 'data_volume': True, 'capacity': '1Gi'},
             {'name': 'cd', 'import_from': 'docker://quay.io/containerdisks/fedora:40', 'capacity': '2Gi'}]
    blank = ok(run_module('volume', kv(srv, volumes=items)))
    assert [v['dv_phase'] for v in blank['volumes']] == ['Succeeded', 'Succeeded']
    assert dv_obj(srv, 'scratch')['spec']['source'] == {'blank': {}}
    assert dv_obj(srv, 'cd')['spec']['source'] == {'registry': {'url': 'docker://quay.io/containerdisks/fedora:40'}}
    # a clone takes the size of its source
    clone = ok(run_module('volume', kv(srv, name='root1-copy', clone_from='root1')))
    phases = clone['operations'][0]['phases']
    assert phases[-1] == 'Succeeded' and in_order(phases, ['Pending', 'CloneScheduled', 'CloneInProgress', 'Succeeded']), phases
    assert dv_obj(srv, 'root1-copy')['spec']['source'] == {'pvc': {'name': 'root1', 'namespace': NS}}
    assert clone['volume']['capacity'] == 5 * GI and pvc_obj(srv, 'root1-copy')['status']['phase'] == 'Bound'
    assert not ok(run_module('volume', kv(srv, name='root1-copy', clone_from='root1')))['changed']
    # grow a DataVolume: its claim grows, the declared size is kept on the claim, and a re-run is no change
    grown = ok(run_module('volume', kv(srv, name='root1', import_from=url, capacity='8Gi')))
    assert ops(grown) == [('grow_volume', None)] and grown['volume']['capacity'] == 8 * GI
    assert pvc_obj(srv, 'root1')['status']['capacity']['storage'] == '8Gi'
    assert not ok(run_module('volume', kv(srv, name='root1', import_from=url, capacity='8Gi')))['changed']
    # injected import failure: a clear failure with CDI's message and the phase
    srv.faults.inject('dv_fail', NS, 'broken')
    bad = failed(run_module('volume', kv(srv, name='broken', import_from='https://images.example.com/missing.img', capacity='1Gi')))
    assert 'DataVolume default/broken failed' in bad['msg'] and '404' in bad['msg'] and bad['dv_phase'] == 'Failed'
    assert bad['changed'] and bad['volume']['dv_phase'] == 'Failed' and 'Unable to connect' in bad['volume']['message']


def test_claim_that_never_binds_times_out_clearly(kube_server):
    srv = kube_server
    srv.faults.inject('pvc_bind_stuck', NS, 'stuck')
    result = failed(run_module('volume', kv(srv, name='stuck', capacity='1Gi', wait_timeout=2)))
    assert 'timed out after 2s waiting for PersistentVolumeClaim default/stuck to be Bound' in result['msg']
    assert result['last_observed'] == {'phase': 'Pending', 'storage_class': 'standard'}
    assert result['changed'] and result['volume']['phase'] == 'Pending'
    # a WaitForFirstConsumer class is not waited for: Pending is its normal state until a VM uses it
    wffc = ok(run_module('volume', kv(srv, name='late', capacity='1Gi', storage_class='local-wffc')))
    assert wffc['operations'][0]['binding'] == 'WaitForFirstConsumer' and wffc['volume']['phase'] == 'Pending'


def test_hotplug_attach_detach_running_vm_and_delete_in_use(kube_server):
    srv = kube_server
    make_vm(srv, 'web')
    ok(run_module('volume', kv(srv, name='hp1', capacity='1Gi')))
    attach = [{'vm': 'web', 'dev': 'data', 'serial': 'd1'}]
    planned = ok(run_module('volume', kv(srv, name='hp1', capacity='1Gi', attachments=attach), check=True, diff=True))
    assert ops(planned) == [('attach_config', 'web'), ('attach_live', 'web')] and planned['changed']
    assert 'data' not in template_volumes(srv, 'web')
    assert planned['diff']['after']['hp1']['attachments'] == ['web:data live config']
    history = []
    if srv.real:
        srv.watch('kubevirt.io', 'virtualmachines', NS, lambda kind, obj: obj['metadata']['name'] == 'web' and history.append(obj))
    else:
        start_rv = srv.store.rv
    done = ok(run_module('volume', kv(srv, name='hp1', capacity='1Gi', attachments=attach)))
    assert ops(done) == [('attach_config', 'web'), ('attach_live', 'web')]
    phases = done['operations'][1]['phases']
    assert phases[-1] == 'Ready' and in_order(phases, HOTPLUG_ORDER), phases
    tvol = template_volumes(srv, 'web')['data']
    assert tvol['persistentVolumeClaim'] == {'claimName': 'hp1', 'hotpluggable': True}
    assert 'data' in vmi_volumes(srv, 'web')
    status = [s for s in vmi_obj(srv, 'web')['status']['volumeStatus'] if s['name'] == 'data'][0]
    assert status['phase'] == 'Ready'
    att = done['volume']['attachments'][0]
    assert att == {'vm': 'web', 'dev': 'data', 'bus': 'scsi', 'readonly': False, 'serial': 'd1', 'live': True, 'persistent': True,
                   'vm_running': True, 'hotpluggable': True, 'hotplug_phase': 'Ready'}
    assert done['volume']['used_by'] == ['web']
    # the hotplug ran under the VM's task (attach_volume), released afterwards
    if srv.real:    # the watch delivers the last change (the task released) shortly after the module returns
        srv.controller.wait_for(lambda: history and 'converge.virt/task-id' not in history[-1]['metadata'].get('annotations', {}), timeout=10)
    else:
        history = [e.obj for e in srv.store.events_since(start_rv) if e.obj.get('kind') == 'VirtualMachine' and e.obj['metadata']['name'] == 'web']
    held = [i for i, o in enumerate(history) if (o['metadata'].get('annotations') or {}).get('converge.virt/task-action') == 'attach_volume']
    plugged = [i for i, o in enumerate(history) if 'data' in [v['name'] for v in o['spec']['template']['spec'].get('volumes') or []]]
    assert held and plugged and held[0] < plugged[0] <= held[-1] < len(history) - 1
    assert 'converge.virt/task-id' not in vm_obj(srv, 'web')['metadata']['annotations']
    again = ok(run_module('volume', kv(srv, name='hp1', capacity='1Gi', attachments=attach)))
    assert not again['changed'] and again['operations'] == []

    # delete while in use: refused naming the VM, nothing changed
    rv = vm_obj(srv, 'web')['metadata']['resourceVersion']
    refused = failed(run_module('volume', kv(srv, name='hp1', state='absent')))
    assert 'in use by web' in refused['msg'] and refused['refusals'][0]['used_by'] == ['web'] and not refused['changed']
    assert pvc_obj(srv, 'hp1') is not None and vm_obj(srv, 'web')['metadata']['resourceVersion'] == rv
    # unplugging from a running guest needs force
    noforce = failed(run_module('volume', kv(srv, name='hp1', state='absent', attachments=[])))
    assert 'running VM web' in noforce['msg'] and 'force' in noforce['msg'] and pvc_obj(srv, 'hp1') is not None
    assert 'data' in vmi_volumes(srv, 'web')
    # growing while attached to the running VM is online
    grown = ok(run_module('volume', kv(srv, name='hp1', capacity='2Gi')))
    assert grown['operations'][0]['online'] is True
    # detach only (keep the claim), then delete with the explicit unplug
    detached = ok(run_module('volume', kv(srv, name='hp1', attachments=[], force=True)))
    assert ops(detached) == [('detach_live', 'web'), ('detach_config', 'web')]
    assert detached['operations'][0]['phases'][-1] == 'Detached'
    assert 'data' not in template_volumes(srv, 'web') and 'data' not in vmi_volumes(srv, 'web')
    assert not [s for s in vmi_obj(srv, 'web')['status'].get('volumeStatus') or [] if s['name'] == 'data']
    assert vmi_obj(srv, 'web')['status']['phase'] == 'Running'
    ok(run_module('volume', kv(srv, name='hp1', attachments=attach)))
    removed = ok(run_module('volume', kv(srv, name='hp1', state='absent', attachments=[], force=True)))
    assert ops(removed) == [('detach_live', 'web'), ('detach_config', 'web'), ('delete_volume', None)]
    assert pvc_obj(srv, 'hp1') is None and 'data' not in template_volumes(srv, 'web')


def test_attach_to_stopped_vm_edits_template_then_boots_with_it(kube_server):
    srv = kube_server
    make_vm(srv, 'cold', state='stopped')
    ok(run_module('volume', kv(srv, name='cold-data', capacity='1Gi')))
    attach = [{'vm': 'cold', 'dev': 'extra', 'bus': 'virtio'}]
    result = ok(run_module('volume', kv(srv, name='cold-data', attachments=attach)))
    assert ops(result) == [('attach_config', 'cold')]
    disks = dict((d['name'], d) for d in vm_obj(srv, 'cold')['spec']['template']['spec']['domain']['devices']['disks'])
    assert disks['extra'] == {'name': 'extra', 'disk': {'bus': 'virtio'}} and 'root' in disks
    assert template_volumes(srv, 'cold')['extra']['persistentVolumeClaim']['claimName'] == 'cold-data'
    assert vmi_obj(srv, 'cold') is None
    assert result['volume']['attachments'][0]['persistent'] and not result['volume']['attachments'][0]['live']
    assert not ok(run_module('volume', kv(srv, name='cold-data', attachments=attach)))['changed']
    # started, the VM has the volume live (a hotplug volume of the template) and the declaration is still met
    make_vm(srv, 'cold', state='running')
    srv.controller.wait_for(lambda: (([s for s in (vmi_obj(srv, 'cold') or {}).get('status', {}).get('volumeStatus') or []
                                       if s['name'] == 'extra'] or [{}])[0].get('phase') == 'Ready'))
    same = ok(run_module('volume', kv(srv, name='cold-data', attachments=attach)))
    assert not same['changed'] and same['volume']['attachments'][0]['live'] and same['volume']['attachments'][0]['hotplug_phase'] == 'Ready'
    # stopped again, a detach edits the template only
    make_vm(srv, 'cold', state='stopped')
    off = ok(run_module('volume', kv(srv, name='cold-data', attachments=[])))
    assert ops(off) == [('detach_config', 'cold')] and 'extra' not in template_volumes(srv, 'cold')
    disks = [d['name'] for d in vm_obj(srv, 'cold')['spec']['template']['spec']['domain']['devices']['disks']]
    assert disks == ['root']


def test_check_mode_changes_nothing(kube_server):
    srv = kube_server
    make_vm(srv, 'cm')
    planned = ok(run_module('volume', kv(srv, name='cm1', capacity='1Gi', attachments=[{'vm': 'cm', 'dev': 'd1'}]), check=True, diff=True))
    assert ops(planned) == [('create_volume', None), ('attach_config', 'cm'), ('attach_live', 'cm')]
    assert pvc_obj(srv, 'cm1') is None and 'd1' not in template_volumes(srv, 'cm')
    assert planned['diff']['after']['cm1'] == {'exists': True, 'capacity': GI, 'attachments': ['cm:d1 live config']}
    ok(run_module('volume', kv(srv, name='cm1', capacity='1Gi', attachments=[{'vm': 'cm', 'dev': 'd1'}])))
    before = (pvc_obj(srv, 'cm1')['metadata']['resourceVersion'], vm_obj(srv, 'cm')['metadata']['resourceVersion'])
    for args, expected in ((dict(capacity='3Gi'), [('grow_volume', None)]),
                           (dict(attachments=[], force=True), [('detach_live', 'cm'), ('detach_config', 'cm')]),
                           (dict(state='absent', attachments=[], force=True),
                            [('detach_live', 'cm'), ('detach_config', 'cm'), ('delete_volume', None)])):
        result = ok(run_module('volume', kv(srv, name='cm1', **args), check=True))
        assert result['changed'] and ops(result) == expected, args
    srv.controller.settle()
    assert (pvc_obj(srv, 'cm1')['metadata']['resourceVersion'], vm_obj(srv, 'cm')['metadata']['resourceVersion']) == before
    assert pvc_obj(srv, 'cm1')['spec']['resources']['requests']['storage'] == '1Gi' and 'd1' in vmi_volumes(srv, 'cm')
    # the dry run is a real server-side validation: a grow the storage class refuses fails in check mode too
    srv.store.mutate(rtype(srv, 'storage.k8s.io', 'storageclasses'), '', 'standard', lambda sc: sc.update(allowVolumeExpansion=False))
    refused = failed(run_module('volume', kv(srv, name='cm1', capacity='3Gi'), check=True))
    assert 'only dynamically provisioned pvc can be resized' in refused['msg']


def test_volume_info_agrees_with_volume(kube_server):
    srv = kube_server
    make_vm(srv, 'inf')
    a = ok(run_module('volume', kv(srv, name='info-a', capacity='1Gi', attachments=[{'vm': 'inf', 'dev': 'a'}])))['volume']
    b = ok(run_module('volume', kv(srv, name='info-b', import_from='https://images.example.com/b.raw', capacity='2Gi')))['volume']
    info = ok(run_module('volume_info', dict(backend='kubevirt', kubeconfig=srv.kubeconfig_path, namespace=NS)))
    by_name = dict((v['name'], v) for v in info['volumes'])
    assert set(by_name) == {'info-a', 'info-b'} and not info['changed']
    for vol in (a, b):
        assert by_name[vol['name']] == vol
    assert by_name['info-a']['attachments'][0]['hotplug_phase'] == 'Ready' and by_name['info-a']['used_by'] == ['inf']
    some = ok(run_module('volume_info', dict(backend='kubevirt', kubeconfig=srv.kubeconfig_path, namespace=NS, name=['info-b', 'nope'])))
    assert [v['name'] for v in some['volumes']] == ['info-b', 'nope'] and some['volumes'][1] == {
        'key': 'default/nope', 'name': 'nope', 'namespace': NS, 'exists': False}


def test_bad_input_names_the_field_and_changes_nothing(kube_server):
    srv = kube_server
    cases = [
        (dict(name='x1', capacity='1Gi', pool='default'), 'pool', 'libvirt option'),
        (dict(name='x1', capacity='1Gi', wipe=True), 'wipe', 'libvirt option'),
        (dict(name='X_bad', capacity='1Gi'), 'name', 'claim name'),
        (dict(name='x1', capacity='lots'), 'capacity', 'cannot parse'),
        (dict(name='x1'), 'capacity', 'capacity is required'),
        (dict(name='x1', capacity='1Gi', import_from='/tmp/file.img'), 'import_from', 'http(s)://'),
        (dict(name='x1', capacity='1Gi', import_from='https://a/b', data_volume=False), 'data_volume', 'need a DataVolume'),
        (dict(name='x1', capacity='1Gi', attachments=[{'vm': 'nosuchvm', 'dev': 'd'}]), 'nosuchvm', 'does not exist'),
        (dict(name='x1', capacity='1Gi', attachments=[{'vm': 'v', 'dev': 'Bad_Dev'}]), 'attachments[0].dev', 'DNS label'),
        (dict(name='x1', capacity='1Gi', attachments=[{'vm': 'v', 'dev': 'd', 'bus': 'ide'}]), 'attachments[0].bus', 'scsi'),
        (dict(volumes=[{'name': 'x1', 'capacity': '1Gi'}, {'name': 'x1', 'capacity': '2Gi'}]), 'volumes', 'more than once'),
        (dict(volumes=[{'name': 'x1', 'capacity': '1Gi', 'format': 'qcow2'}]), 'volumes[0].format', 'libvirt option'),
    ]
    for args, field, words in cases:
        result = failed(run_module('volume', kv(srv, **args)))
        assert field in result['msg'] and words in result['msg'], (args, result['msg'])
        assert not result.get('changed')
    assert pvc_obj(srv, 'x1') is None and dv_obj(srv, 'x1') is None
    other = failed(run_module('volume', dict(name='x1', capacity='1Gi', storage_class='standard', uri='test:///default')))
    assert other['msg'].startswith('storage_class: is a kubevirt option')


def test_api_key_never_shown(kube_server):
    srv = kube_server
    canary = 'canary-token-7f3e9d'
    canary = srv.add_token(canary, ['default'])
    args = dict(backend='kubevirt', host=srv.url, api_key=canary, validate_certs=False, namespace=NS)
    results = [
        run_module('volume', dict(args, name='sec1', capacity='1Gi')),
        run_module('volume', dict(args, name='sec1', capacity='512Mi')),
        run_module('volume', dict(args, name='sec1', capacity='1Gi', attachments=[{'vm': 'missing', 'dev': 'd'}])),
        run_module('volume_info', dict(args)),
        run_module('volume', dict(args, name='sec1', capacity='1Gi', namespace='demo')),
    ]
    assert results[0]['changed'] and not results[0].get('failed') and results[1].get('failed') and results[4].get('failed')
    assert '403' in results[4]['msg'] or 'forbidden' in results[4]['msg'].lower()
    for result in results:
        assert canary not in json.dumps(result)


def test_attach_refused_while_another_task_holds_the_vm(kube_server):
    srv = kube_server
    make_vm(srv, 'busy')
    ok(run_module('volume', kv(srv, name='busy-data', capacity='1Gi')))
    lease = '%r' % (time.time() + 600)
    task = {'converge.virt/task-id': 'othertask0001', 'converge.virt/task-state': 'REBOOTING', 'converge.virt/task-action': 'reboot_soft',
            'converge.virt/lease-until': lease, 'converge.virt/task-owner': 'elsewhere:1'}
    srv.store.mutate(rtype(srv, 'kubevirt.io', 'virtualmachines'), NS, 'busy', lambda o: o['metadata'].setdefault('annotations', {}).update(task))
    result = failed(run_module('volume', kv(srv, name='busy-data', attachments=[{'vm': 'busy', 'dev': 'd'}])))
    assert 'busy' in result['msg'] and 'othertask0001' in result['msg'] and 'REBOOTING' in result['msg']
    assert 'd' not in template_volumes(srv, 'busy') and 'd' not in vmi_volumes(srv, 'busy')
    assert vm_obj(srv, 'busy')['metadata']['annotations']['converge.virt/task-id'] == 'othertask0001'


def test_hotplug_that_never_gets_ready_is_kept_and_finished_by_the_next_run(kube_server):
    """The KubeVirt half state (VM spec patched, the instance's hotplug not Ready in time): addvolume wrote the VM and its
    instance in one accepted request, and KubeVirt may still finish it, so it is not rolled back; the failure says so
    (rolled_back false, what stays where), and the next run, once the claim binds, waits for Ready and changes nothing."""
    srv = kube_server
    make_vm(srv, 'slowhp')
    srv.faults.inject('pvc_bind_stuck', NS, 'slow-data')
    attach = [{'vm': 'slowhp', 'dev': 'slow'}]
    try:
        assert ok(run_module('volume', kv(srv, name='slow-data', capacity='1Gi', wait_timeout=0)))['volume']['phase'] == 'Pending'
        stalled = failed(run_module('volume', kv(srv, name='slow-data', attachments=attach, wait_timeout=2)))
    finally:
        srv.faults.clear('pvc_bind_stuck', NS, 'slow-data')
    assert stalled['changed'] and ops(stalled) == [('attach_config', 'slowhp'), ('attach_live', 'slowhp')]
    assert stalled['rolled_back'] is False and stalled['uncertain'] == ['slowhp:slow'], stalled
    assert 'not rolled back' in stalled['msg'] and 'spec.template' in stalled['msg'] and 'next run waits' in stalled['msg'], stalled['msg']
    assert 'slow' in template_volumes(srv, 'slowhp') and 'slow' in vmi_volumes(srv, 'slowhp')
    done = ok(run_module('volume', kv(srv, name='slow-data', attachments=attach)))
    assert not done['changed'] and done['operations'] == []
    assert done['volume']['attachments'][0]['hotplug_phase'] == 'Ready'
