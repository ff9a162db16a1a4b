# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a module writes to the managed host's journal (AnsibleModule logs its invocation while it is built) holds no secret.

The journal is replaced by a stub that keeps every entry (MESSAGE and the per-option fields), syslog by a list;
each module runs in this process with secrets inside option values: a libvirt URI with a password and a
``?password=`` query value, cloud-init user data, a DataVolume import URL with user:password, a domain XML with a
VNC password. The secrets must be in no journal entry, no syslog line and no result (``invocation`` included),
also when the module fails while validating its options.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from ansible.module_utils import basic

from ansible_collections.converge.virt.plugins.modules import host, migration, migration_info, reconcile, vm, vm_info, volume, volume_info

URI_PW = 'jrnl-userinfo-pw-41'
QUERY_PW = 'jrnl-query-pw-52'
TARGET_PW = 'jrnl-target-pw-63'
USER_DATA = 'jrnl-userdata-74'
DV_PW = 'jrnl-dv-pw-85'
IMPORT_PW = 'jrnl-import-pw-96'
VNC_PW = 'jrnl-vnc-pw-07'
SECRETS = (URI_PW, QUERY_PW, TARGET_PW, USER_DATA, DV_PW, IMPORT_PW, VNC_PW)

# nothing listens on port 1: every connection fails at once, after the module logged its invocation
URI = 'qemu+tcp://someone:%s@127.0.0.1:1/system?password=%s&mode=legacy' % (URI_PW, QUERY_PW)
TARGET = 'qemu+tcp://127.0.0.1:1/system?token=%s' % TARGET_PW
KUBE = {'backend': 'kubevirt', 'host': 'https://127.0.0.1:1', 'api_key': 'jrnl-token-18', 'namespace': 'default'}
SPEC = {'template': {'spec': {'volumes': [{'name': 'ci', 'cloudInitNoCloud': {'userData': '#cloud-config\npassword: %s\n' % USER_DATA}}]}}}
DVT = [{'metadata': {'name': 'root'}, 'spec': {'source': {'http': {'url': 'https://me:%s@images.example/r.qcow2' % DV_PW}}, 'storage': {}}}]
XML = "<domain type='qemu'><name>j</name><memory>65536</memory><devices><graphics type='vnc' passwd='%s'/></devices></domain>" % VNC_PW

CASES = [
    ('vm', vm, {'uri': URI, 'name': 'j', 'memory': '64MiB'}),
    ('vm xml', vm, {'uri': URI, 'xml': XML}),
    ('vm_info', vm_info, {'uri': URI}),
    ('volume', volume, {'uri': URI, 'pool': 'p', 'name': 'v.raw', 'capacity': '1MiB'}),
    ('volume_info', volume_info, {'uri': URI}),
    ('host', host, {'uri': URI}),
    ('migration', migration, {'uri': URI, 'target_uri': TARGET, 'name': 'j'}),
    ('migration_info', migration_info, {'uri': URI, 'uris': [TARGET]}),
    ('reconcile', reconcile, {'uri': URI}),
    ('vm kubevirt', vm, dict(KUBE, name='j', memory='64Mi', spec=SPEC, data_volume_templates=DVT)),
    ('vm kubevirt fleet', vm, dict(KUBE, vms=[{'name': 'j', 'memory': '64Mi', 'spec': SPEC}])),
    ('volume kubevirt', volume, dict(KUBE, name='v', capacity='1Gi', import_from='https://me:%s@images.example/v.img' % IMPORT_PW)),
    ('volume kubevirt list', volume, dict(KUBE, volumes=[{'name': 'v', 'capacity': '1Gi', 'import_from': 'https://me:%s@h/v.img' % IMPORT_PW}])),
    # validation fails inside AnsibleModule, before any of the module's own code
    ('vm unsupported option', vm, {'uri': URI, 'name': 'j', 'no_such_option': 1}),
    ('vm kubevirt bad type', vm, dict(KUBE, name='j', spec=SPEC, parallel='many')),
    ('migration bad choice', migration, {'uri': URI, 'target_uri': TARGET, 'name': 'j', 'mode': 'sideways'}),
]


class JournalStub:
    """systemd.journal as AnsibleModule.log uses it: every entry kept with all its fields."""

    def __init__(self):
        self.entries = []

    def send(self, **fields):
        self.entries.append(fields)

    def sendv(self, *fields):
        self.entries.append(dict(f.split('=', 1) for f in fields))


@pytest.fixture
def journal(monkeypatch):
    stub = JournalStub()
    monkeypatch.setattr(basic, 'has_journal', True)
    monkeypatch.setattr(basic, 'journal', stub, raising=False)
    syslog_lines = []
    monkeypatch.setattr(basic.syslog, 'syslog', lambda *args: syslog_lines.append(args))
    monkeypatch.setattr(basic.syslog, 'openlog', lambda *args: None)
    stub.syslog_lines = syslog_lines
    return stub


def run_module(module, args):
    """``module.main()`` with ``args`` in this process; the JSON result."""
    basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode()  # pylint: disable=protected-access
    basic._ANSIBLE_PROFILE = 'legacy'  # pylint: disable=protected-access
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            module.main()
        except SystemExit:
            pass
    return json.loads(out.getvalue())


@pytest.mark.parametrize('what,module,args', CASES, ids=[c[0] for c in CASES])
def test_no_secret_reaches_the_journal_or_the_result(journal, monkeypatch, what, module, args):
    monkeypatch.delenv('K8S_AUTH_API_KEY', raising=False)
    result = run_module(module, args)
    assert result.get('failed'), (what, result)     # nothing listens on port 1; bad options are refused
    logged = [json.dumps(entry, default=str) for entry in journal.entries] + [repr(line) for line in journal.syslog_lines]
    if what.endswith(('option', 'type', 'choice')):
        assert 'invocation' in result
    else:
        # the module got as far as logging its invocation, with every option's own journal field
        assert any('Invoked with' in line for line in logged), logged
        assert any('"URI"' in line or '"HOST"' in line for line in logged), logged
    leaked = [(secret, where) for secret in SECRETS for where, text in [('result', json.dumps(result))] + [('journal', t) for t in logged]
              if secret in text]
    assert not leaked, (what, leaked, logged, result)
