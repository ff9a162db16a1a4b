# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/examples/annotations-policy.yaml: the ValidatingAdmissionPolicy that limits who may write the task record.

The manifests are parsed and checked for what they must match; the CEL expressions are evaluated the way the API
server evaluates a ValidatingAdmissionPolicy (variables in order, then each validation) with cel-python, a CEL
implementation, on admission requests a namespace user and the automation would send. The test on a real
kube-apiserver (create the policy, then patch as each identity) belongs with that server's tests.
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import views as kubevirt_views

ROOT = os.path.dirname(os.path.abspath(__file__))
for _up in range(5):
    ROOT = os.path.dirname(ROOT)
POLICY_PATH = os.path.join(ROOT, 'docs', 'examples', 'annotations-policy.yaml')

AUTOMATION = 'system:serviceaccount:converge-virt:automation'
WRITERS_GROUP = 'converge-virt:record-writers'
USER = 'alice'          # a namespace user with patch on VirtualMachines


def manifests():
    """kind -> object of the file (a v1 List, one YAML document: ``kubectl apply -f`` takes it as it is)."""
    with open(POLICY_PATH, encoding='utf-8') as handle:
        doc = yaml.safe_load(handle)
    assert (doc['apiVersion'], doc['kind']) == ('v1', 'List')
    return dict((item['kind'], item) for item in doc['items'])


def test_the_manifests_match_what_they_must():
    found = manifests()
    assert len(found) == 2
    assert set(found) == {'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'}
    policy, binding = found['ValidatingAdmissionPolicy'], found['ValidatingAdmissionPolicyBinding']
    assert policy['apiVersion'] == binding['apiVersion'] == 'admissionregistration.k8s.io/v1'
    assert binding['spec']['policyName'] == policy['metadata']['name']
    assert binding['spec']['validationActions'] == ['Deny'] and 'matchResources' not in binding['spec']
    assert policy['spec']['failurePolicy'] == 'Fail'
    rules = policy['spec']['matchConstraints']['resourceRules']
    assert rules == [{'apiGroups': ['kubevirt.io'], 'apiVersions': ['*'], 'operations': ['CREATE', 'UPDATE'], 'resources': ['virtualmachines']}]
    assert [v['name'] for v in policy['spec']['variables']] == ['newAnnotations', 'oldAnnotations', 'recordChanged', 'recordWriter']
    assert len(policy['spec']['validations']) == 1 and policy['spec']['validations'][0]['reason'] == 'Forbidden'


def test_the_policy_covers_every_record_annotation():
    """The prefix the policy guards is the collection's, and every annotation of the record has it."""
    changed = dict((v['name'], v['expression']) for v in manifests()['ValidatingAdmissionPolicy']['spec']['variables'])['recordChanged']
    assert changed.count("k.startsWith('%s')" % kubevirt_views.ANNOTATION_PREFIX) == 2
    assert all(key.startswith(kubevirt_views.ANNOTATION_PREFIX) for key in kubevirt_views.RECORD_ANNOTATIONS.values())


def admit(user, groups, old, new):
    """(allowed, message) of the policy for a request by ``user`` turning VM ``old`` (None on CREATE) into ``new``."""
    celpy = pytest.importorskip('celpy', reason='cel-python (test-requirements.txt) evaluates the CEL expressions')
    spec = manifests()['ValidatingAdmissionPolicy']['spec']
    env = celpy.Environment()
    userinfo = {'username': user}
    if groups is not None:
        userinfo['groups'] = groups
    activation = {'object': celpy.json_to_cel(new), 'oldObject': celpy.json_to_cel(old),
                  'request': celpy.json_to_cel({'operation': 'CREATE' if old is None else 'UPDATE', 'userInfo': userinfo})}
    # the variables, each evaluated once in order with the earlier ones in scope (values kept as CEL values)
    variables = celpy.celtypes.MapType({})
    activation['variables'] = variables
    for variable in spec['variables']:
        value = env.program(env.compile(variable['expression'])).evaluate(activation)
        assert not isinstance(value, celpy.CELEvalError), (variable['name'], value)
        variables[celpy.celtypes.StringType(variable['name'])] = value
    for validation in spec['validations']:
        verdict = env.program(env.compile(validation['expression'])).evaluate(activation)
        assert isinstance(verdict, celpy.celtypes.BoolType), verdict
        if not verdict:
            return False, str(env.program(env.compile(validation['messageExpression'])).evaluate(activation))
    return True, None


def vm(annotations=None, run_strategy='Always'):
    meta = {'name': 'web-1', 'namespace': 'demo'}
    if annotations is not None:
        meta['annotations'] = dict(annotations)
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'metadata': meta, 'spec': {'runStrategy': run_strategy}}


RECORD = {'converge.virt/vm-state': 'ACTIVE', 'kubevirt.io/latest-observed-api-version': 'v1'}
FORGED_LEASE = dict(RECORD, **{'converge.virt/task-state': 'STOPPING', 'converge.virt/lease-until': '1e18'})


@pytest.mark.parametrize('user, groups, old, new, allowed', [
    # a namespace user may not write the record: forge a lease, add or change a state, remove a task
    (USER, ['system:authenticated'], vm(RECORD), vm(FORGED_LEASE), False),
    (USER, ['system:authenticated'], vm(RECORD), vm(dict(RECORD, **{'converge.virt/vm-state': 'DELETED'})), False),
    (USER, ['system:authenticated'], vm({}), vm({'converge.virt/vm-state': 'DELETED'}), False),
    (USER, ['system:authenticated'], vm(None), vm({'converge.virt/vm-state': 'DELETED'}), False),
    (USER, ['system:authenticated'], vm(FORGED_LEASE), vm(RECORD), False),
    (USER, ['system:authenticated'], vm(RECORD), vm({'kubevirt.io/latest-observed-api-version': 'v1'}), False),
    (USER, ['system:authenticated'], vm(RECORD), vm(None), False),
    (USER, ['system:authenticated'], None, vm({'converge.virt/task-state': 'DELETING'}), False),
    (USER, None, vm(RECORD), vm(FORGED_LEASE), False),
    # ... but may change everything else, the record untouched
    (USER, ['system:authenticated'], vm(RECORD), vm(RECORD, run_strategy='Halted'), True),
    (USER, ['system:authenticated'], vm(RECORD), vm(dict(RECORD, note='x', **{'example.com/converge.virt/x': 'y'})), True),
    (USER, ['system:authenticated'], vm(None), vm(None, run_strategy='Halted'), True),
    (USER, ['system:authenticated'], None, vm({'app': 'web'}), True),
    (USER, None, None, vm(None), True),
    # the automation (by its service account, or by the group) may
    (AUTOMATION, ['system:serviceaccounts'], vm(RECORD), vm(FORGED_LEASE), True),
    (AUTOMATION, None, None, vm(RECORD), True),
    ('bob', ['system:authenticated', WRITERS_GROUP], vm(FORGED_LEASE), vm(RECORD), True),
    ('system:serviceaccount:other:automation', ['system:serviceaccounts'], vm(RECORD), vm(FORGED_LEASE), False),
])
def test_only_the_automation_may_change_the_record(user, groups, old, new, allowed):
    verdict, message = admit(user, groups, old, new)
    assert verdict is allowed
    if not allowed:
        assert message.startswith('the converge.virt/* annotations') and message.endswith('not by ' + user), message
