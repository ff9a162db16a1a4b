"""Connection options of the other backend are refused by the registry (from the providers' declarations), naming the field."""

import pytest

from ansible_collections.converge.virt.plugins.module_utils import _providers


def refused(params, backend):
    return _providers.refused_option('vm', dict(params, backend=backend))


@pytest.mark.parametrize('backend, params, field', [
    ('libvirt', {'kubeconfig': '/k'}, 'kubeconfig'),
    ('libvirt', {'api_key': 'x'}, 'api_key'),
    ('libvirt', {'validate_certs': False}, 'validate_certs'),
    ('libvirt', {'namespace': 'prod'}, 'namespace'),
    ('kubevirt', {'uri': 'qemu:///system'}, 'uri'),
    ('kubevirt', {'password': 'x'}, 'password'),
])
def test_other_backend_connection_option_is_named(backend, params, field):
    found = refused(params, backend)
    assert found is not None and found[0] == field and found[1].startswith(field + ':')


@pytest.mark.parametrize('backend, params', [
    ('libvirt', {'uri': 'qemu:///system', 'namespace': 'default', 'kubeconfig': None}),
    ('kubevirt', {'kubeconfig': '/k', 'namespace': 'prod', 'uri': None}),
])
def test_own_connection_options_pass(backend, params):
    assert refused(params, backend) is None
