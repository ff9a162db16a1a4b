"""The gate of the real-node test files (tests/integration/test_kubevirt_real_node*.py): call :func:`require_real_node`
at module level, before anything heavy.

The real node (kubelet, containerd, virt-handler, TCG guests) is heavy on 2 cores: its files run with `make
test-real-node` (CONVERGE_VIRT_REAL_NODE=1), not in make test, whose CI run must stay inside its time limit (README, "What
make test costs"); and only where `make kube-node` has built the node (it is not part of `make kube`).
"""

import os

import pytest

from tools.kubelab import build, images


def require_real_node():
    """Skip the calling module (naming what to run) unless the real-node run is asked for and the node is built."""
    if os.environ.get('CONVERGE_VIRT_REAL_NODE') != '1':
        pytest.skip('the real-node tests run with `make test-real-node` (CONVERGE_VIRT_REAL_NODE=1), not in make test',
                    allow_module_level=True)
    try:
        build.locate(build.REAL_NODE)
        images.locate_images()
    except build.KubelabError as exc:
        pytest.skip(f'the real node is not built ({exc}); run `make kube-node`', allow_module_level=True)
