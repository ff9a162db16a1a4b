# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""converge.virt.libvirt ssh_proxy_jump: the ProxyJump destination comes from the host's SSH URI (user, host, port only)."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.converge.virt.plugins.inventory import libvirt as libvirt_inventory

CASES = [
    ('qemu+ssh://root@hv1.example.com/system', '-o ProxyJump=ssh://root@hv1.example.com'),
    ('qemu+ssh://root@127.0.0.5:2222/system?keyfile=/k&no_verify=1', '-o ProxyJump=ssh://root@127.0.0.5:2222'),
    ('qemu+libssh2://admin:s3cret-pw@hv2/system', '-o ProxyJump=ssh://admin@hv2'),
    ('qemu+libssh://[fd00::5]:2200/system', '-o ProxyJump=ssh://[fd00::5]:2200'),
    ('qemu+tcp://hv1/system', None),
    ('qemu:///system', None),
    ('qemu+ssh:///system', None),
]


@pytest.mark.parametrize('uri,expected', CASES, ids=[c[0] for c in CASES])
def test_proxy_jump_from_the_uri(uri, expected):
    assert libvirt_inventory.proxy_jump(uri) == expected
    assert 's3cret' not in str(libvirt_inventory.proxy_jump(uri))


def test_option_documented_off_by_default_and_always_set():
    doc = yaml.safe_load(libvirt_inventory.DOCUMENTATION)['options']['ssh_proxy_jump']
    assert doc['type'] == 'bool' and doc['default'] is False
    assert 'ansible_ssh_common_args' in libvirt_inventory.InventoryModule.ALWAYS_VARS
