"""The KubeVirt backend's pure parts: the declared VirtualMachine, declared-fields-only comparison, the merge patch,
the task store's compare-and-swap (with a fake client) and the connection options' environment fallbacks."""

# pylint: disable=missing-function-docstring,too-few-public-methods

import copy
import os
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration, TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_manifest
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import Conflict, connection_params
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore, annotations_from_record
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks


def test_declared_vm_from_simple_options():
    params = {'name': 'a', 'vcpus': 2, 'memory': '1GiB', 'disks': [{'name': 'root', 'image': 'img'}, {'claim': 'data'}],
              'interfaces': [{}], 'instancetype': 'u1.small'}
    body = vm_manifest.declared_vm(params, 'ns')
    tspec = body['spec']['template']['spec']
    assert tspec['domain']['cpu'] == {'cores': 2} and tspec['domain']['resources']['requests']['memory'] == '1Gi'
    assert tspec['domain']['devices']['disks'] == [{'name': 'root', 'disk': {'bus': 'virtio'}}, {'name': 'disk1', 'disk': {'bus': 'virtio'}}]
    assert tspec['volumes'] == [{'name': 'root', 'containerDisk': {'image': 'img'}},
                                {'name': 'disk1', 'persistentVolumeClaim': {'claimName': 'data'}}]
    assert tspec['domain']['devices']['interfaces'] == [{'name': 'default', 'masquerade': {}}]
    assert tspec['networks'] == [{'name': 'default', 'pod': {}}]
    assert body['spec']['instancetype']['name'] == 'u1.small' and 'runStrategy' not in body['spec']
    created = vm_manifest.manifest_for_create(body)
    assert created['spec']['runStrategy'] == 'Halted' and 'runStrategy' not in body['spec']


@pytest.mark.parametrize('spec, field', [
    ({'memory': 'lots'}, 'memory'),
    ({'disks': [{'image': 'a', 'claim': 'b'}]}, 'disks[0]'),
    ({'disks': [{'pool': 'p', 'volume': 'v'}]}, 'disks[0].pool'),
    ({'disks': [{'name': 'Bad_Name', 'image': 'a'}]}, 'disks[0].name'),
    ({'disks': [{'name': 'x', 'image': 'a'}, {'name': 'x', 'claim': 'b'}]}, 'disks'),
    ({'interfaces': [{'bridge': 'br0'}]}, 'interfaces[0]'),
    ({'spec': {'running': True}}, 'spec.running'),
    ({'graphics': 'vnc'}, 'graphics'),
    ({'vcpus': 0}, 'vcpus'),
    ({'data_volume_templates': [{'spec': {}}]}, 'data_volume_templates[0]'),
])
def test_bad_declarations_name_the_field(spec, field):
    with pytest.raises(InvalidDeclaration) as info:
        vm_manifest.declared_vm(dict(spec, name='a'), 'ns')
    assert info.value.field == field


def test_create_needs_memory_or_instancetype():
    with pytest.raises(InvalidDeclaration) as info:
        vm_manifest.manifest_for_create(vm_manifest.declared_vm({'name': 'a'}, 'ns'))
    assert info.value.field == 'memory'
    assert vm_manifest.manifest_for_create(vm_manifest.declared_vm({'name': 'a', 'instancetype': 'u1'}, 'ns'))


def test_only_declared_fields_are_compared():
    want = vm_manifest.declared_vm({'name': 'a', 'vcpus': 1, 'memory': '64Mi', 'disks': [{'name': 'root', 'image': 'img'}]}, 'ns')['spec']
    have = copy.deepcopy(want)
    have['runStrategy'] = 'Always'
    have['template']['spec']['domain']['machine'] = {'type': 'q35'}
    have['template']['spec']['domain']['devices']['disks'][0]['bootOrder'] = 1
    have['template']['spec']['domain']['devices']['disks'].append({'name': 'cloudinit', 'disk': {}})
    have['template']['spec']['domain']['resources']['requests']['memory'] = '67108864'
    assert not vm_manifest.declared_differences(want, have)
    have['template']['spec']['domain']['cpu']['cores'] = 4
    assert vm_manifest.declared_differences(want, have) == [{'path': 'spec.template.spec.domain.cpu.cores', 'before': 4, 'after': 1}]


def test_merge_patch_keeps_what_was_not_declared():
    want = {'template': {'spec': {'domain': {'devices': {'disks': [{'name': 'root', 'disk': {'bus': 'sata'}}, {'name': 'new', 'disk': {}}]}}}}}
    have_disks = [{'name': 'ci', 'disk': {}}, {'name': 'root', 'disk': {'bus': 'virtio'}, 'bootOrder': 1}]
    have = {'template': {'spec': {'domain': {'devices': {'disks': have_disks}}}}}
    patch = vm_manifest.merged_for_patch(want, have)
    assert patch['template']['spec']['domain']['devices']['disks'] == [
        {'name': 'ci', 'disk': {}}, {'name': 'root', 'disk': {'bus': 'sata'}, 'bootOrder': 1}, {'name': 'new', 'disk': {}}]


