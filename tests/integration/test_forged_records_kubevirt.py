"""Forged task records on KubeVirt (issue 24, finding 5), through the ansible CLI, against the Kubernetes API test server.

A namespace user with ``patch`` on VirtualMachines (here: the test server's token limited to namespace ``demo``)
may write any ``converge.virt/*`` annotation. Written that way behind the collection's back:

* a task whose lease is NaN, infinite or 10^18 s (some 3*10^10 years) ahead: the next vm run recovers it (reported with the
  reason) and acts; the next migration recovers it and moves the VM (the evacuate role can drain);
* a record saying DELETED, and a stale DELETING task: ``reconcile fix=true`` deletes nothing.

Limiting who may write the annotations at all is the cluster's part (docs/examples/annotations-policy.yaml).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import functools
import time

from tests.integration.ansible_run import kubevirt_args, ok, run_module
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

NS = 'demo'
IMAGE = 'quay.io/containerdisks/fedora:40'
PREFIX = 'converge.virt/'


kv = functools.partial(kubevirt_args, {'namespace': NS})


def rtype(srv, plural):
    return srv.store.rtype('kubevirt.io', plural)


def vm_obj(srv, name):
    return srv.store.peek(rtype(srv, 'virtualmachines'), NS, name)


def vmi_obj(srv, name):
    return srv.store.peek(rtype(srv, 'virtualmachineinstances'), NS, name)


def annotations(srv, name):
    return (vm_obj(srv, name) or {}).get('metadata', {}).get('annotations') or {}


def forge(srv, name, **record):
    """Patch the record annotations with the namespace user's token (``patch`` on VMs in ``demo`` only)."""
    from kubernetes import client as k8s  # pylint: disable=import-outside-toplevel
    api = srv.api_client(token=srv.limited_token)
    try:
        body = {'metadata': {'annotations': dict((PREFIX + key.replace('_', '-'), value) for key, value in record.items())}}
        k8s.CustomObjectsApi(api).patch_namespaced_custom_object('kubevirt.io', 'v1', NS, 'virtualmachines', name, body)
    finally:
        api.close()


def wait_until(what, predicate, limit=60):
    """Poll ``predicate`` (a guard against hanging, not a speed assertion)."""
    end = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < end, 'gave up waiting for ' + what
        time.sleep(0.2)


def running_vm(srv, name):
    args = kv(srv, name=name, memory='64Mi', disks=[{'name': 'root', 'image': IMAGE}], state='running', wait_timeout=60)
    result = ok(run_module('vm', args))
    assert result['vm']['status'] == 'Running'
    return result['vm']


def forged_reason(reason):
    return 'not a finite number' in reason or 'longest possible task' in reason


def test_a_forged_lease_is_recovered_by_the_next_run(kube_server):
    srv = kube_server
    running_vm(srv, 'fk-lease')
    for index, lease in enumerate(('nan', 'inf', '1e18')):
        task_id = 'forged-%d' % index
        forge(srv, 'fk-lease', task_state='STOPPING', task_id=task_id, task_action='stop', lease_until=lease, task_owner='elsewhere:1')
        entry = ok(run_module('reconcile', kv(srv, name=['fk-lease'])))['disagreements'][0]
        assert (entry['kind'], entry['task_state'], entry['action']) == ('stale task', 'STOPPING', 'recover') and forged_reason(entry['reason'])
        stopped = ok(run_module('vm', kv(srv, name='fk-lease', state='stopped', wait_timeout=60)))
        assert stopped['recovered']['recovered_task_id'] == task_id and forged_reason(stopped['recovered']['reason']), stopped
        assert 'stop' in [step['action'] for step in stopped['steps']] and stopped['vm']['vm_state'] == 'STOPPED', stopped
        ok(run_module('vm', kv(srv, name='fk-lease', state='running', wait_timeout=60)))
    assert PREFIX + 'task-state' not in annotations(srv, 'fk-lease') and annotations(srv, 'fk-lease')[PREFIX + 'vm-state'] == 'ACTIVE'


def test_reconcile_fix_never_deletes_on_a_forged_record(kube_server):
    srv = kube_server
    running_vm(srv, 'fk-deleted')
    uid = vm_obj(srv, 'fk-deleted')['metadata']['uid']
    forge(srv, 'fk-deleted', vm_state='DELETED')
    fixed = ok(run_module('reconcile', kv(srv, fix=True)))
    entry = fixed['disagreements'][0]
    assert (entry['name'], entry['decision'], entry['action'], entry['done']) == ('fk-deleted', 'finish delete', 'none', False), entry
    assert 'never deletes' in entry['note'] and not fixed['changed']
    forge(srv, 'fk-deleted', vm_state='ACTIVE', task_state='DELETING', task_id='forged-del', task_action='delete',
          lease_until=repr(time.time() - 5), task_owner='elsewhere:1')
    fixed = ok(run_module('reconcile', kv(srv, fix=True)))
    entry = fixed['disagreements'][0]
    assert (entry['decision'], entry['action'], entry['done']) == ('finish delete', 'recover', True) and 'never deletes' in entry['note'], entry
    time.sleep(1)   # a delete would be under way by now
    assert vm_obj(srv, 'fk-deleted')['metadata']['uid'] == uid and not vm_obj(srv, 'fk-deleted')['metadata'].get('deletionTimestamp')
    assert vmi_obj(srv, 'fk-deleted') is not None
    assert PREFIX + 'task-state' not in annotations(srv, 'fk-deleted') and annotations(srv, 'fk-deleted')[PREFIX + 'vm-state'] == 'ACTIVE'
    again = ok(run_module('reconcile', kv(srv, fix=True)))
    assert again['disagreements'] == [] and not again['changed']


def test_a_migration_recovers_a_forged_lease(kube_server):
    """A forged task does not keep a VM on a node being drained: the migration recovers it and moves the VM."""
    srv = kube_server
    source = running_vm(srv, 'fk-migrate')['node']
    target = sorted(set(srv.controller.node_names) - {source})[0]
    forge(srv, 'fk-migrate', task_state='REBOOTING', task_id='forged-reboot', task_action='reboot_soft', lease_until='inf',
          task_owner='elsewhere:1')
    moved = ok(run_module('migration', kv(srv, name='fk-migrate', target_node=target)))
    assert moved['changed'] and moved['phase'] == 'Succeeded' and moved['node'] == target, moved
    assert any('forged-reboot' in note and 'not a finite number' in note for note in moved.get('notes', [])), moved
    assert PREFIX + 'task-state' not in annotations(srv, 'fk-migrate')
    # a forged MIGRATING record without a migration object (the pick-up path), far in the future
    forge(srv, 'fk-migrate', task_state='MIGRATING', task_id='forged-mig', task_action='live_migrate', lease_until='1e18',
          task_owner='elsewhere:1')
    back = ok(run_module('migration', kv(srv, name='fk-migrate', target_node=source)))
    assert back['changed'] and back['phase'] == 'Succeeded' and back['node'] == source, back
    assert PREFIX + 'task-state' not in annotations(srv, 'fk-migrate')
