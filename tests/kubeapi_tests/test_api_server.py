"""Generic apiserver semantics of tests.kubeapi, exercised with the real kubernetes client."""

# pylint: disable=missing-function-docstring,redefined-outer-name,consider-using-f-string

import json
import threading
import time
import urllib.request

import pytest
from kubernetes import client, config, dynamic, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError

from kubeapi_helpers import status_of, vm_body


def cm(name, labels=None, data=None):
    """ConfigMap body."""
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name, 'labels': labels or {}}, 'data': data or {'a': '1'}}


# --- transport / auth ---------------------------------------------------------------------------

def test_https_kubeconfig_with_ca_data(kube_server):
    cfg = client.Configuration()
    config.load_kube_config(config_file=kube_server.kubeconfig_path, client_configuration=cfg)
    assert cfg.host.startswith('https://127.0.0.1:')
    assert cfg.verify_ssl
    with client.ApiClient(cfg) as api:
        names = [n.metadata.name for n in client.CoreV1Api(api).list_namespace().items]
    assert names == ['default', 'demo']


def test_plain_http_same_port(kube_server):
    api = kube_server.api_client(https=False)
    assert api.configuration.host.startswith('http://')
    assert client.CoreV1Api(api).read_namespace('default').status.phase == 'Active'


@pytest.mark.parametrize('token', [None, 'wrong-token'])
def test_unauthorized(kube_server, token):
    req = urllib.request.Request(kube_server.http_url + '/api/v1/namespaces')
    if token:
        req.add_header('Authorization', 'Bearer ' + token)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)  # pylint: disable=consider-using-with
    body = json.loads(err.value.read())
    assert err.value.code == 401
    assert body['kind'] == 'Status' and body['reason'] == 'Unauthorized'


def test_forbidden_for_limited_token(kube_limited_api):
    v1 = client.CoreV1Api(kube_limited_api)
    v1.create_namespaced_config_map('demo', cm('ok'))
    assert v1.read_namespaced_config_map('ok', 'demo').data == {'a': '1'}
    with pytest.raises(ApiException) as err:
        v1.list_namespaced_config_map('default')
    assert err.value.status == 403
    body = status_of(err.value)
    assert body['reason'] == 'Forbidden'
    assert 'cannot list resource "configmaps"' in body['message'] and 'namespace "default"' in body['message']
    with pytest.raises(ApiException) as err:
        v1.list_node()
    assert err.value.status == 403


def test_discovery_with_dynamic_client(kube_dyn):
    for api_version, kind in [('v1', 'Namespace'), ('v1', 'Pod'), ('v1', 'PersistentVolumeClaim'), ('v1', 'Node'), ('v1', 'Event'),
                              ('kubevirt.io/v1', 'VirtualMachine'), ('kubevirt.io/v1', 'VirtualMachineInstance'),
                              ('kubevirt.io/v1', 'VirtualMachineInstanceMigration'), ('cdi.kubevirt.io/v1beta1', 'DataVolume'),
                              ('storage.k8s.io/v1', 'StorageClass')]:
        res = kube_dyn.resources.get(api_version=api_version, kind=kind)
        assert res.kind == kind
    vm = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    assert 'status' in vm.subresources
    cmres = kube_dyn.resources.get(api_version='v1', kind='ConfigMap')
    assert 'status' not in cmres.subresources
    subs = kube_dyn.request('GET', '/apis/subresources.kubevirt.io/v1')
    names = {r['name'] for r in subs['resources']}
    assert {'virtualmachines/start', 'virtualmachines/stop', 'virtualmachines/restart', 'virtualmachines/migrate',
            'virtualmachineinstances/pause', 'virtualmachineinstances/unpause', 'virtualmachines/addvolume'} <= names
    assert kube_dyn.version['kubernetes']['major'] == '1'


# --- CRUD semantics ---------------------------------------------------------------------------------

def test_create_get_metadata_and_errors(kube_api):
    v1 = client.CoreV1Api(kube_api)
    created = v1.create_namespaced_config_map('default', {'metadata': {'generateName': 'gen-'}, 'data': {'x': 'y'}})
    meta = created.metadata
    assert meta.name.startswith('gen-') and len(meta.name) == 9
    assert meta.uid and meta.creation_timestamp and int(meta.resource_version) > 0
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map('default', {'metadata': {'name': meta.name}})
    assert err.value.status == 409 and status_of(err.value)['reason'] == 'AlreadyExists'
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_config_map('missing', 'default')
    body = status_of(err.value)
    assert err.value.status == 404 and body['reason'] == 'NotFound' and body['message'] == 'configmaps "missing" not found'
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map('nope', cm('x'))
    assert err.value.status == 404 and 'namespaces "nope" not found' in status_of(err.value)['message']
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map('default', cm('Bad_Name'))
    assert err.value.status == 422 and status_of(err.value)['reason'] == 'Invalid'


