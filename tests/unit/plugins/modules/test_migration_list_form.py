# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""migration's list form (names): nothing the user wrote is silently ignored."""

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.modules import migration


def params(**given):
    out = dict((key, spec.get('default')) for key, spec in migration.argument_spec().items())
    out.update(uri='qemu:///system', target_uri='qemu+tcp://other/system')
    out.update(given)
    return out


@pytest.mark.parametrize('parse', [migration.options_from, migration.kubevirt_options_from])
def test_parallel_without_names_is_refused_naming_it(parse):
    given = params(name='vm1', parallel=4)
    if parse is migration.kubevirt_options_from:
        given.update(backend='kubevirt', uri=None, target_uri=None, namespace='default')
    with pytest.raises(InvalidDeclaration) as err:
        parse(given)
    assert err.value.field == 'parallel' and 'names' in err.value.reason


def test_parallel_defaults_to_two_with_names():
    assert migration.parallel(params(names=['a', 'b'])) == migration.DEFAULT_PARALLEL == 2
    assert migration.parallel(params(names=['a', 'b'], parallel=5)) == 5


def test_parallel_below_one_is_refused():
    with pytest.raises(InvalidDeclaration) as err:
        migration.options_from(params(names=['a'], parallel=0))
    assert err.value.field == 'parallel'


def test_names_only_with_state_finished():
    with pytest.raises(InvalidDeclaration) as err:
        migration.options_from(params(names=['a'], state='started'))
    assert err.value.field == 'names'


def test_every_top_level_option_reaches_the_options_of_the_list():
    opts = migration.options_from(params(names=['a', 'b'], mode='offline', bandwidth=100, wait_timeout=30))
    assert opts.offline and opts.bandwidth == 100 and opts.wait_timeout == 30
