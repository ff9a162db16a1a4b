"""tools.kubelab with ``--controllers emulated``: VMs reach Running on the real kube-apiserver + KubeVirt's virt-api.

One stack for the module (``lab.up(virt_api=True, controllers='emulated')``): etcd, kube-apiserver,
kube-controller-manager, KubeVirt's virt-api and tests/kubeapi's controller emulation as a process
(``python -m tests.kubeapi.controller``, see tests/kubeapi/remote.py).  Admission is KubeVirt's own.
Checks: our ``vm`` module (backend kubevirt) through running / re-run / stopped / absent; a hot-plug
through KubeVirt's own ``addvolume`` reaching a Ready volumeStatus; a migration reaching Succeeded; and a
contract test of kubevirt.core (from the ``ansible`` package: build/ansible-pkg, see docs/kubelab.md):
kubevirt_vm create with wait, re-run unchanged, stop, delete, and its inventory listing the VM.
Run inside ``python -m tools.virtlab netns -- ...``.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.integration.ansible_run import ROOT, BIN, ansible_env, run_module, run_playbook
from tools.kubelab import lab

NS = 'default'
VMS = '/apis/kubevirt.io/v1/namespaces/%s/virtualmachines' % NS
VMIS = '/apis/kubevirt.io/v1/namespaces/%s/virtualmachineinstances' % NS
SUB = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachines' % NS
ANSIBLE_PKG = os.environ.get('CONVERGE_VIRT_ANSIBLE_PKG', os.path.join(ROOT, 'build', 'ansible-pkg'))


@pytest.fixture(scope='module')
def kubelab(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp('kubelab-ctl'))
    started = time.monotonic()
    info = lab.up(directory, virt_api=True, feature_gates=['DeclarativeHotplugVolumes'], controllers='emulated')
    info['up_seconds'] = time.monotonic() - started
    state = lab._load_state(directory)  # pylint: disable=protected-access
    with open(os.path.join(directory, 'pki', 'admin.token'), encoding='utf-8') as handle:
        info['token'] = handle.read().strip()
    info['client'] = lab.Client(state['server'], state['ca_file'], info['token'])
    info['dir'] = directory
    try:
        yield info
    finally:
        lab.down(directory)


def wait_for(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError('%s not within %d s' % (what, timeout))


def get(kubelab, path):
    status, body = kubelab['client'].request('GET', path)
    return body if status == 200 else None


def subresource(kubelab, name, action, body):
    """PUT a KubeVirt subresource (Accept */*: virt-api's routes declare no representation)."""
    req = urllib.request.Request(kubelab['server'] + '%s/%s/%s' % (SUB, name, action), data=json.dumps(body).encode(), method='PUT')
    req.add_header('Authorization', 'Bearer ' + kubelab['token'])
    req.add_header('Accept', '*/*')
    req.add_header('Content-Type', 'application/json')
    try:
        with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=kubelab['ca_file']), timeout=20) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def kv(kubelab, name, **args):
    base = dict(backend='kubevirt', kubeconfig=kubelab['kubeconfig'], namespace=NS, wait_timeout=60, name=name, vcpus=1,  # pylint: disable=use-dict-literal
                memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}])
    base.update(args)
    return base


def ok(result):
    assert result['_rc'] == 0 and not result.get('failed'), result.get('msg') or result
    return result


def running_vm(kubelab, name):
    """Create a VM with runStrategy Always directly; return the VMI once Running."""
    body = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'runStrategy': 'Always', 'template': {'spec': {'domain': {'devices': {}, 'memory': {'guest': '64Mi'}}}}}}
    status, answer = kubelab['client'].request('POST', VMS, body)
    assert status == 201, answer

    def running_vmi():
        vmi = get(kubelab, VMIS + '/' + name)
        return vmi if vmi and vmi.get('status', {}).get('phase') == 'Running' else None
    return wait_for('VMI %s Running' % name, running_vmi)


def test_status_lists_the_controllers_process(kubelab):
    rows = lab.status(kubelab['dir'])
    assert [row['role'] for row in rows] == list(lab.ROLES) + ['virt-api', 'controllers']
    assert all(row['running'] for row in rows), rows
    nodes = kubelab['client'].request('GET', '/api/v1/nodes')[1]['items']
    assert sorted(n['metadata']['name'] for n in nodes) == ['node01', 'node02', 'node03']
    assert not any(n['spec'].get('taints') for n in nodes)      # not-ready taint lifted, as the node lifecycle controller does


