# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placement of a list of VMs (migration with names / target_uris) and the migration module session, on fake connections."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.fake_module import Failed, FakeModule
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as mb
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_options, placement

GIB = 1024 * 1024  # KiB


class FakeDom:
    def __init__(self, name, memory_kib):
        self._name = name
        self.memory_kib = memory_kib

    def name(self):
        return self._name

    def info(self):
        return [1, self.memory_kib, self.memory_kib, 1, 0]


class FakeConn:
    def __init__(self, host):
        self.host = host

    def lookupByName(self, name):  # pylint: disable=invalid-name
        return self.host['doms'].get(name)

    def getFreeMemory(self):  # pylint: disable=invalid-name
        return self.host['free']

    def listAllDomains(self, flags):  # pylint: disable=invalid-name
        del flags
        return list(self.host['doms'].values())


def fake_world(monkeypatch, hosts):
    """Connection(uri, ...) opens ``hosts[uri]``; a uri not in ``hosts`` cannot be reached. Returns the list of opened uris."""
    opened = []

    class FakeConnection:
        def __init__(self, uri, username=None, password=None):
            del username, password
            if uri not in hosts:
                raise BackendError('cannot connect to %s' % uri)
            opened.append(uri)
            self.conn = FakeConn(hosts[uri])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(placement, 'Connection', FakeConnection)
    monkeypatch.setattr(mb, 'Connection', FakeConnection)
    monkeypatch.setattr(placement, 'drain_mark', lambda conn: {'reason': 'x'} if conn.host.get('draining') else None)
    return opened


def test_targets_by_free_memory_skip_draining_unreachable_and_keep_a_vm_where_it_already_is(monkeypatch):
    src = {'doms': {'big': FakeDom('big', 3 * GIB), 'small': FakeDom('small', 1 * GIB), 'moved': None}, 'free': 0}
    hosts = {'src': src,
             'a': {'doms': {'moved': FakeDom('moved', GIB)}, 'free': 4 * 1024 ** 3},
             'b': {'doms': {}, 'free': 3 * 1024 ** 3},
             'drained': {'doms': {}, 'free': 64 * 1024 ** 3, 'draining': True}}
    fake_world(monkeypatch, hosts)
    targets = placement.choose_targets(('src', None, None), ['small', 'big', 'moved', 'ghost'], ['down', 'drained', 'a', 'b'])
    # big (3 GiB) first onto a (4 GiB free, the most); small then fits only b (3 GiB free against 1 left on a)
    assert targets == {'big': 'a', 'small': 'b', 'moved': 'a', 'ghost': 'down'}


def test_a_vm_that_fits_nowhere_has_no_target(monkeypatch):
    hosts = {'src': {'doms': {'huge': FakeDom('huge', 8 * GIB)}, 'free': 0}, 'a': {'doms': {}, 'free': 1024 ** 3}}
    fake_world(monkeypatch, hosts)
    assert placement.choose_targets(('src', None, None), ['huge'], ['a']) == {'huge': None}
    results = mb.migrate_many(('src', None, None), ['huge'], ['a'], migration_options.MigrationOptions(), check_mode=True, parallel=2)
    assert results == [{'name': 'huge', 'changed': False, 'failed': True, 'phase': None, 'phases': [], 'reason': None,
                        'msg': "no target host fits VM 'huge' (all draining, unreachable or without enough free memory)"}]


def test_a_vm_named_twice_is_refused_before_any_host_is_opened(monkeypatch):
    opened = fake_world(monkeypatch, {'src': {'doms': {}, 'free': 0}})
    with pytest.raises(InvalidDeclaration) as err:
        mb.migrate_many(('src', None, None), ['a', 'b', 'a'], ['src'], migration_options.MigrationOptions(), check_mode=False, parallel=1)
    assert err.value.field == 'names' and 'a VM is named more than once: a' in err.value.message and opened == []


def test_the_session_uses_the_one_uri_default_and_hides_the_target_password(monkeypatch):
    monkeypatch.setenv('LIBVIRT_DEFAULT_URI', 'qemu+tcp://env-host/system')
    module = FakeModule({'uri': None, 'username': None, 'password': 'src-pw-1234', 'target_password': 'dst-pw-9876'})
    session = migration_options.MigrationSession(module)
    assert session.source_args() == ('qemu+tcp://env-host/system', None, 'src-pw-1234')
    monkeypatch.delenv('LIBVIRT_DEFAULT_URI')
    assert session.source_args()[0] == 'qemu:///system'
    result = session.redact_result({'msg': 'dst-pw-9876', 'results': [{'notes': ['src-pw-1234 and dst-pw-9876']}], 'n': 3})
    assert 'dst-pw-9876' not in repr(result) and 'src-pw-1234' not in repr(result) and result['n'] == 3
    with pytest.raises(Failed):
        with session:
            raise BackendError('target refused dst-pw-9876', uri='qemu+tcp://u:dst-pw-9876@h/system')
    assert 'dst-pw-9876' not in repr(module.failed) and module.failed['msg'].startswith('target refused')


@pytest.mark.parametrize('fields, expected', [
    ({}, ('LIVE', 'PERSIST_DEST', 'UNDEFINE_SOURCE', 'PEER2PEER')),
    ({'offline': True, 'undefine_source': False, 'peer_to_peer': False}, ('OFFLINE', 'PERSIST_DEST')),
    ({'persistent': False, 'auto_converge': True, 'post_copy': True, 'copy_storage': True},
     ('LIVE', 'UNDEFINE_SOURCE', 'AUTO_CONVERGE', 'POSTCOPY', 'NON_SHARED_DISK', 'PEER2PEER')),
])
def test_migration_flags_follow_the_options(fields, expected):
    libvirt = pytest.importorskip('libvirt')
    want = 0
    for word in expected:
        want |= getattr(libvirt, 'VIR_MIGRATE_' + word)
    assert migration_options.migration_flags(migration_options.MigrationOptions(**fields)) == want
