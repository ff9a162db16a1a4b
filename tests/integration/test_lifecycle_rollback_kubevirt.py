"""The lifecycle role's rollback on KubeVirt, through ansible-playbook, against the test API server.

KubeVirt restores a snapshot into a stopped VM only. With
``lifecycle_snapshot_before_change`` and ``lifecycle_rollback_on_failure`` the
role snapshots the running VM it is about to change, changes it, fails (a port
that never answers), and in its rescue stops the VM, restores the snapshot and
starts it again. Before, the role refused the combination on KubeVirt.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import os
import socket

import yaml

from tests.integration.ansible_run import run_module, run_playbook
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

GROUP = 'kubevirt.io'


def vm_obj(srv, name):
    return srv.store.peek(srv.store.rtype(GROUP, 'virtualmachines'), 'default', name)


def cores(srv, name):
    return vm_obj(srv, name)['spec']['template']['spec']['domain']['cpu']['cores']


def closed_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]   # nothing listens once the socket is closed


def role_play(tmp_path, srv, vms, **extra):
    path = os.path.join(str(tmp_path), 'lifecycle-kubevirt.yml')
    role_vars = {'lifecycle_backend': 'kubevirt', 'lifecycle_kubeconfig': srv.kubeconfig_path, 'lifecycle_wait_timeout': 60,
                 'lifecycle_snapshot_before_change': True, 'lifecycle_vms': vms}
    role_vars.update(extra)
    play = [{'hosts': 'localhost', 'gather_facts': False, 'tasks': [
        {'name': 'Lifecycle', 'ansible.builtin.include_role': {'name': 'converge.virt.lifecycle'}, 'vars': role_vars}]}]
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(play, handle)
    return path


def results_named(data, suffix):
    return [task['hosts']['localhost'] for play in data['plays'] for task in play['tasks'] if task['task']['name'].endswith(suffix)]


def test_failed_change_is_rolled_back_stopped_restored_and_started_again(kube_server, tmp_path):
    srv = kube_server
    base = {'name': 'lr-1', 'memory': '64Mi', 'disks': [{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}]}
    made = run_module('vm', dict(base, backend='kubevirt', kubeconfig=srv.kubeconfig_path, vcpus=1, state='running', wait_timeout=60))
    assert made['_rc'] == 0, made.get('msg')
    assert cores(srv, 'lr-1') == 1

    changed = dict(base, vcpus=2, state='running', reachable={'host': '127.0.0.1', 'port': closed_port(), 'timeout': 2})
    rc, data = run_playbook(role_play(tmp_path, srv, [changed], lifecycle_wait_reachable=True, lifecycle_restart_on_change=True))
    assert rc != 0, 'the role must fail: the port never answers'
    failure = results_named(data, 'Fail with the error of the change, naming what was rolled back')[0]
    assert 'rolled back to snapshot lifecycle-' in failure['msg'] and 'lr-1' in failure['msg'], failure['msg']
    assert 'FAILED' not in failure['msg'], failure['msg']
    # the rescue stopped it, restored it and started it again
    stopped = results_named(data, 'stop the snapshotted VMs first (KubeVirt restores into a stopped VM only)')[0]
    assert stopped['changed'] and [r['name'] for r in stopped['results']] == ['lr-1'], stopped
    restored = results_named(data, 'Roll the snapshotted VMs back to the snapshot taken before the change')[0]['results'][0]
    assert not restored.get('failed') and restored['snapshot']['phase'] == 'Restored', restored
    started = results_named(data, 'start again the rolled-back VMs that were running before the change')[0]
    assert started['changed'] and [r['vm']['status'] for r in started['results']] == ['Running'], started
    assert cores(srv, 'lr-1') == 1, 'the spec of before the change is back'
    info = run_module('vm_info', {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'name': ['lr-1']})
    vm = info['vms'][0]
    assert (vm['status'], vm['task_state']) == ('Running', None), vm

    # a stopped VM is restored and left stopped
    run_module('vm', dict(base, backend='kubevirt', kubeconfig=srv.kubeconfig_path, vcpus=1, state='stopped', wait_timeout=60))
    rc, data = run_playbook(role_play(tmp_path, srv, [dict(changed, state='stopped')], lifecycle_wait_reachable=True))
    assert rc != 0
    started = results_named(data, 'start again the rolled-back VMs that were running before the change')[0]
    assert started.get('skipped') and 'FAILED' not in results_named(data, 'naming what was rolled back')[0]['msg'], started
    assert cores(srv, 'lr-1') == 1
    assert run_module('vm_info', {'backend': 'kubevirt', 'kubeconfig': srv.kubeconfig_path, 'name': ['lr-1']})['vms'][0]['status'] == 'Stopped'
