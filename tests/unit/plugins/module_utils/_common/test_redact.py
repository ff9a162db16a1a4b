# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets never leave in URIs or messages."""

from __future__ import annotations

import json

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


USER_DATA = '#cloud-config\npassword: ud-secret-5512\nchpasswd: {expire: false}\n'
SPEC = {
    'template': {'spec': {'volumes': [{'name': 'ci', 'cloudInitNoCloud': {'userData': USER_DATA, 'networkDataBase64': 'bmQtc2VjcmV0'}},
                                      {'name': 'cd', 'containerDisk': {'image': 'docker://quay.io/x/y:1'}}]}},
    'dataVolumeTemplates': [{'metadata': {'name': 'root'},
                             'spec': {'source': {'http': {'url': 'https://someone:dv-secret-7781@images.example/f.qcow2?token=tq-9931',
                                                          'extraHeaders': ['Authorization: Basic hdr-secret-4410']}}}}],
}


def test_declared_secrets_finds_every_secret_of_a_declaration():
    from ansible_collections.converge.virt.plugins.module_utils._common.redact import declared_secrets
    params = {'uri': 'qemu+tcp://u:pw-1@h/system?password=q-2&mode=legacy', 'name': 'vm1', 'spec': SPEC,
              'vms': [{'name': 'b', 'spec': {'template': {'spec': {'volumes': [{'cloudInitConfigDrive': {'userData': 'ud-b-3'}}]}}}}],
              'uris': ['qemu+tls://h2/system?pkipath=/etc/pki/x'],
              'xml': "<domain><graphics type='vnc' passwd='vnc-secret-8'/><disk><source protocol='http' name='x'/></disk></domain>",
              'import_from': 'http://me:imp-4@h/x.img', 'wait': True, 'count': 3, 'empty': None}
    assert declared_secrets(params) == {'pw-1', 'q-2', USER_DATA, 'bmQtc2VjcmV0', 'dv-secret-7781', 'tq-9931',
                                        'Authorization: Basic hdr-secret-4410', 'ud-b-3', '/etc/pki/x', 'vnc-secret-8', 'imp-4'}
    assert declared_secrets({'uri': 'qemu:///system', 'name': 'a', 'memory': '2GiB', 'disks': [{'image': 'quay.io/x:1'}]}) == set()


def test_redact_spec_masks_cloud_init_and_url_credentials_and_keeps_the_rest():
    from ansible_collections.converge.virt.plugins.module_utils._common.redact import MASK, redact_spec
    shown = redact_spec(SPEC)
    text = repr(shown)
    for secret in ('ud-secret-5512', 'bmQtc2VjcmV0', 'dv-secret-7781', 'tq-9931', 'hdr-secret-4410'):
        assert secret not in text
    volumes = shown['template']['spec']['volumes']
    assert volumes[0]['cloudInitNoCloud'] == {'userData': MASK, 'networkDataBase64': MASK}
    assert volumes[1] == SPEC['template']['spec']['volumes'][1]
    assert shown['dataVolumeTemplates'][0]['spec']['source']['http']['url'] == \
        'https://someone:********@images.example/f.qcow2?token=********'
    assert 'ud-secret-5512' in repr(SPEC)   # the declaration itself is left alone


@pytest.mark.parametrize('change,expected', [
    ({'path': 'spec.template.spec.volumes[ci].cloudInitNoCloud.userData', 'before': 'old-ud-1', 'after': 'new-ud-2'},
     {'path': 'spec.template.spec.volumes[ci].cloudInitNoCloud.userData', 'before': '********', 'after': '********'}),
    ({'path': 'spec.template.spec.volumes[ci]', 'before': None, 'after': {'name': 'ci', 'cloudInitNoCloud': {'userData': 'new-ud-2'}}},
     {'path': 'spec.template.spec.volumes[ci]', 'before': None, 'after': {'name': 'ci', 'cloudInitNoCloud': {'userData': '********'}}}),
    ({'path': 'spec.dataVolumeTemplates[root].spec.source.http.url', 'before': 'https://a:old-3@h/x', 'after': 'https://a:new-4@h/x'},
     {'path': 'spec.dataVolumeTemplates[root].spec.source.http.url', 'before': 'https://a:********@h/x', 'after': 'https://a:********@h/x'}),
    ({'path': 'spec.dataVolumeTemplates[root].spec.source.http.extraHeaders[0]', 'before': 'X-Token: old-5', 'after': 'X-Token: new-6'},
     {'path': 'spec.dataVolumeTemplates[root].spec.source.http.extraHeaders[0]', 'before': '********', 'after': '********'}),
    ({'path': 'spec.template.spec.domain.cpu.cores', 'before': 1, 'after': 2},
     {'path': 'spec.template.spec.domain.cpu.cores', 'before': 1, 'after': 2}),
])
def test_redact_change(change, expected):
    from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_change
    assert redact_change(change) == expected


def test_secret_forms_cover_how_a_dict_option_is_logged():
    from ansible_collections.converge.virt.plugins.module_utils._common.redact import secret_forms
    user_data = "#cloud-config\npassword: 'p\u00e4ss'\n"
    forms = secret_forms([user_data, '', None])
    assert user_data in forms and '' not in forms
    # AnsibleModule logs a dict option as str(dict), where the user data is escaped; a result is JSON
    logged = str({'userData': user_data})
    assert user_data not in logged and any(form in logged for form in forms)
    assert any(form in json.dumps({'userData': user_data}) for form in forms)
