"""tools.kubelab: a real kube-apiserver (+ etcd, kube-controller-manager) with KubeVirt's and CDI's generated CRDs.

The stack is started once for the module (``python -m tools.kubelab up --virt-api``
does the same: with KubeVirt's own virt-api, its webhooks and subresources API);
it needs ``make kube`` first and fails naming that when the builds are missing.
Run inside ``python -m tools.virtlab netns -- ...`` like every lab test.

Checks what the home-made API server (tests/kubeapi) cannot: the pinned release
answers /version, KubeVirt's own schema is installed, Strict field validation
names an unknown field, unknown and null fields are pruned, KubeVirt's webhooks
refuse and default, its subresources patch the VM, and then what the
collection's ``vm`` module (backend kubevirt) does against the real server: a typo
in ``spec`` refused naming the field (fieldValidation=Strict), a start through
KubeVirt's own subresource, every module with exactly the documented minimal RBAC
(``DIR/kubeconfig-restricted``, docs/examples/kubevirt-rbac.yaml) and a missing rule
named, a delete held by a finalizer, a start without virt-api.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import json
import os
import subprocess
import sys
import time

import pytest

from tests.integration.ansible_run import BIN, ansible_env, run_module
from tools import procs
from tools.kubelab import build, lab

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NS = 'default'
VMS = '/apis/kubevirt.io/v1/namespaces/%s/virtualmachines' % NS


@pytest.fixture(scope='module')
def kubelab(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp('kubelab'))
    info = lab.up(directory, virt_api=True, feature_gates=['DeclarativeHotplugVolumes'])
    state = lab._load_state(directory)  # pylint: disable=protected-access
    with open(os.path.join(directory, 'pki', 'admin.token'), encoding='utf-8') as handle:
        token = handle.read().strip()
    info['client'] = lab.Client(state['server'], state['ca_file'], token)
    info['dir'] = directory
    info['crd_names'] = state['crds']
    try:
        yield info
    finally:
        lab.down(directory)


def vm_body(name, spec_extra=None, domain_extra=None):
    domain = {'devices': {}, 'memory': {'guest': '64Mi'}}
    domain.update(domain_extra or {})
    spec = {'runStrategy': 'Halted', 'template': {'spec': {'domain': domain}}}
    spec.update(spec_extra or {})
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name, 'namespace': NS}, 'spec': spec}


def test_version_is_the_pinned_release(kubelab):
    status, version = kubelab['client'].request('GET', '/version')
    assert status == 200
    assert version['gitVersion'] == build.versions()['kubernetes'], version
    assert version['gitVersion'] == kubelab['versions']['kubernetes']


def test_up_writes_a_kubeconfig_that_kubectl_style_clients_accept(kubelab):
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    api = config.new_client_from_config(config_file=kubelab['kubeconfig'])
    try:
        names = [ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items]
    finally:
        api.close()
    assert {'default', 'kube-system', 'kubevirt'} <= set(names)
    assert os.stat(kubelab['kubeconfig']).st_mode & 0o077 == 0


def test_status_reports_every_process_running(kubelab):
    rows = lab.status(kubelab['dir'])
    assert [row['role'] for row in rows] == list(lab.ROLES) + ['virt-api']
    assert all(row['running'] for row in rows), rows
    out = subprocess.run([sys.executable, '-m', 'tools.kubelab', 'status', '--dir', kubelab['dir']], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0 and json.loads(out.stdout) == rows


def test_virtualmachine_crd_carries_kubevirts_generated_schema(kubelab):
    status, crd = kubelab['client'].request('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io')
    assert status == 200
    v1 = [v for v in crd['spec']['versions'] if v['name'] == 'v1'][0]
    assert v1['served'] and v1['storage'] and v1['subresources'] == {'status': {}}
    spec = v1['schema']['openAPIV3Schema']['properties']['spec']['properties']
    domain = spec['template']['properties']['spec']['properties']['domain']
    assert {'cpu', 'devices', 'memory', 'resources'} <= set(domain['properties'])
    assert 'cores' in domain['properties']['cpu']['properties']
    assert domain['required'] == ['devices']


def test_every_kubevirt_and_cdi_crd_is_established(kubelab):
    status, crds = kubelab['client'].request('GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions')
    assert status == 200
    names = {item['metadata']['name'] for item in crds['items'] if all(
        c['status'] == 'True' for c in item['status']['conditions'] if c['type'] == 'Established')}
    for name in ('virtualmachines.kubevirt.io', 'virtualmachineinstances.kubevirt.io', 'virtualmachineinstancemigrations.kubevirt.io',
                 'virtualmachinesnapshots.snapshot.kubevirt.io', 'virtualmachineinstancetypes.instancetype.kubevirt.io',
                 'virtualmachineclusterpreferences.instancetype.kubevirt.io', 'kubevirts.kubevirt.io',
                 'migrationpolicies.migrations.kubevirt.io', 'virtualmachineclones.clone.kubevirt.io',
                 'datavolumes.cdi.kubevirt.io', 'datasources.cdi.kubevirt.io', 'storageprofiles.cdi.kubevirt.io'):
        assert name in names, name
    assert set(kubelab['crd_names']) <= names and kubelab['crds'] == len(kubelab['crd_names']) == 31     # 19 KubeVirt + 12 CDI


def test_strict_field_validation_refuses_an_unknown_field_naming_it(kubelab):
    client = kubelab['client']
    body = vm_body('strict', domain_extra={'cpu': {'core': 2}})
    status, answer = client.request('POST', VMS + '?fieldValidation=Strict', body)
    assert status == 400 and answer['reason'] == 'BadRequest', answer        # 400 (not 422) is what Strict answers
    # 'VirtualMachine in version "v1" cannot be handled as a VirtualMachine: strict decoding error: unknown field "..."'
    assert 'strict decoding error: unknown field "spec.template.spec.domain.cpu.core"' in answer['message'], answer['message']
    assert client.request('GET', VMS + '/strict')[0] == 404


def test_unknown_and_null_fields_are_pruned_without_strict(kubelab):
    client = kubelab['client']
    body = vm_body('pruned', spec_extra={'runStrategy': None, 'running': False}, domain_extra={'cpu': {'core': 2, 'cores': 1}})
    body['spec']['template']['spec']['hostname'] = None
    status, stored = client.request('POST', VMS, body)
    assert status == 201, stored
    domain = stored['spec']['template']['spec']['domain']
    assert domain['cpu'] == {'cores': 1}                        # the typo is dropped silently
    assert 'runStrategy' not in stored['spec']                  # null dropped (not nullable in KubeVirt's schema)
    assert 'hostname' not in stored['spec']['template']['spec']
    assert client.request('DELETE', VMS + '/pruned')[0] == 200


# ---------------------------------------------------------------- the collection against the real server

def kv(kubelab, name, **args):
    base = dict(backend='kubevirt', kubeconfig=kubelab['kubeconfig'], namespace=NS, wait_timeout=30, name=name, vcpus=1,  # pylint: disable=use-dict-literal
                memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}])
    base.update(args)
    return base


def test_vm_module_create_rerun_delete(kubelab):
    client = kubelab['client']
    created = run_module('vm', kv(kubelab, 'coll', state='present'))
    assert created['_rc'] == 0 and not created.get('failed'), created.get('msg') or created
    assert created['changed'] and [s['action'] for s in created['steps']] == ['create']
    status, stored = client.request('GET', VMS + '/coll')
    assert status == 200 and stored['spec']['runStrategy'] == 'Halted'
    again = run_module('vm', kv(kubelab, 'coll', state='present'))
    assert again['_rc'] == 0 and not again.get('failed'), again.get('msg') or again
    assert not again['changed'], again.get('steps')
    removed = run_module('vm', kv(kubelab, 'coll', state='absent'))
    assert removed['_rc'] == 0 and not removed.get('failed'), removed.get('msg') or removed
    assert removed['changed'] and [s['action'] for s in removed['steps']] == ['delete']
    assert client.request('GET', VMS + '/coll')[0] == 404


def test_vm_module_refuses_an_unknown_spec_field_naming_it(kubelab):
    typo = kv(kubelab, 'typo', state='present', spec={'template': {'spec': {'domain': {'cpu': {'core': 2}}}}})
    result = run_module('vm', typo)
    assert result.get('failed') and 'spec.template.spec.domain.cpu.core' in result['msg'], result.get('msg') or result
    assert kubelab['client'].request('GET', VMS + '/typo')[0] == 404


# ---------------------------------------------------------------- KubeVirt's own virt-api (stage 2)

def test_kubevirts_webhook_refuses_two_pod_networks_naming_the_field(kubelab):
    body = vm_body('twopod', domain_extra={'devices': {'interfaces': [{'name': 'a', 'masquerade': {}}, {'name': 'b', 'masquerade': {}}]}})
    body['spec']['template']['spec']['networks'] = [{'name': 'a', 'pod': {}}, {'name': 'b', 'pod': {}}]
    status, answer = kubelab['client'].request('POST', VMS, body)
    assert status == 422 and answer['reason'] == 'Invalid', answer
    assert 'admission webhook "virtualmachine-validator.kubevirt.io" denied the request' in answer['message']
    assert answer['details']['causes'][0]['field'] == 'spec.template.spec.interfaces'
    assert kubelab['client'].request('GET', VMS + '/twopod')[0] == 404


def test_kubevirts_mutating_webhook_sets_its_defaults(kubelab):
    status, stored = kubelab['client'].request('POST', VMS, vm_body('defaults'))
    assert status == 201, stored
    template = stored['spec']['template']
    assert template['spec']['domain']['machine'] == {'type': 'q35'}
    # (spec.template.spec.architecture: amd64 is set only without a KubeVirt CR; the lab's CR has no architectureConfiguration)
    assert set(template['spec']['domain']['firmware']) == {'serial', 'uuid'}
    assert kubelab['client'].request('DELETE', VMS + '/defaults')[0] == 200


def test_start_subresource_is_kubevirts_own(kubelab):
    client = kubelab['client']
    assert client.request('POST', VMS, vm_body('sub'))[0] == 201
    start = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines/sub/start' % NS
    # KubeVirt's route declares no representation: an exact `Accept: application/json` gets 406
    assert client.request('PUT', start, {})[0] == 406
    client_any = lab.Client(client.server, kubelab['ca_file'], client.token)
    status, _answer = _put_accept_any(client_any, start)
    assert status == 202
    assert client.request('GET', VMS + '/sub')[1]['spec']['runStrategy'] == 'Always'
    status, answer = _put_accept_any(client_any, start)
    assert status == 409 and 'Always does not support manual start requests' in answer


def _put_accept_any(client, path, body=None):
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    req = urllib.request.Request(client.server + path, data=json.dumps(body or {}).encode(), method='PUT')
    req.add_header('Authorization', 'Bearer ' + client.token)
    req.add_header('Content-Type', 'application/json')
    req.add_header('Accept', '*/*')
    try:
        with urllib.request.urlopen(req, context=client.context, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_addvolume_subresource_patches_the_vm_spec_under_declarative_hotplug(kubelab):
    # with the DeclarativeHotplugVolumes gate (KubeVirt CR kubevirt/kubevirt), addvolume/removevolume edit the VM's
    # spec (no status.volumeRequests); the gate is read by virt-api from the CR
    client = kubelab['client']
    assert client.request('POST', VMS, vm_body('hp'))[0] == 201
    base = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines/hp/' % NS
    add = {'name': 'data', 'disk': {'name': 'data', 'disk': {'bus': 'scsi'}},
           'volumeSource': {'persistentVolumeClaim': {'claimName': 'data-pvc', 'hotpluggable': True}}}
    assert _put_accept_any(client, base + 'addvolume', add)[0] == 202
    vm = client.request('GET', VMS + '/hp')[1]
    assert vm['spec']['template']['spec']['volumes'] == [{'name': 'data', 'persistentVolumeClaim': {'claimName': 'data-pvc', 'hotpluggable': True}}]
    assert vm['spec']['template']['spec']['domain']['devices']['disks'] == [{'name': 'data', 'disk': {'bus': 'scsi'}}]
    assert 'volumeRequests' not in vm.get('status', {})
    assert _put_accept_any(client, base + 'removevolume', {'name': 'data'})[0] == 202
    assert 'volumes' not in client.request('GET', VMS + '/hp')[1]['spec']['template']['spec']


def test_vm_module_surfaces_a_webhook_refusal_naming_the_field(kubelab):
    result = run_module('vm', kv(kubelab, 'twoif', state='present', interfaces=[{'name': 'a'}, {'name': 'b'}]))
    assert result.get('failed') and not result.get('changed')
    assert 'more than one interface is connected to a pod network in spec.template.spec.interfaces' in result['msg']


def test_vm_module_starts_through_kubevirts_subresource(kubelab):
    ok = run_module('vm', kv(kubelab, 'starts', state='present'))
    assert not ok.get('failed'), ok.get('msg')
    started = run_module('vm', kv(kubelab, 'starts', state='running', wait=False))
    assert not started.get('failed'), started.get('msg')
    assert kubelab['client'].request('GET', VMS + '/starts')[1]['spec']['runStrategy'] == 'Always'


POLICY_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'docs', 'examples',
                           'annotations-policy.yaml')
ADMISSION = '/apis/admissionregistration.k8s.io/v1'
AUTOMATION = 'system:serviceaccount:converge-virt:automation'


def _as_user(client, user, method, path, body=None, groups=(), content_type='application/json'):
    """One request impersonating ``user`` (and ``groups``): what that user's own credentials would get."""
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    req = urllib.request.Request(client.server + path, data=json.dumps(body).encode() if body is not None else None, method=method)
    req.add_header('Authorization', 'Bearer ' + client.token)
    req.add_header('Accept', 'application/json')
    req.add_header('Content-Type', content_type)
    req.add_header('Impersonate-User', user)
    for group in groups:
        req.add_header('Impersonate-Group', group)
    try:
        with urllib.request.urlopen(req, context=client.context, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b'null')
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, raw.decode(errors='replace')


