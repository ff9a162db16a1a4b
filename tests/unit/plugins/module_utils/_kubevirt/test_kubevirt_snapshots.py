# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure parts of _kubevirt/snapshots.py and of the snapshot modules' kubevirt side: objects read and written,
the restore refusal, the options of the other backend, the Kubernetes names and the runner's waiting and task handling."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import (
    BackendError, DataSafetyRefusal, InvalidDeclaration, WaitTimeout)
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshots as ks
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as sn
from ansible_collections.converge.virt.plugins.module_utils._phase import states, tasks
from ansible_collections.converge.virt.plugins.modules import snapshot, snapshot_info


def vmsnapshot(name, vm='web', created='2026-11-26T08:00:00Z', status=None, description=None, kind='VirtualMachine'):
    meta = {'name': name, 'namespace': 'demo', 'creationTimestamp': created}
    if description:
        meta['annotations'] = {ks.DESCRIPTION_ANNOTATION: description}
    return {'metadata': meta, 'spec': {'source': {'apiGroup': 'kubevirt.io', 'kind': kind, 'name': vm}}, 'status': status or {}}


def test_actual_snapshot_reads_time_state_and_description():
    snap = ks.actual_snapshot(vmsnapshot('s1', created='2026-11-26T08:00:05Z', description='d',
                                         status={'indications': ['Online', 'NoGuestAgent'], 'creationTime': '2026-11-26T08:00:07Z'}))
    assert snap.name == 's1' and snap.description == 'd' and snap.vm_state_at_snapshot == 'running' and not snap.memory
    assert snap.created == datetime.datetime(2026, 11, 26, 8, 0, 7, tzinfo=datetime.timezone.utc).timestamp()  # status.creationTime first
    offline = ks.actual_snapshot(vmsnapshot('s2', created='2026-11-26T08:00:05Z'))
    assert offline.vm_state_at_snapshot == 'shutoff'
    assert offline.created == datetime.datetime(2026, 11, 26, 8, 0, 5, tzinfo=datetime.timezone.utc).timestamp()


@pytest.mark.parametrize('status, phase, consistency', [
    ({}, sn.PENDING, sn.CRASH_CONSISTENT),
    ({'phase': 'InProgress', 'indications': ['GuestAgent', 'Online']}, sn.CREATING, sn.FS_CONSISTENT),
    ({'phase': 'Succeeded', 'readyToUse': False}, sn.CREATING, sn.CRASH_CONSISTENT),
    ({'phase': 'Succeeded', 'readyToUse': True, 'indications': ['NoGuestAgent', 'Online']}, sn.READY, sn.CRASH_CONSISTENT),
    ({'phase': 'Failed', 'error': {'message': 'boom'}}, sn.FAILED, sn.CRASH_CONSISTENT),
])
def test_public_snapshot_words(status, phase, consistency):
    out = ks.public_snapshot(vmsnapshot('s', status=status))
    assert out['phase'] == phase and out['consistency'] == consistency and out['vm'] == 'web' and out['namespace'] == 'demo'
    assert out['error'] == (status.get('error') or {}).get('message')


def test_deleting_snapshot_is_deleting():
    obj = vmsnapshot('s', status={'phase': 'Succeeded', 'readyToUse': True})
    obj['metadata']['deletionTimestamp'] = '2026-11-26T08:00:00Z'
    assert ks.public_snapshot(obj)['phase'] == sn.DELETING


def test_source_of_ignores_other_kinds():
    assert ks.source_of(vmsnapshot('s', vm='a')) == 'a'
    assert ks.source_of(vmsnapshot('s', vm='a', kind='VirtualMachineInstance')) is None


