# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt secrets and connection defaults: cloud-init and import URLs never shown, no silent insecure connection."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.tests.unit.plugins.module_utils._common.fake_module import Failed, FakeModule
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kclient
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_backend
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_manifest
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import volume_spec
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import VmDeclaration

OLD_USER_DATA = '#cloud-config\npassword: old-ud-canary-1\n'
NEW_USER_DATA = '#cloud-config\npassword: new-ud-canary-2\n'
OLD_URL = 'https://someone:old-dv-canary-3@images.example/root.qcow2'
NEW_URL = 'https://someone:new-dv-canary-4@images.example/root.qcow2'
SECRETS = ('old-ud-canary-1', 'new-ud-canary-2', 'old-dv-canary-3', 'new-dv-canary-4')


def _vm_spec(user_data, url):
    return {'template': {'spec': {'volumes': [{'name': 'ci', 'cloudInitNoCloud': {'userData': user_data}}]}},
            'dataVolumeTemplates': [{'metadata': {'name': 'root'}, 'spec': {'source': {'http': {'url': url}}, 'storage': {}}}]}


class Snapshot:
    """One existing VM, as NamespaceSnapshot gives it."""

    def __init__(self, vm):
        self.vm = vm

    def observe(self, name):
        return kobserve.build(name, 'ns', self.vm, None, [], [])


class DryRunClient:
    def __init__(self):
        self.patches = []

    def merge_patch(self, api, namespace, plural, name, patch, dry_run=False):
        del api, namespace, plural, name
        self.patches.append((patch, dry_run))
        return {}


def test_changes_and_diff_never_show_cloud_init_or_import_credentials():
    existing = {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine',
                'metadata': {'name': 'a', 'namespace': 'ns', 'uid': 'u1', 'annotations': {'converge.virt/vm-state': 'STOPPED'}},
                'spec': dict(_vm_spec(OLD_USER_DATA, OLD_URL), runStrategy='Halted'), 'status': {'printableStatus': 'Stopped'}}
    declared = vm_manifest.declared_vm({'name': 'a', 'spec': _vm_spec(NEW_USER_DATA, NEW_URL)}, 'ns')
    client = DryRunClient()
    changed, result = vm_backend.converge_vm(vm_backend.KubevirtVm(client, 'ns', 'a'), VmDeclaration(state='present', autostart=None),
                                             declared, vm_backend.KubevirtOptions(), check_mode=True, snapshot=Snapshot(existing))
    assert changed and [s['action'] for s in result['steps']] == ['update']
    paths = dict((c['path'], c) for c in result['changes'])
    assert paths['spec.template.spec.volumes[ci].cloudInitNoCloud.userData'] == {
        'path': 'spec.template.spec.volumes[ci].cloudInitNoCloud.userData', 'before': '********', 'after': '********'}
    assert paths['spec.dataVolumeTemplates[0].spec.source.http.url']['after'] == 'https://someone:********@images.example/root.qcow2'
    shown = repr(result)
    assert not [s for s in SECRETS if s in shown], shown
    # the server still gets the real declaration (server-side dry run)
    assert client.patches and client.patches[0][1] is True and 'new-ud-canary-2' in repr(client.patches[0][0])


def test_an_unsupported_import_url_is_refused_without_its_password():
    with pytest.raises(InvalidDeclaration) as caught:
        volume_spec.normalize_volume({'name': 'v', 'import_from': 'ftp://me:ftp-canary-5@h/x.img', 'capacity': '1Gi'})
    assert caught.value.field == 'import_from' and 'ftp-canary-5' not in str(caught.value) and 'ftp://me:********@h/x.img' in str(caught.value)


# ------------------------------------------------------------------ connection defaults
@pytest.mark.parametrize('word,expected', [('true', True), ('Yes', True), ('1', True), ('on', True), ('y', True), ('t', True),
                                           ('false', False), ('NO', False), ('0', False), ('off', False), ('n', False), ('f', False)])
