"""The event sources loaded as ansible-rulebook loads them: by their path (``runpy.run_path``), with no collections root
on sys.path and no PYTHONPATH - as in a decision environment built by ansible-builder, where the collection is installed
under ``<root>/ansible_collections/converge/virt`` (tests/integration/test_awx_mesh_de.py found them failing there with
"No module named 'ansible_collections'")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
SOURCES = ('libvirt_events.py', 'kubevirt_events.py')
LOAD = 'import runpy, sys; found = runpy.run_path(sys.argv[1]); print(callable(found["main"]))'


def load_by_path(path, cwd):
    """Run ``path`` as ansible-rulebook does, in a fresh interpreter without PYTHONPATH; (exit status, stdout, stderr)."""
    env = {key: value for key, value in os.environ.items() if key != 'PYTHONPATH'}
    out = subprocess.run([sys.executable, '-c', LOAD, path], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    return out.returncode, out.stdout.strip(), out.stderr


@pytest.mark.parametrize('source', SOURCES)
def test_a_source_of_an_installed_collection_loads_by_its_path(tmp_path, source):
    # the installed layout (ansible-galaxy's), the collection itself linked in
    parent = tmp_path / 'collections' / 'ansible_collections' / 'converge'
    parent.mkdir(parents=True)
    os.symlink(ROOT, str(parent / 'virt'))
    path = os.path.join(str(parent / 'virt'), 'extensions', 'eda', 'plugins', 'event_source', source)
    code, out, err = load_by_path(path, str(tmp_path))
    assert (code, out) == (0, 'True'), err[-2000:]


@pytest.mark.parametrize('source', SOURCES)
def test_outside_an_installed_layout_nothing_is_guessed(tmp_path, source):
    # a checkout is no collections root: the source adds nothing to sys.path and fails as before, naming the module. The
    # source is copied into a tree of that shape (not the file under ROOT: ansible-test runs this file from its own copy,
    # build/ansible-test/ansible_collections/converge/virt, which IS an installed layout)
    folder = tmp_path / 'checkout' / 'extensions' / 'eda' / 'plugins' / 'event_source'
    folder.mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, 'extensions', 'eda', 'plugins', 'event_source', source), str(folder))
    code, _out, err = load_by_path(str(folder / source), str(tmp_path))
    assert code != 0 and "No module named 'ansible_collections'" in err, err[-2000:]
