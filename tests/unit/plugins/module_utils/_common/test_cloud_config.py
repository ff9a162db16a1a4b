# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""User data that cloud-init's schema rejects is refused by the seed code, naming the field, before anything changes."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
import sys

import jsonschema
import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common import cloud_config, cloud_config_schema, nocloud

KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7 user@host'
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))))

GOOD = [
    {'users': [{'name': 'converge', 'shell': '/bin/bash', 'sudo': 'ALL=(ALL) NOPASSWD:ALL', 'lock_passwd': True, 'ssh_authorized_keys': [KEY]}],
     'write_files': [{'path': '/etc/converge/golden.txt', 'content': 'x\n', 'permissions': '0640', 'owner': 'root:root'}],
     'runcmd': [['sh', '-c', 'echo ran'], 'echo as a string']},
    {'users': 'alice'},
    {'users': ['default', {'name': 'bob', 'groups': ['adm', 'sudo']}]},
    {'bootcmd': ['echo hi', ['cloud-init-per', 'once', 'x', 'true']]},
    {'growpart': {'mode': 'auto', 'devices': ['/'], 'ignore_growroot_disabled': False}},
    {'resize_rootfs': 'noblock'},
    {'power_state': {'mode': 'reboot', 'delay': '+5'}},
    {'hostname': 'web-1', 'fqdn': 'web-1.example.org', 'manage_etc_hosts': True},
    {'apt': {'sources': {'x': {'source': 'deb http://example.org/debian bookworm main'}}}},
    {'packages': ['htop', ['nginx', '1.22']], 'package_update': True},
    {'some_key_cloud_init_does_not_know': 1},
    {},
]

BAD = [
    ({'write_files': [{'content': 'x'}]}, 'cloud_init.user_data.write_files[0]', 'misses the required key path'),
    ({'write_files': {'path': '/x'}}, 'cloud_init.user_data.write_files', 'must be array, got object'),
    ({'write_files': [{'path': '/x', 'permissions': 640}]}, 'cloud_init.user_data.write_files[0].permissions', 'must be string, got integer'),
    ({'users': [{'nam': 'x'}]}, 'cloud_init.user_data.users[0].nam', 'is not a key cloud-init accepts here'),
    ({'runcmd': 'echo hi'}, 'cloud_init.user_data.runcmd', 'must be array, got string'),
    ({'bootcmd': [['echo', 1]]}, 'cloud_init.user_data.bootcmd[0][1]', 'must be string, got integer'),
    ({'resize_rootfs': 'yes'}, 'cloud_init.user_data.resize_rootfs', 'must be one of true, false, "noblock"'),
    ({'growpart': {'mode': 'sometimes'}}, 'cloud_init.user_data.growpart.mode', 'does not match any of the accepted forms'),
    ({'hostname': 5}, 'cloud_init.user_data.hostname', 'must be string, got integer'),
    ({'chpasswd': {'expire': 'no'}}, 'cloud_init.user_data.chpasswd.expire', 'must be boolean, got string'),
]


@pytest.mark.parametrize('user_data', GOOD)
def test_cloud_config_the_schema_accepts_passes(user_data):
    assert cloud_config.check_user_data(user_data, 'cloud_init.user_data') == 'schema'
    assert nocloud.seed_files({'user_data': user_data, 'ssh_authorized_keys': [KEY]}, 'h')['user-data'].startswith(b'#cloud-config\n')


@pytest.mark.parametrize('user_data, field, reason', BAD)
def test_cloud_config_the_schema_rejects_is_refused_naming_the_field(user_data, field, reason):
    with pytest.raises(InvalidDeclaration) as err:
        nocloud.seed_files({'user_data': user_data}, 'h')
    assert err.value.field == field and err.value.reason.startswith(reason), err.value.message
    assert 'cloud-init 22.4.2 would not apply it' in err.value.reason


@pytest.mark.parametrize('user_data', GOOD + [bad for bad, _field, _reason in BAD])
def test_the_validator_agrees_with_jsonschema_draft4(user_data):
    # the collection's own validator (no jsonschema needed where the module runs) says what the reference implementation says
    reference = list(jsonschema.Draft4Validator(cloud_config.schema()).iter_errors(user_data))
    assert bool(cloud_config.schema_errors(user_data)) == bool(reference), reference


