# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vm and reconcile modules run through the backend registry: a task imports only the backend it selects.

Each case runs the module's main() in a fresh interpreter up to its result (libvirt: its test driver, so the
libvirt runner converges for real; kubevirt: a kubeconfig that names no cluster, so the KubeVirt runner fails
connecting) and lists the collection's modules it imported.
"""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.tests.unit.plugins.modules.backend_imports import code_of, kubeconfig, run


@pytest.mark.parametrize('module, args, runner', [
    ('vm', {'uri': 'test:///default', 'name': 'test', 'state': 'running'}, '_libvirt.vm_converge'),
    ('reconcile', {'uri': 'test:///default'}, '_libvirt.reconcile_runs'),
])
def test_a_libvirt_task_imports_no_kubevirt_code(tmp_path, module, args, runner):
    pytest.importorskip('libvirt')
    result, imported = run(module, args, tmp_path)
    # the runner talked to the test driver: the vm task read its domain 'test', reconcile checked it
    assert (result.get('vm') or {}).get('uuid') or result.get('checked') == 1, result
    assert runner in imported and '_libvirt.vm_backend' in imported
    assert code_of('_kubevirt', imported) == []


@pytest.mark.parametrize('module, runner', [('vm', '_kubevirt.vm_converge'), ('reconcile', '_kubevirt.reconcile_runs')])
def test_a_kubevirt_task_imports_no_libvirt_code(tmp_path, module, runner):
    args = {'backend': 'kubevirt', 'kubeconfig': kubeconfig(tmp_path), 'wait': False} if module == 'vm' else {'backend': 'kubevirt'}
    if module == 'vm':
        args.update(name='test', memory='64Mi', disks=[{'name': 'root', 'image': 'quay.io/containerdisks/fedora:40'}])
    else:
        args.update(kubeconfig=args.get('kubeconfig') or kubeconfig(tmp_path))
    result, imported = run(module, args, tmp_path)
    assert result.get('failed'), result  # no cluster: the runner got as far as connecting
    assert runner in imported
    assert code_of('_libvirt', imported) == []


@pytest.mark.parametrize('module, args, field, msg', [
    ('vm', {'name': 'x', 'kubeconfig': '/k'}, 'kubeconfig', 'kubeconfig: is a kubevirt connection option and is not used with backend libvirt'),
    ('vm', {'name': 'x', 'backend': 'kubevirt', 'uri': 'qemu:///system'}, 'uri',
     'uri: is a libvirt connection option and is not used with backend kubevirt'),
    ('reconcile', {'namespace': 'demo'}, 'namespace', 'namespace: is a kubevirt option; set backend: kubevirt'),
    ('reconcile', {'backend': 'kubevirt', 'password': 'x'}, 'password', 'password: is a libvirt option and is not supported with backend kubevirt'),
])
def test_an_option_of_the_other_backend_is_refused_before_any_backend_is_imported(tmp_path, module, args, field, msg):
    result, imported = run(module, args, tmp_path)
    assert (result.get('failed'), result.get('field'), result.get('msg')) == (True, field, msg)
    assert code_of('_libvirt', imported) + code_of('_kubevirt', imported) == []
