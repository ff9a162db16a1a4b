"""Issue 18 on KubeVirt: from one golden image to configured guests, through ansible-playbook, on the real API stack.

The kube_server fixture is the real stack (kube-apiserver + etcd + KubeVirt's virt-api with its validating and mutating
webhooks, CDI's CRDs); CDI's controller and virt-handler are emulated in the test process (tests/kubeapi/kubevirt.py):
a DataVolume moves through CDI's phases, a started instance reports Running, AgentConnected and its interfaces. The
test plays the instance status itself where it checks readiness (an agent not yet connected, then link-local and
global addresses), as virt-handler would report them.

One golden claim and a DataSource pointing to it; three root disks cloned by the volume module (clone_from the claim,
clone_from_datasource by name and by namespace/name); three VMs from them with cloud_init (hostname and an SSH key,
one with a password). Checked: what the API server stored (DataVolume source / sourceRef, the VM's dataVolume disk and
cloudInitNoCloud secretRef), the golden objects never written, readiness words and addresses from the instance status
(vm wait_for agent|address and the kubevirt inventory's readiness / ansible_host), and that the password is in the
Secret only - not in any other object, the play's output, the ansible log or the audit journal.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import,too-many-locals,too-many-statements

import base64
import json
import os
import subprocess
import time

import yaml
from kubernetes import client as kclient

from tests.integration.ansible_run import BIN, ansible_env, ok, run_module, run_playbook, task_results
from tests.kubeapi.fixtures import kube_api, kube_server  # noqa: F401  (pytest fixtures)

NS = 'default'
PASSWORD = 'golden-hunter2-5c1e9a'
KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGoldenJourneyKeyForTestsOnly0000000000000 ops@example'
GI = 1024 ** 3
VMS = ('web-1', 'web-2', 'db-1')
ROOTS = {'web-1': 'web-1-root', 'web-2': 'web-2-root', 'db-1': 'db-1-root'}


def store_obj(srv, group, plural, name, ns=NS):
    return srv.store.peek(srv.store.rtype(group, plural), ns, name)


def user_data(name):
    # not the VM name itself: user_data is no_log, so each of its values is masked wherever it appears in the output
    data = {'hostname': 'host-' + name, 'write_files': [{'path': '/etc/motd', 'content': 'golden journey\n'}]}
    if name == 'db-1':
        # a secret in the user data: it lives in the Secret only
        data['chpasswd'] = {'expire': False, 'users': [{'name': 'dba', 'password': PASSWORD, 'type': 'text'}]}
    return data


def playbook(srv, tmp_path):
    common = {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'wait_timeout': 90}
    tasks = [
        {'name': 'roots', 'converge.virt.volume': dict(common, volumes=[
            {'name': 'web-1-root', 'clone_from': 'golden-fedora'},
            {'name': 'web-2-root', 'clone_from_datasource': 'fedora'},
            {'name': 'db-1-root', 'clone_from_datasource': NS + '/fedora', 'capacity': '4Gi'}])},
        {'name': 'guests', 'converge.virt.vm': dict(common, state='running', wait_for='address', vcpus=1, memory='64Mi', vms=[
            {'name': name, 'disks': [{'name': 'root', 'data_volume': ROOTS[name]}],
             'cloud_init': {'user_data': user_data(name), 'ssh_authorized_keys': [KEY]}} for name in VMS])},
    ]
    path = tmp_path / 'golden.yml'
    path.write_text(yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]))
    return str(path)


def inventory(srv, tmp_path):
    config = tmp_path / 'cluster.converge_kubevirt.yml'
    config.write_text(yaml.safe_dump({'plugin': 'converge.virt.kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespaces': [NS]}))
    proc = subprocess.run([os.path.join(BIN, 'ansible-inventory'), '-i', str(config), '--list', '--export'],
                          env=ansible_env({'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.kubevirt'}), capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr
    hostvars = json.loads(proc.stdout)['_meta']['hostvars']
    return dict((host, dict((k, v['__ansible_unsafe'] if isinstance(v, dict) and set(v) == {'__ansible_unsafe'} else v)
                            for k, v in hvars.items())) for host, hvars in hostvars.items())


def play_instance(srv, name, agent, addresses):
    """Write the instance status virt-handler would report: AgentConnected and the pod interface's addresses."""
    def status(vmi):
        conds = [c for c in vmi['status'].get('conditions') or [] if c.get('type') != 'AgentConnected']
        if agent:
            conds.append({'type': 'AgentConnected', 'status': 'True', 'lastProbeTime': None,
                          'lastTransitionTime': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())})
        vmi['status']['conditions'] = conds
        vmi['status']['interfaces'] = [{'name': 'default', 'interfaceName': 'eth0', 'mac': '02:00:00:0d:b1:01', 'infoSource': 'domain, guest-agent',
                                        'ipAddress': addresses[0], 'ipAddresses': list(addresses), 'queueCount': 1}] if addresses else []
    srv.store.mutate(srv.store.rtype('kubevirt.io', 'virtualmachineinstances'), NS, name, status)


