# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt module session: clean failures with the password (parameter or inside the URI) never shown."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.fake_module import Failed, FakeModule
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
from ansible_collections.converge.virt.plugins.module_utils._libvirt import connection as lconn


@pytest.mark.parametrize('params, secret', [
    ({'uri': 'qemu+tcp://admin:uri-pw-7781@10.0.0.1/system', 'password': None}, 'uri-pw-7781'),
    ({'uri': 'qemu+tcp://10.0.0.1/system', 'username': 'admin', 'password': 'param-pw-5521'}, 'param-pw-5521'),
])
def test_errors_before_connecting_never_show_the_password(params, secret):
    module = FakeModule(params)
    with pytest.raises(Failed):
        with lconn.ModuleSession(module):
            raise BackendError('cannot reach %s with %s' % (params['uri'], secret), uri=params['uri'])
    assert secret not in repr(module.failed) and module.failed['msg'].startswith('cannot reach')
    module = FakeModule(params)
    with pytest.raises(Failed):
        with lconn.ModuleSession(module):
            raise KeyError(secret)
    assert module.failed['msg'].startswith('unexpected error') and 'KeyError' in module.failed['exception']
    assert secret not in repr(module.failed)


def test_missing_binding_fails_naming_it(monkeypatch):
    monkeypatch.setattr(lconn, 'HAS_LIBVIRT', False)
    module = FakeModule({'uri': None})
    with pytest.raises(Failed):
        lconn.ModuleSession(module)
    assert 'libvirt-python' in module.failed['msg']
