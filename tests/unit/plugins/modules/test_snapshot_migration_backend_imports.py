# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snapshot and migration modules run through the backend registry: a task imports only the backend it selects.

As in test_vm_reconcile_backend_imports (its helpers repeated here): main() in a fresh interpreter up to its result (libvirt: the test driver;
kubevirt: a kubeconfig that names no cluster, so the KubeVirt runner fails connecting), then the collection's modules it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PREFIX = 'ansible_collections.converge.virt.plugins.module_utils.'

CODE = '''
import contextlib, io, json, sys
from ansible.module_utils import basic
basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": json.loads(sys.argv[2])}).encode()
basic._ANSIBLE_PROFILE = "legacy"
import importlib
module = importlib.import_module("ansible_collections.converge.virt.plugins.modules." + sys.argv[1])
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        module.main()
    except SystemExit:
        pass
print(json.dumps({"result": json.loads(out.getvalue()), "modules": sorted(name for name in sys.modules if name.startswith("%s"))}))
''' % PREFIX


def run(module, args, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path), HOME=str(tmp_path))
    env.pop('K8S_AUTH_KUBECONFIG', None)
    done = subprocess.run([sys.executable, '-c', CODE, module, json.dumps(args)], env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
    out = json.loads(done.stdout.splitlines()[-1])
    return out['result'], [name[len(PREFIX):] for name in out['modules']]


def kubeconfig(tmp_path):
    path = tmp_path / 'kubeconfig'
    path.write_text(json.dumps({'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'none',
                                'clusters': [{'name': 'none', 'cluster': {'server': 'https://127.0.0.1:1'}}],
                                'contexts': [{'name': 'none', 'context': {'cluster': 'none', 'user': 'none'}}],
                                'users': [{'name': 'none', 'user': {'token': 'x'}}]}))
    return str(path)


@pytest.mark.parametrize('module, args, runner', [
    ('snapshot', {'uri': 'test:///default', 'vm': 'test', 'name': 's1', '_ansible_check_mode': True}, '_libvirt.snapshot_runs'),
    ('migration', {'uri': 'test:///default', 'name': 'test', 'target_uri': 'test:///default', '_ansible_check_mode': True}, '_libvirt.migration_runs'),
])
def test_a_libvirt_task_imports_no_kubevirt_code(tmp_path, module, args, runner):
    pytest.importorskip('libvirt')
    result, imported = run(module, args, tmp_path)
    assert 'msg' not in result or 'is a ' not in result['msg'], result  # not refused by the registry: the runner ran
    assert runner in imported, (result, imported)
    assert [name for name in imported if name.startswith('_kubevirt')] == []


@pytest.mark.parametrize('module, args, runner', [
    ('snapshot', {'vm': 'web', 'name': 's1'}, '_kubevirt.snapshot_runs'),
    ('migration', {'name': 'web'}, '_kubevirt.migration_runs'),
])
def test_a_kubevirt_task_imports_no_libvirt_code(tmp_path, module, args, runner):
    result, imported = run(module, dict(args, backend='kubevirt', kubeconfig=kubeconfig(tmp_path)), tmp_path)
    assert result.get('failed'), result  # no cluster: the runner got as far as connecting
    assert runner in imported
    assert [name for name in imported if name.startswith('_libvirt')] == []
