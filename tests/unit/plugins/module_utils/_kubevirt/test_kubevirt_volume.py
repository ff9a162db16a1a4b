"""The KubeVirt volume backend's pure parts: declarations, sizes, manifests, the actual world read off VMs and
instances, the plan (through the shared volume planner) and the template JSON patches (with a fake client)."""

# pylint: disable=missing-function-docstring,too-few-public-methods

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_backend as vb
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_observe, volume_plan, volume_spec
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import CDI_API, CORE_API, KUBEVIRT_API, Conflict, KubeClient
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase

GI = 1024 ** 3


# ---------------------------------------------------------------- declarations and sizes
@pytest.mark.parametrize('value, size, quantity', [
    ('10Gi', 10 * GI, '10Gi'), ('1G', 10 ** 9, '1G'), ('512Mi', 512 * 1024 ** 2, '512Mi'), ('1GiB', GI, '1Gi'),
    ('1.5GiB', 3 * GI // 2, '1536Mi'), (GI, GI, '1Gi'), ('1000', 1000, '1000'), ('1GB', 10 ** 9, '1000000000'),
])
def test_capacity_reads_quantities_as_kubernetes_does(value, size, quantity):
    assert volume_spec.capacity_of(value) == (size, quantity)


@pytest.mark.parametrize('decl, field', [
    ({'name': 'Bad_Name', 'capacity': '1Gi'}, 'name'),
    ({'name': 'a', 'capacity': 'lots'}, 'capacity'),
    ({'name': 'a', 'capacity': '0Gi'}, 'capacity'),
    ({'name': 'a', 'pool': 'default'}, 'pool'),
    ({'name': 'a', 'wipe': True}, 'wipe'),
    ({'name': 'a', 'import_from': '/tmp/x.img'}, 'import_from'),
    ({'name': 'a', 'import_from': 'https://x/y', 'clone_from': 'b'}, 'import_from'),
    ({'name': 'a', 'clone_from': 'Bad/Name'}, 'clone_from'),
    ({'name': 'a', 'import_from': 'https://x/y', 'data_volume': False}, 'data_volume'),
    ({'name': 'a', 'access_modes': ['ReadWriteSometimes']}, 'access_modes'),
    ({'name': 'a', 'volume_mode': 'Raw'}, 'volume_mode'),
    ({'name': 'a', 'attachments': [{'vm': 'v', 'dev': 'Bad_Dev'}]}, 'attachments[0].dev'),
    ({'name': 'a', 'attachments': [{'vm': 'v', 'dev': 'd', 'bus': 'ide'}]}, 'attachments[0].bus'),
    ({'name': 'a', 'attachments': [{'vm': 'v', 'dev': 'd'}, {'vm': 'v', 'dev': 'e'}]}, 'attachments'),
])
def test_bad_declarations_name_the_field(decl, field):
    with pytest.raises(InvalidDeclaration) as err:
        volume_spec.normalize_volume(decl, 'volumes[3].')
    assert err.value.field == 'volumes[3].' + field


def test_kind_and_source_follow_the_options():
    assert volume_spec.normalize_volume({'name': 'a', 'capacity': '1Gi'})['kind'] == 'PersistentVolumeClaim'
    blank = volume_spec.normalize_volume({'name': 'a', 'capacity': '1Gi', 'data_volume': True})
    assert blank['kind'] == 'DataVolume' and blank['source'] == {'blank': {}}
    assert volume_spec.normalize_volume({'name': 'a', 'import_from': 'http://h/i.qcow2'})['source'] == {'http': {'url': 'http://h/i.qcow2'}}
    assert volume_spec.normalize_volume({'name': 'a', 'import_from': 'docker://q/i:1'})['source'] == {'registry': {'url': 'docker://q/i:1'}}
    assert volume_spec.normalize_volume({'name': 'a', 'clone_from': 'other/golden'})['source'] == {'pvc': {'name': 'golden', 'namespace': 'other'}}
    defaults = volume_spec.normalize_volume({'name': 'b'}, defaults={'capacity': '2Gi', 'storage_class': 'fast'})
    assert defaults['capacity'] == 2 * GI and defaults['storage_class'] == 'fast'


def test_create_needs_a_capacity_except_for_a_clone():
    assert volume_spec.check_create(volume_spec.normalize_volume({'name': 'a'}))['field'] == 'capacity'
    assert volume_spec.check_create(volume_spec.normalize_volume({'name': 'a', 'clone_from': 'b'})) is None


def test_manifests():
    params = {'name': 'a', 'capacity': '2GiB', 'storage_class': 'fast', 'access_modes': ['ReadWriteMany'], 'volume_mode': 'Block'}
    spec = volume_spec.normalize_volume(params)
    pvc = volume_spec.claim_manifest(spec, 'ns')
    assert pvc['spec'] == {'accessModes': ['ReadWriteMany'], 'resources': {'requests': {'storage': '2Gi'}}, 'storageClassName': 'fast',
                           'volumeMode': 'Block'}
    assert pvc['metadata'] == {'name': 'a', 'namespace': 'ns', 'labels': volume_spec.MANAGED_BY}
    clone = volume_spec.datavolume_manifest(volume_spec.normalize_volume({'name': 'c', 'clone_from': 'golden'}), 'ns')
    assert clone['spec'] == {'source': {'pvc': {'name': 'golden', 'namespace': 'ns'}}, 'storage': {}}
    assert volume_spec.hotplug_volume('a', 'DataVolume', 'd') == {'name': 'd', 'dataVolume': {'name': 'a', 'hotpluggable': True}}
    assert volume_spec.hotplug_disk('d', None, True, 's1') == {'name': 'd', 'disk': {'bus': 'scsi', 'readonly': True}, 'serial': 's1'}


# ---------------------------------------------------------------- the actual world
def vm(name, volumes=(), disks=(), uid=None):
    return {'metadata': {'name': name, 'uid': uid or 'uid-' + name, 'resourceVersion': '7'},
            'spec': {'template': {'spec': {'domain': {'devices': {'disks': list(disks)}}, 'volumes': list(volumes)}}}}


def vmi(name, volumes=(), disks=(), phase_name='Running', statuses=(), owner=None):
    return {'metadata': {'name': name, 'uid': 'vmi-' + name, 'ownerReferences': [{'uid': owner or 'uid-' + name}]},
            'spec': {'domain': {'devices': {'disks': list(disks)}}, 'volumes': list(volumes)},
            'status': {'phase': phase_name, 'volumeStatus': list(statuses)}}


def pvc(name, request='1Gi', bound=None, annotations=None, deleting=False):
    meta = {'name': name, 'annotations': annotations or {}}
    if deleting:
        meta['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    return {'metadata': meta, 'spec': {'resources': {'requests': {'storage': request}}, 'storageClassName': 'standard'},
            'status': {'phase': 'Bound', 'capacity': {'storage': bound or request}}}


def dv(name, request='1Gi'):
    return {'metadata': {'name': name}, 'spec': {'source': {'blank': {}}, 'storage': {'resources': {'requests': {'storage': request}}}},
            'status': {'phase': 'Succeeded'}}


class FakeClient:
    """Lists and GETs from dicts; records writes; optional conflicts on PATCH."""

    def __init__(self, pvcs=(), dvs=(), vms=(), vmis=(), conflicts=0):
        self.objects = {(CORE_API, 'persistentvolumeclaims'): dict((o['metadata']['name'], o) for o in pvcs),
                        (CDI_API, 'datavolumes'): dict((o['metadata']['name'], o) for o in dvs),
                        (KUBEVIRT_API, 'virtualmachines'): dict((o['metadata']['name'], o) for o in vms),
                        (KUBEVIRT_API, 'virtualmachineinstances'): dict((o['metadata']['name'], o) for o in vmis)}
        self.requests = []
        self.conflicts = conflicts

    path = staticmethod(KubeClient.path)

    def list(self, api, namespace, plural):
        del namespace
        return list(self.objects[(api, plural)].values())

    def get(self, api, namespace, plural, name):
        del namespace
        return self.objects[(api, plural)].get(name)

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        del what
        self.requests.append((method, path, body, query, content_type))
        if method == 'PATCH' and self.conflicts:
            self.conflicts -= 1
            raise Conflict('conflict', code=409)
        return {}


def world(**objects):
    return volume_observe.NamespaceVolumes(FakeClient(**objects), 'ns')


def test_attachments_are_read_from_the_template_and_the_running_instance():
    hot = {'name': 'data', 'persistentVolumeClaim': {'claimName': 'c1', 'hotpluggable': True}}
    boot = {'name': 'root', 'dataVolume': {'name': 'root-dv'}}
    only_live = {'name': 'tmp', 'persistentVolumeClaim': {'claimName': 'c2', 'hotpluggable': True}}
    disks = [{'name': 'data', 'disk': {'bus': 'scsi'}, 'serial': 'x'}, {'name': 'root', 'disk': {'bus': 'virtio'}}]
    w = world(pvcs=[pvc('c1'), pvc('c2'), pvc('root-dv')], dvs=[dv('root-dv')],
              vms=[vm('a', [hot, boot], disks), vm('b', [hot], disks)],
              vmis=[vmi('a', [hot, boot, only_live], disks + [{'name': 'tmp', 'disk': {'bus': 'scsi'}}],
                        statuses=[{'name': 'data', 'phase': 'MountedToPod', 'hotplugVolume': {}}, {'name': 'root'}])])
    by = dict(((a.vm, a.target), a) for a in w.attachments)
    assert by[('a', 'data')] == phase.Attachment('a', 'data', 'c1', False, 'scsi', 'x', live=True, persistent=True, vm_running=True)
    assert by[('a', 'root')].live and by[('a', 'root')].persistent and by[('a', 'root')].volume == 'root-dv'
    assert by[('a', 'tmp')].live and not by[('a', 'tmp')].persistent
    assert by[('b', 'data')].persistent and not by[('b', 'data')].live and not by[('b', 'data')].vm_running
    assert w.facts[('a', 'data')] == {'hotpluggable': True, 'hotplug_phase': 'MountedToPod'}
    assert w.facts[('a', 'root')]['hotpluggable'] is False
    assert w.users('c1') == frozenset({'a', 'b'}) and w.running() == {'a': True, 'b': False}


def test_an_instance_owned_by_another_vm_or_final_is_not_live():
    hot = {'name': 'data', 'persistentVolumeClaim': {'claimName': 'c1', 'hotpluggable': True}}
    w = world(pvcs=[pvc('c1')], vms=[vm('a', [hot])], vmis=[vmi('a', [hot], owner='someone-else')])
    assert [a.live for a in w.attachments] == [False]
    w = world(pvcs=[pvc('c1')], vms=[vm('a', [hot])], vmis=[vmi('a', [hot], phase_name='Succeeded')])
    assert [(a.live, a.vm_running) for a in w.attachments] == [(False, False)]


def test_capacity_is_the_size_asked_for():
    # CDI may add file system overhead to the claim: the DataVolume holds the declared size
    w = world(pvcs=[pvc('d', request='1100Mi'), pvc('p', request='1Gi', bound='2Gi'),
                    pvc('g', '8Gi', annotations={volume_observe.REQUESTED_ANNOTATION: '8Gi'})],
              dvs=[dv('d', '1Gi'), dv('g', '5Gi')])
    assert w.capacity('d') == GI and w.capacity('p') == GI and w.capacity('g') == 8 * GI
    assert w.public('p')['bound_capacity'] == 2 * GI
    assert w.actual_volume('nope') is None
    assert world(pvcs=[pvc('x', deleting=True)]).actual_volume('x').uncertain


def spec(name, **kw):
    decl = {'name': name}
    decl.update(kw)
    return volume_spec.normalize_volume(decl)


def test_plan_uses_the_shared_planner_words():
    w = world(pvcs=[pvc('c1', '2Gi')], vms=[vm('a')], vmis=[vmi('a')])
    _plan, refusals, ops = volume_plan.plan([spec('c1', capacity='1Gi')], w)
    assert not ops and refusals[0]['reason'].startswith('shrinking from %d to %d bytes' % (2 * GI, GI))
    _plan, refusals, ops = volume_plan.plan([spec('new', capacity='1Gi', attachments=[{'vm': 'a', 'dev': 'd'}])], w)
    assert [o.kind for o in ops] == [phase.CREATE, phase.ATTACH_CONFIG, phase.ATTACH_LIVE] and not refusals
    _plan, refusals, ops = volume_plan.plan([spec('new', capacity='1Gi', attachments=[{'vm': 'zz', 'dev': 'd'}])], w)
    assert 'VirtualMachine zz does not exist in namespace ns' in refusals[0]['reason'] and not ops
    _plan, refusals, ops = volume_plan.plan([spec('new')], w)
    assert refusals[0]['field'] == 'capacity' and not ops


def test_undeclared_bus_and_serial_are_taken_from_what_exists():
    hot = {'name': 'data', 'persistentVolumeClaim': {'claimName': 'c1', 'hotpluggable': True}}
    disks = [{'name': 'data', 'disk': {'bus': 'virtio'}, 'serial': 's9'}]
    w = world(pvcs=[pvc('c1')], vms=[vm('a', [hot], disks)], vmis=[vmi('a', [hot], disks, statuses=[{'name': 'data', 'phase': 'Ready'}])])
    _plan, refusals, ops = volume_plan.plan([spec('c1', attachments=[{'vm': 'a', 'dev': 'data'}])], w)
    assert not ops and not refusals
    _plan, refusals, ops = volume_plan.plan([spec('c1', attachments=[{'vm': 'a', 'dev': 'data', 'bus': 'scsi'}])], w, force=True)
    assert [o.kind for o in ops] == [phase.DETACH_LIVE, phase.DETACH_CONFIG, phase.ATTACH_CONFIG, phase.ATTACH_LIVE]


def test_delete_in_use_refused_and_boot_disks_never_unplugged_live():
    boot = {'name': 'root', 'persistentVolumeClaim': {'claimName': 'c1'}}
    w = world(pvcs=[pvc('c1')], vms=[vm('a', [boot])], vmis=[vmi('a', [boot])])
    _plan, refusals, ops = volume_plan.plan([spec('c1', state='absent')], w)
    assert refusals[0]['used_by'] == ['a'] and not ops
    _plan, refusals, ops = volume_plan.plan([spec('c1', state='absent', attachments=[])], w, force=True)
    assert not ops and any('was not hotplugged' in r['reason'] and r['vm'] == 'a' for r in refusals)
    # the VM stopped: its template is edited, then the claim deleted
    w = world(pvcs=[pvc('c1')], vms=[vm('a', [boot])])
    _plan, refusals, ops = volume_plan.plan([spec('c1', state='absent', attachments=[])], w)
    assert [o.kind for o in ops] == [phase.DETACH_CONFIG, phase.DELETE] and not refusals


def test_config_and_live_halves_are_one_request():
    ops = [phase.Operation(phase.DETACH_LIVE, 'v', 'a', 'd'), phase.Operation(phase.DETACH_CONFIG, 'v', 'a', 'd'), phase.Operation(phase.DELETE, 'v'),
           phase.Operation(phase.CREATE, 'w'), phase.Operation(phase.ATTACH_CONFIG, 'w', 'a', 'e'), phase.Operation(phase.ATTACH_LIVE, 'w', 'a', 'e'),
           phase.Operation(phase.ATTACH_LIVE, 'x', 'b', 'f')]
    assert [[o.kind for o in g] for g in volume_plan.group_operations(ops)] == [
        [phase.DETACH_LIVE, phase.DETACH_CONFIG], [phase.DELETE], [phase.CREATE], [phase.ATTACH_CONFIG, phase.ATTACH_LIVE], [phase.ATTACH_LIVE]]


def test_template_edits_are_json_patches_guarded_by_resource_version():
    client = FakeClient(pvcs=[pvc('c1')], vms=[vm('a', [{'name': 'root', 'containerDisk': {'image': 'i'}}], [{'name': 'root'}])], conflicts=1)
    w = volume_observe.NamespaceVolumes(client, 'ns')
    ex = vb.Executor(client, 'ns', w, [spec('c1')])
    op = phase.Operation(phase.ATTACH_CONFIG, 'c1', 'a', 'd', (('bus', None), ('readonly', False), ('serial', None)))
    assert ex.attach([op]) == {}
    patches = [r for r in client.requests if r[0] == 'PATCH']
    assert len(patches) == 2 and ex.writes == 1
    method, path, body, query, ctype = patches[-1]
    assert (method, ctype, query) == ('PATCH', 'application/json-patch+json', {'dryRun': None}) and path.endswith('/virtualmachines/a')
    assert body == [{'op': 'test', 'path': '/metadata/resourceVersion', 'value': '7'},
                    {'op': 'add', 'path': '/spec/template/spec/volumes/-',
                     'value': {'name': 'd', 'persistentVolumeClaim': {'claimName': 'c1', 'hotpluggable': True}}},
                    {'op': 'add', 'path': '/spec/template/spec/domain/devices/disks/-', 'value': {'name': 'd', 'disk': {'bus': 'scsi'}}}]
    remove_client = FakeClient(vms=[vm('a', [{'name': 'root', 'containerDisk': {'image': 'i'}},
                                             {'name': 'd', 'persistentVolumeClaim': {'claimName': 'c1'}}], [{'name': 'root'}, {'name': 'd'}])])
    ex = vb.Executor(remove_client, 'ns', volume_observe.NamespaceVolumes(remove_client, 'ns'), [spec('c1')], dry_run=True)
    ex.detach([phase.Operation(phase.DETACH_CONFIG, 'c1', 'a', 'd')])
    _method, _path, body, query, _ctype = remove_client.requests[-1]
    assert query == {'dryRun': 'All'}
    assert body[1:] == [{'op': 'remove', 'path': '/spec/template/spec/volumes/1'}, {'op': 'remove', 'path': '/spec/template/spec/domain/devices/disks/1'}]


def test_check_mode_subresources_carry_dry_run():
    client = FakeClient(pvcs=[pvc('c1')], vms=[vm('a')], vmis=[vmi('a')])
    ex = vb.Executor(client, 'ns', volume_observe.NamespaceVolumes(client, 'ns'), [spec('c1')], dry_run=True)
    ex.attach([phase.Operation(phase.ATTACH_CONFIG, 'c1', 'a', 'd'), phase.Operation(phase.ATTACH_LIVE, 'c1', 'a', 'd')])
    method, path, body, _query, _ctype = client.requests[-1]
    assert method == 'PUT' and path.endswith('/virtualmachines/a/addvolume') and body['dryRun'] == ['All']
    assert body['volumeSource'] == {'persistentVolumeClaim': {'claimName': 'c1', 'hotpluggable': True}} and body['name'] == 'd'
