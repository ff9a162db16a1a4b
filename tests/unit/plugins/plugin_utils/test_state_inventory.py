# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory plugins' shared base: the host_vars option and unsafe() (values never trusted as templates)."""

from __future__ import annotations

import os

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
                     ('ansible_host', 'ansible_host'), ('readiness', 'readiness'), ('stale', 'stale')]
    pairs = _plugin(LibvirtInventory, ['vm_state', 'libvirt_name']).host_var_keys()
    assert pairs == [('vm_state', 'vm_state'), ('libvirt_name', 'name'), ('ansible_host', 'ansible_host'),
                     ('ansible_ssh_common_args', 'ansible_ssh_common_args'), ('readiness', 'readiness'), ('title', 'title'), ('stale', 'stale')]


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


# --- host names (issue 24, finding 1) ---

class _FakeInventory(_state_inventory.StateInventory):
    """The shared base with canned VMs: host names and values as a hypervisor would report them."""

    NAME = 'converge.virt.fake'
    HOST_VARS = {'status': 'status', 'note': 'note'}
    GROUP_WORDS = (('status', 'status'),)

    def __init__(self, options):
        super().__init__()
        self._test_options = options

    def get_option(self, option, hostvars=None):
        return self._test_options.get(option)


def _template(text):
    """A template as the inventory file or a playbook has it: trusted (ansible-core 2.19+ evaluates only trusted ones)."""
    return TrustedAsTemplate().tag(text) if TrustedAsTemplate is not None else text


def _populated(vms):
    from ansible.inventory.data import InventoryData  # pylint: disable=import-outside-toplevel
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel
    plugin = _FakeInventory({'host_vars': ['status', 'note'], 'strict': True, 'leading_separator': True, 'use_extra_vars': False,
                             'compose': {'composed_name': _template('inventory_hostname')}, 'groups': {},
                             'keyed_groups': [{'key': _template('inventory_hostname'), 'prefix': 'byname'},
                                              {'key': _template('note'), 'prefix': 'bynote'}]})
    plugin.inventory = InventoryData()
    plugin.templar = Templar(loader=DataLoader())
    plugin._populate({'src': vms})  # pylint: disable=protected-access
    return plugin.inventory, Templar


def test_a_host_name_holding_jinja_is_never_evaluated(tmp_path, monkeypatch):
    """inventory_hostname, compose and keyed_groups on the name, on the running ansible-core (make matrix: every version)."""
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    marker = tmp_path / 'evaluated'
    monkeypatch.setenv('CONVERGE_TEST_MARKER', str(marker))
    name = "x-{{ lookup('pipe', 'touch $CONVERGE_TEST_MARKER') }}"
    note = "{{ lookup('pipe', 'touch $CONVERGE_TEST_MARKER') }}"
    inventory, templar_class = _populated([{'name': name, 'status': 'Running', 'note': note}])
    host = inventory.get_host(name)
    assert host is not None and host.name == name
    hostvars = host.get_vars()
    assert hostvars['composed_name'] == name
    templar = templar_class(loader=DataLoader(), variables=hostvars)
    assert templar.template(_template('{{ inventory_hostname }}')) == name
    assert templar.template(_template('{{ composed_name }}|{{ note }}')) == '%s|%s' % (name, note)
    sanitize = _FakeInventory._sanitize_group_name  # pylint: disable=protected-access
    assert sorted(g.name for g in host.get_groups() if g.name.startswith('by')) == [sanitize('byname_' + name), sanitize('bynote_' + note)]
    assert not marker.exists(), 'a host name or value was evaluated as a template'
    if not TRUST_BY_TAGS:
        assert isinstance(host.name, AnsibleUnsafe)


# --- the inventory cache directory (issue 24, finding 4) ---

def _refused(path):
    with pytest.raises(AnsibleError) as err:
        _state_inventory.check_private_directory(str(path), 'converge.virt.libvirt')
    message = str(err.value)
    assert 'converge.virt.libvirt: cache_connection:' in message and str(path) in message and 'chooses the hosts' in message
    return message


def test_a_private_cache_directory_is_accepted(tmp_path):
    home = tmp_path / 'home'
    cache = home / '.cache' / 'converge.virt'
    cache.mkdir(parents=True)
    _state_inventory.check_private_directory(str(cache), 'converge.virt.libvirt')
    link = tmp_path / 'mine'
    link.symlink_to(cache)          # a link of one's own is fine
    _state_inventory.check_private_directory(str(link), 'converge.virt.libvirt')
    shared = tmp_path / 'sticky'
    shared.mkdir()
    shared.chmod(0o1777)            # as /tmp: others may write it but cannot replace our directory in it
    (shared / 'cache').mkdir(mode=0o700)
    _state_inventory.check_private_directory(str(shared / 'cache'), 'converge.virt.libvirt')


@pytest.mark.parametrize('mode,reason', [(0o777, 'writable by others (mode 0777)'), (0o770, 'writable by its group (mode 0770)'),
                                         (0o1777, 'writable by others (mode 1777)')])
def test_a_cache_directory_others_can_write_is_refused(tmp_path, mode, reason):
    cache = tmp_path / 'cache'
    cache.mkdir()
    cache.chmod(mode)
    assert reason in _refused(cache)


def test_a_cache_directory_in_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o777)             # no sticky bit: anyone can rename our directory away and put theirs in its place
    (shared / 'cache').mkdir(mode=0o700)
    assert 'above it is writable by others and has no sticky bit' in _refused(shared / 'cache')


def test_a_missing_cache_directory_or_a_file_is_refused(tmp_path):
    assert 'cannot read' in _refused(tmp_path / 'absent')
    (tmp_path / 'file').write_text('x')
    assert 'is not a directory' in _refused(tmp_path / 'file')


@pytest.mark.skipif(os.geteuid() != 0, reason='making a directory of another user needs root')
def test_a_cache_directory_of_another_user_is_refused(tmp_path):
    # /tmp/converge-libvirt-cache made first by another local user, filled with the hosts they choose
    theirs = tmp_path / 'theirs'
    theirs.mkdir(mode=0o755)
    os.chown(str(theirs), 65534, 65534)
    assert 'belongs to uid 65534, not to you (uid 0)' in _refused(theirs)
    (tmp_path / 'link').symlink_to(tmp_path / 'mine')
    (tmp_path / 'mine').mkdir()
    os.lchown(str(tmp_path / 'link'), 65534, 65534)   # their link: they can point it elsewhere at any time
    assert 'is a symbolic link of uid 65534' in _refused(tmp_path / 'link')
    inner = theirs / 'cache'
    inner.mkdir(mode=0o700)         # ours, but in their directory
    assert 'above it belongs to uid 65534' in _refused(inner)


def test_a_cached_vm_of_an_unreadable_source_claims_no_readiness():
    cached = [{'name': 'web', 'status': 'Running', 'readiness': 'address', 'ansible_host': '192.0.2.5'}]
    assert _state_inventory.stale_copy(cached) == [
        {'name': 'web', 'status': 'Unknown', 'power_state': 'NOSTATE', 'phase': 'Unknown', 'stale': True, 'ansible_host': '192.0.2.5'}]
    assert cached[0]['readiness'] == 'address'     # the cache itself is not changed
