# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory plugins' shared base: the host_vars option and unsafe() (values never trusted as templates)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleError
from ansible.utils.unsafe_proxy import AnsibleUnsafe

from ansible_collections.converge.virt.plugins.inventory.kubevirt import InventoryModule as KubevirtInventory
from ansible_collections.converge.virt.plugins.inventory.libvirt import InventoryModule as LibvirtInventory
from ansible_collections.converge.virt.plugins.plugin_utils import _state_inventory
from ansible_collections.converge.virt.plugins.plugin_utils._state_inventory import TRUST_BY_TAGS, unsafe

try:
    from ansible._internal._datatag._tags import TrustedAsTemplate
except ImportError:  # ansible-core < 2.19: no data tagging
    TrustedAsTemplate = None

HOSTILE = "{{ lookup('pipe', 'id') }}"


def _plugin(cls, host_vars):
    plugin = cls()
    plugin.get_option = {'host_vars': host_vars}.__getitem__
    return plugin


def _trusted(value):
    return TrustedAsTemplate is not None and TrustedAsTemplate.is_tagged_on(value)


@pytest.mark.parametrize('cls', [LibvirtInventory, KubevirtInventory])
def test_documented_defaults_and_choices_match_the_code(cls):
    import yaml  # pylint: disable=import-outside-toplevel
    option = yaml.safe_load(__import__(cls.__module__, fromlist=['DOCUMENTATION']).DOCUMENTATION)['options']['host_vars']
    assert set(option['choices']) == set(cls.HOST_VARS)
    assert set(option['default']) <= set(option['choices'])
    for word in ('vm_state', 'power_state', 'task_state', 'status', 'phase', 'vcpus', 'memory' if cls is KubevirtInventory else 'memory_kib'):
        assert word in option['default'], word
    assert 'namespace' not in cls.HOST_VARS, "a host variable 'namespace' hides Jinja's namespace()"


def test_host_vars_maps_names_to_keys_and_adds_the_conditional_ones():
    pairs = _plugin(KubevirtInventory, ['status', 'kubevirt_namespace', 'status', 'kubevirt_name']).host_var_keys()
    assert pairs == [('status', 'status'), ('kubevirt_namespace', 'namespace'), ('kubevirt_name', 'name'),
                     ('ansible_host', 'ansible_host'), ('stale', 'stale')]
    pairs = _plugin(LibvirtInventory, ['vm_state', 'libvirt_name']).host_var_keys()
    assert pairs == [('vm_state', 'vm_state'), ('libvirt_name', 'name'), ('ansible_host', 'ansible_host'), ('title', 'title'),
                     ('stale', 'stale')]


def test_unknown_host_var_is_refused_naming_the_option():
    with pytest.raises(AnsibleError) as err:
        _plugin(LibvirtInventory, ['vm_state', 'bogus']).host_var_keys()
    assert 'host_vars' in str(err.value) and 'bogus' in str(err.value) and 'power_state' in str(err.value)


def test_unsafe_keeps_plain_values_and_untrusts_everything_else():
    assert unsafe(7) == 7 and unsafe(None) is None and unsafe(True) is True
    plain = unsafe(HOSTILE)
    assert plain == HOSTILE and not _trusted(plain)
    if not TRUST_BY_TAGS:
        assert isinstance(plain, AnsibleUnsafe)
    nested = unsafe({'note': HOSTILE, 'list': [HOSTILE]})
    assert nested == {'note': HOSTILE, 'list': [HOSTILE]}
    assert not _trusted(nested['note']) and not _trusted(nested['list'][0])


@pytest.mark.skipif(TrustedAsTemplate is None, reason='ansible-core < 2.19 has no template trust tags')
def test_unsafe_removes_trust_from_strings_of_the_inventory_file():
    # strings read from the inventory file (a URI, a namespace) are trusted on 2.19; in a host variable they must not be
    trusted = TrustedAsTemplate().tag(HOSTILE)
    assert _trusted(trusted) and _state_inventory.TRUST_BY_TAGS
    assert not _trusted(unsafe(trusted)) and unsafe(trusted) == HOSTILE
    assert not _trusted(unsafe({'k': trusted})['k']) and not _trusted(unsafe([trusted])[0])