def test_annotations_policy_lets_only_the_automation_write_the_task_record(kubelab):
    """docs/examples/annotations-policy.yaml on the real API server: a namespace user who may create and patch VMs cannot
    write converge.virt/* annotations; the automation's service account and the writers' group can; the rest of a VM is
    left to RBAC."""
    import yaml  # pylint: disable=import-outside-toplevel
    client = kubelab['client']
    with open(POLICY_FILE, encoding='utf-8') as handle:
        policy, binding = yaml.safe_load(handle)['items']
    rbac = '/apis/rbac.authorization.k8s.io/v1'
    editor = {'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRole', 'metadata': {'name': 'vm-editor'},
              'rules': [{'apiGroups': ['kubevirt.io'], 'resources': ['virtualmachines'], 'verbs': ['get', 'create', 'patch', 'update', 'delete']}]}
    client.apply(rbac + '/clusterroles', editor)
    client.apply(rbac + '/clusterrolebindings', {
        'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'ClusterRoleBinding', 'metadata': {'name': 'vm-editor'},
        'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'ClusterRole', 'name': 'vm-editor'},
        'subjects': [{'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'User', 'name': name} for name in ('alice', 'bob', AUTOMATION)]})
    client.apply(ADMISSION + '/validatingadmissionpolicies', policy)
    client.apply(ADMISSION + '/validatingadmissionpolicybindings', binding)
    merge = 'application/merge-patch+json'
    try:
        forged = vm_body('pol-forged')
        forged['metadata']['annotations'] = {'converge.virt/lease-until': '1e18'}
        deadline = time.monotonic() + 60
        while True:     # the API server starts enforcing a new policy within seconds
            status, answer = _as_user(client, 'alice', 'POST', VMS, forged)
            if status != 201 or time.monotonic() > deadline:
                break
            _as_user(client, 'alice', 'DELETE', VMS + '/pol-forged')
            time.sleep(1)
        assert status == 403 and 'may be changed only by %s' % AUTOMATION in answer['message'] and 'not by alice' in answer['message'], answer
        assert client.request('GET', VMS + '/pol-forged')[0] == 404
        # what RBAC allows alice is unchanged: a VM without a record, its spec, other annotations
        assert _as_user(client, 'alice', 'POST', VMS, vm_body('pol-vm'))[0] == 201
        assert _as_user(client, 'alice', 'PATCH', VMS + '/pol-vm', {'spec': {'runStrategy': 'Manual'}}, content_type=merge)[0] == 200
        assert _as_user(client, 'alice', 'PATCH', VMS + '/pol-vm', {'metadata': {'annotations': {'team': 'a'}}}, content_type=merge)[0] == 200
        lease = {'metadata': {'annotations': {'converge.virt/lease-until': '1e18'}}}
        assert _as_user(client, 'alice', 'PATCH', VMS + '/pol-vm', lease, content_type=merge)[0] == 403
        # the automation writes the record; a member of the writers' group too; alice can neither change nor remove it
        assert _as_user(client, AUTOMATION, 'PATCH', VMS + '/pol-vm', {'metadata': {'annotations': {'converge.virt/vm-state': 'STOPPED'}}},
                        content_type=merge)[0] == 200
        assert _as_user(client, 'bob', 'PATCH', VMS + '/pol-vm', {'metadata': {'annotations': {'converge.virt/generation': '2'}}},
                        groups=['converge-virt:record-writers'], content_type=merge)[0] == 200
        assert _as_user(client, 'bob', 'PATCH', VMS + '/pol-vm', {'metadata': {'annotations': {'converge.virt/generation': '3'}}},
                        content_type=merge)[0] == 403
        assert _as_user(client, 'alice', 'PATCH', VMS + '/pol-vm', {'metadata': {'annotations': {'converge.virt/vm-state': None}}},
                        content_type=merge)[0] == 403
        annotations = client.request('GET', VMS + '/pol-vm')[1]['metadata']['annotations']
        assert annotations['converge.virt/vm-state'] == 'STOPPED' and annotations['converge.virt/generation'] == '2'
        assert 'converge.virt/lease-until' not in annotations
    finally:
        client.request('DELETE', ADMISSION + '/validatingadmissionpolicybindings/' + binding['metadata']['name'])
        client.request('DELETE', ADMISSION + '/validatingadmissionpolicies/' + policy['metadata']['name'])
        client.request('DELETE', VMS + '/pol-vm')


# ---------------------------------------------------------------- RBAC: docs/examples/kubevirt-rbac.yaml, kubeconfig-restricted

def _token_of(kubeconfig):
    with open(kubeconfig, encoding='utf-8') as handle:
        return json.load(handle)['users'][0]['user']['token']


def test_up_writes_kubeconfig_restricted_bound_to_the_documented_rules(kubelab):
    client = kubelab['client']
    path = kubelab['kubeconfig_restricted']
    assert path == os.path.join(kubelab['dir'], 'kubeconfig-restricted') and os.stat(path).st_mode & 0o077 == 0
    role_rules, cluster_rules = lab.documented_rbac()
    name = lab.RESTRICTED_ACCOUNT
    assert client.request('GET', '%s/namespaces/%s/roles/%s' % (lab.RBAC_API, NS, name))[1]['rules'] == role_rules
    assert client.request('GET', '%s/clusterroles/%s-%s' % (lab.RBAC_API, name, NS))[1]['rules'] == cluster_rules
    restricted = lab.Client(client.server, kubelab['ca_file'], _token_of(path))
    assert restricted.request('GET', VMS)[0] == 200
    assert restricted.request('GET', '/api/v1/namespaces')[0] == 403                    # nothing beyond the documented rules
    assert restricted.request('GET', '/api/v1/namespaces/%s/secrets' % NS)[0] == 403
    assert restricted.request('GET', '/api/v1/nodes/x')[0] == 404                        # the ClusterRole: get nodes


def test_restricted_identity_runs_the_modules_read_and_write_paths(kubelab):
    """Every module with exactly the documented rules: vm create / re-run / start / stop / delete, vm_info, volume
    create / volume_info / delete, migration_info, host drain of a node (a Node object: no kubelet here)."""
    client = kubelab['client']
    restricted = kubelab['kubeconfig_restricted']

    def run(module, **args):
        result = run_module(module, dict(args, backend='kubevirt', kubeconfig=restricted, namespace=NS))
        assert result['_rc'] == 0 and not result.get('failed'), (module, result.get('msg') or result)
        return result

    vm = dict(name='rbac-vm', vcpus=1, memory='64Mi', wait_timeout=30, disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}],
              labels={'app': 'rbac'})
    assert run('vm', state='present', **vm)['changed']
    inventory = os.path.join(kubelab['dir'], 'rbac.converge_kubevirt.yml')
    with open(inventory, 'w', encoding='utf-8') as handle:
        json.dump({'plugin': 'converge.virt.kubevirt', 'kubeconfig': restricted, 'namespaces': [NS], 'label_selectors': ['app=rbac']}, handle)
    listed = subprocess.run([os.path.join(BIN, 'ansible-inventory'), '-i', inventory, '--list'], capture_output=True, text=True,
                            env=ansible_env({'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.kubevirt'}), check=False, timeout=120)
    assert listed.returncode == 0 and 'cannot read namespace' not in listed.stderr, listed.stderr
    assert '%s-rbac-vm' % NS in json.loads(listed.stdout)['_meta']['hostvars'], listed.stdout      # host names: namespace-name
    assert not run('vm', state='present', **vm)['changed']
    assert run('vm', state='running', wait=False, **vm)['changed']                   # virtualmachines/start
    assert client.request('GET', VMS + '/rbac-vm')[1]['spec']['runStrategy'] == 'Always'
    assert run('vm', state='stopped', wait=False, **vm)['changed']                   # virtualmachines/stop
    info = run('vm_info', name='rbac-vm')
    assert [v['name'] for v in info['vms']] == ['rbac-vm'], info['vms']
    assert run('volume', name='rbac-data', capacity='1Gi', wait_timeout=0)['changed']   # a PersistentVolumeClaim
    assert client.request('GET', '/api/v1/namespaces/%s/persistentvolumeclaims/rbac-data' % NS)[0] == 200
    volumes = run('volume_info', name='rbac-data')
    assert volumes['volumes'][0]['name'] == 'rbac-data', volumes
    assert run('volume', name='rbac-data', state='absent', wait_timeout=0)['changed']
    run('migration_info')
    assert client.request('POST', '/api/v1/nodes', {'apiVersion': 'v1', 'kind': 'Node', 'metadata': {'name': 'rbac-node'}})[0] == 201
    try:
        assert run('host', node='rbac-node', state='drained', reason='rbac test')['changed']
        assert client.request('GET', '/api/v1/nodes/rbac-node')[1]['spec']['unschedulable'] is True
    finally:
        client.request('DELETE', '/api/v1/nodes/rbac-node')
    assert run('vm', state='absent', **vm)['changed']
    assert client.request('GET', VMS + '/rbac-vm')[0] == 404


def _without(rules, group, resource, verb=None):
    """``rules`` minus ``resource`` of ``group`` (every verb, or only ``verb``)."""
    kept = []
    for rule in rules:
        if group in rule['apiGroups'] and resource in rule['resources']:
            if verb is None:
                rule = dict(rule, resources=[r for r in rule['resources'] if r != resource])
            else:
                rule = dict(rule, verbs=[v for v in rule['verbs'] if v != verb])
            if not rule['resources'] or not rule['verbs']:
                continue
        kept.append(rule)
    return kept


def _kubeconfig_with(kubelab, account, rules, directory):
    token = lab.grant(kubelab['client'], NS, account, rules)
    path = os.path.join(directory, account + '.kubeconfig')
    lab._kubeconfig(path, kubelab['client'].server, kubelab['ca_file'], account, token)  # pylint: disable=protected-access
    return path, token


def test_a_missing_rule_fails_naming_the_verb_and_the_resource_and_writes_nothing(kubelab, tmp_path):
    role_rules, _cluster = lab.documented_rbac()
    path, token = _kubeconfig_with(kubelab, 'no-create', _without(role_rules, 'kubevirt.io', 'virtualmachines', 'create'), str(tmp_path))
    result = run_module('vm', kv(kubelab, 'rbac-denied', state='present', kubeconfig=path))
    assert result.get('failed') and not result.get('changed'), result
    assert ('forbidden: system:serviceaccount:%s:no-create cannot create virtualmachines (API group kubevirt.io) in namespace %s'
            % (NS, NS)) in result['msg'], result['msg']
    assert 'docs/examples/kubevirt-rbac.yaml' in result['msg'] and token not in json.dumps(result)
    assert kubelab['client'].request('GET', VMS + '/rbac-denied')[0] == 404


def test_a_missing_subresource_rule_fails_naming_it(kubelab, tmp_path):
    role_rules, _cluster = lab.documented_rbac()
    path, _token = _kubeconfig_with(kubelab, 'no-start', _without(role_rules, 'subresources.kubevirt.io', 'virtualmachines/start'),
                                    str(tmp_path))
    assert kubelab['client'].request('POST', VMS, vm_body('rbac-nostart'))[0] == 201
    result = run_module('vm', kv(kubelab, 'rbac-nostart', state='running', wait=False, kubeconfig=path))
    assert result.get('failed'), result
    assert 'cannot update virtualmachines/start (API group subresources.kubevirt.io) in namespace %s' % NS in result['msg'], result['msg']
    assert kubelab['client'].request('GET', VMS + '/rbac-nostart')[1]['spec']['runStrategy'] == 'Halted'
    assert kubelab['client'].request('DELETE', VMS + '/rbac-nostart')[0] == 200


# ---------------------------------------------------------------- deletion and finalizers

def _merge_patch(client, path, body):
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    req = urllib.request.Request(client.server + path, data=json.dumps(body).encode(), method='PATCH')
    req.add_header('Authorization', 'Bearer ' + client.token)
    req.add_header('Content-Type', 'application/merge-patch+json')
    try:
        with urllib.request.urlopen(req, context=client.context, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _can(client, account, group, resource, verb, namespace=None):
    review = {'apiVersion': 'authorization.k8s.io/v1', 'kind': 'SubjectAccessReview', 'spec': {
        'user': 'system:serviceaccount:kubevirt:%s' % account, 'groups': ['system:serviceaccounts', 'system:serviceaccounts:kubevirt'],
        'resourceAttributes': dict({'group': group, 'resource': resource, 'verb': verb}, **({'namespace': namespace} if namespace else {}))}}
    code, answer = client.request('POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', review)
    assert code == 201, answer
    return answer['status'].get('allowed', False)


def test_virt_api_runs_with_exactly_the_rules_virt_operator_gives_it(kubelab):
    # KubeVirt's own ClusterRole of kubevirt-apiserver (GetAllApiServer), not every rule: what it needs is allowed,
    # what it does not need is not
    client = kubelab['client']
    role = client.request('GET', '/apis/rbac.authorization.k8s.io/v1/clusterroles/kubevirt-apiserver')[1]
    assert any('virtualmachineinstancemigrations' in rule.get('resources', []) for rule in role['rules']), role
    assert not any('*' in rule.get('verbs', []) or '*' in rule.get('resources', []) for rule in role['rules']), role
    assert _can(client, 'kubevirt-apiserver', 'kubevirt.io', 'virtualmachines', 'patch', NS)
    assert _can(client, 'kubevirt-apiserver', 'kubevirt.io', 'virtualmachineinstancemigrations', 'create', NS)
    assert not _can(client, 'kubevirt-apiserver', '', 'nodes', 'delete')
    assert not _can(client, 'kubevirt-apiserver', '', 'secrets', 'list', NS)
    assert not _can(client, 'kubevirt-apiserver', 'kubevirt.io', 'virtualmachines', 'delete', NS)
    with open(os.path.join(kubelab['dir'], 'pki', 'virt-api.kubeconfig'), encoding='utf-8') as handle:
        assert json.load(handle)['users'][0]['name'] == 'system:serviceaccount:kubevirt:kubevirt-apiserver'


def test_delete_with_wait_names_the_finalizer_that_holds_the_vm(kubelab):
    # without virt-controller nobody removes a finalizer: the user must see which one holds the VM, not a bare timeout
    client = kubelab['client']
    body = vm_body('held')
    body['metadata']['finalizers'] = ['example.com/hold']
    assert client.request('POST', VMS, body)[0] == 201
    try:
        result = run_module('vm', kv(kubelab, 'held', state='absent', wait=True, wait_timeout=2))
        assert result.get('failed'), result
        assert 'timed out after 2s waiting for %s/held to be deleted' % NS in result['msg'], result['msg']
        assert 'the VirtualMachine being deleted still carries the finalizer example.com/hold' in result['msg'], result['msg']
        assert result['last_observed']['vm_finalizing'] == {'deleting': True, 'finalizers': ['example.com/hold']}
        # the run that timed out leaves no task in flight: the next run is not refused, and it does not delete again
        # (the VM is already being deleted: nothing to change), it waits and names the finalizer again
        again = run_module('vm', kv(kubelab, 'held', state='absent', wait=True, wait_timeout=1))
        assert again.get('failed') and not again['changed'], again
        assert 'still carries the finalizer example.com/hold' in again['msg'], again['msg']
        untouched = client.request('GET', VMS + '/held')[1]
        nowait = run_module('vm', kv(kubelab, 'held', state='absent', wait=False))
        assert nowait['_rc'] == 0 and not nowait.get('failed') and not nowait['changed'] and nowait['steps'] == [], nowait
        assert client.request('GET', VMS + '/held')[1]['metadata']['resourceVersion'] == untouched['metadata']['resourceVersion']
        # a VM being deleted cannot be declared running: refused, naming its state
        refused = run_module('vm', kv(kubelab, 'held', state='running', wait=False))
        assert refused.get('failed') and 'being deleted' in refused['msg'], refused
    finally:
        assert _merge_patch(client, VMS + '/held', {'metadata': {'finalizers': None}}) == 200
    deadline = time.monotonic() + 30
    while client.request('GET', VMS + '/held')[0] != 404 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.request('GET', VMS + '/held')[0] == 404


def test_up_again_without_virt_api_restarts_on_the_same_data_and_drops_its_webhooks(kubelab):
    # last test of the lab: restarts it (same etcd data, certificates and token) without virt-api
    client = kubelab['client']
    assert client.request('POST', VMS, vm_body('kept'))[0] == 201
    again = lab.up(kubelab['dir'])
    client = lab.Client(again['server'], again['ca_file'], client.token)
    kubelab.update(client=client, kubeconfig_restricted=again['kubeconfig_restricted'])     # the tests below: the lab without virt-api
    assert client.request('GET', VMS + '/kept')[0] == 200
    assert [row['role'] for row in lab.status(kubelab['dir'])] == list(lab.ROLES)
    assert not any(row['pid'] in kubelab['pids'].values() for row in lab.status(kubelab['dir']))
    # no webhook left behind pointing at a virt-api that is gone (failurePolicy Fail would refuse every VM)
    body = vm_body('twopod-crd-only', domain_extra={'devices': {'interfaces': [{'name': 'a', 'masquerade': {}}, {'name': 'b', 'masquerade': {}}]}})
    body['spec']['template']['spec']['networks'] = [{'name': 'a', 'pod': {}}, {'name': 'b', 'pod': {}}]
    assert client.request('POST', VMS, body)[0] == 201
    assert client.request('GET', '/apis/apiregistration.k8s.io/v1/apiservices/v1.subresources.kubevirt.io')[0] == 404


def test_start_without_virt_api_says_kubevirts_virt_api_is_not_available(kubelab):
    # after the restart above: no subresources.kubevirt.io APIService; the API server answers "404 page not found"
    ok = run_module('vm', kv(kubelab, 'novirtapi', state='present', kubeconfig=kubelab['kubeconfig_restricted']))
    assert not ok.get('failed'), ok.get('msg')
    result = run_module('vm', kv(kubelab, 'novirtapi', state='running', wait=False, kubeconfig=kubelab['kubeconfig_restricted']))
    assert result.get('failed') and not result.get('changed'), result
    assert "start of virtualmachine %s/novirtapi failed: KubeVirt's virt-api is not available: the API server does not serve " \
           "subresources.kubevirt.io/v1 (404: 404 page not found)" % NS in result['msg'], result['msg']
    assert 'APIService v1.subresources.kubevirt.io' in result['msg']
    assert kubelab['client'].request('GET', VMS + '/novirtapi')[1]['spec']['runStrategy'] == 'Halted'


# ---------------------------------------------------------------- build and process bookkeeping (no lab needed)

def test_locate_names_the_missing_build_and_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv('CONVERGE_VIRT_KUBE_CACHE', str(tmp_path))
    with pytest.raises(build.BuildError) as raised:
        build.locate()
    assert 'not built: ' + str(tmp_path) in str(raised.value) and 'make kube' in str(raised.value)
    out = subprocess.run([sys.executable, '-m', 'tools.kubelab', 'up', '--dir', str(tmp_path / 'lab')], cwd=ROOT,
                         env=dict(os.environ, CONVERGE_VIRT_KUBE_CACHE=str(tmp_path)), capture_output=True, text=True, check=False)
    assert out.returncode == 2 and 'make kube' in out.stderr and 'Traceback' not in out.stderr
    assert not (tmp_path / 'lab').exists()


def test_up_refuses_at_once_when_loopback_is_down(tmp_path):
    # a fresh network namespace: lo is down, binding 127.0.0.1 works, connecting does not
    out = subprocess.run(['unshare', '--net', sys.executable, '-m', 'tools.kubelab', 'up', '--dir', str(tmp_path / 'lab')], cwd=ROOT,
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 2 and '127.0.0.1 is not reachable here' in out.stderr and 'loopback' in out.stderr, out.stderr
    assert not (tmp_path / 'lab').exists()


def test_cache_directory_follows_the_pins_and_staging_must_match(tmp_path, monkeypatch):
    import shutil  # pylint: disable=import-outside-toplevel
    copy = tmp_path / 'go'
    shutil.copytree(build.GO_DIR, copy)
    monkeypatch.setattr(build, 'GO_DIR', str(copy))
    before = {part.name: part.directory('go1.26.8') for part in build.parts()}
    assert before == {part.name: part.directory('go1.26.8') for part in build.parts()}     # stable
    assert before['kubernetes'] != build.parts()[1].directory('go1.26.9')                   # another Go: another build
    main = copy / 'kube' / 'cmd' / 'kube-apiserver' / 'main.go'
    main.write_text(main.read_text() + '\n// changed\n')
    after = {part.name: part.directory('go1.26.8') for part in build.parts()}
    assert after['kubernetes'] != before['kubernetes'] and after['etcd'] == before['etcd'] and after['kubevirt'] == before['kubevirt']
    gomod = copy / 'kube' / 'go.mod'
    gomod.write_text(gomod.read_text().replace('k8s.io/client-go => k8s.io/client-go v0.34.4', 'k8s.io/client-go => k8s.io/client-go v0.34.2'))
    with pytest.raises(build.BuildError) as raised:
        build.parts()
    assert 'k8s.io/client-go v0.34.2' in str(raised.value) and 'v0.34.4' in str(raised.value)


def test_down_never_signals_a_process_it_did_not_start(tmp_path):
    sleeper = subprocess.Popen(['sleep', '60'])  # pylint: disable=consider-using-with
    try:
        start = procs.start_time(sleeper.pid)
        record = {'role': 'etcd', 'pid': sleeper.pid, 'boot_id': lab.boot_id(), 'argv': ['sleep'], 'log': '/dev/null'}
        for wrong in ({'starttime': start + 1}, {'starttime': start, 'boot_id': 'another-boot'}):
            state = {'boot_id': lab.boot_id(), 'ports': {}, 'processes': [dict(record, **wrong)]}
            lab._save(str(tmp_path), state)  # pylint: disable=protected-access
            assert lab.status(str(tmp_path))[0]['running'] is False
            assert not lab.down(str(tmp_path)) and sleeper.poll() is None
        lab._save(str(tmp_path), {'boot_id': lab.boot_id(), 'ports': {}, 'processes': [dict(record, starttime=start)]})  # pylint: disable=protected-access
        assert lab.status(str(tmp_path))[0]['running'] is True
        assert lab.down(str(tmp_path)) == [sleeper.pid]
        assert procs.proc_stat(sleeper.pid) is None      # gone and reaped (down reaps its own children)
        assert not lab.status(str(tmp_path)) and not lab.down(str(tmp_path))
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
