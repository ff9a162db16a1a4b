# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A task's owner ("host:pid") and whether its run is known dead, across pid namespaces.

Found through the AWX mesh (tests/integration/test_awx_mesh.py): a job in an execution environment container run with
the host's network has the host's name but a pid namespace of its own, so its owner was "vm:36" with 36 a pid of that
container. Another container on the same node, where pid 36 did not exist, judged that live task gone (and would take
the VM from it); a re-run whose own pid was 36 never judged a killed job's task gone. The pid namespace is now part of
the owner's host outside the kernel's initial one.
"""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base import owner


def _dead_pid():
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    child.wait()
    return child.pid


def test_in_the_initial_pid_namespace_the_owner_is_host_and_pid(monkeypatch):
    monkeypatch.setattr(owner, 'pid_namespace', lambda: owner.INITIAL_PID_NAMESPACE)
    assert owner.owner_id() == '%s:%d' % (socket.gethostname(), os.getpid())
    assert owner.owner_gone('%s:%d' % (socket.gethostname(), _dead_pid()))


def test_in_another_pid_namespace_the_owner_names_it(monkeypatch):
    monkeypatch.setattr(owner, 'pid_namespace', lambda: 4026532890)
    assert owner.owner_id() == '%s/pidns-4026532890:%d' % (socket.gethostname(), os.getpid())
    dead = _dead_pid()
    # written in this namespace: known dead here
    assert owner.owner_gone('%s/pidns-4026532890:%d' % (socket.gethostname(), dead))
    # written by the host (initial namespace) or by another container: its pid means nothing here, the lease decides
    assert not owner.owner_gone('%s:%d' % (socket.gethostname(), dead))
    assert not owner.owner_gone('%s/pidns-4026532891:%d' % (socket.gethostname(), dead))
    monkeypatch.setattr(owner, 'pid_namespace', lambda: owner.INITIAL_PID_NAMESPACE)
    assert not owner.owner_gone('%s/pidns-4026532890:%d' % (socket.gethostname(), dead))


def _in_new_pid_namespace(code):
    """Run python ``code`` in a new pid namespace (unshare, as a container's); its stdout, or None when not allowed here."""
    unshare = shutil.which('unshare')
    if not unshare:
        return None
    out = subprocess.run([unshare, '--pid', '--fork', '--', sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=60, check=False, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    if out.returncode != 0 and 'Operation not permitted' in out.stderr:
        return None
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_live_run_of_another_pid_namespace_is_not_gone():
    """The real thing: a process in a new pid namespace reads the owner of this live process (a pid it cannot see)."""
    mine = owner.owner_id()
    code = ('import json, os; from ansible_collections.converge.virt.plugins.module_utils._base import owner; '
            'print(json.dumps([owner.owner_id(), owner.owner_gone(%r), os.getpid()]))' % mine)
    out = _in_new_pid_namespace(code)
    if out is None:
        pytest.skip('unshare --pid is not allowed here')
    theirs, judged_gone, their_pid = json.loads(out)
    assert judged_gone is False, (mine, theirs)
    assert theirs.endswith(':%d' % their_pid) and theirs != mine and '/pidns-' in theirs, theirs
    # and what that process (gone now) recorded is not judged from here by a pid of this namespace
    assert not owner.owner_gone(theirs)
