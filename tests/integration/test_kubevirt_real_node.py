"""tools.kubelab `up --nodes real`: a real node (containerd + kubelet) in the lab (issue 34).

Run by make test's ``real-node-run`` and by ``make test-real-node`` (CONVERGE_VIRT_REAL_NODE=1; skipped elsewhere).
Needs ``make kube`` and ``make kube-node`` (kubelet, the node's images; Debian's containerd, runc and CNI plugins;
the file is skipped, naming ``make kube-node``, when those are not built);
run inside ``python -m tools.virtlab netns -- ...`` like every lab test (the node refuses the machine's own network
namespace). One lab for the module.

What only a real node shows: the kubelet registers the Node with its own identity and reports it Ready (the CRI
runtime and the CNI network ready), a pod's sandbox and container run under containerd from the locally imported
images with an address of the node's bridge, an image that is not in the node's store is never pulled
(imagePullPolicy Never: ErrImageNeverPull), the machine's kernel tunables stay as they were, and ``down`` removes the
node's bridge and cgroups.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import ipaddress
import json
import os
import subprocess

import pytest

from tests.integration.kubevirt_real_node_fixtures import lab_up, wait_for
from tests.integration.kubevirt_real_node_gate import require_real_node
from tools.kubelab import lab, node

require_real_node()

NS = 'default'
PODS = '/api/v1/namespaces/%s/pods' % NS
TUNABLES = sorted(node.KERNEL_TUNABLES)


def _read_tunables():
    values = {}
    for name in TUNABLES:
        with open('/proc/sys/' + name, encoding='utf-8') as handle:
            values[name] = handle.read().strip()
    return values


@pytest.fixture(scope='module')
def real_node(tmp_path_factory):
    before = _read_tunables()   # read before the node starts: the test below compares
    with lab_up(tmp_path_factory, 'kubelab-node', nodes='real') as info:
        info['tunables_before'] = before
        yield info


def _wait(what, check, timeout=120):
    return wait_for(what, check, timeout=timeout)


def _count(quantity):
    """A device count as the API server writes it ('1k' = 1000)."""
    return int(quantity[:-1]) * 1000 if quantity.endswith('k') else int(quantity)


def _pod(name, image, policy='Never'):
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': name, 'namespace': NS},
            'spec': {'nodeName': node.NODE_NAME, 'restartPolicy': 'Never', 'terminationGracePeriodSeconds': 1,
                     'containers': [{'name': 'main', 'image': image, 'imagePullPolicy': policy}]}}


def test_the_node_registers_with_its_own_identity_and_is_ready(real_node):
    code, body = real_node['client'].request('GET', '/api/v1/nodes/' + node.NODE_NAME)
    assert code == 200, body
    conditions = {c['type']: c['status'] for c in body['status']['conditions']}
    assert conditions.get('Ready') == 'True', body['status']['conditions']
    info = body['status']['nodeInfo']
    assert info['kubeletVersion'] == real_node['versions']['kubernetes']
    assert info['containerRuntimeVersion'].startswith('containerd://1.6'), info
    addresses = {a['type']: a['address'] for a in body['status']['addresses']}
    assert addresses['InternalIP'] == real_node['node']['ip']
    # the kubelet's heartbeat: its Lease (written as system:node:<name>; the first try comes before the Node exists,
    # the kubelet's retry about 10 s later creates it)
    path = '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/' + node.NODE_NAME

    def read_lease():
        answer = real_node['client'].request('GET', path)
        return answer[1] if answer[0] == 200 else None

    lease = _wait('the node lease', read_lease, timeout=60)
    assert lease['spec']['holderIdentity'] == node.NODE_NAME, lease
    renewed = lease['spec']['renewTime']
    assert _wait('the lease renewed', lambda: real_node['client'].request('GET', path)[1]['spec']['renewTime'] != renewed, timeout=60)


def test_a_pod_runs_under_containerd_from_the_local_pause_image(real_node):
    client = real_node['client']
    image = real_node['node']['images']['pause']
    code, body = client.request('POST', PODS, _pod('pause', image))
    assert code == 201, body

    def running():
        _code, pod = client.request('GET', PODS + '/pause')
        statuses = pod.get('status', {}).get('containerStatuses') or []
        return pod if statuses and 'running' in statuses[0].get('state', {}) and pod['status'].get('podIP') else None
    pod = _wait('the pause pod Running', running)
    status = pod['status']['containerStatuses'][0]
    assert status['containerID'].startswith('containerd://'), status
    assert status['image'] == image or status['imageID'], status
    assert ipaddress.ip_address(pod['status']['podIP']) in ipaddress.ip_network(real_node['node']['network']), pod['status']
    assert pod['status']['podIP'] != real_node['node']['ip']
    # the container is a process of the node's containerd, seen through the CRI: list it with ctr inside the node
    ctr = ['ctr', '--address', node.SOCKET, '-n', 'k8s.io', 'containers', 'list', '-q']
    out = subprocess.run(node.nodeexec_argv(real_node['node']['init_pid'], ctr),
                         capture_output=True, text=True, check=True).stdout.split()
    assert status['containerID'].split('://', 1)[1] in out
    code, body = client.request('DELETE', PODS + '/pause')
    assert code == 200, body
    _wait('the pause pod gone', lambda: client.request('GET', PODS + '/pause')[0] == 404)


def test_an_image_not_in_the_node_store_is_never_pulled(real_node):
    client = real_node['client']
    code, body = client.request('POST', PODS, _pod('absent', 'kubelab.local/absent:none'))
    assert code == 201, body

    seen = []

    def never_pulled():
        _code, pod = client.request('GET', PODS + '/absent')
        statuses = pod.get('status', {}).get('containerStatuses') or []
        reason = statuses[0].get('state', {}).get('waiting', {}).get('reason') if statuses else None
        seen.append(reason)
        return reason == 'ErrImageNeverPull'
    _wait('the container waiting with ErrImageNeverPull', never_pulled, timeout=60)
    assert 'running' not in str(seen)
    client.request('DELETE', PODS + '/absent')


def test_the_machine_kernel_tunables_are_untouched(real_node):
    # kubelet ran with protectKernelDefaults against the node's view of these files: it changed nothing of the machine's
    assert _read_tunables() == real_node['tunables_before']
    with open(os.path.join(real_node['dir'], 'logs', 'kubelet.log'), encoding='utf-8', errors='replace') as handle:
        log = handle.read()
    assert 'invalid kernel flag' not in log


def test_down_removes_the_node_bridge_and_cgroups(tmp_path_factory, real_node):  # pylint: disable=unused-argument
    # a second lab of its own (the module's keeps running for the tests above; this one ends here)
    directory = str(tmp_path_factory.mktemp('kubelab-node-down'))
    lab.up(directory, nodes='real')
    state = lab._load_state(directory)  # pylint: disable=protected-access
    bridge, cgroup_root = state['node']['bridge'], state['node']['cgroup_root']
    assert bridge != real_node['node']['bridge']
    assert os.path.isdir('/sys/fs/cgroup/memory' + cgroup_root)
    links = json.loads(subprocess.run(['ip', '-j', 'link', 'show'], capture_output=True, text=True, check=True).stdout)
    assert bridge in {link['ifname'] for link in links}
    lab.down(directory)
    links = json.loads(subprocess.run(['ip', '-j', 'link', 'show'], capture_output=True, text=True, check=True).stdout)
    assert bridge not in {link['ifname'] for link in links}
    assert not os.path.exists('/sys/fs/cgroup/memory' + cgroup_root)
    # the module's node is still there
    assert real_node['client'].request('GET', '/api/v1/nodes/' + node.NODE_NAME)[0] == 200


def test_kubevirt_virt_handler_makes_the_node_schedulable_for_vms(tmp_path_factory):
    # a lab with KubeVirt's own virt-api and virt-controller: `--nodes real` then also runs KubeVirt's own virt-handler
    # inside the node (milestone M4 of issue 34); its device plugins register with the real kubelet
    with lab_up(tmp_path_factory, 'kubelab-node-handler', controllers='real', nodes='real') as handler_lab:
        client, directory = handler_lab['client'], handler_lab['dir']
        state = lab._load_state(directory)  # pylint: disable=protected-access
        code, body = client.request('GET', '/api/v1/nodes/' + node.NODE_NAME)
        assert code == 200, body
        assert body['metadata']['labels'].get('kubevirt.io/schedulable') == 'true', body['metadata']['labels']
        allocatable = body['status']['allocatable']
        assert _count(allocatable['devices.kubevirt.io/kvm']) > 0 and _count(allocatable['devices.kubevirt.io/tun']) > 0, allocatable
        # virt-handler's node labeller (from the capabilities node-labeller.sh wrote with the launcher image) labels the CPU
        assert any(key.startswith('host-model-cpu.node.kubevirt.io/') for key in body['metadata']['labels']), body['metadata']['labels']
        code, cr = client.request('GET', '/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt')
        assert cr['spec']['configuration']['developerConfiguration']['useEmulation'] is True
        code, pod = client.request('GET', '/api/v1/namespaces/kubevirt/pods/' + node.HANDLER_POD)
        assert code == 200 and pod['status']['phase'] == 'Running' and pod['status']['podIP'] == state['node']['ip'], pod.get('status')
        # the process is KubeVirt's virt-handler, running in the node's PID namespace
        record = [p for p in state['processes'] if p['role'] == 'node-virt-handler'][-1]
        assert lab._is_ours(record, state['boot_id'])  # pylint: disable=protected-access
        with open(record['log'], encoding='utf-8', errors='replace') as handle:
            assert '"component":"virt-handler"' in handle.read()
