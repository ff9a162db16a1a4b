"""converge.virt.kubevirt inventory plugin against the Kubernetes API test server.

Words agree with vm_info (backend kubevirt) and with KubeVirt's printableStatus, readiness and ansible_host with
the vm module's vm.readiness / vm.address,
groups by state/namespace/node, label selectors, Jinja in a label or a host
name is never evaluated (issue 24; `make matrix` runs this file on every
ansible-core the collection claims), the cache serves a second run, an API
server that went away costs one warning and its cached VMs are reported
Unknown, a cache directory others can write is refused.
"""
# pylint: disable=redefined-outer-name,unused-import

import json
import os
import re
import subprocess

import yaml

from tests.integration.ansible_run import BIN, ansible_env, flushed_hostvars, run_module, run_playbook, task_results, write_name_probe_play
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

INJECTED = "{{ lookup('pipe', 'id') }}"
# evaluated, it creates the file $CONVERGE_TEST_MARKER on the controller
HOSTILE = "{{ lookup('pipe', 'touch $CONVERGE_TEST_MARKER') }}"
DEFAULT_VARS = ('vm_state', 'power_state', 'task_state', 'status', 'phase', 'message', 'printable_status', 'vcpus', 'memory', 'node',
                'kubevirt_namespace', 'uid')


def _vm(srv, name, state, namespace='default', labels=None, **extra):
    args = dict(backend='kubevirt', kubeconfig=srv.kubeconfig_path, namespace=namespace, wait_timeout=60, name=name, vcpus=1,
                memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}], state=state, **extra)
    if labels:
        args['labels'] = labels
    result = run_module('vm', args)
    assert not result.get('failed'), result
    return result['vm']


