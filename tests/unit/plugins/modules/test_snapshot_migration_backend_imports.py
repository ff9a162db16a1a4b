# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The snapshot and migration modules run through the backend registry: a task imports only the backend it selects.

As in test_vm_reconcile_backend_imports (the helpers of backend_imports.py): main() in a fresh interpreter up to its result (libvirt: the test driver;
kubevirt: a kubeconfig that names no cluster, so the KubeVirt runner fails connecting), then the collection's modules it imported.
"""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.tests.unit.plugins.modules.backend_imports import code_of, kubeconfig, run


@pytest.mark.parametrize('module, args, runner', [
    ('snapshot', {'uri': 'test:///default', 'vm': 'test', 'name': 's1', '_ansible_check_mode': True}, '_libvirt.snapshot_runs'),
    ('migration', {'uri': 'test:///default', 'name': 'test', 'target_uri': 'test:///default', '_ansible_check_mode': True}, '_libvirt.migration_runs'),
])
def test_a_libvirt_task_imports_no_kubevirt_code(tmp_path, module, args, runner):
    pytest.importorskip('libvirt')
    result, imported = run(module, args, tmp_path)
    assert 'msg' not in result or 'is a ' not in result['msg'], result  # not refused by the registry: the runner ran
    assert runner in imported, (result, imported)
    assert code_of('_kubevirt', imported) == []


@pytest.mark.parametrize('module, args, runner', [
    ('snapshot', {'vm': 'web', 'name': 's1'}, '_kubevirt.snapshot_runs'),
    ('migration', {'name': 'web'}, '_kubevirt.migration_runs'),
])
def test_a_kubevirt_task_imports_no_libvirt_code(tmp_path, module, args, runner):
    result, imported = run(module, dict(args, backend='kubevirt', kubeconfig=kubeconfig(tmp_path)), tmp_path)
    assert result.get('failed'), result  # no cluster: the runner got as far as connecting
    assert runner in imported
    assert code_of('_libvirt', imported) == []
