# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ansible-core versions the collection claims are exactly the ones `make matrix` tests (issue 24)."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _matrix():
    spec = importlib.util.spec_from_file_location('converge_virt_matrix', os.path.join(ROOT, 'tools', 'matrix.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_requires_ansible_says_exactly_the_tested_versions():
    matrix = _matrix()
    assert matrix.check_claims() == []
    assert matrix.claimed_range() == '>=%s.0,<2.%d.0' % (matrix.VERSIONS[0], int(matrix.VERSIONS[-1].split('.')[1]) + 1)
    minors = [int(version.split('.')[1]) for version in matrix.VERSIONS]
    assert minors == list(range(minors[0], minors[-1] + 1)), 'every minor version between the first and the last is tested'


def test_a_claim_wider_than_the_matrix_is_reported(tmp_path, monkeypatch):
    matrix = _matrix()
    (tmp_path / 'meta').mkdir()
    (tmp_path / 'meta' / 'runtime.yml').write_text('requires_ansible: ">=2.16.0"\n')
    (tmp_path / 'test-requirements.txt').write_text('pytest\nansible-core>=2.15,<2.20   # too old a floor\n')
    (tmp_path / 'requirements.txt').write_text('PyYAML\n')
    monkeypatch.setattr(matrix, 'ROOT', str(tmp_path))
    problems = matrix.check_claims()
    assert len(problems) == 2
    assert "requires_ansible is '>=2.16.0'" in problems[0] and "['ansible-core>=2.15,<2.20']" in problems[1]


def test_each_environment_pins_its_version_and_leaves_out_the_tools_run_once():
    matrix = _matrix()
    lines = matrix.requirements('2.17')
    assert lines[-1] == 'ansible-core==2.17.*'
    names = [matrix._requirement_name(line) for line in lines]  # pylint: disable=protected-access
    assert names.count('ansible-core') == 1 and 'pytest' in names and 'libvirt-python' in names
    assert not set(names) & {'ansible-lint', 'molecule', 'antsibull-changelog', 'ansible-builder'}