def test_bodies():
    body = ks.snapshot_body('s1', 'demo', 'web', description='x', deletion_policy='retain')
    assert body['spec'] == {'source': {'apiGroup': 'kubevirt.io', 'kind': 'VirtualMachine', 'name': 'web'}, 'deletionPolicy': 'retain'}
    assert body['metadata']['annotations'] == {ks.DESCRIPTION_ANNOTATION: 'x'} and body['apiVersion'] == 'snapshot.kubevirt.io/v1beta1'
    assert 'deletionPolicy' not in ks.snapshot_body('s1', 'demo', 'web')['spec']
    assert 'annotations' not in ks.snapshot_body('s1', 'demo', 'web')['metadata']
    restore = ks.restore_body('r', 'demo', 'web', 's1')
    assert restore['spec'] == {'target': {'apiGroup': 'kubevirt.io', 'kind': 'VirtualMachine', 'name': 'web'}, 'virtualMachineSnapshotName': 's1'}


def test_restore_name_is_a_bounded_subdomain():
    when = datetime.datetime(2026, 11, 26, 8, 1, 2, tzinfo=datetime.timezone.utc)
    assert ks.restore_name('s1', when) == 's1-restore-20261126080102'
    long_name = ks.restore_name('a' * 253, when)
    assert len(long_name) == 253 and long_name.endswith('-restore-20261126080102')


@pytest.mark.parametrize('power, refused', [(states.SHUTDOWN, False), (states.NOSTATE, False), (states.RUNNING, True), (states.PAUSED, True)])
def test_restore_refusal_names_the_state(power, refused):
    why = ks.restore_refusal(power, 'Running' if refused else 'Stopped')
    assert bool(why) == refused
    if refused:
        assert power in why and 'stopped VM only' in why


class FakeObserver:
    def __init__(self, snaps, power=states.SHUTDOWN):
        self.snaps, self.power = snaps, power
        self.namespace, self.vm = 'demo', 'web'
        self.obs = {'status': 'Running' if power == states.RUNNING else 'Stopped'}

    def snapshots(self):
        return [ks.actual_snapshot(obj) for obj in self.snaps], None

    def power_state(self):
        return self.power


def declared(**kwargs):
    base = dict(state='present', name='s1', description=None, memory=None, children=False, keep_last=None, safety_snapshot=True)
    base.update(kwargs)
    return base


def test_refuse_or_plan_refuses_libvirt_only_and_running_restore():
    observer = FakeObserver([vmsnapshot('s1')], power=states.RUNNING)
    with pytest.raises(InvalidDeclaration) as err:
        ks.refuse_or_plan(observer, declared(memory=True), None)
    assert err.value.field == 'memory'
    with pytest.raises(InvalidDeclaration) as err:
        ks.refuse_or_plan(observer, declared(state='absent', children=True), None)
    assert err.value.field == 'children'
    with pytest.raises(DataSafetyRefusal) as err:
        ks.refuse_or_plan(observer, declared(state='restored'), 's1-before-restore-x')
    assert 'RUNNING' in err.value.message and err.value.details['power_state'] == states.RUNNING
    steps, _snaps = ks.refuse_or_plan(observer, declared(state='absent'), None)  # deleting from a running VM is fine
    assert [(step.op, step.name) for step in steps] == [(sn.DELETE, 's1')]


def test_keep_last_plans_by_creation_time():
    snaps = [vmsnapshot('zz', created='2026-11-26T08:00:00Z'), vmsnapshot('aa', created='2026-11-26T08:00:09Z')]
    steps, _snaps = ks.refuse_or_plan(FakeObserver(snaps), declared(name='mm', keep_last=2), None)
    assert [(step.op, step.name) for step in steps] == [(sn.CREATE, 'mm'), (sn.DELETE, 'zz')]


def test_plan_action():
    assert ks.plan_action([sn.SnapshotStep(sn.CREATE, 'a', ()), sn.SnapshotStep(sn.RESTORE, 'b', ())]) == 'restore_snapshot'
    assert ks.plan_action([sn.SnapshotStep(sn.CREATE, 'a', ()), sn.SnapshotStep(sn.DELETE, 'b', ())]) == 'snapshot'
    assert ks.plan_action([sn.SnapshotStep(sn.DELETE, 'b', ())]) == 'delete_snapshot'


