"""pytest plugin: fixtures starting the test API server.

Load it with ``pytest_plugins = ['tests.kubeapi.fixtures']`` in a top-level
conftest, or ``from tests.kubeapi.fixtures import *`` in a nested one.

Fixtures
--------
``kube_server``          function scoped, fresh server (namespaces ``default``
                         and ``demo``, nodes node01..node03, admin token
                         ``kube_server.admin_token`` for everything, limited
                         token ``kube_server.limited_token`` for ``demo`` only)
                         with a fresh kubeconfig at ``kube_server.kubeconfig_path``
                         (inside ``tmp_path``).
``kube_server_session``  one shared server for the session (cheaper; tests must
                         use their own names/namespaces).
``kube_api``             ``kubernetes.client.ApiClient`` for the admin token.
``kube_dyn``             ``kubernetes.dynamic.DynamicClient`` on ``kube_api``.
``kube_limited_api``     ApiClient for the limited token.
"""

import pytest

from . import KubeTestServer


@pytest.fixture
def kube_server(tmp_path):
    """A started server with a fresh kubeconfig (admin token) in tmp_path."""
    srv = KubeTestServer(kubeconfig_path=str(tmp_path / 'kubeconfig')).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope='session')
def kube_server_session(tmp_path_factory):
    """A server shared by the whole session."""
    path = tmp_path_factory.mktemp('kubeapi') / 'kubeconfig'
    srv = KubeTestServer(kubeconfig_path=str(path)).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def kube_api(kube_server):  # pylint: disable=redefined-outer-name
    """Admin ApiClient."""
    api = kube_server.api_client()
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def kube_limited_api(kube_server):  # pylint: disable=redefined-outer-name
    """ApiClient with the namespace-limited token."""
    api = kube_server.api_client(token=kube_server.limited_token)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def kube_dyn(kube_api):  # pylint: disable=redefined-outer-name
    """DynamicClient (admin)."""
    from kubernetes import dynamic  # pylint: disable=import-outside-toplevel
    return dynamic.DynamicClient(kube_api)