def test_vm_module_running_rerun_stopped_absent(kubelab):
    started = time.monotonic()
    result = ok(run_module('vm', kv(kubelab, 'life', state='running')))
    elapsed = time.monotonic() - started
    assert result['changed'] and result['vm']['status'] == 'Running' and result['vm']['vm_state'] == 'ACTIVE', result['vm']
    vm = get(kubelab, VMS + '/life')
    assert vm['status']['printableStatus'] == 'Running' and vm['status']['ready'] is True and vm['status']['created'] is True
    vmi = get(kubelab, VMIS + '/life')
    assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] in ('node01', 'node02', 'node03')
    assert vmi['spec']['architecture'] == 'amd64'       # defaulted by KubeVirt's own VMI mutator (virt-api)
    pods = kubelab['client'].request('GET', '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%3Dvirt-launcher' % NS)[1]['items']
    assert [p['spec']['nodeName'] for p in pods if p['metadata']['labels'].get('vm.kubevirt.io/name') == 'life'] == [vmi['status']['nodeName']]
    print('vm module: state running reached Running in %.1f s (stack up %.1f s)' % (elapsed, kubelab['up_seconds']))

    again = ok(run_module('vm', kv(kubelab, 'life', state='running')))
    assert not again['changed'] and again['steps'] == [], again['steps']
    assert again['vm']['status'] == 'Running'

    stopped = ok(run_module('vm', kv(kubelab, 'life', state='stopped')))
    assert stopped['changed'] and stopped['vm']['status'] == 'Stopped' and stopped['vm']['vm_state'] == 'STOPPED', stopped['vm']
    assert get(kubelab, VMIS + '/life') is None
    assert not ok(run_module('vm', kv(kubelab, 'life', state='stopped')))['changed']

    removed = ok(run_module('vm', kv(kubelab, 'life', state='absent')))
    assert removed['changed']
    wait_for('VM life gone', lambda: get(kubelab, VMS + '/life') is None, timeout=30)


def test_pause_and_unpause_go_through_virt_api_to_the_handler_endpoint(kubelab):
    """virt-api forwards pause/unpause to the virt-handler pod of the VMI's node (tests/kubeapi/handler.py plays it)."""
    ok(run_module('vm', kv(kubelab, 'pz', state='running')))
    paused = ok(run_module('vm', kv(kubelab, 'pz', state='paused')))
    assert [s['action'] for s in paused['steps']] == ['pause'] and paused['vm']['status'] == 'Paused', paused['vm']
    conditions = {c['type']: c for c in get(kubelab, VMIS + '/pz')['status']['conditions']}
    assert conditions['Paused']['status'] == 'True' and conditions['Paused']['reason'] == 'PausedByUser'
    handlers = kubelab['client'].request('GET', '/api/v1/namespaces/kubevirt/pods?labelSelector=kubevirt.io%3Dvirt-handler')[1]['items']
    assert sorted(p['spec']['nodeName'] for p in handlers) == ['node01', 'node02', 'node03']
    resumed = ok(run_module('vm', kv(kubelab, 'pz', state='running')))
    assert [s['action'] for s in resumed['steps']] == ['unpause'] and resumed['vm']['status'] == 'Running', resumed['vm']
    assert 'Paused' not in {c['type'] for c in get(kubelab, VMIS + '/pz')['status']['conditions']}
    ok(run_module('vm', kv(kubelab, 'pz', state='absent')))


def test_hotplug_through_kubevirts_addvolume_reaches_ready(kubelab):
    client = kubelab['client']
    running_vm(kubelab, 'hp')
    pvc = {'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': 'hp-data', 'namespace': NS},
           'spec': {'accessModes': ['ReadWriteOnce'], 'resources': {'requests': {'storage': '1Gi'}}}}
    assert client.request('POST', '/api/v1/namespaces/%s/persistentvolumeclaims' % NS, pvc)[0] == 201
    wait_for('PVC bound', lambda: (get(kubelab, '/api/v1/namespaces/%s/persistentvolumeclaims/hp-data' % NS) or {}).get(
        'status', {}).get('phase') == 'Bound')
    status, answer = subresource(kubelab, 'hp', 'addvolume', {
        'name': 'data', 'disk': {'name': 'data', 'disk': {'bus': 'scsi'}},
        'volumeSource': {'persistentVolumeClaim': {'claimName': 'hp-data', 'hotpluggable': True}}})
    assert status == 202, answer

    def ready():
        vmi = get(kubelab, VMIS + '/hp') or {}
        found = [v for v in vmi.get('status', {}).get('volumeStatus') or [] if v['name'] == 'data']
        return found if found and found[0].get('phase') == 'Ready' else None
    entry = wait_for('volumeStatus data Ready', ready, timeout=30)[0]
    assert entry['hotplugVolume'] and entry['target']
    assert any(v['name'] == 'data' for v in get(kubelab, VMIS + '/hp')['spec']['volumes'])

    status, answer = subresource(kubelab, 'hp', 'removevolume', {'name': 'data'})
    assert status == 202, answer
    wait_for('volume data unplugged', lambda: not any(v['name'] == 'data' for v in (get(kubelab, VMIS + '/hp') or {}).get(
        'status', {}).get('volumeStatus') or []), timeout=30)


