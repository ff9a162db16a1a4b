"""Fixtures of the reliability suites (tests/reliability).

* the private libvirt hosts of ``tests/integration/virtlab_fixtures.py`` and the
  Kubernetes API test server fixtures of ``tests/kubeapi/fixtures.py``;
* ``kube_module_server``: one API server per test module (cheaper than
  ``kube_server`` for the fuzzers and fault suites, which use their own names): by
  default the session's real stack (reset once for the module, a fresh fault proxy
  and controller emulation), the emulator with ``CONVERGE_VIRT_KUBE_API=emulated``;
* the figures file (``figures.py``) is emptied when the session starts and,
  when figures were recorded, ``tools/reliability_report.py`` writes
  ``docs/reliability.md`` from them when it ends.
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# pylint: disable=wrong-import-position
# the private libvirt host fixtures and the Kubernetes ones (kube_server, kube_api, kube_dyn, kube_real_stack ...) come
# from the root conftest (pytest_plugins): importing a fixture here again would define a second session-scoped copy of
# it for this folder - a second libvirt_hosts on the same addresses, a second kube_real_stack (another kube-apiserver,
# etcd and virt-api) on every worker that also runs the KubeVirt files of tests/integration
from tests.kubeapi.fixtures import serving  # noqa: E402
from tests.reliability import figures  # noqa: E402


def pytest_sessionstart(session):  # pylint: disable=unused-argument
    """Start every session with an empty figures file, so the report reflects one run."""
    if getattr(session.config, 'workerinput', None) is not None:
        return  # an xdist worker: the controller already started the file
    path = figures.figures_path()
    if os.path.exists(path):
        os.replace(path, path + '.previous')


def pytest_sessionfinish(session, exitstatus):  # pylint: disable=unused-argument
    """Write docs/reliability.md from the figures this session recorded (nothing recorded: left alone)."""
    if getattr(session.config, 'workerinput', None) is not None:
        return  # an xdist worker: the controller writes the report
    if not figures.read():
        return
    # only a run of the whole suite (or one that names its report) writes it: a single file's figures are not the report
    whole = any(os.path.normpath(str(arg)) == os.path.join('tests', 'reliability') for arg in session.config.invocation_params.args)
    if not whole and not os.environ.get('RELIABILITY_REPORT'):
        return
    from tools import reliability_report  # pylint: disable=import-outside-toplevel
    output = os.environ.get('RELIABILITY_REPORT') or os.path.join(ROOT, 'docs', 'reliability.md')
    reliability_report.main(['--figures', figures.figures_path(), '--output', output,
                             '--command', ' '.join(['pytest'] + [str(a) for a in session.config.invocation_params.args])])


@pytest.fixture(scope='module')
def kube_module_server(request, tmp_path_factory):
    """A Kubernetes API server shared by one test module: the real stack (default) or the emulator."""
    with serving(request, str(tmp_path_factory.mktemp('kubeapi') / 'kubeconfig')) as srv:
        yield srv