def test_quantities():
    assert vm_manifest.quantity_bytes('64Mi') == vm_manifest.quantity_bytes(67108864) == vm_manifest.quantity_bytes('67108864')
    assert vm_manifest.quantity_bytes('1G') == 10 ** 9 and vm_manifest.quantity_bytes('abc') is None
    assert vm_manifest.memory_quantity(512) == '512Mi' and vm_manifest.memory_quantity('2GiB') == '2Gi' and vm_manifest.memory_quantity('64Mi') == '64Mi'


class FakeClient:
    """A VM object with a resourceVersion; ``interfere`` runs before each patch (another writer)."""

    def __init__(self):
        self.vm = {'metadata': {'name': 'a', 'resourceVersion': '1', 'annotations': {}}, 'spec': {}, 'status': {}}
        self.interfere = []

    def get(self, *args):
        del args
        return copy.deepcopy(self.vm)

    def merge_patch(self, api, namespace, plural, name, patch, dry_run=False):
        del api, namespace, plural, name, dry_run
        if self.interfere:
            self.interfere.pop(0)(self.vm)
        if patch['metadata']['resourceVersion'] != self.vm['metadata']['resourceVersion']:
            raise Conflict('conflict', code=409)
        for key, value in patch['metadata']['annotations'].items():
            if value is None:
                self.vm['metadata']['annotations'].pop(key, None)
            else:
                self.vm['metadata']['annotations'][key] = value
        self.bump(self.vm)
        return self.vm

    @staticmethod
    def bump(vm):
        vm['metadata']['resourceVersion'] = str(int(vm['metadata']['resourceVersion']) + 1)


def test_task_store_survives_status_writes_but_not_record_writes():
    client = FakeClient()
    store = KubevirtTaskStore(client, 'ns', 'a', inferred_vm_state='STOPPED')
    # the controller updates the status between our read and our write: retried, the task is taken
    client.interfere = [FakeClient.bump, FakeClient.bump]
    record = tasks.take_task(store, 'start', 't1', 100.0)
    assert record.task_state == 'STARTING'
    assert client.vm['metadata']['annotations']['converge.virt/task-id'] == 't1'
    # somebody else takes the VM between our read and our write: the swap fails, the take is a conflict
    client.vm['metadata']['annotations'] = {'converge.virt/vm-state': 'STOPPED'}

    def other(vm):
        vm['metadata']['annotations']['converge.virt/task-id'] = 'other'
        vm['metadata']['annotations']['converge.virt/task-state'] = 'STARTING'
        FakeClient.bump(vm)
    client.interfere = [other]
    with pytest.raises(TaskConflict):
        tasks.take_task(KubevirtTaskStore(client, 'ns', 'a'), 'start', 't2', 100.0)
    assert client.vm['metadata']['annotations']['converge.virt/task-id'] == 'other'


def test_finish_clears_the_task_annotations():
    client = FakeClient()
    store = KubevirtTaskStore(client, 'ns', 'a', inferred_vm_state='STOPPED')
    tasks.take_task(store, 'start', 't1', 100.0, lease_seconds=10)
    assert client.vm['metadata']['annotations']['converge.virt/lease-until'] == repr(110.0)
    tasks.finish_task(KubevirtTaskStore(client, 'ns', 'a'), 't1', vm_state='ACTIVE')
    assert client.vm['metadata']['annotations'] == {'converge.virt/vm-state': 'ACTIVE'}


def _dead_owner():
    """An owner string ("host:pid") of a process of this host that has exited."""
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    child.wait()
    return '%s:%d' % (socket.gethostname(), child.pid)


@pytest.mark.parametrize('owner_alive', [True, False])
def test_task_of_a_killed_run_is_stale_at_once(owner_alive):
    # as on libvirt: a task whose owner ran on this host and is gone loads with its lease ended, although the
    # recorded lease is still an hour away; a live owner's task keeps its lease
    client = FakeClient()
    owner = '%s:%d' % (socket.gethostname(), os.getppid()) if owner_alive else _dead_owner()
    client.vm['metadata']['annotations'] = annotations_from_record(tasks.TaskRecord(
        vm_state='STOPPED', task_state='STARTING', task_id='t1', action='start', lease_until=time.time() + 3600, owner=owner))
    record, _version = KubevirtTaskStore(client, 'ns', 'a').load()
    assert record.task_id == 't1' and record.task_state == 'STARTING'
    assert record.stale(time.time()) is not owner_alive
    if not owner_alive:
        assert record.lease_until == 0.0


def test_connection_env_fallbacks():
    env = {'K8S_AUTH_KUBECONFIG': '/k', 'K8S_AUTH_CONTEXT': 'c', 'K8S_AUTH_HOST': 'https://h', 'K8S_AUTH_API_KEY': 't',
           'K8S_AUTH_SSL_CA_CERT': '/ca', 'K8S_AUTH_VERIFY_SSL': 'no'}
    params = connection_params({}, env)
    assert params == {'kubeconfig': '/k', 'context': 'c', 'host': 'https://h', 'api_key': 't', 'ca_cert': '/ca', 'validate_certs': False}
    explicit = connection_params({'host': 'https://mine', 'validate_certs': True}, env)
    assert explicit['host'] == 'https://mine' and explicit['validate_certs'] is True
    assert connection_params({}, {})['validate_certs'] is None
