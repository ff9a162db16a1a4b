# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cloud_init user data never reaches the managed host's journal, nor a result: top level and ``vms`` items, dict and text."""

from __future__ import annotations

import json

import pytest

from ansible_collections.converge.virt.plugins.modules import vm
from tests.unit.plugins.modules.test_module_journal import journal, run_module  # noqa: F401  pylint: disable=unused-import

SECRET = 'jrnl-ci-pw-3141'
URI = 'qemu+tcp://127.0.0.1:1/system'
DICT_DATA = {'chpasswd': {'users': [{'name': 'u', 'password': SECRET}]}}
TEXT_DATA = '#cloud-config\npassword: %s\n' % SECRET
KUBE = {'backend': 'kubevirt', 'host': 'https://127.0.0.1:1', 'api_key': 'jrnl-token-18', 'namespace': 'default'}

CASES = [
    ('top dict', {'uri': URI, 'name': 'j', 'memory': '64MiB', 'disks': [], 'cloud_init': {'user_data': DICT_DATA}}),
    ('top text', {'uri': URI, 'name': 'j', 'memory': '64MiB', 'disks': [], 'cloud_init': {'user_data': TEXT_DATA}}),
    ('vms dict', {'uri': URI, 'vms': [{'name': 'j', 'disks': [], 'cloud_init': {'user_data': DICT_DATA}}]}),
    ('vms text', {'uri': URI, 'vms': [{'name': 'j', 'disks': [], 'cloud_init': {'user_data': TEXT_DATA}}]}),
    ('kubevirt vms', dict(KUBE, vms=[{'name': 'j', 'memory': '64Mi', 'cloud_init': {'user_data': DICT_DATA}}])),
    ('vms bad item', {'uri': URI, 'vms': [{'name': 'j', 'disks': [], 'no_such': 1, 'cloud_init': {'user_data': TEXT_DATA}}]}),
]


@pytest.mark.parametrize('what,args', CASES, ids=[c[0] for c in CASES])
def test_user_data_never_in_the_journal_or_the_result(journal, monkeypatch, what, args):  # pylint: disable=redefined-outer-name
    monkeypatch.delenv('K8S_AUTH_API_KEY', raising=False)
    result = run_module(vm, args)
    assert result.get('failed'), (what, result)     # nothing listens on port 1
    logged = [json.dumps(entry, default=str) for entry in journal.entries] + [repr(line) for line in journal.syslog_lines]
    assert any('Invoked with' in line for line in logged), logged
    leaked = [where for where, text in [('result', json.dumps(result))] + [('journal', t) for t in logged] if SECRET in text]
    assert not leaked, (what, leaked, logged, result)
