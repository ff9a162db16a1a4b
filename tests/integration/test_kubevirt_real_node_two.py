"""Two real nodes in the lab (issue 37 item 1; item 2's live migration on them).

``tools.kubelab.multinode.up(directory, node_count=2)``: the lab of ``up --controllers real`` plus two real nodes
(``kubelab-node1``, ``kubelab-node2``), each with its own containerd, kubelet and KubeVirt virt-handler in PID, mount,
UTS and network namespaces of its own, joined by the lab's bridge (tools/kubelab/multinode.py says why).

Run by ``make test-real-node`` only (CONVERGE_VIRT_REAL_NODE=1; not in make test's real-node lane, REAL_NODE_LANE);
skipped elsewhere. One lab for the module, TCG guests (the project's test guest, tools/virtlab/guest.py).

1. Both nodes registered by their own kubelets, Ready, schedulable for KubeVirt (virt-handler's label and device
   plugins), each at its own IP on the lab's bridge, with its own network namespace, cgroup root and identity.
2. A VM on each node through converge.virt.vm: each VMI Running on the node it asks for, the guest's boot
   marker on that node's console log, its QEMU in that node's PID namespace; the memory of both nodes with both guests
   (RSS and PSS sums over every process of each node) is printed.
3. A live migration through converge.virt.migration (target_node): the VMI's node changes, KubeVirt's migrationState
   says completed, the source launcher pod is gone, the guest is not booted again and keeps running on the target (its
   QEMU there accumulates CPU time: the guest's tmpfs dirtier loop), and the transfer crossed the lab's network (the
   source node's veth sent more than 8 MiB; 86.7 MB measured); the same task again is no change.
4. An abort: a MigrationPolicy with bandwidthPerMigration 1Mi selects the VMI (it does not hold this transfer slow:
   5.2 MB/s measured on the source's veth, so the abort races the transfer; a completed migration fails the test).
   converge.virt.migration state=started returns with the transfer running (KubeVirt names the policy and its bandwidth
   in the VMI's migrationState), state=cancelled deletes the migration (KubeVirt's abort): the same VMI stays Running on
   the source, the migration is marked aborted or failed, QEMU runs only on the source and keeps using CPU.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import glob
import json
import os
import time

import pytest

from tests.integration.ansible_run import run_module
from tests.integration.kubevirt_real_node_fixtures import API, NS, BOOT_TIMEOUT, call, edit, get, ok, qemu_pids, vm_args, wait_for
from tests.integration.kubevirt_real_node_gate import require_real_node
from tools.kubelab import lab, multinode
from tools.virtlab import guest

require_real_node()

NODES = multinode.node_names(2)


@pytest.fixture(scope='module')
def twolab(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp('kubelab-two-nodes'))
    started = time.monotonic()
    info = multinode.up(directory, node_count=2)
    info['up_seconds'] = round(time.monotonic() - started, 1)
    state = lab._load_state(directory)  # pylint: disable=protected-access
    with open(os.path.join(directory, 'pki', 'admin.token'), encoding='utf-8') as handle:
        info['client'] = lab.Client(state['server'], state['ca_file'], handle.read().strip())
    info.update(dir=directory, state=state, node=info['nodes'][0])
    print('two nodes up in %.1f s (nodes %.1f s)' % (info['up_seconds'], info['node_seconds']))
    try:
        yield info
    finally:
        left = multinode.down(directory)
        assert left == [], left


def _on(twolab, node_name, vm_name, pinned=True):
    """The VM on ``node_name``: pinned (nodeSelector), or only preferred (node affinity), so that a migration may move
    it: KubeVirt keeps the VMI's own nodeSelector in the target pod, and a hostname there wins over the migration's
    addedNodeSelector (seen here: the target pod stayed Pending, its nodeSelector naming the source node)."""
    args = vm_args(twolab, 'running', name=vm_name)
    spec = args['spec']['template']['spec']
    del spec['nodeSelector']
    if pinned:
        spec['nodeSelector'] = {'kubernetes.io/hostname': node_name}
    else:
        spec['affinity'] = {'nodeAffinity': {'preferredDuringSchedulingIgnoredDuringExecution': [{'weight': 100, 'preference': {
            'matchExpressions': [{'key': 'kubernetes.io/hostname', 'operator': 'In', 'values': [node_name]}]}}]}}
    return args


def _console(twolab, vm_name, node_name=None):
    """Every console log line the launcher pods of ``vm_name`` wrote (on ``node_name`` or on any node)."""
    pattern = os.path.join(twolab['dir'], 'nodes', node_name or '*', 'pod-logs', '%s_virt-launcher-%s-*' % (NS, vm_name),
                           'guest-console-log', '*.log')
    text = ''
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding='utf-8', errors='replace') as handle:
            text += handle.read()
    return text


def _qemu_on(twolab, vm_name):
    """{node name: [QEMU pids of domain NS_vm_name]}, the node found by the QEMU's ancestry (multinode.node_of)."""
    state = lab._load_state(twolab['dir'])  # pylint: disable=protected-access
    found = {}
    for pid in qemu_pids(vm_name):
        found.setdefault(multinode.node_of(pid, state) or 'elsewhere', []).append(pid)
    return found


