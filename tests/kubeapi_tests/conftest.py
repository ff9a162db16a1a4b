"""Loads the kubeapi test server fixtures (tests/kubeapi/fixtures.py) for this directory.

These are the emulator's own tests: ``kube_server`` here is always the emulator (elsewhere it is the real stack).
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402 pylint: disable=wrong-import-position

from tests.kubeapi import KubeTestServer  # noqa: E402 pylint: disable=wrong-import-position
from tests.kubeapi import fixtures as _fixtures  # noqa: E402 pylint: disable=wrong-import-position


@pytest.fixture
def kube_server(tmp_path):
    """The emulator, fresh for this test."""
    srv = KubeTestServer(kubeconfig_path=str(tmp_path / 'kubeconfig')).start()
    try:
        yield srv
    finally:
        srv.stop()


kube_server_session = _fixtures.kube_server_session
kube_api = _fixtures.kube_api
kube_limited_api = _fixtures.kube_limited_api
kube_dyn = _fixtures.kube_dyn
