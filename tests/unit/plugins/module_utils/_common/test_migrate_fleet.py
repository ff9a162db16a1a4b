# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""migrate.migrate_fleet: the one loop of a fleet migration (names), for every backend, on an in-memory fleet."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common import migrate


class Run:
    def __init__(self, fleet, key, target):
        self.fleet, self.key, self.target = fleet, key, target

    def converge(self):
        self.fleet.ran.append((self.key, self.target))
        if self.key in self.fleet.raising:
            raise self.fleet.raising[self.key]
        return {'name': self.key, 'changed': True, 'failed': False, 'target': self.target}


class Fleet(migrate.FleetMigration):
    def __init__(self, targets=None, raising=None):
        self.placed = targets
        self.raising = raising or {}
        self.ran = []
        self.asked_targets = []

    def keys(self, entries):
        for index, entry in enumerate(entries):
            if not entry:
                raise InvalidDeclaration('names[%d]' % index, 'is empty')
        return list(entries)

    def label(self, key):
        return 'ns/' + key

    def targets(self, keys):
        self.asked_targets.append(list(keys))
        return self.placed

    def migration(self, key, target):
        return Run(self, key, target)

    def failed(self, key, target, fields):
        return dict(fields, name=key, target=target, changed=False, failed=True)


def test_every_vm_runs_in_order_with_its_target():
    fleet = Fleet({'a': 'h1', 'b': 'h2'})
    results = migrate.migrate_fleet(fleet, ['a', 'b'], parallel=2)
    assert [(r['name'], r['target'], r['failed']) for r in results] == [('a', 'h1', False), ('b', 'h2', False)]
    assert sorted(fleet.ran) == [('a', 'h1'), ('b', 'h2')]


def test_a_backend_that_places_each_migration_itself_gets_no_target():
    fleet = Fleet(None)
    assert [r['target'] for r in migrate.migrate_fleet(fleet, ['a', 'b'], parallel=1)] == [None, None]


def test_a_vm_named_twice_is_refused_before_anything_runs_naming_every_duplicate():
    fleet = Fleet({'a': 'h1', 'b': 'h1'})
    with pytest.raises(InvalidDeclaration) as err:
        migrate.migrate_fleet(fleet, ['b', 'a', 'b', 'a', 'c'], parallel=2)
    assert err.value.field == 'names' and err.value.reason == 'a VM is named more than once: ns/a, ns/b'
    assert fleet.ran == [] and fleet.asked_targets == [], 'nothing placed, nothing migrated'


def test_a_bad_entry_is_refused_by_the_backend_naming_it():
    fleet = Fleet({'a': 'h1'})
    with pytest.raises(InvalidDeclaration) as err:
        migrate.migrate_fleet(fleet, ['a', ''], parallel=1)
    assert err.value.field == 'names[1]' and fleet.ran == []


def test_a_vm_no_target_fits_fails_alone_and_changes_nothing():
    fleet = Fleet({'a': None, 'b': 'h2'})
    first, second = migrate.migrate_fleet(fleet, ['a', 'b'], parallel=1)
    assert first == {'name': 'ns/a', 'changed': False, 'failed': True, 'phase': None, 'phases': [], 'reason': None,
                     'msg': "no target host fits VM 'ns/a' (all draining, unreachable or without enough free memory)"}
    assert second['failed'] is False and fleet.ran == [('b', 'h2')]


def test_a_migration_that_raises_is_the_backends_failed_result_and_the_others_still_run():
    fleet = Fleet({'a': 'h1', 'b': 'h2', 'c': 'h3'}, raising={'a': BackendError('target gone', phase='Failed'), 'b': KeyError('x')})
    a, b, c = migrate.migrate_fleet(fleet, ['a', 'b', 'c'], parallel=3)
    assert a == {'msg': 'target gone', 'phase': 'Failed', 'name': 'a', 'target': 'h1', 'changed': False, 'failed': True}
    assert b['failed'] and b['target'] == 'h2' and b['msg'].startswith('unexpected error (KeyError')
    assert c['failed'] is False and ('c', 'h3') in fleet.ran


def test_the_backends_fleets_name_their_vms_as_before():
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as lmb
    with pytest.raises(InvalidDeclaration) as err:   # 'a' and 'default/a' are the same VM
        kmb.migrate_many(None, 'default', ['a', 'default/a'], None, check_mode=True, parallel=1)
    assert err.value.field == 'names' and err.value.reason == 'a VM is named more than once: default/a'
    with pytest.raises(InvalidDeclaration) as err:
        kmb.migrate_many(None, 'default', ['a', 'x/y/z'], None, check_mode=True, parallel=1)
    assert err.value.field == 'names[1]'
    kube = kmb.KubevirtFleet(type('Client', (), {'redact': staticmethod(lambda text: text.replace('s3cret', '********'))})(), 'default', None, True)
    assert kube.failed(('prod', 'a'), None, {'msg': 'token s3cret refused'}) == {
        'msg': 'token ******** refused', 'name': 'a', 'namespace': 'prod', 'changed': False, 'failed': True}
    virt = lmb.LibvirtFleet(('qemu:///system', None, None), ['qemu+tcp://root:pw@h2/system'], None, True)
    assert virt.failed('a', 'qemu+tcp://root:pw@h2/system', {'msg': 'boom'}) == {
        'msg': 'boom', 'name': 'a', 'changed': False, 'failed': True, 'target_uri': 'qemu+tcp://root:********@h2/system'}
