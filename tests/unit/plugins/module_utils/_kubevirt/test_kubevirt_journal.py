"""KubeVirt attach/detach, snapshot and migration tasks write their interval to the audit journal.

Each acting task appends ``begin`` once it holds the VM's task (the annotations of the VirtualMachine) and ``end``
(``done`` / ``failed``) before it lets the task go, under the VM's name and the task's id: the chaos checker
proves from these records that no two acting tasks held one VM at once. The backends run here against an
in-memory VirtualMachine (annotations with a resourceVersion); the KubeVirt work itself is a stub that looks at
the journal and the task record while it runs.
"""

import copy
import json
import subprocess
import socket
import sys
import types

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import journal
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, TaskConflict
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_options
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshots as ksnap
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_backend as kvb
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import Conflict
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.taskstore import KubevirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as sphase
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as vphase

TASK_ID = 'converge.virt/task-id'


class OneVm:
    """One VirtualMachine ``a`` (annotations, resourceVersion): what the task store reads and patches."""

    def __init__(self, vm_state='ACTIVE'):
        self.vm = {'metadata': {'name': 'a', 'resourceVersion': '1', 'annotations': {'converge.virt/vm-state': vm_state}},
                   'spec': {}, 'status': {}}

    def get(self, *args):
        del args
        return copy.deepcopy(self.vm)

    def merge_patch(self, api, namespace, plural, name, patch, dry_run=False):
        del api, namespace, plural, name, dry_run
        meta = patch['metadata']
        if meta.get('resourceVersion') not in (None, self.vm['metadata']['resourceVersion']):
            raise Conflict('conflict', code=409)
        for key, value in meta.get('annotations', {}).items():
            if value is None:
                self.vm['metadata']['annotations'].pop(key, None)
            else:
                self.vm['metadata']['annotations'][key] = value
        self.vm['metadata']['resourceVersion'] = str(int(self.vm['metadata']['resourceVersion']) + 1)
        return copy.deepcopy(self.vm)

    def task(self):
        return self.vm['metadata']['annotations'].get(TASK_ID)


@pytest.fixture(name='records')
def _records(tmp_path, monkeypatch):
    path = tmp_path / 'audit.jsonl'
    monkeypatch.setenv(journal.AUDIT_JOURNAL_ENV, str(path))

    def read():
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return read


def _events(records):
    return [(r['event'], r['kind'], r['vm'], r['action'], r.get('outcome')) for r in records]


# -- attach / detach -----------------------------------------------------------------------------------------------

def _executor(client):
    world = types.SimpleNamespace(vm_observation=lambda name: {'effective_vm_state': 'ACTIVE'})
    return kvb.Executor(client, 'ns', world, [])


@pytest.mark.parametrize('kind, action', [(vphase.ATTACH_LIVE, 'attach_volume'), (vphase.DETACH_LIVE, 'detach_volume')])
def test_attach_and_detach_journal_their_interval_while_they_hold_the_vm(records, kind, action):
    client = OneVm()
    executor = _executor(client)
    seen = {}

    def work(group):
        # inside the interval: the begin is written and the task is held, with the same id
        seen['records'], seen['task'] = records(), client.task()
        return {'group': len(group)}
    setattr(executor, 'detach' if action == 'detach_volume' else 'attach', work)
    op = types.SimpleNamespace(kind=kind, vm='a', volume='data')
    assert executor.run_group([op]) == {'group': 1}
    assert _events(seen['records']) == [('begin', 'vm', 'a', action, None)]
    assert seen['records'][0]['task_id'] == seen['task'] and seen['records'][0]['target'] == 'data'
    after = records()
    assert _events(after) == [('begin', 'vm', 'a', action, None), ('end', 'vm', 'a', action, 'done')]
    assert after[1]['task_id'] == seen['task'] and client.task() is None


def test_a_failed_attach_ends_its_interval_failed(records):
    client = OneVm()
    executor = _executor(client)

    def work(group):
        raise BackendError('hotplug refused by virt-api')
    executor.attach = work
    with pytest.raises(BackendError):
        executor.run_group([types.SimpleNamespace(kind=vphase.ATTACH_LIVE, vm='a', volume='data')])
    assert _events(records()) == [('begin', 'vm', 'a', 'attach_volume', None), ('end', 'vm', 'a', 'attach_volume', 'failed')]
    assert client.task() is None


def test_a_task_that_is_not_taken_writes_nothing(records):
    client = OneVm()
    tasks.take_task(KubevirtTaskStore(client, 'ns', 'a'), 'stop', 'other', 1e12, owner='elsewhere:1')
    executor = _executor(client)
    executor.attach = lambda group: pytest.fail('ran without the task')
    with pytest.raises(TaskConflict):
        executor.run_group([types.SimpleNamespace(kind=vphase.ATTACH_LIVE, vm='a', volume='data')])
    assert records() == []


# -- snapshots ------------------------------------------------------------------------------------------------------

def _runner(client):
    observer = types.SimpleNamespace(client=client, namespace='ns', vm='a',
                                     store=lambda: KubevirtTaskStore(client, 'ns', 'a', inferred_vm_state='ACTIVE'))
    return ksnap.Runner(observer, wait_timeout=5)


