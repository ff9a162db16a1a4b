# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cloud-init NoCloud seeds: the files, their digest, and the ISO9660 image a guest reads."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pycdlib
import pytest
import yaml

from ansible_collections.converge.virt.plugins.module_utils._common import nocloud
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration

KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7 user@host'


def test_dict_user_data_is_cloud_config_with_the_keys_merged():
    files = nocloud.seed_files({'user_data': {'packages': ['htop'], 'ssh_authorized_keys': ['ssh-rsa OLD']},
                                'ssh_authorized_keys': [KEY, 'ssh-rsa OLD']}, 'web-1')
    text = files['user-data'].decode()
    assert text.startswith('#cloud-config\n')
    assert yaml.safe_load(text) == {'packages': ['htop'], 'ssh_authorized_keys': ['ssh-rsa OLD', KEY]}
    meta = yaml.safe_load(files['meta-data'])
    assert meta['local-hostname'] == 'web-1' and meta['instance-id'].startswith('iid-')
    assert 'network-config' not in files


def test_values_from_outside_are_data_never_template():
    # a value that looks like YAML structure stays one string
    tricky = 'x\n- injected: true\n#cloud-config'
    files = nocloud.seed_files({'user_data': {'write_files': [{'path': '/etc/motd', 'content': tricky}]}}, 'h')
    assert yaml.safe_load(files['user-data'])['write_files'][0]['content'] == tricky


def test_text_user_data_is_kept_as_written():
    script = '#!/bin/sh\necho hi'
    assert nocloud.seed_files({'user_data': script}, 'h')['user-data'] == b'#!/bin/sh\necho hi\n'


@pytest.mark.parametrize('cloud_init,field', [
    ({'user_data': 'packages: [htop]'}, 'cloud_init.user_data'),
    ({'user_data': '#cloud-config\n{}', 'ssh_authorized_keys': [KEY]}, 'cloud_init.ssh_authorized_keys'),
    ({'user_data': ['x']}, 'cloud_init.user_data'),
    ({'ssh_authorized_keys': KEY}, 'cloud_init.ssh_authorized_keys'),
    ({'ssh_authorized_keys': ['']}, 'cloud_init.ssh_authorized_keys'),
    ({'user_data': {'ssh_authorized_keys': KEY}, 'ssh_authorized_keys': [KEY]}, 'cloud_init.user_data.ssh_authorized_keys'),
    ({'network_config': {'ethernets': {}}}, 'cloud_init.network_config'),
    ({'meta_data': 'instance-id: x'}, 'cloud_init.meta_data'),
    ({'userdata': {}}, 'cloud_init.userdata'),
])
def test_bad_input_names_the_field(cloud_init, field):
    with pytest.raises(InvalidDeclaration) as raised:
        nocloud.seed_files(cloud_init, 'h')
    assert raised.value.field == field


def test_not_a_dict_is_refused():
    with pytest.raises(InvalidDeclaration) as raised:
        nocloud.seed_files('user_data: x', 'h')
    assert raised.value.field == 'cloud_init'


def test_instance_id_follows_the_content_unless_given():
    first = yaml.safe_load(nocloud.seed_files({'user_data': {'a': 1}}, 'h')['meta-data'])['instance-id']
    again = yaml.safe_load(nocloud.seed_files({'user_data': {'a': 1}}, 'h')['meta-data'])['instance-id']
    changed = yaml.safe_load(nocloud.seed_files({'user_data': {'a': 2}}, 'h')['meta-data'])['instance-id']
    renamed = yaml.safe_load(nocloud.seed_files({'user_data': {'a': 1}}, 'other')['meta-data'])['instance-id']
    assert first == again and len({first, changed, renamed}) == 3
    given = nocloud.seed_files({'user_data': {'a': 2}, 'meta_data': {'instance-id': 'i-1', 'local-hostname': 'x'}}, 'h')
    assert yaml.safe_load(given['meta-data']) == {'instance-id': 'i-1', 'local-hostname': 'x'}


def test_digest_names_the_content():
    files = nocloud.seed_files({'user_data': {'a': 1}, 'network_config': {'version': 2, 'ethernets': {}}}, 'h')
    assert nocloud.seed_digest(files) == nocloud.seed_digest(dict(files))
    assert nocloud.seed_digest(files) != nocloud.seed_digest(dict(files, **{'user-data': files['user-data'] + b'#'}))
    # moving bytes from one file to the next is another seed
    assert nocloud.seed_digest({'meta-data': b'ab', 'user-data': b'c'}) != nocloud.seed_digest({'meta-data': b'a', 'user-data': b'bc'})


def test_the_iso_is_labelled_cidata_and_carries_every_file_under_its_long_names():
    files = nocloud.seed_files({'user_data': {'hostname': 'web-1'}, 'network_config': {'version': 2, 'ethernets': {'eth0': {'dhcp4': True}}}},
                               'web-1')
    image = nocloud.seed_iso(files)
    read, label = nocloud.read_seed_iso(image)
    assert label == 'cidata' and read == files
    # a guest without Rock Ridge reads the Joliet names: the same bytes
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(image))
    try:
        for name, data in files.items():
            out = io.BytesIO()
            iso.get_file_from_iso_fp(out, joliet_path='/' + name)
            assert out.getvalue() == data
    finally:
        iso.close()


def test_the_vm_module_imports_pycdlib_only_to_build_or_read_a_seed():
    # every vm task imports the seed code; pycdlib (about 4% of a no-op vm task's import time) only when a seed is built
    code = ('import sys; import ansible_collections.converge.virt.plugins.modules.vm; '
            'from ansible_collections.converge.virt.plugins.module_utils._common import nocloud; '
            'print("pycdlib" in sys.modules); nocloud.seed_iso({"meta-data": b"x"}); print("pycdlib" in sys.modules)')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == ['False', 'True']