def test_resource_version_global_counter_and_generation(kube_dyn):
    vms = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    a = vms.create(namespace='default', body=vm_body('a', 'Halted'))
    b = vms.create(namespace='default', body=vm_body('b', 'Halted'))
    assert int(b.metadata.resourceVersion) > int(a.metadata.resourceVersion)
    assert a.metadata.generation == 1
    patched = vms.patch(namespace='default', name='a', body={'metadata': {'labels': {'x': 'y'}}}, content_type='application/merge-patch+json')
    assert patched.metadata.generation == 1
    patched = vms.patch(namespace='default', name='a', body={'spec': {'template': {'metadata': {'labels': {'new': 'label'}}}}},
                        content_type='application/merge-patch+json')
    assert patched.metadata.generation == 2


def read_modify_replace(resource, name, mutate, replace=None):
    """GET, change, PUT; again on 409: the KubeVirt controller emulation writes a VM's status meanwhile, and a
    conflict means "read again" for any client."""
    for _attempt in range(20):
        cur = resource.get(namespace='default', name=name).to_dict()
        mutate(cur)
        try:
            return (replace or resource.replace)(namespace='default', body=cur)
        except DynamicApiError as exc:
            if exc.status != 409:
                raise
            time.sleep(0.05)
    raise AssertionError('20 conflicts in a row on %s' % name)


def test_conflict_on_stale_resource_version(kube_dyn):
    vms = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    first = vms.create(namespace='default', body=vm_body('c', 'Halted')).to_dict()
    vms.patch(namespace='default', name='c', body={'metadata': {'labels': {'v': '2'}}}, content_type='application/merge-patch+json')
    first['metadata']['labels'] = {'v': 'stale'}
    with pytest.raises(DynamicApiError) as err:
        vms.replace(namespace='default', body=first)
    body = status_of(err.value)
    assert err.value.status == 409 and body['reason'] == 'Conflict'
    assert 'the object has been modified' in body['message']
    with pytest.raises(DynamicApiError) as err:
        vms.patch(namespace='default', name='c', body={'metadata': {'resourceVersion': first['metadata']['resourceVersion']}},
                  content_type='application/merge-patch+json')
    assert err.value.status == 409
    # CRs need a resourceVersion on update (AllowUnconditionalUpdate=false)
    first['metadata'].pop('resourceVersion')
    with pytest.raises(DynamicApiError) as err:
        vms.replace(namespace='default', body=first)
    assert err.value.status == 422
    out = read_modify_replace(vms, 'c', lambda cur: cur['metadata'].update(labels={'v': '3'}))
    assert out.metadata.labels['v'] == '3'


def test_merge_and_json_patch(kube_dyn):
    cms = kube_dyn.resources.get(api_version='v1', kind='ConfigMap')
    cms.create(namespace='default', body=cm('p', data={'a': '1', 'b': '2'}))
    out = cms.patch(namespace='default', name='p', body={'data': {'a': None, 'c': '3'}}, content_type='application/merge-patch+json')
    assert out.data.to_dict() == {'b': '2', 'c': '3'}
    ops = [{'op': 'test', 'path': '/data/b', 'value': '2'}, {'op': 'replace', 'path': '/data/b', 'value': '20'},
           {'op': 'add', 'path': '/metadata/labels', 'value': {'k/x': 'v'}}, {'op': 'remove', 'path': '/data/c'}]
    out = cms.patch(namespace='default', name='p', body=ops, content_type='application/json-patch+json')
    assert out.data.to_dict() == {'b': '20'} and out.metadata.labels['k/x'] == 'v'
    out = cms.patch(namespace='default', name='p', body=[{'op': 'add', 'path': '/metadata/labels/a~1b', 'value': 'esc'}],
                    content_type='application/json-patch+json')
    assert out.metadata.labels['a/b'] == 'esc'
    with pytest.raises(DynamicApiError) as err:
        cms.patch(namespace='default', name='p', body=[{'op': 'test', 'path': '/data/b', 'value': 'nope'},
                                                       {'op': 'replace', 'path': '/data/b', 'value': 'x'}],
                  content_type='application/json-patch+json')
    assert err.value.status == 422 and 'test failed' in status_of(err.value)['message']
    assert cms.get(namespace='default', name='p').data.b == '20'