class FakeClient:
    """get answers from a script of statuses for the snapshot being waited for."""

    def __init__(self, statuses):
        self.statuses = list(statuses)
        self.created = []

    def create(self, _api, _ns, plural, body):
        self.created.append((plural, body))
        return body

    def get(self, _api, _ns, _plural, name):
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return None if status is None else dict(vmsnapshot(name), status=status)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def runner(client, timeout=10):
    observer = FakeObserver([])
    observer.client = client
    clock = Clock()
    return ks.Runner(observer, wait_timeout=timeout, deletion_policy='retain', owner='me', clock=clock, sleep=clock.sleep)


def test_create_waits_until_ready():
    client = FakeClient([{}, {'phase': 'InProgress'}, {'phase': 'Succeeded', 'readyToUse': False}, {'phase': 'Succeeded', 'readyToUse': True}])
    run = runner(client)
    run.create(sn.SnapshotStep(sn.CREATE, 's1', (('description', 'd'),)))
    assert client.created[0][1]['spec']['deletionPolicy'] == 'retain'
    assert client.statuses == [{'phase': 'Succeeded', 'readyToUse': True}]  # polled through every earlier status


def test_create_failure_and_timeout_name_the_snapshot():
    with pytest.raises(BackendError) as err:
        runner(FakeClient([{'phase': 'Failed', 'error': {'message': 'no VolumeSnapshotClass'}}])).create(sn.SnapshotStep(sn.CREATE, 's1', ()))
    assert 'no VolumeSnapshotClass' in err.value.message and 's1' in err.value.message
    with pytest.raises(WaitTimeout) as err:
        runner(FakeClient([{'phase': 'InProgress'}]), timeout=3).create(sn.SnapshotStep(sn.CREATE, 's1', ()))
    assert 'wait_timeout 3' in err.value.message and 'Creating' in err.value.message


def test_kubevirt_options_refused_on_libvirt_and_libvirt_options_on_kubevirt():
    base = dict(backend='libvirt', children=False)
    for key, value in (('wait_timeout', 5), ('deletion_policy', 'retain'), ('kubeconfig', '/k')):
        with pytest.raises(InvalidDeclaration) as err:
            snapshot.refuse_other_backend(dict(base, **{key: value}))
        assert err.value.field == key
    kube = dict(backend='kubevirt', children=False)
    for key, value in (('uri', 'qemu:///system'), ('memory', False), ('children', True), ('wait_timeout', 0)):
        with pytest.raises(InvalidDeclaration) as err:
            snapshot.refuse_other_backend(dict(kube, **{key: value}))
        assert err.value.field == key
    snapshot.refuse_other_backend(dict(kube, wait_timeout=60))
    with pytest.raises(InvalidDeclaration) as err:
        snapshot_info.refuse_other_backend({'backend': 'libvirt', 'vm': None})
    assert err.value.field == 'vm'
    snapshot_info.refuse_other_backend({'backend': 'kubevirt', 'vm': None})


@pytest.mark.parametrize('value', ['', 'Web', 'a_b', '-a', 'a' * 254])
def test_kubernetes_names_refused_naming_the_field(value):
    with pytest.raises(InvalidDeclaration) as err:
        snapshot.check_kubernetes_name('name', value)
    assert err.value.field == 'name'


def test_kubevirt_safety_name_is_a_subdomain():
    when = datetime.datetime(2026, 11, 23, 21, 5, 9, tzinfo=datetime.timezone.utc)
    name = snapshot.safety_name('s1', when, kubernetes=True)
    assert name == 's1-before-restore-20261123210509'
    snapshot.check_kubernetes_name('safety', name)
    assert len(snapshot.safety_name('a' * 253, when, kubernetes=True)) == 253


class RecordingStore(tasks.MemoryTaskStore):
    """A MemoryTaskStore that keeps every record written."""

    def __init__(self, record):
        super().__init__(record)
        self.written = []

    def compare_and_swap(self, expected_version, record):
        done = super().compare_and_swap(expected_version, record)
        if done:
            self.written.append(record)
        return done