@pytest.mark.parametrize('op, action', [(sphase.CREATE, 'snapshot'), (sphase.DELETE, 'delete_snapshot'), (sphase.RESTORE, 'restore_snapshot')])
def test_snapshot_runs_journal_one_interval_under_the_vm_task(records, op, action):
    client = OneVm()
    runner = _runner(client)
    seen = []

    def step_run(step):
        seen.append((_events(records()), client.task(), records()[0]['task_id']))
        return {}
    monkey = {sphase.CREATE: 'create', sphase.DELETE: 'delete', sphase.RESTORE: 'restore'}[op]
    setattr(runner, monkey, step_run)
    steps = [types.SimpleNamespace(op=op, name='s1', detail=()), types.SimpleNamespace(op=op, name='s2', detail=())]
    assert len(runner.run(steps)) == 2
    assert [(events, task == begun) for events, task, begun in seen] == [([('begin', 'vm', 'a', action, None)], True)] * 2
    after = records()
    assert _events(after) == [('begin', 'vm', 'a', action, None), ('end', 'vm', 'a', action, 'done')]
    assert after[0]['target'] == after[1]['target'] == '%s:s1,%s:s2' % (op, op)
    assert after[0]['task_id'] == after[1]['task_id'] == seen[0][1] and client.task() is None


def test_a_failed_snapshot_step_ends_the_interval_failed(records):
    client = OneVm()
    runner = _runner(client)

    def fail(step):
        raise BackendError('snapshot s1 failed: no VolumeSnapshotClass')
    runner.create = fail
    with pytest.raises(BackendError):
        runner.run([types.SimpleNamespace(op=sphase.CREATE, name='s1', detail=())])
    assert _events(records()) == [('begin', 'vm', 'a', 'snapshot', None), ('end', 'vm', 'a', 'snapshot', 'failed')]
    assert client.task() is None


# -- migrations -----------------------------------------------------------------------------------------------------

def _migration(client, target_node='n2'):
    run = kmb.KubevirtMigration(client, 'ns', 'a', migration_options.KubevirtMigrationOptions(target_node=target_node))
    run._observe = lambda: {'exists': True, 'effective_vm_state': 'ACTIVE'}  # pylint: disable=protected-access
    return run


class Vmims(OneVm):
    """The VM and a migration object created for it (``fail``: the API server refuses the create)."""

    def __init__(self, fail=False):
        super().__init__()
        self.fail = fail

    def create(self, api, namespace, plural, body):
        del api, namespace, plural
        if self.fail:
            raise BackendError('503 from the API server')
        return {'metadata': {'name': 'a-converge-x', 'uid': 'u1', 'labels': body['metadata']['labels']}}


@pytest.mark.parametrize('succeeded', [True, False])
def test_a_migration_journals_begin_once_it_holds_the_task_and_end_before_it_closes_it(records, succeeded):
    client = Vmims()
    run = _migration(client)
    seen = {}

    def follow(uid, task_id, attached=False, lease_until=None):
        del uid, attached, lease_until
        seen['records'], seen['task'] = records(), client.task()
        run._close_task(task_id, succeeded)  # pylint: disable=protected-access
        seen['after_close'] = records()
        return {}
    run._follow = follow  # pylint: disable=protected-access
    run._start({'exists': True, 'effective_vm_state': 'ACTIVE'})  # pylint: disable=protected-access
    assert _events(seen['records']) == [('begin', 'vm', 'a', 'live_migrate', None)]
    assert seen['records'][0]['task_id'] == seen['task'] and seen['records'][0]['target'] == 'n2'
    outcome = 'done' if succeeded else 'failed'
    assert _events(seen['after_close']) == [('begin', 'vm', 'a', 'live_migrate', None), ('end', 'vm', 'a', 'live_migrate', outcome)]
    assert seen['after_close'][1]['task_id'] == seen['task'] and client.task() is None


def test_a_migration_the_api_server_refuses_ends_its_interval_failed(records):
    client = Vmims(fail=True)
    run = _migration(client, target_node=None)
    with pytest.raises(BackendError):
        run._start({'exists': True, 'effective_vm_state': 'ACTIVE'})  # pylint: disable=protected-access
    after = records()
    assert _events(after) == [('begin', 'vm', 'a', 'live_migrate', None), ('end', 'vm', 'a', 'live_migrate', 'failed')]
    assert after[0]['target'] == '' and client.task() is None


def _dead_owner():
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    child.wait()
    return '%s:%d' % (socket.gethostname(), child.pid)


@pytest.mark.parametrize('owner_alive', [True, False])
def test_an_adopted_migration_task_is_ended_in_the_journal_only_when_its_run_is_gone(records, owner_alive):
    # the run that began it writes its own end; a run that follows it after that run was killed closes it and ends it once
    client = Vmims()
    owner = '%s:%d' % (socket.gethostname(), 1) if owner_alive else _dead_owner()
    tasks.take_task(KubevirtTaskStore(client, 'ns', 'a'), 'live_migrate', 'started-by-other', 1e12, owner=owner)
    run = _migration(client)
    run._close_task('started-by-other', True)  # pylint: disable=protected-access
    assert client.task() is None
    if owner_alive:
        assert records() == []
    else:
        assert _events(records()) == [('end', 'vm', 'a', 'live_migrate', 'done')]
        assert records()[0]['task_id'] == 'started-by-other'
