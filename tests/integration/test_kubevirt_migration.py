"""converge.virt.migration, migration_info and host with backend kubevirt, through the ansible CLI, against the test API server.

The server (tests/kubeapi) moves VirtualMachineInstanceMigration objects
through KubeVirt's phases, aborts one when it is deleted, fails one whose
target pod fails or stays unschedulable past its pending timeout, admits one
migration per instance, and never schedules onto a cordoned or tainted node.
The collection derives its phases and reasons from those objects with the
shared phase machine; these tests check the words it reports and what it
leaves in the cluster (the VMI's node, the task record in the VM's
annotations, the migration objects).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import argparse
import functools
import json
import os
import signal
import socket

from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

NS = 'default'
TASK_STATE = 'converge.virt/task-state'
VM_STATE = 'converge.virt/vm-state'
FULL = ['Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Succeeded']


kv = functools.partial(kubevirt_args, {'namespace': NS})


def rtype(srv, plural):
    group = '' if plural in ('nodes', 'persistentvolumeclaims') else 'kubevirt.io'
    return srv.store.rtype(group, plural)


def vm_obj(srv, name, ns=NS):
    return srv.store.peek(rtype(srv, 'virtualmachines'), ns, name)


def vmi_obj(srv, name, ns=NS):
    return srv.store.peek(rtype(srv, 'virtualmachineinstances'), ns, name)


def vmims(srv, name=None, ns=NS):
    items = srv.store.items(rtype(srv, 'virtualmachineinstancemigrations'), ns)
    return [m for m in items if name is None or m['spec']['vmiName'] == name]


def node_of(srv, name, ns=NS):
    return vmi_obj(srv, name, ns)['status']['nodeName']


def annotations(srv, name, ns=NS):
    return vm_obj(srv, name, ns)['metadata'].get('annotations') or {}


def failed(result):
    assert result.get('failed') and result['_rc'] != 0, result
    return result


def running_vm(srv, name, ns=NS):
    args = kv(srv, name=name, namespace=ns, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}],
              state='running', wait_timeout=60)
    result = ok(run_module('vm', args))
    assert result['vm']['status'] == 'Running'
    return result['vm']['node']


def other_node(srv, *nodes):
    return sorted(set(srv.controller.node_names) - set(nodes))[0]


def task_states_seen(srv, name):
    """Every task-state annotation value the VM had while recording (None = idle)."""
    seen = []
    key = rtype(srv, 'virtualmachines').key

    def listen(ev):
        if ev.key == key and ev.obj['metadata']['name'] == name:
            value = (ev.obj['metadata'].get('annotations') or {}).get(TASK_STATE)
            if not seen or seen[-1] != value:
                seen.append(value)
    if srv.real:
        srv.watch('kubevirt.io', 'virtualmachines', 'default', lambda kind, obj: listen(argparse.Namespace(key=key, obj=obj)))
    else:
        srv.store.listeners.append(listen)
    return seen


def test_migration_to_a_node_with_phases_check_mode_and_idempotence(kube_server):
    srv = kube_server
    source = running_vm(srv, 'mv')
    target = other_node(srv, source)
    planned = ok(run_module('migration', kv(srv, name='mv', target_node=target), check=True))
    assert planned['changed'] and planned['phases'] == FULL
    assert vmims(srv, 'mv') == [] and node_of(srv, 'mv') == source

    seen = task_states_seen(srv, 'mv')
    moved = ok(run_module('migration', kv(srv, name='mv', target_node=target)))
    assert moved['changed'] and moved['phase'] == 'Succeeded' and moved['phases'] == FULL, moved
    assert moved['kubevirt_phase'] == 'Succeeded' and moved['reason'] is None
    assert moved['source_node'] == source and moved['target_node'] == target and moved['node'] == target and moved['on_target']
    assert node_of(srv, 'mv') == target
    assert 'MIGRATING' in seen and seen[-1] is None, seen
    assert moved['vm']['vm_state'] == 'ACTIVE' and moved['vm']['task_state'] is None
    assert annotations(srv, 'mv')[VM_STATE] == 'ACTIVE' and TASK_STATE not in annotations(srv, 'mv')
    created = vmims(srv, 'mv')
    assert len(created) == 1 and created[0]['metadata']['name'] == moved['migration']
    assert created[0]['spec']['addedNodeSelector'] == {'kubernetes.io/hostname': target}

    again = ok(run_module('migration', kv(srv, name='mv', target_node=target)))
    assert not again['changed'] and again['on_target'] and len(vmims(srv, 'mv')) == 1
    assert not ok(run_module('migration', kv(srv, name='mv', target_node=target), check=True))['changed']
    # source_node: a VM that is not on that node is no change either
    assert not ok(run_module('migration', kv(srv, name='mv', source_node=source)))['changed']
    # without a target KubeVirt picks a node, never the one the VM is on
    anywhere = ok(run_module('migration', kv(srv, name='mv')))
    assert anywhere['changed'] and anywhere['node'] not in (None, target) and node_of(srv, 'mv') == anywhere['node']
    info = ok(run_module('migration_info', kv(srv, name=['mv'])))['migrations']
    assert len(info) == 1 and info[0]['in_flight'] is None
    assert [m['outcome'] for m in info[0]['recent']] == ['succeeded', 'succeeded']
    assert info[0]['last']['phases'] == FULL and info[0]['last']['source'] == target


def test_started_in_flight_info_one_per_vm_then_cancelled(kube_server):
    srv = kube_server
    source = running_vm(srv, 'fly')
    srv.faults.inject('migration_no_converge', NS, 'fly')
    started = ok(run_module('migration', kv(srv, name='fly', state='started')))
    assert started['changed'] and started['phase'] not in ('Succeeded', 'Failed') and started['migration']
    srv.controller.wait_for(lambda: (vmims(srv, 'fly')[0].get('status') or {}).get('phase') == 'Running', timeout=30)
    info = ok(run_module('migration_info', kv(srv, name=['fly'])))['migrations'][0]
    assert info['in_flight']['phase'] == 'Running' and info['in_flight']['id'] == started['migration']
    assert info['task_state'] == 'MIGRATING' and info['status'] == 'Migrating' and info['vm_state'] == 'ACTIVE'
    assert info['in_flight']['source'] == source and info['in_flight']['started_at']
    # a second run attaches to the migration in flight instead of creating another one
    attached = ok(run_module('migration', kv(srv, name='fly', state='started')))
    assert attached['migration'] == started['migration'] and len(vmims(srv, 'fly')) == 1
    assert any('attached' in n for n in attached['notes'])
    # cancelled in check mode changes nothing
    assert ok(run_module('migration', kv(srv, name='fly', state='cancelled'), check=True))['changed']
    assert vmims(srv, 'fly')[0]['status']['phase'] == 'Running' and 'deletionTimestamp' not in vmims(srv, 'fly')[0]['metadata']
    cancelled = ok(run_module('migration', kv(srv, name='fly', state='cancelled')))
    assert cancelled['changed'] and cancelled['phase'] == 'Failed' and cancelled['reason'] == 'aborted', cancelled
    assert node_of(srv, 'fly') == source and vmi_obj(srv, 'fly')['status']['phase'] == 'Running'
    state = vmi_obj(srv, 'fly')['status']['migrationState']
    assert state['abortStatus'] == 'Succeeded' and state['failed'] is True
    srv.controller.wait_for(lambda: TASK_STATE not in annotations(srv, 'fly'), timeout=30)
    assert annotations(srv, 'fly')[VM_STATE] == 'ACTIVE'
    again = ok(run_module('migration', kv(srv, name='fly', state='cancelled')))
    assert not again['changed'] and 'no migration' in again['msg']


def test_target_failure_keeps_the_vm_on_the_source(kube_server):
    srv = kube_server
    source = running_vm(srv, 'tf')
    srv.faults.inject('migration_target_fail', NS, 'tf', count=1)
    seen = task_states_seen(srv, 'tf')
    result = failed(run_module('migration', kv(srv, name='tf')))
    assert result['phase'] == 'Failed' and result['reason'] == 'the target died or vanished', result
    assert result['phases'][-1] == 'Failed' and result['phases'][0] == 'Pending'
    assert 'keeps running on node %s' % source in result['msg'] and 'target pod' in result['msg']
    assert node_of(srv, 'tf') == source and vmi_obj(srv, 'tf')['status']['phase'] == 'Running'
    assert 'MIGRATING' in seen and seen[-1] is None
    assert annotations(srv, 'tf')[VM_STATE] == 'ACTIVE' and TASK_STATE not in annotations(srv, 'tf')
    last = ok(run_module('migration_info', kv(srv, name=['tf'])))['migrations'][0]['last']
    assert last['outcome'] == 'failed' and last['reason'] == 'the target died or vanished'
    # the fault fired once: the next run moves it
    retry = ok(run_module('migration', kv(srv, name='tf')))
    assert retry['phase'] == 'Succeeded' and node_of(srv, 'tf') != source


def test_pending_timeout_fails_the_migration(kube_server):
    srv = kube_server
    source = running_vm(srv, 'pend')
    for node in srv.controller.node_names:
        if node != source:
            srv.controller.set_node(node, schedulable=False)
    result = failed(run_module('migration', kv(srv, name='pend', pending_timeout=1, wait_timeout=120)))
    assert result['reason'] == 'the target stayed pending too long' and result['phase'] == 'Failed', result
    assert 'Scheduling' in result['phases'] and 'Running' not in result['phases']
    mig = vmims(srv, 'pend')[0]
    assert mig['metadata']['annotations']['kubevirt.io/migrationUnschedulablePodTimeoutSeconds'] == '1'
    assert node_of(srv, 'pend') == source and TASK_STATE not in annotations(srv, 'pend')


def test_wait_timeout_aborts_and_keeps_the_vm(kube_server):
    srv = kube_server
    source = running_vm(srv, 'slow')
    srv.faults.inject('migration_no_converge', NS, 'slow')
    result = failed(run_module('migration', kv(srv, name='slow', wait_timeout=2)))
    assert result['reason'] == 'aborted' and any('wait_timeout' in n for n in result['notes']), result
    assert node_of(srv, 'slow') == source and TASK_STATE not in annotations(srv, 'slow')


def test_refusals_name_the_state_and_change_nothing(kube_server):
    srv = kube_server
    ok(run_module('vm', kv(srv, name='off', memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/x'}], state='present')))
    stopped = failed(run_module('migration', kv(srv, name='off')))
    assert 'STOPPED' in stopped['msg'] and 'live_migrate' in stopped['msg'] and 'Stopped' in stopped['msg'], stopped['msg']
    assert stopped['vm_state'] == 'STOPPED' and vmims(srv, 'off') == []
    # a disk on a ReadWriteOnce claim: the instance is not LiveMigratable
    srv.store.create(rtype(srv, 'persistentvolumeclaims'), NS, {
        'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim', 'metadata': {'name': 'rwo'},
        'spec': {'accessModes': ['ReadWriteOnce'], 'resources': {'requests': {'storage': '1Gi'}}}})
    ok(run_module('vm', kv(srv, name='pinned', memory='64Mi', disks=[{'name': 'data', 'claim': 'rwo'}], state='running', wait_timeout=60)))
    pinned = failed(run_module('migration', kv(srv, name='pinned')))
    assert 'LiveMigratable' in pinned['msg'] and 'DisksNotLiveMigratable' in pinned['msg'] and 'ACTIVE' in pinned['msg'], pinned['msg']
    assert vmims(srv, 'pinned') == [] and TASK_STATE not in annotations(srv, 'pinned')
    # a cordoned target node is refused before anything is created
    source = running_vm(srv, 'tgt')
    target = other_node(srv, source)
    ok(run_module('host', kv(srv, node=target, state='drained', reason='maintenance')))
    drained = failed(run_module('migration', kv(srv, name='tgt', target_node=target)))
    assert drained['reason'] == 'the target host is being drained' and drained['phases'] == ['Pending', 'Failed']
    assert 'cordoned' in drained['msg'] and vmims(srv, 'tgt') == [] and not drained['changed']
    # bad input names the field
    assert failed(run_module('migration', kv(srv, name='tgt', target_node='nowhere')))['msg'].startswith('target_node')
    assert failed(run_module('migration', kv(srv, name='tgt', bandwidth=100)))['msg'].startswith('bandwidth')
    assert failed(run_module('migration', kv(srv, name='tgt', mode='offline')))['msg'].startswith('mode')
    assert failed(run_module('migration', kv(srv, name='tgt', pending_timeout=0)))['msg'].startswith('pending_timeout')
    assert failed(run_module('migration', kv(srv, names=['tgt', 'default/tgt'])))['msg'].startswith('names')
    # parallel means nothing for one VM: refused naming it, not silently ignored
    assert failed(run_module('migration', kv(srv, name='tgt', parallel=3)))['msg'].startswith('parallel')
    assert vmims(srv, 'tgt') == []


def test_host_cordon_taint_and_uncordon(kube_server):
    srv = kube_server
    nodes = rtype(srv, 'nodes')
    foreign = {'key': 'example.com/gpu', 'value': 'true', 'effect': 'NoSchedule'}
    srv.controller.set_node('node02', taints=[foreign])
    planned = ok(run_module('host', kv(srv, node='node02', state='drained'), check=True, diff=True))
    assert planned['changed'] and planned['diff'] == {'before': {'draining': False}, 'after': {'draining': True}}
    assert not srv.store.peek(nodes, '', 'node02')['spec'].get('unschedulable')
    drained = ok(run_module('host', kv(srv, node='node02', state='drained', reason='kernel update')))
    assert drained['changed'] and drained['host']['draining'] and drained['host']['drain']['reason'] == 'kernel update'
    node = srv.store.peek(nodes, '', 'node02')
    assert node['spec']['unschedulable'] is True
    assert sorted(t['key'] for t in node['spec']['taints']) == ['converge.virt/draining', 'example.com/gpu']
    assert not ok(run_module('host', kv(srv, node='node02', state='drained')))['changed']
    assert ok(run_module('host', kv(srv, node='node02', state='active'), check=True))['changed']
    assert srv.store.peek(nodes, '', 'node02')['spec']['unschedulable'] is True
    active = ok(run_module('host', kv(srv, node='node02', state='active')))
    assert active['changed'] and not active['host']['draining'] and active['host']['drain'] is None
    node = srv.store.peek(nodes, '', 'node02')
    assert not node['spec'].get('unschedulable') and node['spec']['taints'] == [foreign]
    assert 'converge.virt/drain' not in (node['metadata'].get('annotations') or {})
    assert not ok(run_module('host', kv(srv, node='node02', state='active')))['changed']
    cordon_only = ok(run_module('host', kv(srv, node='node03', state='drained', taint=False)))
    assert cordon_only['host']['unschedulable'] and cordon_only['host']['taints'] == []
    assert failed(run_module('host', kv(srv, node='node09', state='drained')))['msg'].startswith('node')
    # node03 is cordoned (node02 untainted): a VM placed on node01 or node02 can only move to the other one of the two
    srv.controller.set_node('node02', taints=[])
    source = running_vm(srv, 'hv')
    assert source in ('node01', 'node02')
    moved = ok(run_module('migration', kv(srv, name='hv')))
    assert moved['node'] == other_node(srv, source, 'node03') and node_of(srv, 'hv') == moved['node']
    present = ok(run_module('host', kv(srv, node=moved['node'])))
    assert not present['changed'] and present['host']['running_vms'] == ['default/hv']
    assert ok(run_module('host', kv(srv, node=source)))['host']['running_vms'] == []


def test_api_key_never_in_results(kube_server, tmp_path):
    srv = kube_server
    canary = 'canary-token-3b9d0f6a21'
    canary = srv.add_token(canary, ['*'])
    ca = tmp_path / 'ca.pem'
    ca.write_bytes(srv.ca_pem)
    source = running_vm(srv, 'tok')
    conn = dict(backend='kubevirt', host=srv.url, api_key=canary, ca_cert=str(ca), namespace=NS)
    results = [
        ok(run_module('migration', dict(conn, name='tok', target_node=other_node(srv, source)))),
        ok(run_module('migration_info', dict(conn))),
        ok(run_module('host', dict(conn, node='node03', state='drained'), diff=True)),
        failed(run_module('migration', dict(conn, name='ghost'))),
        failed(run_module('migration', dict(conn, name='tok', host='https://127.0.0.1:1'))),
        failed(run_module('host', dict(conn, node='node01', host='https://127.0.0.1:1'))),
        failed(run_module('migration_info', dict(conn, host='https://127.0.0.1:1'))),
    ]
    for result in results:
        text = json.dumps(result)
        assert canary not in text, text[:2000]


def test_an_interrupted_run_is_picked_up(kube_server):
    srv = kube_server
    source = running_vm(srv, 'cut')
    target = other_node(srv, source)
    srv.faults.inject('migration_no_converge', NS, 'cut')
    started = ok(run_module('migration', kv(srv, name='cut', target_node=target, state='started')))
    owner = annotations(srv, 'cut')['converge.virt/task-owner']
    host, _sep, pid = owner.rpartition(':')
    assert annotations(srv, 'cut')[TASK_STATE] == 'MIGRATING' and host == socket.gethostname()
    os.kill(int(pid), signal.SIGKILL)       # the detached process this test started, which follows the migration
    srv.faults.clear('migration_no_converge')
    # a migration object has no status until the controller's first pass over it
    srv.controller.wait_for(lambda: (vmims(srv, 'cut')[0].get('status') or {}).get('phase') == 'Succeeded', timeout=30)
    assert annotations(srv, 'cut')[TASK_STATE] == 'MIGRATING', 'nobody closed the task of the killed run yet'
    assert ok(run_module('migration', kv(srv, name='cut', target_node=target), check=True))['changed']
    assert annotations(srv, 'cut')[TASK_STATE] == 'MIGRATING'
    picked = ok(run_module('migration', kv(srv, name='cut', target_node=target)))
    assert picked['changed'] and any('interrupted run' in n and 'succeeded' in n for n in picked['notes']), picked
    assert TASK_STATE not in annotations(srv, 'cut') and annotations(srv, 'cut')[VM_STATE] == 'ACTIVE'
    assert node_of(srv, 'cut') == target and len(vmims(srv, 'cut')) == 1
    assert not ok(run_module('migration', kv(srv, name='cut', target_node=target)))['changed']