def test_strategic_merge_patch_core_only(kube_dyn):
    pods = kube_dyn.resources.get(api_version='v1', kind='Pod')
    pods.create(namespace='default', body={'metadata': {'name': 'pod1'}, 'spec': {'containers': [{'name': 'a', 'image': 'i1'},
                                                                                                 {'name': 'b', 'image': 'i2'}]}})
    out = pods.patch(namespace='default', name='pod1', body={'spec': {'containers': [{'name': 'b', 'image': 'i3'}]}},
                     content_type='application/strategic-merge-patch+json')
    assert [(c.name, c.image) for c in out.spec.containers] == [('a', 'i1'), ('b', 'i3')]
    vms = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    vms.create(namespace='default', body=vm_body('s', 'Halted'))
    with pytest.raises(DynamicApiError) as err:
        vms.patch(namespace='default', name='s', body={'metadata': {'labels': {'a': 'b'}}},
                  content_type='application/strategic-merge-patch+json')
    assert err.value.status == 415 and status_of(err.value)['reason'] == 'UnsupportedMediaType'


def test_dry_run_everywhere(kube_dyn, kube_server):
    cms = kube_dyn.resources.get(api_version='v1', kind='ConfigMap')
    rv0 = kube_server.store.rv
    out = cms.create(namespace='default', body=cm('dry'), dry_run='All')
    assert out.metadata.name == 'dry' and out.metadata.uid
    assert kube_server.store.rv == rv0
    with pytest.raises(DynamicApiError):
        cms.get(namespace='default', name='dry')
    cms.create(namespace='default', body=cm('real'))
    out = cms.patch(namespace='default', name='real', body={'data': {'a': 'changed'}}, content_type='application/merge-patch+json',
                    dry_run='All')
    assert out.data.a == 'changed'
    body = cms.get(namespace='default', name='real').to_dict()
    assert body['data']['a'] == '1'
    body['data']['a'] = 'put'
    assert cms.replace(namespace='default', body=body, dry_run='All').data.a == 'put'
    cms.delete(namespace='default', name='real', dry_run='All')
    assert cms.get(namespace='default', name='real').data.a == '1'


def test_status_subresource_separation(kube_dyn):
    vms = kube_dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    body = vm_body('st', 'Halted')
    body['status'] = {'printableStatus': 'Bogus'}
    created = vms.create(namespace='default', body=body)
    assert (created.status or {}).get('printableStatus') != 'Bogus'

    def status_and_strategy(status, run_strategy):
        def mutate(cur):
            cur['status'] = {'printableStatus': status}
            cur['spec']['runStrategy'] = run_strategy
        return mutate

    out = read_modify_replace(vms, 'st', status_and_strategy('Ignored', 'Manual'))
    assert out.spec.runStrategy == 'Manual' and (out.status or {}).get('printableStatus') != 'Ignored'
    out = read_modify_replace(vms, 'st', status_and_strategy('ViaStatus', 'Always'), replace=vms.status.replace)
    assert out.status.printableStatus == 'ViaStatus' and out.spec.runStrategy == 'Manual'
    # ConfigMaps have no status subresource
    cms = kube_dyn.resources.get(api_version='v1', kind='ConfigMap')
    cms.create(namespace='default', body=cm('nostatus'))
    with pytest.raises(DynamicApiError) as err:
        kube_dyn.request('GET', '/api/v1/namespaces/default/configmaps/nostatus/status')
    assert err.value.status == 404


def test_finalizers_and_deletion_timestamp(kube_dyn):
    cms = kube_dyn.resources.get(api_version='v1', kind='ConfigMap')
    body = cm('fin')
    body['metadata']['finalizers'] = ['example.com/a', 'example.com/b']
    cms.create(namespace='default', body=body)
    cms.delete(namespace='default', name='fin')
    obj = cms.get(namespace='default', name='fin')
    assert obj.metadata.deletionTimestamp
    cms.patch(namespace='default', name='fin', body=[{'op': 'remove', 'path': '/metadata/finalizers/0'}],
              content_type='application/json-patch+json')
    assert cms.get(namespace='default', name='fin').metadata.finalizers == ['example.com/b']
    cms.patch(namespace='default', name='fin', body={'metadata': {'finalizers': None}}, content_type='application/merge-patch+json')
    with pytest.raises(DynamicApiError) as err:
        cms.get(namespace='default', name='fin')
    assert err.value.status == 404


