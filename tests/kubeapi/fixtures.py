"""pytest plugin: fixtures starting the test API server.

Load it with ``pytest_plugins = ['tests.kubeapi.fixtures']`` in a top-level
conftest, or ``from tests.kubeapi.fixtures import *`` in a nested one.

Fixtures
--------
``kube_server``          function scoped: by default the REAL stack
                         (tests/kubeapi/real.py: kube-apiserver + etcd + KubeVirt's
                         virt-api of tools/kubelab, one per session/xdist worker,
                         reset between tests, the controller emulation in the test
                         process, HTTP faults from a proxy); with
                         ``CONVERGE_VIRT_KUBE_API=emulated`` the emulator.  Either
                         way: namespaces ``default`` and ``demo``, nodes
                         node01..node03, ``admin_token``, ``limited_token`` (``demo``
                         only), a fresh kubeconfig at ``kubeconfig_path`` (inside
                         ``tmp_path``); ``add_token`` returns the token to use.
``kube_emulator``        function scoped, always the emulator (tests/kubeapi): for
                         tests that need what the real stack cannot do (each says why).
``kube_real_stack``      the session's ``real.RealStack``.
``kube_server_session``  one shared server for the session (cheaper; tests must
                         use their own names/namespaces).
``kube_api``             ``kubernetes.client.ApiClient`` for the admin token.
``kube_dyn``             ``kubernetes.dynamic.DynamicClient`` on ``kube_api``.
``kube_limited_api``     ApiClient for the limited token.
"""

import contextlib
import os

import pytest

from . import KubeTestServer

MODE = os.environ.get('CONVERGE_VIRT_KUBE_API', 'real')


@pytest.fixture(scope='session')
def kube_real_stack(tmp_path_factory):
    """One real stack (tools/kubelab with virt-api) for the session (each xdist worker has its own)."""
    from .real import RealStack  # pylint: disable=import-outside-toplevel
    stack = RealStack(str(tmp_path_factory.mktemp('kubelab')))
    try:
        yield stack
    finally:
        stack.close()


@pytest.fixture
def kube_emulator(tmp_path):
    """A started emulator (tests/kubeapi) with a fresh kubeconfig (admin token) in tmp_path."""
    srv = KubeTestServer(kubeconfig_path=str(tmp_path / 'kubeconfig')).start()
    try:
        yield srv
    finally:
        srv.stop()


@contextlib.contextmanager
def serving(request, kubeconfig_path):
    """A fresh server: the session's real stack, reset (default), or a new emulator (``CONVERGE_VIRT_KUBE_API=emulated``)."""
    if MODE == 'emulated':
        srv = KubeTestServer(kubeconfig_path=kubeconfig_path).start()
        try:
            yield srv
        finally:
            srv.stop()
        return
    from .real import RealKubeServer  # pylint: disable=import-outside-toplevel
    stack = request.getfixturevalue('kube_real_stack')
    stack.reset()
    srv = RealKubeServer(stack, kubeconfig_path=kubeconfig_path).start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def kube_server(request, tmp_path):
    """The real stack (default) or the emulator (``CONVERGE_VIRT_KUBE_API=emulated``), fresh for this test."""
    with serving(request, str(tmp_path / 'kubeconfig')) as srv:
        yield srv


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