def _inventory(path, env=None):
    cmd = [os.path.join(BIN, 'ansible-inventory'), '-i', path, '--list', '--export']
    proc = subprocess.run(cmd, env=ansible_env(dict(env or {}, ANSIBLE_INVENTORY_ENABLED='converge.virt.kubevirt')), capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return _plain(json.loads(proc.stdout)), proc.stderr


def _plain(value):
    if isinstance(value, dict):
        if set(value) == {'__ansible_unsafe'}:
            return value['__ansible_unsafe']
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _config(tmp_path, srv, **extra):
    config = {'plugin': 'converge.virt.kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespaces': ['default', 'demo']}
    config.update(extra)
    path = tmp_path / 'cluster.converge_kubevirt.yml'
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_words_groups_selectors_and_injection(kube_server, tmp_path):
    srv = kube_server
    web_vm = _vm(srv, 'web', 'running', labels={'app': 'web'}, wait_for='address')
    # a label holding Jinja, written by someone else (not through a module, whose arguments ansible templates); a real
    # API server refuses it (422: a label value must match the label regex), only the emulator stores it
    note = INJECTED if not srv.real else 'plain'
    from kubernetes import client as k8s
    k8s.CustomObjectsApi(srv.api_client()).patch_namespaced_custom_object(
        'kubevirt.io', 'v1', 'default', 'virtualmachines', 'web', {'metadata': {'annotations': {}, 'labels': {'note': note}}})
    _vm(srv, 'db', 'stopped', labels={'app': 'db'})
    _vm(srv, 'batch', 'running', namespace='demo', labels={'app': 'batch'})
    data, stderr = _inventory(_config(tmp_path, srv, host_vars=list(DEFAULT_VARS) + ['labels', 'kubevirt_name']))
    hostvars = data['_meta']['hostvars']
    assert 'reserved name' not in stderr, stderr
    assert hostvars['demo-batch']['kubevirt_namespace'] == 'demo' and hostvars['demo-batch']['kubevirt_name'] == 'batch'
    assert 'namespace' not in hostvars['demo-batch'], "a host variable 'namespace' hides Jinja's namespace()"
    assert set(hostvars) == {'default-web', 'default-db', 'demo-batch'}
    info = run_module('vm_info', {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'namespace': 'default'})
    for vm in info['vms']:
        host = hostvars['default-' + vm['name']]
        for word in ('vm_state', 'power_state', 'task_state', 'status', 'printable_status', 'phase'):
            assert host[word] == vm[word], (vm['name'], word)
    assert hostvars['default-web']['status'] == 'Running' == hostvars['default-web']['printable_status']
    assert hostvars['default-db']['vm_state'] == 'STOPPED'
    # readiness and ansible_host: what the vm module reported (wait_for: address) for the running VM; none for a stopped one
    assert (hostvars['default-web']['readiness'], hostvars['default-web']['ansible_host']) == ('address', web_vm['address']), web_vm
    assert web_vm['readiness'] == 'address' and not {'readiness', 'ansible_host'} & set(hostvars['default-db']), hostvars['default-db']
    assert hostvars['default-web']['labels']['note'] == note
    assert 'default-web' in data['status_running']['hosts'] and 'demo-batch' in data['namespace_demo']['hosts']
    assert 'default-db' in data['vm_state_stopped']['hosts']
    selected, _stderr = _inventory(_config(tmp_path, srv, label_selectors=['app in (web,batch)']))
    assert set(selected['_meta']['hostvars']) == {'default-web', 'demo-batch'}
    # the default host variables; labels and the others only when asked for
    web = selected['_meta']['hostvars']['default-web']
    assert set(DEFAULT_VARS) <= set(web) and not set(web) & {'labels', 'kubevirt_name', 'task_id', 'run_strategy', 'ready'}
    assert web['uid'] == hostvars['default-web']['uid'] and web['node'] == hostvars['default-web']['node']


def test_cache_and_unreachable_server(kube_server, tmp_path):
    srv = kube_server
    _vm(srv, 'cached', 'running')
    path = _config(tmp_path, srv, namespaces=['default'], cache=True, cache_plugin='ansible.builtin.jsonfile',
                   cache_connection=str(tmp_path / 'cache'), cache_timeout=3600)
    first, _stderr = _inventory(path)
    assert first['_meta']['hostvars']['default-cached']['status'] == 'Running'
    _vm(srv, 'later', 'stopped')
    second, _stderr = _inventory(path)
    assert 'default-later' not in second['_meta']['hostvars'], 'the second run must come from the cache'
    srv.stop()
    third, stderr = flushed_hostvars(path, 'converge.virt.kubevirt')
    assert stderr.count('converge.virt.kubevirt: cannot') == 1, stderr
    gone = third['default-cached']
    assert gone['status'] == 'Unknown' and gone['stale'] is True


# the emulator (kube_emulator): a real API server refuses Jinja in a label value (422, labels must match the label
# regex), so this injection can only be put in front of the inventory by a permissive API
def test_jinja_in_a_host_name_or_a_label_never_runs_on_the_controller(kube_emulator, tmp_path):
    """Issue 24: inventory_hostname, compose and keyed_groups on the host name and on a label, and a connection with no ansible_host.

    The API server refuses template markers in VM names and namespaces (RFC 1123 names); a host name gets them only
    through host_format here, which is not a template either. A real API server refuses them in label values too; the
    test server does not, so a label stands for any free-text value (a condition message) used in compose or keyed_groups.
    """
    srv = kube_emulator
    from kubernetes import client as k8s  # pylint: disable=import-outside-toplevel
    _vm(srv, 'plain', 'stopped')
    k8s.CustomObjectsApi(srv.api_client()).patch_namespaced_custom_object(
        'kubevirt.io', 'v1', 'default', 'virtualmachines', 'plain', {'metadata': {'labels': {'note': HOSTILE}}})
    name = 'default-plain-' + HOSTILE
    marker = tmp_path / 'evaluated'
    path = _config(tmp_path, srv, namespaces=['default'], host_format='{namespace}-{name}-' + HOSTILE, host_vars=list(DEFAULT_VARS) + ['labels'],
                   compose={'composed_name': 'inventory_hostname', 'composed_note': 'labels.note'},
                   keyed_groups=[{'key': 'inventory_hostname', 'prefix': 'byname'}, {'key': 'labels.note', 'prefix': 'bynote'}],
                   cache=True, cache_plugin='ansible.builtin.jsonfile', cache_connection=str(tmp_path / 'cache'), cache_timeout=3600)
    play = write_name_probe_play(str(tmp_path / 'hostile.yml'))
    env = {'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.kubevirt', 'CONVERGE_TEST_MARKER': str(marker)}
    for run in ('read from the API', 'served from the cache'):
        _rc, out = run_playbook(play, env=env, inventory=path)
        assert not marker.exists(), '%s: a host name or label was evaluated on the controller' % run
        tasks = task_results(out)
        shown, composed, groups = tasks['templates'][name]['msg'].split('|')
        assert shown == name and composed == name, (run, shown, composed)
        assert sorted(g for g in groups.split(',') if g.startswith('by')) == [re.sub(r'\W', '_', 'byname_' + name), re.sub(r'\W', '_', 'bynote_' + HOSTILE)]
        assert tasks['connects'][name].get('unreachable'), (run, 'the connection to the name was tried', tasks['connects'])
    data, _stderr = _inventory(path, env={'CONVERGE_TEST_MARKER': str(marker)})
    assert data['_meta']['hostvars'][name]['composed_note'] == HOSTILE and 'ansible_host' not in data['_meta']['hostvars'][name]
    assert not marker.exists()


def test_a_cache_directory_others_can_write_is_refused(kube_server, tmp_path):
    """Issue 24: a cache directory another local user can write (as /tmp/converge-kubevirt-cache made by them first) is refused."""
    srv = kube_server
    _vm(srv, 'cached', 'stopped')
    shared = tmp_path / 'shared-cache'
    shared.mkdir()
    shared.chmod(0o777)
    path = _config(tmp_path, srv, namespaces=['default'], cache=True, cache_plugin='ansible.builtin.jsonfile', cache_connection=str(shared))
    cmd = [os.path.join(BIN, 'ansible-inventory'), '-i', path, '--list']
    proc = subprocess.run(cmd, env=ansible_env({'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.kubevirt', 'ANSIBLE_INVENTORY_UNPARSED_FAILED': '1'}),
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode != 0, proc.stdout
    message = ''.join(proc.stderr.split())       # ansible wraps warnings at any character
    for part in ('converge.virt.kubevirt: cache_connection: refusing the inventory cache directory %s' % shared, 'writable by others (mode 0777)'):
        assert ''.join(part.split()) in message, proc.stderr
    assert not os.listdir(str(shared)), 'nothing was read from or written to the refused directory'
    shared.chmod(0o700)
    data, _stderr = _inventory(path)
    assert 'default-cached' in data['_meta']['hostvars']