def test_the_keys_merged_from_ssh_authorized_keys_are_validated_too():
    with pytest.raises(InvalidDeclaration) as err:
        nocloud.seed_files({'user_data': {'ssh_authorized_keys': 'not a list'}, 'ssh_authorized_keys': []}, 'h')
    assert err.value.field == 'cloud_init.user_data.ssh_authorized_keys'


def test_cloud_config_text_is_parsed_and_must_be_a_valid_mapping():
    assert cloud_config.check_user_data('#cloud-config\nruncmd: [[echo, hi]]\n', 'f') == 'schema'
    assert cloud_config.check_user_data('#cloud-config\n', 'f') == 'schema'
    with pytest.raises(InvalidDeclaration) as err:
        nocloud.seed_files({'user_data': '#cloud-config\n- just\n- a list\n'}, 'h')
    assert err.value.field == 'cloud_init.user_data' and 'not a mapping (it is a array)' in err.value.reason
    with pytest.raises(InvalidDeclaration) as err:
        nocloud.seed_files({'user_data': '#cloud-config\nruncmd: echo hi\n'}, 'h')
    assert err.value.field == 'cloud_init.user_data.runcmd'
    with pytest.raises(InvalidDeclaration) as err:
        nocloud.seed_files({'user_data': '#cloud-config\nruncmd: [a\n'}, 'h')
    assert err.value.field == 'cloud_init.user_data' and err.value.reason.startswith('is not valid YAML (line ')


def test_other_user_data_formats_are_left_to_cloud_init():
    assert cloud_config.check_user_data('#!/bin/sh\necho hi\n', 'f') == 'text'
    assert cloud_config.check_user_data('#include\nhttp://example.org/x\n', 'f') == 'text'


def test_errors_never_show_the_values():
    # the path names the field (keys, indexes); a value (a token, a password hash) never appears
    secret = 's3cr3t-token-value'
    for user_data in ({'write_files': [{'path': '/x', 'content': secret, 'permissions': 640}]},
                      {'ntp': {'servers': [secret, secret]}}, {'chpasswd': {'expire': secret}}, {'resize_rootfs': secret}):
        with pytest.raises(InvalidDeclaration) as err:
            nocloud.seed_files({'user_data': user_data}, 'h')
        assert secret not in err.value.message, err.value.message


def test_the_schema_is_cloud_init_22_4s_own():
    schema = cloud_config.schema()
    assert cloud_config_schema.CLOUD_INIT_VERSION.startswith('22.4.')
    assert schema['$schema'] == 'http://json-schema.org/draft-04/schema#'
    assert {'$ref': '#/$defs/cc_write_files'} in schema['allOf'] and {'$ref': '#/$defs/cc_users_groups'} in schema['allOf']
    # what the generator removes is documentation only: no validation keyword is lost
    text = cloud_config_schema.SCHEMA_JSON
    assert '"description"' not in text.replace('"description": {', '')  # a property named description would stay
    assert len(hashlib.sha256(text.encode()).hexdigest()) == 64 and len(cloud_config_schema.SCHEMA_SHA256) == 64


def test_the_committed_schema_is_what_the_generator_makes_from_the_package():
    # tools/virtlab/cloudschema.py --check: the committed file is the .deb's schema (skipped only where no cloud-init .deb can be had)
    # make guest keeps it in the cloud image's cache, in the user's real home (ansible-test units runs with another HOME)
    home = pwd.getpwuid(os.getuid()).pw_dir
    debs = os.path.join(os.environ.get('CONVERGE_VIRT_CLOUDIMAGE_CACHE') or os.path.join(home, '.cache', 'converge-virt', 'cloudimage'), 'debs')
    found = sorted(name for name in os.listdir(debs) if name.startswith('cloud-init_')) if os.path.isdir(debs) else []
    if not found:
        pytest.skip('no cloud-init .deb in %s (make guest downloads it)' % debs)
    proc = subprocess.run([sys.executable, '-m', 'tools.virtlab.cloudschema', '--check', '--deb', os.path.join(debs, found[-1])], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(cloud_config_schema.SCHEMA_JSON) == cloud_config.schema()