def everything_but_the_secret(srv, api):
    """Every object of the namespace (and the cluster's volumes) but the cloud-init Secrets, as JSON texts."""
    texts = []
    for group, plural in (('kubevirt.io', 'virtualmachines'), ('kubevirt.io', 'virtualmachineinstances'), ('cdi.kubevirt.io', 'datavolumes'),
                          ('cdi.kubevirt.io', 'datasources'), ('', 'persistentvolumeclaims'), ('', 'pods'), ('', 'events')):
        texts.extend(json.dumps(o) for o in srv.store.items(srv.store.rtype(group, plural), NS))
    texts.extend(json.dumps(o) for o in srv.store.items(srv.store.rtype('', 'persistentvolumes')))
    core = kclient.CoreV1Api(api)
    texts.extend(json.dumps(api.sanitize_for_serialization(o)) for o in core.list_namespaced_config_map(NS).items)
    texts.extend(json.dumps(api.sanitize_for_serialization(o)) for o in core.list_namespaced_secret(NS).items
                 if not o.metadata.name.endswith('-cloudinit'))
    return texts


def test_golden_image_to_configured_guests(kube_server, kube_api, tmp_path):
    srv = kube_server
    custom = kclient.CustomObjectsApi(kube_api)
    # the golden image: a claim (here a blank DataVolume's, 2Gi) and a DataSource naming it
    ok(run_module('volume', {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': 'golden-fedora',
                             'capacity': '2Gi', 'data_volume': True, 'wait_timeout': 60}))
    custom.create_namespaced_custom_object('cdi.kubevirt.io', 'v1beta1', NS, 'datasources', {
        'apiVersion': 'cdi.kubevirt.io/v1beta1', 'kind': 'DataSource', 'metadata': {'name': 'fedora'},
        'spec': {'source': {'pvc': {'name': 'golden-fedora', 'namespace': NS}}}})
    try:
        golden = dict((plural, store_obj(srv, group, plural, name)['metadata']['resourceVersion'])
                      for group, plural, name in (('', 'persistentvolumeclaims', 'golden-fedora'), ('cdi.kubevirt.io', 'datavolumes', 'golden-fedora'),
                                                  ('cdi.kubevirt.io', 'datasources', 'fedora')))
        # a DataSource that does not exist is refused naming the field, before anything is created
        missing = run_module('volume', {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': 'stray-root',
                                        'clone_from_datasource': 'no-such-image'})
        assert missing.get('failed') and 'clone_from_datasource: DataSource no-such-image does not exist in namespace default' in missing['msg']
        assert store_obj(srv, 'cdi.kubevirt.io', 'datavolumes', 'stray-root') is None

        log = tmp_path / 'ansible.log'
        journal = tmp_path / 'journal'
        env = {'ANSIBLE_LOG_PATH': str(log), 'CONVERGE_VIRT_AUDIT_JOURNAL': str(journal)}
        started = time.monotonic()
        rc, out = run_playbook(playbook(srv, tmp_path), env=env, timeout=300)
        results = dict((task, hosts['localhost']) for task, hosts in task_results(out).items())
        assert rc == 0, json.dumps(results)[-3000:]
        elapsed = time.monotonic() - started
        print('golden journey play: %.1f s' % elapsed)

        # the clones: what the API server stored (CRD schema of CDI's DataVolume)
        ops = dict((op['volume'], op) for op in results['roots']['operations'] if op['op'] == 'create_volume')
        assert set(ops) == set(ROOTS.values()), results['roots']['operations']
        dvs = dict((name, store_obj(srv, 'cdi.kubevirt.io', 'datavolumes', name)) for name in ROOTS.values())
        assert dvs['web-1-root']['spec']['source'] == {'pvc': {'name': 'golden-fedora', 'namespace': NS}}
        for name in ('web-2-root', 'db-1-root'):
            assert dvs[name]['spec']['sourceRef'] == {'kind': 'DataSource', 'name': 'fedora', 'namespace': NS}, dvs[name]['spec']
            assert 'source' not in dvs[name]['spec'], 'CDI takes either source or sourceRef'
            assert 'CloneInProgress' in ops[name]['phases'] and ops[name]['phases'][-1] == 'Succeeded', ops[name]
        assert dvs['db-1-root']['spec']['storage']['resources']['requests']['storage'] == '4Gi'
        sizes = dict((name, store_obj(srv, '', 'persistentvolumeclaims', name)['spec']['resources']['requests']['storage']) for name in ROOTS.values())
        assert sizes == {'web-1-root': '2Gi', 'web-2-root': '2Gi', 'db-1-root': '4Gi'}, 'a clone takes its source size unless one is declared'
        # the golden claim, its DataVolume and the DataSource were only read
        assert golden == dict((plural, store_obj(srv, group, plural, name)['metadata']['resourceVersion'])
                              for group, plural, name in (('', 'persistentvolumeclaims', 'golden-fedora'),
                                                          ('cdi.kubevirt.io', 'datavolumes', 'golden-fedora'), ('cdi.kubevirt.io', 'datasources', 'fedora')))

        # the VMs the API server stored after virt-api's webhooks admitted them
        items = dict((item['name'], item) for item in results['guests']['results'])  # a fleet item carries readiness and address
        core = kclient.CoreV1Api(kube_api)
        for name in VMS:
            vm = store_obj(srv, 'kubevirt.io', 'virtualmachines', name)
            tspec = vm['spec']['template']['spec']
            volumes = dict((v['name'], v) for v in tspec['volumes'])
            assert volumes['root']['dataVolume'] == {'name': ROOTS[name]}
            assert volumes['cloudinitdisk']['cloudInitNoCloud'] == {'secretRef': {'name': name + '-cloudinit'}}
            assert {'root', 'cloudinitdisk'} <= set(d['name'] for d in tspec['domain']['devices']['disks'])
            seed = base64.b64decode(core.read_namespaced_secret(name + '-cloudinit', NS).data['userdata']).decode()
            assert seed.startswith('#cloud-config\n')
            declared = yaml.safe_load(seed.split('\n', 1)[1])
            assert declared['hostname'] == 'host-' + name and declared['ssh_authorized_keys'] == [KEY]
            assert (PASSWORD in seed) == (name == 'db-1')
            # readiness from the instance status the emulated virt-handler wrote (Running, AgentConnected, its pod address)
            vmi = store_obj(srv, 'kubevirt.io', 'virtualmachineinstances', name)
            address = vmi['status']['interfaces'][0]['ipAddress']
            assert (items[name]['readiness'], items[name]['address']) == ('address', address), items[name]

        # readiness is read from the instance status: the agent not connected yet, then a link-local and a global address
        db_args = {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': NS, 'name': 'db-1', 'state': 'running', 'vcpus': 1,
                   'memory': '64Mi', 'disks': [{'name': 'root', 'data_volume': 'db-1-root'}],
                   'cloud_init': {'user_data': user_data('db-1'), 'ssh_authorized_keys': [KEY]}}
        play_instance(srv, 'db-1', agent=False, addresses=[])
        waiting = run_module('vm', dict(db_args, wait_for='agent', wait_timeout=3))
        assert waiting.get('failed') and 'agent' in waiting['msg'], waiting.get('msg')
        assert PASSWORD not in json.dumps(waiting)
        play_instance(srv, 'db-1', agent=True, addresses=['fe80::5', '10.244.99.7'])
        agent = ok(run_module('vm', dict(db_args, wait_for='agent')))
        assert not agent['changed'] and agent['vm']['readiness'] == 'address' and agent['vm']['address'] == '10.244.99.7', agent['vm']
        play_instance(srv, 'db-1', agent=True, addresses=['fe80::5'])
        local_only = run_module('vm', dict(db_args, wait_for='address', wait_timeout=3))
        assert local_only.get('failed') and 'address' in local_only['msg'], 'a link-local address is not an address to connect to'
        play_instance(srv, 'db-1', agent=True, addresses=['fe80::5', '2001:db8:5::7', '10.244.99.8'])
        addressed = ok(run_module('vm', dict(db_args, wait_for='address')))
        assert (addressed['vm']['readiness'], addressed['vm']['address']) == ('address', '10.244.99.8'), 'IPv4 first, never link-local'

        # the kubevirt inventory: readiness and ansible_host from the same instance status
        hostvars = inventory(srv, tmp_path)
        for name in ('web-1', 'web-2'):
            assert (hostvars['default-' + name]['readiness'], hostvars['default-' + name]['ansible_host']) == ('address', items[name]['address'])
        assert (hostvars['default-db-1']['readiness'], hostvars['default-db-1']['ansible_host']) == ('address', '10.244.99.8')

        # the password is in the Secret only: not in another object, the play's output, the ansible log or the audit journal
        assert PASSWORD in base64.b64decode(core.read_namespaced_secret('db-1-cloudinit', NS).data['userdata']).decode()
        encoded = core.read_namespaced_secret('db-1-cloudinit', NS).data['userdata']
        for text in everything_but_the_secret(srv, kube_api):
            assert PASSWORD not in text and encoded not in text, text[:500]
        assert PASSWORD not in json.dumps(out)
        assert log.exists() and PASSWORD not in log.read_text()
        assert not journal.exists() or PASSWORD not in journal.read_text()
    finally:
        custom.delete_namespaced_custom_object('cdi.kubevirt.io', 'v1beta1', NS, 'datasources', 'fedora')
