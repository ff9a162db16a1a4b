"""Loads the kubeapi test server fixtures (tests/kubeapi/fixtures.py) for this directory."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.kubeapi import fixtures as _fixtures  # noqa: E402 pylint: disable=wrong-import-position

kube_server = _fixtures.kube_server
kube_server_session = _fixtures.kube_server_session
kube_api = _fixtures.kube_api
kube_limited_api = _fixtures.kube_limited_api
kube_dyn = _fixtures.kube_dyn
