# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every acting task appends begin/end records to the audit journal: vm steps, volume create/grow/delete,
attach/detach (under the VM's task), snapshots, migrations and a host's drain mark; no record carries a secret."""

from __future__ import annotations

import json
import types

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import journal, volume_driver
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
from ansible_collections.converge.virt.plugins.module_utils._libvirt import attachments, drain, migration_backend, snapshots
from ansible_collections.converge.virt.plugins.module_utils._phase import migration, volumes as phase
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import MemoryTaskStore, TaskRecord
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_backend import InMemoryVolumes, VolumeWorld

GIB = 1024 ** 3


@pytest.fixture(name='records')
def records_fixture(tmp_path, monkeypatch):
    path = tmp_path / 'journal.jsonl'
    monkeypatch.setenv(journal.AUDIT_JOURNAL_ENV, str(path))

    def read():
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]
    return read


def brief(entries, obj_key):
    return [(e['event'], e[obj_key], e['action'], e.get('target'), e.get('outcome')) for e in entries]


def test_an_interval_writes_begin_and_end_with_the_outcome(records):
    with journal.Interval('web-1', 't1', 'start', target='ACTIVE'):
        pass
    with pytest.raises(ValueError):
        with journal.Interval('web-1', 't2', 'stop', target='STOPPED'):
            raise ValueError('boom')
    got = records()
    assert brief(got, 'vm') == [('begin', 'web-1', 'start', 'ACTIVE', None), ('end', 'web-1', 'start', 'ACTIVE', 'done'),
                                ('begin', 'web-1', 'stop', 'STOPPED', None), ('end', 'web-1', 'stop', 'STOPPED', 'failed')]
    assert [e['task_id'] for e in got] == ['t1', 't1', 't2', 't2'] and all(e['kind'] == 'vm' for e in got)


@pytest.mark.parametrize('field', ['password', 'target_password', 'api_token', 'client_secret', 'private_key'])
def test_a_field_named_as_a_secret_is_refused_and_nothing_is_written(records, field):
    with pytest.raises(BackendError) as refused:
        journal.append('begin', 'web-1', 't1', 'start', **{field: 'hunter2'})
    assert field in refused.value.message and records() == []


def test_only_scalars_and_known_events_and_kinds_are_written(records):
    with pytest.raises(BackendError) as refused:
        journal.append('begin', 'web-1', 't1', 'start', target={'nested': 'x'})
    assert 'target' in refused.value.message
    with pytest.raises(BackendError) as refused:
        journal.append('middle', 'web-1', 't1', 'start')
    assert 'event' in refused.value.message
    with pytest.raises(BackendError) as refused:
        journal.append('begin', 'web-1', 't1', 'start', kind='cluster')
    assert 'kind' in refused.value.message
    assert records() == []


def test_volume_create_grow_delete_are_journaled(records):
    world = VolumeWorld(running={'web': False})
    volume_driver.converge_volumes(InMemoryVolumes(world), [{'key': 'p/a', 'state': 'present', 'capacity': GIB, 'attachments': None}])
    volume_driver.converge_volumes(InMemoryVolumes(world), [{'key': 'p/a', 'state': 'present', 'capacity': 2 * GIB, 'attachments': None}])
    volume_driver.converge_volumes(InMemoryVolumes(world), [{'key': 'p/a', 'state': 'absent', 'capacity': None, 'attachments': None}])
    got = records()
    assert all(e['kind'] == 'volume' for e in got)
    assert [(e['event'], e['volume'], e['action'], e.get('outcome')) for e in got] == [
        ('begin', 'p/a', phase.CREATE, None), ('end', 'p/a', phase.CREATE, 'done'),
        ('begin', 'p/a', phase.GROW, None), ('end', 'p/a', phase.GROW, 'done'),
        ('begin', 'p/a', phase.DELETE, None), ('end', 'p/a', phase.DELETE, 'done')]
    assert got[2]['target'] == str(2 * GIB) and got[4]['target'] == 'absent'
    assert len(set(e['task_id'] for e in got)) == 3


def test_a_failed_volume_operation_ends_failed_and_the_ones_never_reached_end_not_run(records):
    world = VolumeWorld(running={'web': False})
    world.fail[('create_volume', 'p/b')] = BackendError('pool p is full')
    specs = [{'key': key, 'state': 'present', 'capacity': GIB, 'attachments': None} for key in ('p/a', 'p/b', 'p/c')]
    volume_driver.converge_volumes(InMemoryVolumes(world), specs)
    ends = dict((e['volume'], e['outcome']) for e in records() if e['event'] == 'end')
    assert ends == {'p/a': 'done', 'p/b': 'failed', 'p/c': 'not_run'}


def test_check_mode_journals_nothing(records):
    world = VolumeWorld(running={'web': False})
    volume_driver.converge_volumes(InMemoryVolumes(world), [{'key': 'p/a', 'state': 'present', 'capacity': GIB, 'attachments': None}],
                                   check_mode=True)
    assert records() == []


class _Store(MemoryTaskStore):
    def __init__(self, *_args, **_kwargs):
        super().__init__(TaskRecord(vm_state='ACTIVE'))


def test_an_attach_and_a_failed_detach_are_journaled_under_the_vms_task(records, monkeypatch):
    monkeypatch.setattr(attachments, 'LibvirtTaskStore', _Store)
    view = types.SimpleNamespace(dom=object(), name='web-1', inferred_vm_state=lambda: 'ACTIVE')
    with attachments.VmTask(types.SimpleNamespace(conn=None), view, 'attach_volume', 'me', volume='p/data'):
        pass
    with pytest.raises(BackendError):
        with attachments.VmTask(types.SimpleNamespace(conn=None), view, 'detach_volume', 'me', volume='p/data'):
            raise BackendError('detach refused')
    assert brief(records(), 'vm') == [('begin', 'web-1', 'attach_volume', 'p/data', None), ('end', 'web-1', 'attach_volume', 'p/data', 'done'),
                                      ('begin', 'web-1', 'detach_volume', 'p/data', None),
                                      ('end', 'web-1', 'detach_volume', 'p/data', 'failed')]


def test_a_snapshot_task_is_journaled(records, monkeypatch):
    monkeypatch.setattr(snapshots, 'LibvirtTaskStore', _Store)
    observer = types.SimpleNamespace(connection=types.SimpleNamespace(conn=None), dom=object(), vm='web-1', inferred_vm_state=lambda: 'ACTIVE')
    with snapshots.SnapshotTask(observer, 'snapshot', owner='me'):
        pass
    assert brief(records(), 'vm') == [('begin', 'web-1', 'snapshot', None, None), ('end', 'web-1', 'snapshot', None, 'done')]


def _migration(monkeypatch, phase_after, fail=False):
    monkeypatch.setattr(migration_backend, 'LibvirtTaskStore', _Store)
    monkeypatch.setattr(migration_backend, 'vm_view', lambda dom: {'effective_vm_state': 'ACTIVE'})
    run = migration_backend.Migration.__new__(migration_backend.Migration)
    run.name, run.owner, run.phase = 'web-1', 'me', None
    run.source = types.SimpleNamespace(conn=None)
    run.target_uri = 'qemu+tcp://root:hunter2@10.0.0.2/system'
    run.opts = types.SimpleNamespace(action='live_migrate', wait_timeout=60, completion_timeout=None)

    def held(*_args):
        if fail:
            raise BackendError('destination gone')
        run.phase = phase_after
        return {'phase': phase_after}
    run._run_held = held  # pylint: disable=protected-access
    return run


@pytest.mark.parametrize('phase_after, fail, outcome', [(migration.SUCCEEDED, False, 'done'), (migration.FAILED, False, 'failed'),
                                                        (None, True, 'failed')])
def test_a_migration_is_journaled_with_its_target_host_and_no_password(records, monkeypatch, phase_after, fail, outcome):
    run = _migration(monkeypatch, phase_after, fail)
    if fail:
        with pytest.raises(BackendError):
            run._run(object())  # pylint: disable=protected-access
    else:
        run._run(object())  # pylint: disable=protected-access
    got = records()
    expected = [('begin', 'web-1', 'live_migrate', None), ('end', 'web-1', 'live_migrate', outcome)]
    assert [(e['event'], e['vm'], e['action'], e.get('outcome')) for e in got] == expected
    assert '10.0.0.2' in got[0]['target'] and all('hunter2' not in json.dumps(e) for e in got)


class _DrainConn:
    def __init__(self):
        self.secrets = []

    def getURI(self):
        return 'qemu+tcp://10.0.0.3/system'

    def secretLookupByUsage(self, _kind, _usage):
        if not self.secrets:
            raise drain.libvirt.libvirtError('no secret')
        return types.SimpleNamespace(undefine=self.secrets.clear)

    def secretDefineXML(self, xml, _flags):
        self.secrets.append(xml)


def test_a_hosts_drain_and_undrain_are_journaled(records):
    conn = _DrainConn()
    assert drain.set_drain_mark(conn, 'maintenance', 'me') is True
    assert drain.set_drain_mark(conn, 'maintenance', 'me') is False  # already marked: nothing acted, nothing journaled
    assert drain.clear_drain_mark(conn) is True
    got = records()
    assert [(e['event'], e['kind'], e['host'], e['action'], e.get('outcome')) for e in got] == [
        ('begin', 'host', 'qemu+tcp://10.0.0.3/system', 'drain', None), ('end', 'host', 'qemu+tcp://10.0.0.3/system', 'drain', 'done'),
        ('begin', 'host', 'qemu+tcp://10.0.0.3/system', 'undrain', None), ('end', 'host', 'qemu+tcp://10.0.0.3/system', 'undrain', 'done')]