def test_owner_references_garbage_collection(kube_dyn):
    cms = kube_dyn.resources.get(api_version='v1', kind='ConfigMap')
    owner = cms.create(namespace='default', body=cm('owner'))
    for name in ('dep1', 'dep2'):
        body = cm(name)
        body['metadata']['ownerReferences'] = [{'apiVersion': 'v1', 'kind': 'ConfigMap', 'name': 'owner', 'uid': owner.metadata.uid}]
        cms.create(namespace='default', body=body)
    cms.delete(namespace='default', name='owner', body={'kind': 'DeleteOptions', 'apiVersion': 'v1', 'propagationPolicy': 'Orphan'})
    dep = cms.get(namespace='default', name='dep1')
    assert not dep.metadata.ownerReferences
    owner = cms.create(namespace='default', body=cm('owner2'))
    body = cm('dep3')
    body['metadata']['ownerReferences'] = [{'apiVersion': 'v1', 'kind': 'ConfigMap', 'name': 'owner2', 'uid': owner.metadata.uid}]
    cms.create(namespace='default', body=body)
    cms.delete(namespace='default', name='owner2')
    with pytest.raises(DynamicApiError):
        cms.get(namespace='default', name='dep3')


def test_selectors(kube_dyn):
    cms = kube_dyn.resources.get(api_version='v1', kind='ConfigMap')
    for name, labels in [('s1', {'app': 'a', 'tier': 'web'}), ('s2', {'app': 'b', 'tier': 'db'}), ('s3', {'app': 'c'})]:
        cms.create(namespace='default', body=cm(name, labels))

    def names(**kw):
        return sorted(i.metadata.name for i in cms.get(namespace='default', **kw).items)
    assert names(label_selector='app=a') == ['s1']
    assert names(label_selector='app==b') == ['s2']
    assert names(label_selector='app!=a') == ['s2', 's3']
    assert names(label_selector='app in (a, c)') == ['s1', 's3']
    assert names(label_selector='app notin (a,c)') == ['s2']
    assert names(label_selector='tier') == ['s1', 's2']
    assert names(label_selector='!tier') == ['s3']
    assert names(label_selector='app in (a,b),tier=db') == ['s2']
    assert names(field_selector='metadata.name=s3') == ['s3']
    assert names(field_selector='metadata.name!=s3,metadata.namespace=default') == ['s1', 's2']


def test_pagination(kube_api):
    v1 = client.CoreV1Api(kube_api)
    for i in range(7):
        v1.create_namespaced_config_map('demo', cm('page-%d' % i))
    seen, token, pages = [], None, 0
    while True:
        resp = v1.list_namespaced_config_map('demo', limit=3, _continue=token)
        pages += 1
        seen += [i.metadata.name for i in resp.items]
        token = resp.metadata._continue  # pylint: disable=protected-access
        if not token:
            break
        assert resp.metadata.remaining_item_count == 7 - len(seen)
    assert pages == 3 and seen == ['page-%d' % i for i in range(7)]


def test_namespace_create_delete(kube_api):
    v1 = client.CoreV1Api(kube_api)
    v1.create_namespace({'metadata': {'name': 'tmp-ns'}})
    v1.create_namespaced_config_map('tmp-ns', cm('inside'))
    v1.delete_namespace('tmp-ns')
    with pytest.raises(ApiException) as err:
        v1.read_namespace('tmp-ns')
    assert err.value.status == 404
    with pytest.raises(ApiException):
        v1.read_namespaced_config_map('inside', 'tmp-ns')


# --- watch ---------------------------------------------------------------------------------------

def test_watch_stream_events_and_timeout(kube_api):
    v1 = client.CoreV1Api(kube_api)
    start_rv = v1.list_namespaced_config_map('default').metadata.resource_version

    def writer():
        time.sleep(0.2)
        v1.create_namespaced_config_map('default', cm('w1', {'watch': 'yes'}))
        v1.patch_namespaced_config_map('w1', 'default', {'data': {'a': '2'}})
        v1.create_namespaced_config_map('default', cm('ignored'))
        v1.delete_namespaced_config_map('w1', 'default')
    thread = threading.Thread(target=writer)
    thread.start()
    events = []
    began = time.time()
    for ev in watch.Watch().stream(v1.list_namespaced_config_map, 'default', label_selector='watch=yes', resource_version=start_rv,
                                   timeout_seconds=2):
        events.append((ev['type'], ev['object'].metadata.name))
        if len(events) == 3:
            break
    thread.join()
    assert events == [('ADDED', 'w1'), ('MODIFIED', 'w1'), ('DELETED', 'w1')]
    assert time.time() - began < 2.5
    # replay from an old resourceVersion
    replay = [ev['type'] for ev in watch.Watch().stream(v1.list_namespaced_config_map, 'default', resource_version=start_rv,
                                                        timeout_seconds=1)]
    assert replay[:3] == ['ADDED', 'MODIFIED', 'ADDED']


