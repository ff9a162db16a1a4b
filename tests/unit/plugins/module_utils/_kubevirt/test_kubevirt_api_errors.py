# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The KubeVirt client's error mapping (RBAC refusals, virt-api absent) and the delete wait's explanation.

The messages are those a real kube-apiserver 1.34 sends (tests/integration/test_kubelab.py checks the modules
against it); here the pure helpers are checked on each shape.
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import api_errors, client as kclient
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.vm_backend import _deletion_view, deletion_blockers

NAMESPACED = ('virtualmachines.kubevirt.io is forbidden: User "system:serviceaccount:demo:bot" cannot create resource '
              '"virtualmachines" in API group "kubevirt.io" in the namespace "demo"')
SUBRESOURCE = ('virtualmachines.subresources.kubevirt.io "web" is forbidden: User "system:serviceaccount:demo:bot" cannot update '
               'resource "virtualmachines/start" in API group "subresources.kubevirt.io" in the namespace "demo"')
CLUSTER = 'nodes "n1" is forbidden: User "alice" cannot patch resource "nodes" in API group "" at the cluster scope'
POLICY = ('virtualmachines.kubevirt.io "x" is forbidden: ValidatingAdmissionPolicy \'converge-virt-task-record\' with binding '
          '\'converge-virt-task-record\' denied request: converge.virt/* annotations may be changed only by ...')


def test_rbac_refusal_names_identity_verb_resource_group_and_namespace():
    text = api_errors.rbac_refusal(NAMESPACED)
    assert text.startswith('forbidden: system:serviceaccount:demo:bot cannot create virtualmachines (API group kubevirt.io) in namespace demo')
    assert api_errors.RBAC_DOC in text


def test_rbac_refusal_of_a_subresource_and_at_cluster_scope():
    assert 'cannot update virtualmachines/start (API group subresources.kubevirt.io) in namespace demo' in api_errors.rbac_refusal(SUBRESOURCE)
    assert 'forbidden: alice cannot patch nodes (core API group) at the cluster scope' in api_errors.rbac_refusal(CLUSTER)


def test_an_admission_policy_refusal_is_not_taken_for_rbac():
    assert api_errors.rbac_refusal(POLICY) is None
    assert api_errors.rbac_refusal(None) is None


@pytest.mark.parametrize('status, decoded, missing', [
    (404, None, True),                                                        # "404 page not found": no APIService
    (503, {'kind': 'Status', 'code': 503}, True),                             # APIService registered, virt-api down
    (404, {'kind': 'Status', 'reason': 'NotFound', 'code': 404}, False),      # virt-api: no such VM / VMI
    (409, {'kind': 'Status', 'code': 409}, False),
])
def test_subresource_api_missing(status, decoded, missing):
    assert api_errors.subresource_api_missing(status, decoded) is missing


def _client(secret='s3cr3t-token'):
    client = kclient.KubeClient.__new__(kclient.KubeClient)
    client.secrets = [secret]
    return client


def test_error_of_a_403_is_forbidden_with_the_clear_sentence():
    exc = _client()._error(403, {'kind': 'Status', 'reason': 'Forbidden', 'message': NAMESPACED}, '', 'create virtualmachines demo/web',
                           path='/apis/kubevirt.io/v1/namespaces/demo/virtualmachines')
    assert isinstance(exc, kclient.Forbidden) and exc.code == 403
    assert str(exc).startswith('create virtualmachines demo/web failed: 403 Forbidden: forbidden: system:serviceaccount:demo:bot cannot create '
                               'virtualmachines (API group kubevirt.io) in namespace demo')
    assert exc.details['api_message'] == NAMESPACED           # the server's own words stay in the result


def test_error_of_a_policy_403_keeps_the_servers_message():
    exc = _client()._error(403, {'kind': 'Status', 'reason': 'Forbidden', 'message': POLICY}, '', 'patch virtualmachines demo/x')
    assert isinstance(exc, kclient.Forbidden) and str(exc) == 'patch virtualmachines demo/x failed: 403 Forbidden: ' + POLICY


