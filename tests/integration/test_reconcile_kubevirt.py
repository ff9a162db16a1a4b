"""converge.virt.reconcile and the reconcile role with backend kubevirt, through the ansible CLI, against the Kubernetes API test server.

Drift is made behind the collection's back through the API: a running VM's
runStrategy set to Halted (KubeVirt stops it), a stopped VM's runStrategy set
to Always (KubeVirt starts it), the instance of a Manual VM deleted, a task
left in the annotations with an expired lease, and one whose owner process on
this host is gone. Report-only and check mode list each disagreement with its
decision and change nothing (resourceVersions unchanged); fix repairs them
through the KubeVirt vm backend; a second run finds nothing. A task still in
flight (live owner, lease ahead) and a VMI deleted under runStrategy Always
(KubeVirt restarts it) are no disagreements.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,unused-import

import functools
import os
import socket
import time

import yaml

from tests.integration.ansible_run import ROOT, kubevirt_args, ok, run_module, run_playbook
from tests.kubeapi.fixtures import kube_server  # noqa: F401  (pytest fixture)

NS = 'default'
IMAGE = 'quay.io/containerdisks/fedora:40'
TASK = 'converge.virt/task-state'
VM_STATE = 'converge.virt/vm-state'


kv = functools.partial(kubevirt_args, {'namespace': NS})


def _rtype(srv, plural):
    return srv.store.rtype('kubevirt.io', plural)


def vm_obj(srv, name):
    return srv.store.peek(_rtype(srv, 'virtualmachines'), NS, name)


def vmi_obj(srv, name):
    return srv.store.peek(_rtype(srv, 'virtualmachineinstances'), NS, name)


def versions(srv):
    """resourceVersion of every VM and VMI of the namespace."""
    found = {}
    for plural in ('virtualmachines', 'virtualmachineinstances'):
        for obj in srv.store.items(_rtype(srv, plural), NS):
            found[(plural, obj['metadata']['name'])] = obj['metadata']['resourceVersion']
    return found


def api(srv):
    from kubernetes import client as k8s  # pylint: disable=import-outside-toplevel
    return k8s.CustomObjectsApi(srv.api_client())


def patch_vm(srv, name, body):
    api(srv).patch_namespaced_custom_object('kubevirt.io', 'v1', NS, 'virtualmachines', name, body)


def wait_until(what, predicate, limit=60):
    """Poll ``predicate`` (a guard against hanging, not a speed assertion)."""
    end = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < end, 'gave up waiting for ' + what
        time.sleep(0.2)


def running(srv, name):
    vmi = vmi_obj(srv, name)
    return vmi is not None and (vmi.get('status') or {}).get('phase') == 'Running'


def controller_passed(srv, end):
    """Wait until the KubeVirt controller emulation has run one whole pass that began after this call, with no delayed
    step still due. A pass (every object read through the API on the real stack) can take longer than any fixed pause
    on a loaded machine: two reads a fixed time apart can both fall inside one pass and miss its writes."""
    ctrl = srv.controller
    first = ctrl.passes
    while True:
        with ctrl.lock:
            pending = any(due > ctrl.now() for due in ctrl.due.values())
        # run_pass counts a pass when it starts: first + 2 means pass first + 1 began after this call and ended
        if ctrl.passes >= first + 2 and not pending:
            return
        assert time.monotonic() < end, 'the controller emulation ran no whole pass (paused? errors: %r)' % ctrl.errors[-3:]
        time.sleep(0.05)


def quiet(srv):
    """Wait until the controllers stopped writing: every resourceVersion the same before and after a whole controller pass."""
    end = time.monotonic() + 120
    previous = versions(srv)
    while True:
        controller_passed(srv, end)
        current = versions(srv)
        if current == previous:
            return current
        assert time.monotonic() < end, 'the namespace never settled'
        previous = current


def make_vms(srv, states):
    vms = [dict(name=name, state=state, vcpus=1, memory='64Mi', disks=[{'name': 'root', 'image': IMAGE}]) for name, state in states]
    ok(run_module('vm', kv(srv, vms=vms, wait_timeout=60)))


def stale_task(task_state, action, lease_until, owner):
    return {'metadata': {'annotations': {TASK: task_state, 'converge.virt/task-id': 'killed-run', 'converge.virt/task-action': action,
                                         'converge.virt/lease-until': repr(lease_until), 'converge.virt/task-owner': owner}}}


def by_name(result):
    return dict((d['name'], d) for d in result['disagreements'])


def test_report_check_fix_then_nothing(kube_server):
    srv = kube_server
    make_vms(srv, [('rc-halted', 'running'), ('rc-sneaky', 'stopped'), ('rc-manual', 'running'), ('rc-stale', 'running'),
                   ('rc-dead', 'stopped'), ('rc-busy', 'running'), ('rc-restarts', 'running'), ('rc-fine', 'running')])
    host = socket.gethostname()
    old_uid = vmi_obj(srv, 'rc-restarts')['metadata']['uid']
    # drift behind the collection's back, through the API
    patch_vm(srv, 'rc-halted', {'spec': {'runStrategy': 'Halted'}})
    patch_vm(srv, 'rc-sneaky', {'spec': {'runStrategy': 'Always'}})
    patch_vm(srv, 'rc-manual', {'spec': {'runStrategy': 'Manual'}})
    api(srv).delete_namespaced_custom_object('kubevirt.io', 'v1', NS, 'virtualmachineinstances', 'rc-manual')
    api(srv).delete_namespaced_custom_object('kubevirt.io', 'v1', NS, 'virtualmachineinstances', 'rc-restarts')
    patch_vm(srv, 'rc-stale', stale_task('STARTING', 'start', time.time() - 5, '%s:%d' % (host, os.getpid())))
    patch_vm(srv, 'rc-dead', stale_task('STOPPING', 'stop', time.time() + 3600, '%s:999999' % host))
    patch_vm(srv, 'rc-busy', stale_task('REBOOTING', 'reboot_soft', time.time() + 3600, '%s:%d' % (host, os.getpid())))
    wait_until('rc-halted to stop', lambda: vmi_obj(srv, 'rc-halted') is None)
    wait_until('rc-manual to stop', lambda: vmi_obj(srv, 'rc-manual') is None)
    wait_until('rc-sneaky to run', lambda: running(srv, 'rc-sneaky'))
    wait_until('rc-restarts to run again', lambda: running(srv, 'rc-restarts') and vmi_obj(srv, 'rc-restarts')['metadata']['uid'] != old_uid)
    before = quiet(srv)

    report = ok(run_module('reconcile', kv(srv)))
    assert not report['changed'] and report['checked'] == 8
    found = by_name(report)
    assert set(found) == {'rc-halted', 'rc-sneaky', 'rc-manual', 'rc-stale', 'rc-dead'}, found
    for name in ('rc-halted', 'rc-manual'):
        assert found[name]['kind'] == 'power' and found[name]['vm_state'] == 'ACTIVE' and found[name]['power_state'] == 'SHUTDOWN'
        assert found[name]['decision'] == 'record STOPPED' and found[name]['action'] == 'state=stopped'
    sneaky = found['rc-sneaky']
    assert (sneaky['vm_state'], sneaky['power_state'], sneaky['decision'], sneaky['action']) == \
        ('STOPPED', 'RUNNING', 'force stop', 'state=stopped (forced)')
    assert found['rc-stale']['kind'] == 'stale task' and found['rc-stale']['task_state'] == 'STARTING'
    assert found['rc-stale']['decision'] == 'redo' and found['rc-stale']['action'] == 'recover'
    assert found['rc-dead']['kind'] == 'stale task' and found['rc-dead']['task_state'] == 'STOPPING'
    assert not any(d['done'] for d in found.values()) and not any('steps' in d for d in found.values())
    assert versions(srv) == before, 'report-only changed something'

    planned = ok(run_module('reconcile', kv(srv, fix=True), check=True))
    assert planned['changed'] and by_name(planned).keys() == found.keys()
    assert all(by_name(planned)[n]['decision'] == found[n]['decision'] for n in found)
    assert not any(d['done'] for d in planned['disagreements'])
    assert versions(srv) == before, 'check mode changed something'

    fixed = ok(run_module('reconcile', kv(srv, fix=True)))
    assert fixed['changed']
    done = by_name(fixed)
    assert done.keys() == found.keys() and all(d['done'] for d in done.values()), done
    for name in ('rc-halted', 'rc-manual'):
        assert [s['action'] for s in done[name]['steps']] == ['record'] and done[name]['vm_state_after'] == 'STOPPED'
        assert vm_obj(srv, name)['metadata']['annotations'][VM_STATE] == 'STOPPED' and vmi_obj(srv, name) is None
    assert [s['action'] for s in done['rc-sneaky']['steps']] == ['record', 'stop'] and done['rc-sneaky']['vm_state_after'] == 'STOPPED'
    assert vmi_obj(srv, 'rc-sneaky') is None and vm_obj(srv, 'rc-sneaky')['spec']['runStrategy'] == 'Halted'
    assert vm_obj(srv, 'rc-sneaky')['metadata']['annotations'][VM_STATE] == 'STOPPED'
    assert done['rc-stale']['steps'][0]['recovered_task'] == 'STARTING' and done['rc-stale']['steps'][0]['vm_state'] == 'ACTIVE'
    assert done['rc-dead']['steps'][0]['recovered_task'] == 'STOPPING' and done['rc-dead']['steps'][0]['vm_state'] == 'STOPPED'
    for name, vm_state in (('rc-stale', 'ACTIVE'), ('rc-dead', 'STOPPED')):
        annotations = vm_obj(srv, name)['metadata']['annotations']
        assert TASK not in annotations and annotations[VM_STATE] == vm_state, annotations
    # the task in flight (live owner, lease ahead) was left alone, and the VMs that agreed were not touched
    assert vm_obj(srv, 'rc-busy')['metadata']['annotations'][TASK] == 'REBOOTING'
    after = versions(srv)
    for name in ('rc-fine', 'rc-busy', 'rc-restarts'):
        assert after[('virtualmachines', name)] == before[('virtualmachines', name)], name
        assert after[('virtualmachineinstances', name)] == before[('virtualmachineinstances', name)], name

    settled = quiet(srv)
    for args in (kv(srv), kv(srv, fix=True)):
        again = ok(run_module('reconcile', args))
        assert again['disagreements'] == [] and not again['changed'] and again['checked'] == 8
    assert versions(srv) == settled


def test_name_list_limits_the_run_and_options_of_the_other_backend_are_refused(kube_server):
    srv = kube_server
    make_vms(srv, [('only-a', 'running'), ('only-b', 'running')])
    for name in ('only-a', 'only-b'):
        patch_vm(srv, name, {'spec': {'runStrategy': 'Halted'}})
    wait_until('both to stop', lambda: vmi_obj(srv, 'only-a') is None and vmi_obj(srv, 'only-b') is None)
    fixed = ok(run_module('reconcile', kv(srv, name=['only-a'], fix=True)))
    assert fixed['checked'] == 1 and [d['name'] for d in fixed['disagreements']] == ['only-a']
    assert vm_obj(srv, 'only-a')['metadata']['annotations'][VM_STATE] == 'STOPPED'
    assert vm_obj(srv, 'only-b')['metadata']['annotations'][VM_STATE] == 'ACTIVE'

    before = quiet(srv)
    canary = 'Canary-Reconcile-Kv-0c1f'
    for args, field in ((kv(srv, uri='qemu:///system', fix=True), 'uri'),
                        (kv(srv, password=canary, fix=True), 'password'),
                        (dict(kubeconfig=srv.kubeconfig_path, fix=True), 'kubeconfig'),
                        (dict(namespace='demo', fix=True), 'namespace'),
                        (kv(srv, namespace='Not_A_Label', fix=True), 'namespace')):
        result = run_module('reconcile', args)
        assert result.get('failed') and result.get('field') == field and result['msg'].startswith(field + ':'), (field, result)
        assert canary not in repr(result)
    assert versions(srv) == before


def _role_play(tmp_path, srv, fix, report, **extra):
    role = {'role': 'converge.virt.reconcile', 'reconcile_backend': 'kubevirt', 'reconcile_namespace': NS,
            'reconcile_kubeconfig': srv.kubeconfig_path, 'reconcile_fix': fix, 'reconcile_report_path': report}
    role.update(extra)
    path = tmp_path / ('fix.yml' if fix else 'report.yml')
    path.write_text(yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False, 'roles': [role]}]))
    return str(path)


def _role_result(out):
    for task in out['plays'][0]['tasks']:
        for res in task['hosts'].values():
            if 'disagreements' in res:
                return res
    raise AssertionError('no reconcile result in %r' % out)


def test_role_reports_then_fixes_on_kubevirt(kube_server, tmp_path):
    srv = kube_server
    make_vms(srv, [('role-gone', 'running'), ('role-sneaky', 'stopped'), ('role-fine', 'running')])
    patch_vm(srv, 'role-gone', {'spec': {'runStrategy': 'Manual'}})
    api(srv).delete_namespaced_custom_object('kubevirt.io', 'v1', NS, 'virtualmachineinstances', 'role-gone')
    patch_vm(srv, 'role-sneaky', {'spec': {'runStrategy': 'Always'}})
    wait_until('role-gone to stop', lambda: vmi_obj(srv, 'role-gone') is None)
    wait_until('role-sneaky to run', lambda: running(srv, 'role-sneaky'))
    before = quiet(srv)
    report = str(tmp_path / 'report.md')
    env = {'ANSIBLE_ROLES_PATH': os.path.join(ROOT, 'roles')}
    policy = dict(reconcile_restart_stopped_guests=True, reconcile_accept_running_guests=True)

    rc, out = run_playbook(_role_play(tmp_path, srv, False, report, **policy), env=env)
    assert rc == 0, out
    found = by_name(_role_result(out))
    assert set(found) == {'role-gone', 'role-sneaky'}, found
    assert found['role-gone']['decision'] == 'record STOPPED' and found['role-gone']['action'] == 'state=running'
    assert found['role-sneaky']['decision'] == 'force stop' and found['role-sneaky']['action'] == 'state=running'
    assert versions(srv) == before, 'the report-only role changed something'
    with open(report, encoding='utf-8') as handle:
        text = handle.read()
    assert 'in KubeVirt namespace default' in text and '| role-gone | ACTIVE | SHUTDOWN | - | power | record STOPPED | state=running |' in text

    rc, out = run_playbook(_role_play(tmp_path, srv, True, report, **policy), env=env)
    assert rc == 0, out
    fixed = by_name(_role_result(out))
    assert all(d['done'] for d in fixed.values()) and set(fixed) == set(found), fixed
    assert [s['action'] for s in fixed['role-gone']['steps']] == ['record', 'start'] and running(srv, 'role-gone')
    assert [s['action'] for s in fixed['role-sneaky']['steps']] == ['record'] and running(srv, 'role-sneaky')
    for name in ('role-gone', 'role-sneaky'):
        assert vm_obj(srv, name)['metadata']['annotations'][VM_STATE] == 'ACTIVE'

    quiet(srv)
    rc, out = run_playbook(_role_play(tmp_path, srv, True, report, **policy), env=env)
    assert rc == 0 and _role_result(out)['disagreements'] == [] and not _role_result(out)['changed']


def test_role_refuses_a_libvirt_run_without_uri(tmp_path):
    path = tmp_path / 'nouri.yml'
    path.write_text(yaml.safe_dump([{'hosts': 'localhost', 'gather_facts': False, 'roles': [{'role': 'converge.virt.reconcile'}]}]))
    rc, out = run_playbook(str(path), env={'ANSIBLE_ROLES_PATH': os.path.join(ROOT, 'roles')})
    assert rc != 0
    messages = [res.get('msg') for task in out['plays'][0]['tasks'] for res in task['hosts'].values() if res.get('failed')]
    assert messages == ['reconcile_uri: is required with reconcile_backend libvirt'], messages


def test_an_interrupted_delete_is_not_finished_by_fix(kube_server):
    """A stale DELETING task (its run was killed, or the annotations were forged) is cleared by fix, and the VM kept.

    The annotations may be written by any namespace user with patch on VMs: reconcile never deletes on their
    strength alone (issue 24); state=absent finishes the delete.
    """
    srv = kube_server
    make_vms(srv, [('rc-deleting', 'running')])
    uid = vm_obj(srv, 'rc-deleting')['metadata']['uid']
    patch_vm(srv, 'rc-deleting', stale_task('DELETING', 'delete', time.time() - 5, '%s:999999' % socket.gethostname()))
    before = quiet(srv)
    for args, check in ((kv(srv), False), (kv(srv, fix=True), True)):
        entry = ok(run_module('reconcile', args, check=check))['disagreements'][0]
        assert entry['decision'] == 'finish delete' and entry['action'] == 'recover' and not entry['done'], entry
        assert 'never deletes' in entry['note']
    assert versions(srv) == before
    entry = ok(run_module('reconcile', kv(srv, fix=True)))['disagreements'][0]
    assert entry['done'] and entry['steps'][0]['recovered_task'] == 'DELETING' and entry['steps'][0]['vm_state'] == 'ACTIVE', entry
    assert 'vm_state_after' not in entry
    assert vm_obj(srv, 'rc-deleting')['metadata']['uid'] == uid and running(srv, 'rc-deleting')
    assert TASK not in vm_obj(srv, 'rc-deleting')['metadata']['annotations']
    again = ok(run_module('reconcile', kv(srv, fix=True)))
    assert again['disagreements'] == [] and not again['changed']
    gone = ok(run_module('vm', kv(srv, name='rc-deleting', state='absent', wait_timeout=60)))
    assert gone['changed']
    wait_until('the VM to go', lambda: vm_obj(srv, 'rc-deleting') is None and vmi_obj(srv, 'rc-deleting') is None)
