# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An address a guest reports becomes ansible_host only when it is an IP address of another machine."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common.address import guest_ip


@pytest.mark.parametrize('value,expected', [
    ('192.0.2.11', '192.0.2.11'),
    (' 10.1.2.3 ', '10.1.2.3'),
    ('2001:db8::2', '2001:db8::2'),
    ('2001:DB8:0:0::2', '2001:db8::2'),
    ('evil.example.com', None),
    ('-oProxyCommand=touch /tmp/x', None),
    ('10.0.0.1/24', None),
    ('10.0.0.1 extra', None),
    ('{{ lookup("pipe", "id") }}', None),
    ('127.0.0.1', None),
    ('::1', None),
    ('0.0.0.0', None),
    ('169.254.169.254', None),
    ('fe80::1', None),
    ('224.0.0.1', None),
    ('', None),
    (None, None),
    (3232235777, None),
])
def test_guest_ip(value, expected):
    assert guest_ip(value) == expected