def test_error_of_an_unserved_subresource_api_names_virt_api():
    path = kclient.SUBRESOURCE_API + '/namespaces/demo/virtualmachines/web/start'
    exc = _client()._error(404, None, '404 page not found\n', 'start of virtualmachine demo/web', path=path)
    assert isinstance(exc, kclient.ApiUnavailable) and not isinstance(exc, kclient.NotFound)
    assert str(exc).startswith("start of virtualmachine demo/web failed: KubeVirt's virt-api is not available: the API server does not serve "
                               'subresources.kubevirt.io/v1 (404: 404 page not found)')
    down = _client()._error(503, {'kind': 'Status', 'reason': 'ServiceUnavailable', 'message': 'service unavailable'}, '', 'stop', path=path)
    assert isinstance(down, kclient.ApiUnavailable) and 'cannot reach virt-api for subresources.kubevirt.io/v1 (503 ServiceUnavailable' in str(down)


WEBHOOK_DOWN = ('Internal error occurred: failed calling webhook "virtualmachines-mutator.kubevirt.io": failed to call webhook: Post '
                '"https://127.0.0.1:46655/virtualmachines-mutate?timeout=10s": dial tcp 127.0.0.1:46655: connect: connection refused')


def test_error_of_an_unreachable_kubevirt_webhook_names_virt_api():
    # what kube-apiserver 1.34 answered to a VM patch with virt-api killed (tests/reliability/test_faults_kubevirt_stack.py)
    exc = _client()._error(500, {'kind': 'Status', 'reason': 'InternalError', 'message': WEBHOOK_DOWN}, '', 'patch virtualmachines demo/web')
    assert str(exc).startswith("patch virtualmachines demo/web failed: 500 InternalError: the API server could not call KubeVirt's admission "
                               'webhook virtualmachines-mutator.kubevirt.io, which virt-api serves')
    assert 'is virt-api running?' in str(exc) and 'nothing was changed' in str(exc) and WEBHOOK_DOWN in str(exc)
    other = _client()._error(500, {'kind': 'Status', 'reason': 'InternalError', 'message': WEBHOOK_DOWN.replace('.kubevirt.io', '.example.com')},
                             '', 'patch')
    assert 'admission webhook virtualmachines-mutator.example.com (its failurePolicy' in str(other) and 'virt-api' not in str(other)
    plain = _client()._error(500, {'kind': 'Status', 'reason': 'InternalError', 'message': 'etcdserver: request timed out'}, '', 'patch')
    assert str(plain) == 'patch failed: 500 InternalError: etcdserver: request timed out'


def test_error_of_a_missing_vm_behind_virt_api_stays_not_found():
    path = kclient.SUBRESOURCE_API + '/namespaces/demo/virtualmachineinstances/web/pause'
    exc = _client()._error(404, {'kind': 'Status', 'reason': 'NotFound', 'message': 'virtualmachineinstance.kubevirt.io "web" not found'}, '',
                           'pause', path=path)
    assert type(exc) is kclient.NotFound     # pylint: disable=unidiomatic-typecheck
    plain = _client()._error(404, None, '404 page not found', 'read', path='/apis/kubevirt.io/v1/namespaces/demo/virtualmachines/web')
    assert type(plain) is kclient.NotFound   # pylint: disable=unidiomatic-typecheck


def test_error_redacts_the_token():
    exc = _client('tok-123')._error(403, {'kind': 'Status', 'reason': 'Forbidden', 'message': POLICY + ' tok-123'}, '', 'patch')
    assert 'tok-123' not in str(exc) and 'tok-123' not in exc.details['api_message']


def _obs(vm_meta=None, vmi_meta=None):
    vm = {'metadata': dict(name='web', **(vm_meta or {}))} if vm_meta is not None else None
    vmi = {'metadata': dict(name='web', **vmi_meta)} if vmi_meta is not None else None
    return {'exists': vm is not None, 'vm': vm, 'vmi': vmi, 'status': 'Stopped'}


