# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ModuleSession: the kubevirt preamble every module shares - clean failures, secrets never shown."""

from __future__ import annotations

import sys

import pytest

from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.fake_module import Failed, FakeModule
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kclient

SECRET = 'tok-3f9a-very-secret'


@pytest.fixture
def module(monkeypatch):
    monkeypatch.setattr(kclient, 'import_kubernetes', object)  # anything but None: kubernetes is importable
    monkeypatch.delenv('K8S_AUTH_API_KEY', raising=False)
    return FakeModule({'api_key': SECRET, 'host': 'https://127.0.0.1:1', 'namespace': 'default'})


def test_a_converge_error_fails_with_its_fields_redacted(module):
    with pytest.raises(Failed):
        with kclient.ModuleSession(module):
            raise InvalidDeclaration('name', 'bad value %s' % SECRET)
    assert module.failed['msg'].startswith('name: bad value ')
    assert SECRET not in repr(module.failed)


def test_any_other_error_is_an_unexpected_error_without_secrets(module):
    with pytest.raises(Failed):
        with kclient.ModuleSession(module):
            raise RuntimeError('boom with Bearer %s' % SECRET)
    assert module.failed['msg'].startswith('unexpected error (RuntimeError') and module.failed['msg'].endswith(': boom with Bearer ********')
    assert 'Traceback' in module.failed['exception'] and 'RuntimeError' in module.failed['exception']
    assert SECRET not in repr(module.failed)


def test_exit_and_fail_inside_pass_through(module):
    with pytest.raises(SystemExit) as caught:
        with kclient.ModuleSession(module):
            raise SystemExit(0)
    assert caught.value.code == 0 and module.failed is None
    with kclient.ModuleSession(module) as session:
        value = 42
    assert value == 42 and module.failed is None
    assert session.redact('key=%s' % SECRET) == 'key=********' and session.redact(7) == 7


def test_the_environment_key_is_redacted_too(module, monkeypatch):
    monkeypatch.setenv('K8S_AUTH_API_KEY', 'env-key-81723')
    module.params['api_key'] = None
    with pytest.raises(Failed):
        with kclient.ModuleSession(module):
            raise ValueError('env-key-81723 leaked')
    assert 'env-key-81723' not in repr(module.failed)


def test_missing_kubernetes_fails_before_anything(monkeypatch):
    # a package that cannot be imported (as where it is not installed); the availability check must not import it
    monkeypatch.setitem(sys.modules, 'kubernetes', None)
    module = FakeModule({'api_key': None})
    with pytest.raises(Failed):
        kclient.ModuleSession(module)
    assert 'kubernetes' in module.failed['msg']