def task_runner(statuses, timeout=300):
    run = runner(FakeClient(statuses), timeout=timeout)
    store = RecordingStore(tasks.TaskRecord(vm_state='STOPPED'))
    run.observer.store = lambda: store
    return run, store


def test_run_holds_the_task_renews_it_while_waiting_and_releases_it():
    # InProgress for 100 polls of 0.5 s: 50 s of waiting, more than RENEW_EVERY
    run, store = task_runner([{'phase': 'InProgress'}] * 100 + [{'phase': 'Succeeded', 'readyToUse': True}])
    done = run.run([sn.SnapshotStep(sn.CREATE, 's1', (('description', None),))])
    assert done == [{'op': sn.CREATE, 'snapshot': 's1', 'description': None}]
    assert store.written[0].task_state == 'IMAGE_SNAPSHOT' and store.written[0].action == 'snapshot'
    leases = [rec.lease_until for rec in store.written if rec.task_state == 'IMAGE_SNAPSHOT']
    assert len(leases) >= 2 and leases == sorted(leases) and leases[-1] > leases[0]  # renewed while it waited
    assert store.record.idle() and store.record.vm_state == 'STOPPED'


def test_run_abandons_the_task_when_a_step_fails():
    run, store = task_runner([{'phase': 'Failed'}])
    with pytest.raises(BackendError):
        run.run([sn.SnapshotStep(sn.CREATE, 's1', ())])
    assert store.written[0].task_state == 'IMAGE_SNAPSHOT'
    assert store.record.idle() and store.record.vm_state == 'STOPPED'


@pytest.mark.parametrize('value, seconds', [('90', 90), ('90s', 90), ('30m', 1800), ('12h', 43200), ('7d', 604800), ('2w', 1209600), (None, None)])
def test_older_than_durations(value, seconds):
    assert snapshot.parse_older_than(value) == seconds


@pytest.mark.parametrize('value', ['0d', '-1d', '7y', 'soon', ''])
def test_bad_older_than_is_refused_naming_it(value):
    with pytest.raises(InvalidDeclaration) as err:
        snapshot.parse_older_than(value)
    assert err.value.field == 'older_than'


def test_older_than_deletes_only_observed_older_others_once():
    day = 86400.0
    now = 100 * day
    snaps = [sn.ActualSnapshot(name, created, None, (), 'shutoff', False, None)
             for name, created in (('young', now - day), ('old', now - 9 * day), ('older', now - 20 * day), ('me', now - 30 * day))]
    keep_step = sn.SnapshotStep(sn.DELETE, 'older', (('children', False), ('reason', 'keep_last 2')))
    steps = snapshot.add_older_than([keep_step], snaps, {'state': 'present', 'name': 'me', 'older_than': '7d'}, now=now)
    # 'older' is deleted by keep_last already; 'me' is the declared one; 'young' is within 7 days
    assert [(step.op, step.name, dict(step.detail).get('reason')) for step in steps] == [
        (sn.DELETE, 'older', 'keep_last 2'), (sn.DELETE, 'old', 'older_than 7d')]
    assert snapshot.add_older_than([], snaps, {'state': 'present', 'name': 'me', 'older_than': None}, now=now) == []
    with pytest.raises(InvalidDeclaration) as err:
        snapshot.add_older_than([], snaps, {'state': 'absent', 'name': 'me', 'older_than': '1d'}, now=now)
    assert err.value.field == 'older_than'


@pytest.mark.parametrize('value, seconds', [('5m0s', 300.0), ('300s', 300.0), ('1h2m3s', 3723.0), ('1.5s', 1.5), ('250ms', 0.25),
                                            ('', None), ('5 minutes', None), ('5m0', None), (None, None), (300, None)])
def test_go_durations(value, seconds):
    assert ks.parse_go_duration(value) == seconds


