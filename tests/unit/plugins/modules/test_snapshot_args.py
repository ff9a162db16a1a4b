# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snapshot module's own checks: names, the safety snapshot's name, the names check mode predicts."""

from __future__ import annotations

import datetime

import pytest

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as sn
from ansible_collections.converge.virt.plugins.modules import snapshot, snapshot_info


@pytest.mark.parametrize('value', ['', 'a/b', 'bad\nname', '\x00'])
def test_bad_names_are_refused_naming_the_field(value):
    with pytest.raises(InvalidDeclaration) as err:
        snapshot.check_name('name', value)
    assert err.value.field == 'name'


def test_safety_snapshot_name():
    when = datetime.datetime(2026, 11, 23, 21, 5, 9, tzinfo=datetime.timezone.utc)
    assert snapshot.safety_name('s1', when) == 's1-before-restore-20261123T210509Z'


def test_predicted_names():
    steps = [sn.SnapshotStep(sn.CREATE, 'new', ()), sn.SnapshotStep(sn.DELETE, 'old', ())]
    assert snapshot.predicted_names(['old', 'keep'], steps) == ['keep', 'new']


@pytest.mark.parametrize('module', [snapshot, snapshot_info])
def test_argument_specs_validate(module):
    checked = ArgumentSpecValidator(module.argument_spec()).validate({'vm': 'web-1', 'name': 's1'} if module is snapshot else {'vm': 'web-1'})
    assert not checked.error_messages
    assert checked.validated_parameters['backend'] == 'libvirt'


def test_state_choices_are_the_planners():
    assert snapshot.argument_spec()['state']['choices'] == list(sn.STATES)


@pytest.mark.parametrize('params, field', [({'vms': []}, 'vms'), ({'vms': ['a', 'b', 'a']}, 'vms'), ({'vms': ['a'], 'parallel': 0}, 'parallel'),
                                           ({'vms': ['a'], 'target_vm': 'c'}, 'target_vm')])
def test_fleet_form_refusals_name_the_field(params, field):
    with pytest.raises(InvalidDeclaration) as err:
        snapshot.check_fleet(dict({'parallel': 8, 'target_vm': None}, **params))
    assert err.value.field == field


def test_fleet_runs_each_vm_and_reports_failures_per_vm():
    def runner(_connection, params, _check_mode):
        if params['vm'] == 'bad':
            raise InvalidDeclaration('vm', 'VM %r does not exist' % params['vm'])
        return {'changed': True, 'operations': [{'op': 'create_snapshot', 'snapshot': params['name']}]}
    changed, results, failed = snapshot.run_fleet(runner, None, {'name': 's1', 'parallel': 2}, False, ['a', 'bad', 'c'])
    assert changed and failed == ['bad'] and [r['vm'] for r in results] == ['a', 'bad', 'c']
    assert results[1]['field'] == 'vm' and results[1]['failed'] and not results[1]['changed'] and not results[0]['failed']
    assert snapshot.check_fleet({'vms': None}) is None