def test_migration_reaches_succeeded(kubelab):
    client = kubelab['client']
    source = running_vm(kubelab, 'mig')['status']['nodeName']
    status, answer = subresource(kubelab, 'mig', 'migrate', {})
    assert status == 202, answer
    base = '/apis/kubevirt.io/v1/namespaces/%s/virtualmachineinstancemigrations' % NS

    def done():
        items = [m for m in client.request('GET', base)[1]['items'] if m['spec']['vmiName'] == 'mig']
        return items if items and items[0].get('status', {}).get('phase') == 'Succeeded' else None
    wait_for('migration Succeeded', done, timeout=60)
    vmi = get(kubelab, VMIS + '/mig')
    state = vmi['status']['migrationState']
    assert state['completed'] and not state.get('failed') and state['sourceNode'] == source
    assert vmi['status']['nodeName'] == state['targetNode'] != source


# ---------------------------------------------------------------- kubevirt.core contract

def kubevirt_core_env():
    if not os.path.isdir(os.path.join(ANSIBLE_PKG, 'ansible_collections', 'kubevirt', 'core')):
        # make integration (make test) installs it (make peers); a run without it fails naming the command (a skip would prove nothing)
        pytest.fail('kubevirt.core not installed: make peers (pip install --no-deps --target build/ansible-pkg "ansible>=12,<13")')
    return {'ANSIBLE_COLLECTIONS_PATH': os.pathsep.join([os.path.join(ROOT, 'build', 'collections'), ANSIBLE_PKG])}


def core_play(tmp_path, kubelab, name, **args):
    import yaml  # pylint: disable=import-outside-toplevel
    task = dict({'name': name, 'namespace': NS, 'kubeconfig': kubelab['kubeconfig'], 'wait': True, 'wait_timeout': 60,
                 'labels': {'app': 'core-contract'},
                 'spec': {'domain': {'devices': {}, 'memory': {'guest': '64Mi'}}}}, **args)
    path = str(tmp_path / 'core.yml')
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False, 'tasks': [{'name': 'vm', 'kubevirt.core.kubevirt_vm': task}]}], handle)
    return path


def core_run(tmp_path, kubelab, env, name, **args):
    code, out = run_playbook(core_play(tmp_path, kubelab, name, **args), env=env)
    result = out['plays'][0]['tasks'][0]['hosts']['localhost']
    assert code == 0 and not result.get('failed'), result.get('msg') or result
    return result


def test_kubevirt_core_create_rerun_stop_delete_and_inventory(kubelab, tmp_path):
    env = kubevirt_core_env()
    created = core_run(tmp_path, kubelab, env, 'core', running=True)
    assert created['changed']
    vm = get(kubelab, VMS + '/core')
    assert vm['status']['printableStatus'] == 'Running' and vm['status']['ready'] is True
    again = core_run(tmp_path, kubelab, env, 'core', running=True)
    assert not again['changed'], again.get('diff') or again

    inventory = tmp_path / 'contract.kubevirt.yml'
    inventory.write_text(json.dumps({'plugin': 'kubevirt.core.kubevirt', 'kubeconfig': kubelab['kubeconfig'], 'namespaces': [NS],
                                     'label_selector': 'app=core-contract'}))
    proc = subprocess.run([os.path.join(BIN, 'ansible-inventory'), '-i', str(inventory), '--list'], env=ansible_env(env),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hostvars = json.loads(proc.stdout)['_meta']['hostvars']
    assert '%s-core' % NS in hostvars, sorted(hostvars)
    host = {k: v.get('__ansible_unsafe', v) if isinstance(v, dict) else v for k, v in hostvars['%s-core' % NS].items()}
    assert host['vmi_phase'] == 'Running' and host['vmi_node_name'].startswith('node0'), host

    stopped = core_run(tmp_path, kubelab, env, 'core', run_strategy='Halted')
    assert stopped['changed']
    assert get(kubelab, VMS + '/core')['spec']['runStrategy'] == 'Halted'
    wait_for('VMI core gone', lambda: get(kubelab, VMIS + '/core') is None, timeout=30)
    assert not core_run(tmp_path, kubelab, env, 'core', run_strategy='Halted')['changed']

    deleted = core_run(tmp_path, kubelab, env, 'core', state='absent')
    assert deleted['changed'] and get(kubelab, VMS + '/core') is None
