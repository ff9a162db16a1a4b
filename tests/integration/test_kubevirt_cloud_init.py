"""converge.virt.vm cloud_init with backend kubevirt, through the ansible CLI, against the kube_server fixture (real stack by default).

The user data lives in a Secret ``<vm>-cloudinit`` owned by the VM; the template carries a cloudInitNoCloud volume that
references it (secretRef / networkDataSecretRef) and the seed's digest; a re-run is no change; changed user data updates the
Secret and is a restart-needing change; the data never appears in a result. The modules run with the restricted
identity of the lab (the documented RBAC: Secrets get, create, patch); the test reads the Secret as admin.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import base64
import json
import time

from kubernetes import client as kclient

from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.kubeapi.fixtures import kube_api, kube_server  # noqa: F401  (pytest fixtures)

NS = 'default'
SECRET = 'kv-hunter2-cloud-init-7d2e'


def restricted(srv):
    """The modules run as the lab's restricted identity (DIR/kubeconfig-restricted: a ServiceAccount bound to exactly
    docs/examples/kubevirt-rbac.yaml) on the real stack, so a verb the example lacks fails here (issue 33); the
    emulator has no RBAC (admin there)."""
    return srv.stack.info['kubeconfig_restricted'] if srv.real else srv.kubeconfig_path


def kv(srv, **args):
    return kubevirt_args({'namespace': NS, 'wait_timeout': 120}, srv, **dict({'kubeconfig': restricted(srv)}, **args))


def declared(srv, name, secret=SECRET, **args):
    base = dict(name=name, vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}],
                cloud_init={'user_data': {'chpasswd': {'expire': False, 'users': [{'name': 'kvuser', 'password': secret, 'type': 'text'}]}},
                            'network_config': {'version': 2, 'ethernets': {'eth0': {'dhcp4': True}}}})
    base.update(args)
    return kv(srv, **base)


def vm_obj(srv, name):
    return srv.store.peek(srv.store.rtype('kubevirt.io', 'virtualmachines'), NS, name)


def secret_of(api, name):
    return kclient.CoreV1Api(api).read_namespaced_secret(name + '-cloudinit', NS)


def secret_exists(api, name):
    try:
        secret_of(api, name)
        return True
    except kclient.exceptions.ApiException as exc:
        if exc.status == 404:
            return False
        raise


def test_secret_volume_idempotence_change_and_no_leak(kube_server, kube_api):
    srv = kube_server
    name = 'kvci'
    checked = run_module('vm', declared(srv, name, state='present'), check=True)
    assert checked['changed'] and checked['cloud_init']['changed'] and SECRET not in json.dumps(checked)
    assert vm_obj(srv, name) is None

    created = ok(run_module('vm', declared(srv, name, state='present'), diff=True))
    assert created['changed'] and created['cloud_init']['secret'] == name + '-cloudinit'
    assert SECRET not in json.dumps(created), 'the user data leaked into the result'
    vm = vm_obj(srv, name)
    tspec = vm['spec']['template']['spec']
    volume = [v for v in tspec['volumes'] if v['name'] == 'cloudinitdisk'][0]
    assert volume['cloudInitNoCloud'] == {'secretRef': {'name': name + '-cloudinit'}, 'networkDataSecretRef': {'name': name + '-cloudinit'}}
    assert 'cloudinitdisk' in [d['name'] for d in tspec['domain']['devices']['disks']]
    assert SECRET not in json.dumps(vm), 'the VirtualMachine object must not carry the user data'
    secret = secret_of(kube_api, name)
    user_data = base64.b64decode(secret.data['userdata'])
    assert user_data.startswith(b'#cloud-config\n') and json.loads(user_data.split(b'\n', 1)[1])['chpasswd']['users'][0]['password'] == SECRET
    assert json.loads(base64.b64decode(secret.data['networkdata']))['version'] == 2
    owners = [(ref.kind, ref.name, ref.uid) for ref in secret.metadata.owner_references or []]
    assert owners == [('VirtualMachine', name, vm['metadata']['uid'])], 'the Secret goes with the VM'
    digest = created['cloud_init']['digest']
    assert created['diff']['after']['cloud_init_digest'] == digest and created['diff']['before']['cloud_init_digest'] is None

    again = ok(run_module('vm', declared(srv, name, state='present')))
    assert not again['changed'] and again['cloud_init']['digest'] == digest and not again['cloud_init']['changed']

    running = ok(run_module('vm', declared(srv, name, state='running')))
    assert [s['action'] for s in running['steps']] == ['start'] and not running['cloud_init']['changed']

    changed = ok(run_module('vm', declared(srv, name, secret=SECRET + '-v2', state='running'), diff=True))
    assert SECRET not in json.dumps(changed)
    assert changed['changed'] and changed['cloud_init']['changed'] and changed['cloud_init']['digest'] != digest
    assert changed['diff']['before']['cloud_init_digest'] == digest
    assert [s['action'] for s in changed['steps']] == ['update']
    assert changed['vm']['pending_restart'], 'a new seed reaches the guest only at its next boot'
    new_data = base64.b64decode(secret_of(kube_api, name).data['userdata'])
    assert json.loads(new_data.split(b'\n', 1)[1])['chpasswd']['users'][0]['password'] == SECRET + '-v2'
    still = ok(run_module('vm', declared(srv, name, secret=SECRET + '-v2', state='running')))
    assert not still['changed'] and not still['cloud_init']['changed']

    gone = ok(run_module('vm', kv(srv, name=name, state='absent')))
    assert gone['changed'] and vm_obj(srv, name) is None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and secret_exists(kube_api, name):
        time.sleep(1)
    assert not secret_exists(kube_api, name), 'the Secret goes with its owner, the VM'


def test_bad_cloud_init_names_the_field(kube_server):
    srv = kube_server
    bad = run_module('vm', declared(srv, 'kvbad', cloud_init={'user_data': {'package_update': True}, 'meta_data': {'x': 'y'}}))
    assert bad.get('failed') and 'cloud_init.meta_data' in bad['msg']
    pool = run_module('vm', declared(srv, 'kvbad', cloud_init={'user_data': {'package_update': True}, 'pool': 'default'}))
    assert pool.get('failed') and 'cloud_init.pool' in pool['msg']
    assert vm_obj(srv, 'kvbad') is None
