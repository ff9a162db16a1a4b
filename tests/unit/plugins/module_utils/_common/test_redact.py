# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets never leave in URIs or messages."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_text, redact_uri


@pytest.mark.parametrize('uri,expected', [
    ('qemu:///system', 'qemu:///system'),
    ('qemu+unix:///system?socket=/run/x/libvirt-sock', 'qemu+unix:///system?socket=/run/x/libvirt-sock'),
    ('qemu+tcp://root:s3cret@10.0.0.1:16509/system', 'qemu+tcp://root:********@10.0.0.1:16509/system'),
    ('qemu+ssh://root@hv1/system?keyfile=/k&no_verify=1', 'qemu+ssh://root@hv1/system?keyfile=********&no_verify=1'),
    ('qemu+tls://u:p@h/system?pkipath=/etc/pki&password=x', 'qemu+tls://u:********@h/system?pkipath=********&password=********'),
    ('', ''),
    (None, None),
])
def test_redact_uri(uri, expected):
    assert redact_uri(uri) == expected


def test_redact_text():
    text = 'cannot connect to qemu+tcp://u:pw1@h/system: Authorization: Bearer abc.def-123 failed for tok9'
    out = redact_text(text, secrets=['tok9'])
    assert 'pw1' not in out and 'abc.def-123' not in out and 'tok9' not in out
    assert 'qemu+tcp://u:********@h/system' in out


@pytest.mark.parametrize('uri,expected', [
    ('qemu:///system', []),
    ('qemu+tcp://root:s3cret@h/system', ['s3cret']),
    ('qemu+tls://u@h/system?pkipath=/p&password=pw&mode=x', ['/p', 'pw']),
    ('qemu+tcp://root:@h/system', []),
    (None, []),
])
def test_uri_secrets(uri, expected):
    from ansible_collections.converge.virt.plugins.module_utils._common.redact import uri_secrets
    assert uri_secrets(uri) == expected