def test_watch_gone_after_compaction(kube_api, kube_server):
    v1 = client.CoreV1Api(kube_api)
    rv = v1.create_namespaced_config_map('default', cm('old')).metadata.resource_version
    v1.create_namespaced_config_map('default', cm('new'))
    kube_server.store.compact()
    with pytest.raises(ApiException) as err:
        for _unused0 in watch.Watch().stream(v1.list_namespaced_config_map, 'default', resource_version=rv, timeout_seconds=2):
            pass
    assert err.value.status == 410


def test_watch_raw_newline_json_and_bookmark(kube_server):
    req = urllib.request.Request(kube_server.http_url + '/api/v1/namespaces?watch=true&timeoutSeconds=1&allowWatchBookmarks=true')
    req.add_header('Authorization', 'Bearer ' + kube_server.admin_token)
    with urllib.request.urlopen(req, timeout=5) as resp:
        lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    types = [line['type'] for line in lines]
    assert types[:2] == ['ADDED', 'ADDED'] and 'BOOKMARK' in types


# --- faults --------------------------------------------------------------------------------------

def test_http_faults_500_delay_and_conflict(kube_api, kube_server):
    v1 = client.CoreV1Api(kube_api)
    kube_server.faults.add_http(r'/configmaps', status=500, method='GET', count=2)
    for _unused0 in range(2):
        with pytest.raises(ApiException) as err:
            v1.list_namespaced_config_map('default')
        assert err.value.status == 500
    assert v1.list_namespaced_config_map('default').items == []
    kube_server.faults.add_http(r'/configmaps', status=None, delay=0.3, count=1)
    began = time.time()
    v1.list_namespaced_config_map('default')
    assert time.time() - began >= 0.3
    rule = kube_server.faults.add_http(r'/configmaps', status=None, delay=1.0, count=None)
    with pytest.raises(Exception, match='timed out'):
        v1.list_namespaced_config_map('default', _request_timeout=0.1)
    assert [r['hits'] for r in kube_server.faults.to_dict()['http'] if r['id'] == rule][0] >= 2  # urllib3 retried
    kube_server.faults.clear()
    kube_server.faults.conflict(r'/configmaps/x$', method='PATCH')
    v1.create_namespaced_config_map('default', cm('x'))
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map('x', 'default', {'data': {'a': '9'}})
    assert err.value.status == 409 and status_of(err.value)['reason'] == 'Conflict'
    assert v1.patch_namespaced_config_map('x', 'default', {'data': {'a': '9'}}).data['a'] == '9'


def test_admin_endpoint_and_dropped_watch(kube_server):
    data = json.dumps({'http': [{'path': '/api/v1/namespaces$', 'status': 500, 'count': 1}]}).encode()
    req = urllib.request.Request(kube_server.http_url + '/__admin__/faults', data=data, method='POST')
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert json.loads(resp.read())['http'][0]['status'] == 500
    api = kube_server.api_client()
    v1 = client.CoreV1Api(api)
    with pytest.raises(ApiException) as err:
        v1.list_namespace(_preload_content=False)
    assert err.value.status == 500
    got = []

    def consume():
        for ev in watch.Watch().stream(v1.list_namespace, timeout_seconds=20):
            got.append(ev['type'])
    thread = threading.Thread(target=consume)
    began = time.time()
    thread.start()
    time.sleep(0.3)
    kube_server.faults.drop_watches()
    thread.join(5)
    assert not thread.is_alive() and time.time() - began < 5
    assert got == ['ADDED', 'ADDED']
    api.close()


def test_dynamic_client_limited_token_on_allowed_namespace(kube_server):
    api = kube_server.api_client(token=kube_server.limited_token)
    dyn = dynamic.DynamicClient(api)
    vms = dyn.resources.get(api_version='kubevirt.io/v1', kind='VirtualMachine')
    vms.create(namespace='demo', body=vm_body('mine', 'Halted'))
    with pytest.raises(DynamicApiError) as err:
        vms.create(namespace='default', body=vm_body('theirs', 'Halted'))
    assert err.value.status == 403
    api.close()
