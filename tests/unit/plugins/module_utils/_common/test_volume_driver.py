# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared volume converge driver, run on the in-memory backend (no libvirt, no Kubernetes)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

from ansible_collections.converge.virt.plugins.module_utils._common import volume_driver
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, WaitTimeout
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.inmemory_backend import InMemoryVolumes, VolumeWorld

GIB = 1024 ** 3


def spec(key, state='present', capacity=GIB, attachments=None):
    return {'key': key, 'state': state, 'capacity': capacity, 'attachments': attachments}


def converge(world, specs, check_mode=False, force=False):
    return volume_driver.converge_volumes(InMemoryVolumes(world), specs, force=force, check_mode=check_mode)


def ops(result):
    return [(item['op'], item['volume']) for item in result['operations']]


def test_create_and_plug_into_a_running_vm_then_nothing_to_do():
    world = VolumeWorld(running={'web': True})
    declared = [spec('p/data', attachments=[{'vm': 'web', 'target': 'vdb'}])]
    result = converge(world, declared)
    assert result['changed'] is True and result['error'] is None
    assert ops(result) == [('create_volume', 'p/data'), ('attach_config', 'p/data'), ('attach_live', 'p/data')]
    assert result['diff'] == {'before': {}, 'after': {'p/data': {'exists': True, 'capacity': GIB, 'attachments': ['web:vdb']}}}
    assert result['volumes'] == [{'key': 'p/data', 'exists': True, 'capacity': GIB}]
    assert world.attachments == {('web', 'vdb'): ('p/data', True, True)}
    again = converge(world, declared)
    assert (again['changed'], again['operations'], again['refusals']) == (False, [], [])


def test_check_mode_predicts_the_diff_a_real_run_gets_and_writes_nothing():
    world = VolumeWorld(running={'web': False})
    world.volumes['p/data'] = GIB
    declared = [spec('p/data', capacity=2 * GIB, attachments=[{'vm': 'web', 'target': 'vdb'}]), spec('p/new')]
    predicted = converge(world, declared, check_mode=True)
    assert world.calls == [] and world.volumes == {'p/data': GIB}
    assert predicted['changed'] is True and predicted['error'] is None
    assert predicted['volumes'] == [{'key': 'p/data', 'exists': True, 'capacity': GIB}, {'key': 'p/new', 'exists': False, 'capacity': None}]
    real = converge(world, declared)
    assert ops(predicted) == ops(real) == [('grow_volume', 'p/data'), ('create_volume', 'p/new'), ('attach_config', 'p/data')]
    assert predicted['diff'] == real['diff']


def test_delete_a_declared_absent_volume():
    world = VolumeWorld()
    world.volumes['p/old'] = GIB
    result = converge(world, [spec('p/old', state='absent', capacity=None)])
    assert ops(result) == [('delete_volume', 'p/old')] and world.volumes == {}
    assert result['diff'] == {'before': {'p/old': {'exists': True, 'capacity': GIB, 'attachments': []}}, 'after': {}}


def test_a_refused_volume_is_not_touched_and_the_others_run():
    world = VolumeWorld()
    world.volumes['p/data'] = 2 * GIB
    result = converge(world, [spec('p/data', capacity=GIB), spec('p/new')])
    assert [r['volume'] for r in result['refusals']] == ['p/data'] and 'never shrunk' in result['refusals'][0]['reason']
    assert ops(result) == [('create_volume', 'p/new')] and world.volumes['p/data'] == 2 * GIB


def test_a_running_guest_keeps_its_disk_unless_forced():
    world = VolumeWorld(running={'web': True})
    world.volumes['p/data'] = GIB
    world.attachments[('web', 'vdb')] = ('p/data', True, True)
    refused = converge(world, [spec('p/data', attachments=[])])
    assert refused['changed'] is False and refused['refusals'][0]['vm'] == 'web'
    forced = converge(world, [spec('p/data', attachments=[])], force=True)
    assert ops(forced) == [('detach_live', 'p/data'), ('detach_config', 'p/data')] and world.attachments == {}


def test_the_first_failure_stops_the_run_and_is_returned():
    world = VolumeWorld(running={'web': False})
    world.fail[('create_volume', 'p/b')] = BackendError('pool p is full')
    result = converge(world, [spec('p/a'), spec('p/b'), spec('p/c')])
    assert ops(result) == [('create_volume', 'p/a'), ('create_volume', 'p/b')]
    assert [item.get('failed', False) for item in result['operations']] == [False, True]
    assert result['error'].message == 'pool p is full'
    assert result['changed'] is True and sorted(world.volumes) == ['p/a']
    assert result['diff']['after'] == {'p/a': {'exists': True, 'capacity': GIB, 'attachments': []}}


def test_what_an_interrupted_run_left_is_recovered_first():
    world = VolumeWorld()
    world.volumes['p/img'] = 7
    world.partial.add('p/img')
    predicted = converge(world, [spec('p/img')], check_mode=True)
    assert predicted['changed'] is True and 'p/img' in world.partial
    result = converge(world, [spec('p/img')])
    assert ops(predicted) == ops(result) == [('remove_partial', 'p/img'), ('create_volume', 'p/img')]
    assert world.volumes == {'p/img': GIB} and world.partial == set()


def test_a_hotplug_not_confirmed_in_time_is_uncertain():
    world = VolumeWorld(running={'web': True})
    world.fail[('attach_live', 'p/data')] = WaitTimeout('hot-plug not Ready', vm='web', target='vdb')
    result = converge(world, [spec('p/data', attachments=[{'vm': 'web', 'target': 'vdb'}])])
    assert result['uncertain'] == ['web:vdb'] and isinstance(result['error'], WaitTimeout)


def test_what_settle_reports_is_the_error_and_uncertain():
    world = VolumeWorld(running={'web': True})
    world.unsettled = WaitTimeout('hot-plug not Ready', vm='web', target='vdc')
    result = converge(world, [spec('p/data', attachments=[{'vm': 'web', 'target': 'vdc'}])])
    assert result['error'] is world.unsettled and result['uncertain'] == ['web:vdc']
    assert result['changed'] is True


class DryRunVolumes(InMemoryVolumes):
    """A backend whose executor also runs in check mode, without writing (as KubeVirt's does)."""

    executes_in_check_mode = True

    def execute(self, operations, check_mode):
        if not check_mode:
            return super().execute(operations, check_mode)
        return [dict(op.as_dict(), dry_run=True) for op in operations], None


def test_a_backend_that_dry_runs_answers_for_check_mode():
    world = VolumeWorld()
    result = volume_driver.converge_volumes(DryRunVolumes(world), [spec('p/a')], check_mode=True)
    assert result['operations'] == [{'op': 'create_volume', 'volume': 'p/a', 'capacity': GIB, 'format': None, 'source': None, 'dry_run': True}]
    assert result['changed'] is True and world.volumes == {}
