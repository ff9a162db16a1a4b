"""The provider conformance scenarios (tests/unit/plugins/module_utils/test_providers.py) through the KubeVirt backend
against the Kubernetes API test server (tests/kubeapi: by default the lab's kube-apiserver + etcd + virt-api), issue 35.

The unit file runs them through the real runners on the in-memory backend and a skeleton third backend; here the same
scenarios, with the same expected outcome (steps, operations, records), run through the ansible CLI and the KubeVirt
provider: create and its idempotence, check mode, start, pause, stop (with a grace), delete, a task held by another run, a
stale task, snapshot create / restore (a safety snapshot first) / delete, a snapshot refused while another run holds the
VM and a stale snapshot task cleared. Kept to four tests (one fresh server each) for the KubeVirt lane's time (the file
name matches the lane's tests/integration/test_kubevirt_*.py).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import functools
import socket
import subprocess
import time

from ansible_collections.converge.virt.plugins.module_utils._kubevirt.views import RECORD_ANNOTATIONS
from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

NS = 'default'
kv = functools.partial(kubevirt_args, {'namespace': NS, 'wait_timeout': 60})


def vm_args(srv, name, **args):
    return kv(srv, **dict(dict(name=name, vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}]), **args))


def snap(srv, vm, name, check=False, diff=False, **args):
    return run_module('snapshot', kv(srv, **dict(dict(vm=vm, name=name), **args)), check=check, diff=diff)


def vm_obj(srv, name):
    return srv.store.peek(srv.store.rtype('kubevirt.io', 'virtualmachines'), NS, name)


def snapshot_names(srv):
    by_plural = dict((rt.plural, rt) for rt in srv.controller.snapshot_types())
    return sorted(o['metadata']['name'] for o in srv.store.items(by_plural['virtualmachinesnapshots'], NS))


def record(srv, name):
    annotations = vm_obj(srv, name)['metadata'].get('annotations') or {}
    return dict((field, annotations.get(key)) for field, key in RECORD_ANNOTATIONS.items())


def set_task(srv, name, **fields):
    """Another run's task on VM ``name`` (its record's annotations, as a run writes them)."""
    values = dict((RECORD_ANNOTATIONS[field], value) for field, value in fields.items())
    srv.store.mutate(srv.store.rtype('kubevirt.io', 'virtualmachines'), NS, name,
                     lambda o: o['metadata'].setdefault('annotations', {}).update(values))


def dead_owner():
    """The owner word of a run that is gone (a process of this host that has exited)."""
    dead = subprocess.Popen(['true'])  # pylint: disable=consider-using-with
    dead.wait()
    return '%s:%d' % (socket.gethostname(), dead.pid)


def actions(result):
    return [step['action'] for step in result['steps']]


def test_create_check_mode_start_pause_stop_delete(kube_server):
    srv = kube_server
    planned = ok(run_module('vm', vm_args(srv, 'web', state='running', vcpus=2), check=True))
    assert planned['changed'] and vm_obj(srv, 'web') is None  # check mode changes nothing
    created = ok(run_module('vm', vm_args(srv, 'web', state='stopped', vcpus=2)))
    assert created['changed'] and actions(created) == ['create'] and created['vm']['vm_state'] == 'STOPPED'
    assert vm_obj(srv, 'web')['spec']['template']['spec']['domain']['cpu']['cores'] == 2
    again = ok(run_module('vm', vm_args(srv, 'web', state='stopped', vcpus=2)))
    assert (again['changed'], again['steps']) == (False, [])

    started = ok(run_module('vm', vm_args(srv, 'web', state='running', vcpus=2)))
    assert started['changed'] and actions(started) == ['start'] and started['vm']['vm_state'] == 'ACTIVE'
    assert not record(srv, 'web')['task_state'] and record(srv, 'web')['vm_state'] == 'ACTIVE'
    paused = ok(run_module('vm', vm_args(srv, 'web', state='paused', vcpus=2)))
    assert actions(paused) == ['pause'] and paused['vm']['vm_state'] == 'PAUSED'
    stopped = ok(run_module('vm', vm_args(srv, 'web', state='stopped', vcpus=2, shutdown_timeout=45)))
    assert actions(stopped) == ['unpause', 'stop'] and stopped['vm']['vm_state'] == 'STOPPED'
    assert vm_obj(srv, 'web')['spec']['runStrategy'] == 'Halted' and not record(srv, 'web')['task_state']

    deleted = ok(run_module('vm', vm_args(srv, 'web', state='absent')))
    assert deleted['changed'] and actions(deleted) == ['delete'] and deleted['vm']['exists'] is False
    assert vm_obj(srv, 'web') is None


def test_a_task_held_by_another_run_and_a_stale_task(kube_server):
    srv = kube_server
    ok(run_module('vm', vm_args(srv, 'web', state='stopped')))
    set_task(srv, 'web', task_state='STARTING', task_id='theirs', last_action='start', owner='other-host:1',
             lease_until=repr(time.time() + 600), task_started_at=repr(time.time()))
    busy = run_module('vm', vm_args(srv, 'web', state='running'))
    assert busy.get('failed') and "VM 'web' is busy: task theirs (task_state STARTING)" in busy['msg'], busy
    assert record(srv, 'web')['task_id'] == 'theirs' and vm_obj(srv, 'web')['spec']['runStrategy'] == 'Halted'

    owner = dead_owner()
    set_task(srv, 'web', task_state='STARTING', task_id='old', last_action='start', owner=owner,
             lease_until=repr(time.time() + 600), task_started_at=repr(time.time() - 5))
    recovered = ok(run_module('vm', vm_args(srv, 'web', state='running')))
    assert recovered['recovered']['reason'] == 'the run that held it (%s) is gone' % owner, recovered
    assert not record(srv, 'web')['task_state'] and recovered['vm']['vm_state'] == 'ACTIVE'


def test_snapshot_create_restore_delete(kube_server):
    srv = kube_server
    ok(run_module('vm', vm_args(srv, 'web', state='stopped', vcpus=1)))
    planned = ok(snap(srv, 'web', 's1', check=True))
    assert planned['changed'] and planned['snapshot']['phase'] == 'Pending' and snapshot_names(srv) == []
    created = ok(snap(srv, 'web', 's1', diff=True))
    assert created['changed'] and [op['op'] for op in created['operations']] == ['create_snapshot']
    assert created['snapshots'] == ['s1'] and created['diff'] == {'before': {'snapshots': []}, 'after': {'snapshots': ['s1']}}
    assert created['snapshot']['phase'] == 'Ready' and not record(srv, 'web')['task_state']
    again = ok(snap(srv, 'web', 's1'))
    assert (again['changed'], again['operations']) == (False, [])

    ok(run_module('vm', vm_args(srv, 'web', state='stopped', vcpus=2)))
    restored = ok(snap(srv, 'web', 's1', state='restored'))
    safety = restored['safety_snapshot']
    assert safety.startswith('s1-before-restore-') and restored['snapshot']['phase'] == 'Restored'
    assert [(op['op'], op['snapshot']) for op in restored['operations']] == [('create_snapshot', safety), ('restore_snapshot', 's1')]
    assert vm_obj(srv, 'web')['spec']['template']['spec']['domain']['cpu']['cores'] == 1
    assert snapshot_names(srv) == sorted(['s1', safety]) and not record(srv, 'web')['task_state']

    deleted = ok(snap(srv, 'web', 's1', state='absent'))
    assert deleted['changed'] and deleted['snapshot'] == {'phase': 'absent'} and snapshot_names(srv) == [safety]
    assert not ok(snap(srv, 'web', 's1', state='absent'))['changed']


def test_a_snapshot_refused_while_held_and_a_stale_snapshot_task_cleared(kube_server):
    srv = kube_server
    ok(run_module('vm', vm_args(srv, 'web', state='stopped')))
    ok(snap(srv, 'web', 's1'))
    set_task(srv, 'web', task_state='STARTING', task_id='theirs', last_action='start', owner='other-host:1',
             lease_until=repr(time.time() + 600), task_started_at=repr(time.time()))
    for check in (True, False):  # refused before any step, check mode too
        busy = snap(srv, 'web', 's2', check=check)
        assert busy.get('failed') and "VM 'web' is busy: task theirs (task_state STARTING)" in busy['msg'], busy
    assert snapshot_names(srv) == ['s1'] and record(srv, 'web')['task_id'] == 'theirs'

    set_task(srv, 'web', task_state='IMAGE_SNAPSHOT', task_id='old', last_action='snapshot', owner=dead_owner(),
             lease_until=repr(time.time() + 600), task_started_at=repr(time.time() - 5))
    cleared = ok(snap(srv, 'web', 's1'))
    assert cleared['changed'] and cleared['operations'] == [{'op': 'clear_stale_task', 'task_state': 'IMAGE_SNAPSHOT', 'task_id': 'old'}]
    assert not record(srv, 'web')['task_state'] and record(srv, 'web')['vm_state'] == 'STOPPED'
