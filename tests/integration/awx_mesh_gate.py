"""The gate of the AWX mesh test files (tests/integration/test_awx_mesh*.py): call :func:`require_mesh` at module level,
before anything heavy.

The mesh (receptor, execution nodes, the EE and the DE under podman) runs with `make test-awx`, which builds it first and
sets CONVERGE_VIRT_AWX_MESH=1. Anywhere else the files skip; asked for on a machine where the mesh is not built, they fail
(a mesh run never passes by skipping), as the real-node gate does (kubevirt_real_node_gate.py).
"""

import os

import pytest

from tools.awxlab import build as awx_build


def require_mesh(decision_environment=False):
    """Skip the calling module (naming what to run) unless the mesh run is asked for; fail when it is not built."""
    if os.environ.get('CONVERGE_VIRT_AWX_MESH') != '1':
        pytest.skip('the AWX mesh tests run with `make test-awx` (CONVERGE_VIRT_AWX_MESH=1 after make awx), not in make test',
                    allow_module_level=True)
    missing = [] if awx_build.built() else ['the AWX execution environment and receptor']
    if decision_environment and not awx_build.de_built():
        missing.append('the decision environment')
    if missing:
        pytest.fail('CONVERGE_VIRT_AWX_MESH=1 but %s not built: make awx (a mesh run never passes by skipping)'
                    % ' and '.join(missing), pytrace=False)
