# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/examples/execution-environment.yml (ansible-builder v3) lists what the AWX runs of issue 20 need, in step with the collection."""

from __future__ import annotations

import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(*path):
    with open(os.path.join(ROOT, *path), encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def test_the_execution_environment_definition_needs_what_awx_runs_need():
    ee = load('docs', 'examples', 'execution-environment.yml')
    deps = ee['dependencies']
    assert ee['version'] == 3 and ee['images']['base_image']['name']
    # ansible-core in exactly the range the collection claims
    assert deps['ansible_core']['package_pip'] == 'ansible-core' + load('meta', 'runtime.yml')['requires_ansible'].replace(' ', '')
    # AWX runs every job and inventory update through ansible-runner
    assert re.match(r'^ansible-runner\b', deps['ansible_runner']['package_pip'])
    assert [item['name'] for item in deps['galaxy']['collections']] == ['converge.virt']
    # qemu+ssh URIs (the credential type's key file goes to ssh's -i)
    assert any(entry.split()[0] == 'openssh-clients' for entry in deps['system'])
    # the collection's own requirements reach the image through its meta/execution-environment.yml
    meta = load('meta', 'execution-environment.yml')
    for kind, name in (('python', 'requirements.txt'), ('system', 'bindep.txt')):
        assert meta['dependencies'][kind] == name and os.path.exists(os.path.join(ROOT, name))
    with open(os.path.join(ROOT, 'requirements.txt'), encoding='utf-8') as handle:
        python = [line.split('>=')[0].split('#')[0].strip() for line in handle if line.strip() and not line.startswith('#')]
    assert {'libvirt-python', 'kubernetes'} <= set(python), python