def _cpu_seconds(pid):
    with open('/proc/%d/stat' % pid, encoding='utf-8') as handle:
        fields = handle.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def test_two_nodes_ready_each_in_its_own_namespaces(twolab):
    client = twolab['client']
    own_net = os.readlink('/proc/self/ns/net')
    nets, ips, roots = set(), set(), set()
    for description in twolab['nodes']:
        code, body = client.request('GET', '/api/v1/nodes/' + description['name'])
        assert code == 200, (description['name'], code)
        conditions = {c['type']: c['status'] for c in body['status']['conditions']}
        assert conditions.get('Ready') == 'True', conditions
        assert body['metadata']['labels'].get('kubevirt.io/schedulable') == 'true', body['metadata']['labels']
        assert int(body['status']['allocatable'].get('devices.kubevirt.io/kvm', '0').rstrip('k') or 0) > 0, body['status']['allocatable']
        assert not body['spec'].get('unschedulable') and not body['spec'].get('taints'), body['spec']
        addresses = {a['type']: a['address'] for a in body['status']['addresses']}
        assert addresses['InternalIP'] == description['ip'], addresses
        # the kubelet's heartbeat Lease is renewed by this node's kubelet
        code, lease = client.request('GET', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/' + description['name'])
        assert code == 200 and lease['spec']['holderIdentity'] == description['name'], lease
        # the node's processes run in its own network namespace (not the lab's, not the other node's)
        net = os.readlink('/proc/%d/ns/net' % description['init_pid'])
        assert net != own_net
        nets.add(net)
        ips.add(description['ip'])
        roots.add(description['cgroup_root'])
        # the virt-handler pod virt-api finds it by carries the node's IP (hostNetwork: the kubelet's report)
        code, pod = client.request('GET', '/api/v1/namespaces/kubevirt/pods/virt-handler-' + description['name'])
        assert code == 200 and pod['status'].get('podIP') == description['ip'], pod.get('status')
    assert len(nets) == len(ips) == len(roots) == 2, (nets, ips, roots)
    print(json.dumps({'memory_idle': multinode.memory(lab._load_state(twolab['dir']))}))  # pylint: disable=protected-access


def test_a_vm_on_each_node(twolab):
    for index, node_name in enumerate(NODES, 1):
        # vm1 (migrated by the next test) only prefers its node; vm2 is pinned to its
        result = ok(run_module('vm', _on(twolab, node_name, 'vm%d' % index, pinned=index != 1)))
        assert result['changed'] is True
    for index, node_name in enumerate(NODES, 1):
        name = 'vm%d' % index
        vmi = wait_for('%s Running' % name, lambda n=name: (get(twolab, API + 'virtualmachineinstances/' + n) or {})
                       .get('status', {}).get('phase') == 'Running' and get(twolab, API + 'virtualmachineinstances/' + n),
                       timeout=BOOT_TIMEOUT)
        assert vmi['status']['nodeName'] == node_name, vmi['status'].get('nodeName')
        wait_for('%s boot marker on %s' % (name, node_name), lambda n=name, node=node_name: guest.READY_MARKER in _console(twolab, n, node),
                 timeout=BOOT_TIMEOUT, interval=2)
        assert guest.READY_MARKER not in _console(twolab, name, [n for n in NODES if n != node_name][0])
        assert list(_qemu_on(twolab, name)) == [node_name], _qemu_on(twolab, name)
    print(json.dumps({'memory_two_guests': multinode.memory(lab._load_state(twolab['dir']))}))  # pylint: disable=protected-access


def test_live_migration_moves_the_running_guest_to_the_other_node(twolab):
    name, source, target = 'vm1', NODES[0], NODES[1]
    vmi = get(twolab, API + 'virtualmachineinstances/' + name)
    assert vmi and vmi['status']['nodeName'] == source, 'test_a_vm_on_each_node runs first'
    uid = vmi['metadata']['uid']
    assert guest.READY_MARKER in _console(twolab, name, source)
    sent_before = multinode.veth_bytes(twolab['state'], source)[0]
    got_before = multinode.veth_bytes(twolab['state'], target)[1]
    started = time.monotonic()
    result = run_module('migration', dict(backend='kubevirt', kubeconfig=twolab['kubeconfig'], namespace=NS, name=name,  # pylint: disable=use-dict-literal
                                          target_node=target, state='finished', wait_timeout=600))
    seconds = round(time.monotonic() - started, 1)
    sent = multinode.veth_bytes(twolab['state'], source)[0] - sent_before
    got = multinode.veth_bytes(twolab['state'], target)[1] - got_before
    print(json.dumps({'migration_seconds': seconds, 'source_sent_bytes': sent, 'target_received_bytes': got, 'result': {
        k: result.get(k) for k in ('changed', 'phase', 'msg', 'node', 'source_node', 'target_node')}}))
    ok(result)
    assert result['changed'] is True
    vmi = get(twolab, API + 'virtualmachineinstances/' + name)
    assert vmi['metadata']['uid'] == uid, 'the same VMI (not a restart)'
    assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == target, vmi['status']
    state = vmi['status']['migrationState']
    assert state.get('completed') is True and not state.get('failed'), state
    assert state['sourceNode'] == source and state['targetNode'] == target, state

    def launchers_on_source():
        code, pods = twolab['client'].request('GET', '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%2Fcreated-by%%3D%s' % (NS, uid))
        assert code == 200, pods
        return [p['metadata']['name'] for p in pods['items']
                if p['spec'].get('nodeName') == source and p['status'].get('phase') in ('Pending', 'Running')]
    # the source launcher pod is gone (or ended)
    wait_for('the source launcher pod gone', lambda: not launchers_on_source(), timeout=120)
    # QEMU runs on the target only, and the guest runs there (its dirtier loop accumulates CPU time)
    qemu = wait_for('QEMU on the target only', lambda: _qemu_on(twolab, name) if list(_qemu_on(twolab, name)) == [target] else None,
                    timeout=120)
    pid = qemu[target][0]
    cpu = _cpu_seconds(pid)
    time.sleep(10)
    assert _cpu_seconds(pid) - cpu > 0.5, 'the guest on the target does not run'
    # not booted again: the target's console (the target launcher's guest-console-log) never shows the boot marker
    assert guest.READY_MARKER not in _console(twolab, name, target), _console(twolab, name, target)[-2000:]
    # the transfer crossed the lab's bridge: at least the guest's tmpfs (2 MiB dirtied every 0.1 s) plus its kernel
    assert sent > 8 * 2 ** 20 and got > 8 * 2 ** 20, (sent, got)
    # the VM runs where it was asked to: the same task again is no change
    again = ok(run_module('migration', dict(backend='kubevirt', kubeconfig=twolab['kubeconfig'], namespace=NS, name=name,  # pylint: disable=use-dict-literal
                                            target_node=target, state='finished', wait_timeout=600)))
    assert again['changed'] is False, again
    assert get(twolab, API + 'virtualmachineinstances/' + name)['status']['nodeName'] == target
    print(json.dumps({'memory_after_migration': multinode.memory(lab._load_state(twolab['dir']))}))  # pylint: disable=protected-access


def _migrations(twolab, name):
    return call(twolab, 'GET', API + 'virtualmachineinstancemigrations?labelSelector=kubevirt.io%%2Fvmi-name%%3D%s' % name)['items']


def _state_if(twolab, name, condition):
    """The VMI's migrationState when ``condition(state)`` holds, else None."""
    state = get(twolab, API + 'virtualmachineinstances/' + name)['status'].get('migrationState') or {}
    return state if condition(state) else None


def test_an_aborted_migration_leaves_the_guest_on_the_source(twolab):
    name, source, target = 'vm1', NODES[1], NODES[0]
    vmi = get(twolab, API + 'virtualmachineinstances/' + name)
    assert vmi and vmi['status']['nodeName'] == source, 'the migration test runs first'
    uid = vmi['metadata']['uid']
    before = {m['metadata']['name'] for m in _migrations(twolab, name)}
    call(twolab, 'POST', '/apis/migrations.kubevirt.io/v1alpha1/migrationpolicies', {
        'apiVersion': 'migrations.kubevirt.io/v1alpha1', 'kind': 'MigrationPolicy', 'metadata': {'name': 'slow'},
        'spec': {'bandwidthPerMigration': '1Mi', 'selectors': {'virtualMachineInstanceSelector': {'converge-test/slow': 'true'}}}})
    edit(twolab, API + 'virtualmachineinstances/' + name, lambda o: o['metadata'].setdefault('labels', {}).update({'converge-test/slow': 'true'}))
    args = {'backend': 'kubevirt', 'kubeconfig': twolab['kubeconfig'], 'namespace': NS, 'name': name, 'target_node': target,
            'wait_timeout': 600}
    started = ok(run_module('migration', dict(args, state='started')))
    print(json.dumps({'started': {k: started.get(k) for k in ('changed', 'phase', 'msg')}}))
    assert started['changed'] is True
    new = wait_for('the new migration', lambda: [m for m in _migrations(twolab, name) if m['metadata']['name'] not in before])[0]
    state = wait_for('the transfer running under the policy', lambda: _state_if(
        twolab, name, lambda st: st.get('migrationUid') == new['metadata']['uid'] and st.get('startTimestamp')), timeout=300)
    assert state.get('migrationPolicyName') == 'slow', state
    assert (state.get('migrationConfiguration') or {}).get('bandwidthPerMigration') == '1Mi', state
    # what the source node sends meanwhile, printed, not asserted: with this policy (1 MiB/s) the source's veth still
    # carried 5.2 MB/s over 10 s (run of 2026-11-29 05:22-05:31), so the limit does not hold the transfer slow here
    sent_before, clock = multinode.veth_bytes(twolab['state'], source)[0], time.monotonic()
    time.sleep(2)
    print(json.dumps({'source_bytes_per_second_before_the_abort': round(
        (multinode.veth_bytes(twolab['state'], source)[0] - sent_before) / (time.monotonic() - clock))}))
    assert not _state_if(twolab, name, lambda st: st.get('completed')), 'the migration ended before the abort'
    cancelled = ok(run_module('migration', dict(args, state='cancelled')))
    print(json.dumps({'cancelled': {k: cancelled.get(k) for k in ('changed', 'phase', 'msg')}}))
    assert cancelled['changed'] is True
    assert call(twolab, 'GET', API + 'virtualmachineinstancemigrations/' + new['metadata']['name'], expect=(200, 404)) is not None
    vmi = get(twolab, API + 'virtualmachineinstances/' + name)
    assert vmi['metadata']['uid'] == uid and vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == source, vmi['status']
    state = wait_for('KubeVirt marking the migration ended', lambda: _state_if(twolab, name, lambda st: st.get('endTimestamp')), timeout=120)
    print(json.dumps({'migrationState_after_abort': {k: state.get(k) for k in ('abortStatus', 'failed', 'completed', 'sourceNode', 'targetNode')}}))
    assert not state.get('completed') and (state.get('failed') or state.get('abortStatus') == 'Succeeded'), state
    qemu = wait_for('QEMU on the source only', lambda: _qemu_on(twolab, name) if list(_qemu_on(twolab, name)) == [source] else None, timeout=120)
    cpu = _cpu_seconds(qemu[source][0])
    time.sleep(10)
    assert _cpu_seconds(qemu[source][0]) - cpu > 0.5, 'the guest on the source does not run'
    assert get(twolab, API + 'virtualmachineinstances/' + name)['status']['nodeName'] == source