def test_deletion_blockers_names_the_vms_finalizers():
    view = _deletion_view(_obs({'deletionTimestamp': '2026-01-01T00:00:00Z', 'finalizers': ['example.com/hold', 'kubevirt.io/x']}))
    assert view['vm_finalizing'] == {'deleting': True, 'finalizers': ['example.com/hold', 'kubevirt.io/x']} and view['vmi_finalizing'] is None
    text = deletion_blockers(view)
    assert text.startswith('the VirtualMachine being deleted still carries the finalizers example.com/hold, kubevirt.io/x')
    assert 'must remove it' in text


def test_deletion_blockers_of_an_instance_left_behind():
    text = deletion_blockers(_deletion_view(_obs(None, {'deletionTimestamp': 't', 'finalizers': ['foregroundDeleteVirtualMachine']})))
    assert text.startswith('the VirtualMachineInstance being deleted still carries the finalizer foregroundDeleteVirtualMachine')
    text = deletion_blockers(_deletion_view(_obs(None, {})))
    assert text == 'the VirtualMachineInstance still exists'


ROOT = os.path.dirname(os.path.abspath(__file__))
for _up in range(5):
    ROOT = os.path.dirname(ROOT)


def _flat(rules):
    return sorted((group, resource, verb) for rule in rules for group in rule['apiGroups'] for resource in rule['resources'] for verb in rule['verbs'])


def test_the_guide_shows_exactly_the_rules_of_the_rbac_file():
    with open(os.path.join(ROOT, 'docs', 'examples', 'kubevirt-rbac.yaml'), encoding='utf-8') as handle:
        items = dict((item['kind'], item) for item in yaml.safe_load(handle)['items'])
    assert set(items) == {'Role', 'ClusterRole', 'RoleBinding', 'ClusterRoleBinding'}
    with open(os.path.join(ROOT, 'docs', 'guide.md'), encoding='utf-8') as handle:
        guide = handle.read()
    start = guide.index('rules:      # the Role')
    role, cluster = yaml.safe_load_all(guide[start:guide.index('```', start)])
    assert _flat(role['rules']) == _flat(items['Role']['rules'])
    assert _flat(cluster['rules']) == _flat(items['ClusterRole']['rules'])
    assert ('nodes', 'patch') in [(r, v) for _g, r, v in _flat(cluster['rules'])]
    assert not [r for _g, r, _v in _flat(role['rules']) if r in ('pods', 'events', 'namespaces')]
    # cloud_init's Secret (issue 33): read by name, created, patched - never listed or watched
    assert sorted(v for _g, r, v in _flat(role['rules']) if r == 'secrets') == ['create', 'get', 'patch']


class _Response:
    status = 200
    data = b'{"kind": "VirtualMachine"}'


class _FlakyRest:
    """A rest client whose first request fails with ``error`` (then answers 200)."""

    def __init__(self, error):
        self.error = error
        self.calls = []

    def request(self, method, url, **_kwargs):
        self.calls.append(method)
        if len(self.calls) == 1:
            raise self.error
        return _Response()


def _client_over(rest):
    from kubernetes import client as k8s  # pylint: disable=import-outside-toplevel
    client = _client()
    client.host, client.timeout, client.exceptions = 'https://127.0.0.1:6443', 30, k8s.exceptions
    client.config = k8s.Configuration()
    client.api_client = type('Api', (), {'rest_client': rest})()
    return client


def test_a_read_on_a_dropped_connection_is_repeated_once():
    rest = _FlakyRest(ConnectionResetError('Connection reset by peer'))
    assert _client_over(rest).request('GET', '/apis/kubevirt.io/v1/namespaces/d/virtualmachines/x') == {'kind': 'VirtualMachine'}
    assert rest.calls == ['GET', 'GET']


@pytest.mark.parametrize('method, error', [
    ('PATCH', ConnectionResetError('Connection reset by peer')),     # a write is not repeated: it may have been applied
    ('GET', TimeoutError('Read timed out. (read timeout=30)')),       # a read that ran out of time is not repeated
])
def test_a_write_or_a_timed_out_read_is_not_repeated(method, error):
    rest = _FlakyRest(error)
    with pytest.raises(kclient.BackendError, match='cannot reach the Kubernetes API'):
        _client_over(rest).request(method, '/apis/kubevirt.io/v1/namespaces/d/virtualmachines/x', body='{}' if method == 'PATCH' else None)
    assert rest.calls == [method]
