"""The gate of the real-node test files (tests/integration/test_kubevirt_real_node*.py): call :func:`require_real_node`
at module level, before anything heavy.

The real node (kubelet, containerd, virt-handler, TCG guests) is heavy on 2 cores: its files run in their own pytest
process, one lab at a time, with CONVERGE_VIRT_REAL_NODE=1: make test's real-node-run (the Makefile's REAL_NODE_LANE, after
`make kube-node` has built the node) and `make test-real-node` (every real-node file). Anywhere else they skip; asked
for on a machine where the node is not built, they fail (a real-node run never passes by skipping).
"""

import os

import pytest

from tools.kubelab import build, images


def require_real_node():
    """Skip the calling module (naming what to run) unless the real-node run is asked for and the node is built."""
    if os.environ.get('CONVERGE_VIRT_REAL_NODE') != '1':
        pytest.skip('the real-node tests run in make test\'s real-node-run and `make test-real-node` (CONVERGE_VIRT_REAL_NODE=1)',
                    allow_module_level=True)
    try:
        build.locate(build.REAL_NODE)
        images.locate_images()
    except build.KubelabError as exc:
        pytest.fail(f'CONVERGE_VIRT_REAL_NODE=1 but the real node is not built ({exc}); run `make kube-node`', pytrace=False)