def test_verify_ssl_words(word, expected):
    assert kclient.connection_params({}, {'K8S_AUTH_VERIFY_SSL': word})['validate_certs'] is expected


@pytest.mark.parametrize('word', ['maybe', 'ture', 'disabled', '2', 'verify'])
def test_an_unrecognised_verify_ssl_is_refused_naming_the_variable(word):
    with pytest.raises(InvalidDeclaration) as caught:
        kclient.connection_params({}, {'K8S_AUTH_VERIFY_SSL': word})
    assert caught.value.field == 'K8S_AUTH_VERIFY_SSL' and repr(word) in str(caught.value)
    # even with the option given: a typo in the environment is a mistake the user hears about
    with pytest.raises(InvalidDeclaration):
        kclient.connection_params({'validate_certs': True}, {'K8S_AUTH_VERIFY_SSL': word})


def test_a_module_with_an_unrecognised_verify_ssl_fails_naming_it(monkeypatch):
    monkeypatch.setenv('K8S_AUTH_VERIFY_SSL', 'sometimes')
    module = FakeModule({'host': 'https://127.0.0.1:1', 'api_key': 'tok-6', 'namespace': 'default'})
    with pytest.raises(Failed):
        with kclient.ModuleSession(module) as session:
            session.connect()
    assert module.failed['msg'].startswith('K8S_AUTH_VERIFY_SSL: ') and module.failed['field'] == 'K8S_AUTH_VERIFY_SSL'


@pytest.fixture
def no_kubeconfig(monkeypatch, tmp_path):
    for name in ('KUBECONFIG', 'K8S_AUTH_KUBECONFIG', 'K8S_AUTH_HOST', 'K8S_AUTH_API_KEY', 'K8S_AUTH_VERIFY_SSL'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('HOME', str(tmp_path))
    monkeypatch.setenv('KUBECONFIG', str(tmp_path / 'missing-kubeconfig'))


def _fake_in_cluster(monkeypatch):
    from kubernetes import config  # pylint: disable=import-outside-toplevel

    def load_incluster_config(client_configuration=None):
        client_configuration.host = 'https://10.96.0.1:443'
        client_configuration.api_key = {'authorization': 'Bearer sa-token-7'}
    monkeypatch.setattr(config, 'load_incluster_config', load_incluster_config)


def test_the_in_cluster_service_account_is_never_used_silently(monkeypatch, no_kubeconfig):
    del no_kubeconfig
    _fake_in_cluster(monkeypatch)
    client = kclient.client_from_params({})
    assert client.host == 'https://10.96.0.1:443'
    assert len(client.warnings) == 1 and 'in-cluster service account' in client.warnings[0] and 'https://10.96.0.1:443' in client.warnings[0]
    assert 'sa-token-7' not in client.warnings[0]
    # a module says so
    module = FakeModule({'namespace': 'default'})
    with kclient.ModuleSession(module) as session:
        session.connect()
    assert module.warnings and 'in-cluster service account' in module.warnings[0]
    # with a kubeconfig or a host given, no fallback and no warning
    assert kclient.client_from_params({'host': 'https://k.example:6443', 'api_key': 't'}).warnings == []


def test_without_any_configuration_the_error_is_unchanged(no_kubeconfig):
    del no_kubeconfig
    with pytest.raises(kclient.BackendError) as caught:
        kclient.client_from_params({})
    assert 'cannot load the Kubernetes configuration' in str(caught.value)


@pytest.mark.parametrize('host,api_key,warned', [
    ('http://k.example:8080', 'tok-8', True),
    ('HTTP://k.example:8080', 'tok-8', True),
    ('https://k.example:6443', 'tok-8', False),
    ('http://k.example:8080', None, False),
])
def test_a_credential_sent_over_plain_http_is_warned_about(no_kubeconfig, host, api_key, warned):
    del no_kubeconfig
    client = kclient.client_from_params({'host': host, 'api_key': api_key})
    assert bool([w for w in client.warnings if 'plain http://' in w]) is warned
    assert not [w for w in client.warnings if 'tok-8' in w]