def test_failure_deadline_is_written_read_and_ends_the_wait():
    assert ks.failure_deadline_of(vmsnapshot('s')) == ks.DEFAULT_FAILURE_DEADLINE
    declared_one = dict(vmsnapshot('s'), spec={'failureDeadline': '90s'})
    assert ks.failure_deadline_of(declared_one) == 90 and ks.public_snapshot(declared_one)['failure_deadline'] == 90
    assert ks.snapshot_body('s', 'demo', 'web', failure_deadline=90)['spec']['failureDeadline'] == '90s'
    assert 'failureDeadline' not in ks.snapshot_body('s', 'demo', 'web')['spec']

    class DeadlineClient(FakeClient):
        def get(self, _api, _ns, _plural, name):
            snap = vmsnapshot(name, created='1970-01-01T00:16:40Z', status={'phase': 'InProgress'})  # created at the clock's 1000
            snap['spec']['failureDeadline'] = '5s'
            return snap
    run = runner(DeadlineClient([{}]), timeout=60)
    run.failure_deadline = 5
    with pytest.raises(BackendError) as err:
        run.create(sn.SnapshotStep(sn.CREATE, 's1', ()))
    assert 'failureDeadline of 5 s' in err.value.message and run.clock() < 1000 + 60, 'ended at the deadline, not at wait_timeout'
    assert run.client.created[0][1]['spec']['failureDeadline'] == '5s'


class TargetClient:
    """A namespace with VMs (name -> annotations) and VirtualMachineRestores."""

    def __init__(self, vms, restores=()):
        self.vms, self.restores = vms, list(restores)

    def get(self, _api, _ns, plural, name):
        assert plural == 'virtualmachines'
        return None if name not in self.vms else {'metadata': {'name': name, 'annotations': self.vms[name]}}

    def list(self, _api, _ns, plural):
        assert plural == 'virtualmachinerestores'
        return self.restores


def test_restore_into_a_new_vm_plans_skips_or_refuses():
    observer = FakeObserver([vmsnapshot('base')], power=states.RUNNING)  # the source may run: it is not changed
    observer.client = TargetClient({'web': {}})
    steps, _snaps = ks.plan_restore_into_new_vm(observer, 'base', 'clone')
    assert steps == [sn.SnapshotStep(sn.RESTORE, 'base', (('target', 'clone'),))]
    body = ks.restore_body('r1', 'demo', 'web', 'base', 'clone')
    assert body['spec']['target']['name'] == 'clone' and body['metadata']['labels'][ks.TARGET_LABEL] == 'clone'
    restore = {'metadata': {'name': 'r1', 'uid': 'u1'}, 'spec': {'virtualMachineSnapshotName': 'base', 'target': {'name': 'clone'}}}
    observer.client = TargetClient({'web': {}, 'clone': {ks.LAST_RESTORE_ANNOTATION: 'r1-u1'}}, [restore])
    assert ks.plan_restore_into_new_vm(observer, 'base', 'clone')[0] == []
    observer.client = TargetClient({'web': {}, 'clone': {ks.LAST_RESTORE_ANNOTATION: 'other-u2'}}, [restore])
    with pytest.raises(DataSafetyRefusal) as err:
        ks.plan_restore_into_new_vm(observer, 'base', 'clone')
    assert 'clone' in err.value.message and 'not made by a restore of snapshot base' in err.value.message
    with pytest.raises(InvalidDeclaration) as err:
        ks.plan_restore_into_new_vm(observer, 'ghost', 'clone')
    assert err.value.field == 'name'


@pytest.mark.parametrize('args, field', [({'target_vm': 'clone'}, 'target_vm'), ({'state': 'restored', 'target_vm': 'Not_A_Name'}, 'target_vm'),
                                         ({'failure_deadline': 'soon'}, 'failure_deadline')])
def test_target_vm_and_failure_deadline_refused_naming_them(args, field):
    params = dict(backend='kubevirt', vm='web', name='s1', state='present', namespace='demo', safety_snapshot=True, older_than=None)
    params.update(args)
    with pytest.raises(InvalidDeclaration) as err:
        snapshot.run_kubevirt(None, params, check_mode=True)
    assert err.value.field == field
