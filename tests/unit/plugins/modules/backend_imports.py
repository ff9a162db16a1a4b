# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers of the backend-imports tests: a module's main() in a fresh interpreter, and the collection's modules it imported.

libvirt tasks run on libvirt's test driver; kubevirt tasks get a kubeconfig that names no cluster (the KubeVirt runner
fails connecting), so each case reaches its backend's runner and nothing else.

Every run imports each registered backend's declaration (its package and ``provider.py``: options, refusals, no code of
the backend); :func:`code_of` is what a task imported of a backend beyond that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


# what every module run imports of every registered backend: the package and its provider (plugins/module_utils/_providers)
DECLARATIONS = ('_libvirt', '_libvirt.provider', '_kubevirt', '_kubevirt.provider')


def code_of(backend, imported):
    """The modules of ``backend`` (``_libvirt``, ``_kubevirt``) in ``imported`` beyond its declaration."""
    return [name for name in imported if name.startswith(backend) and name not in DECLARATIONS]


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
