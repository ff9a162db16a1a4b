# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/lanes.py, which `make test` uses to run the integration tier beside molecule and the matrix."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKEFILE = '''.RECIPEPREFIX = >
slow:
> @sleep 1; echo slow >> order
fast:
> @echo fast >> order
broken:
> @echo broken-output; false
after:
> @echo after >> order
'''


def _lanes():
    spec = importlib.util.spec_from_file_location('converge_virt_lanes', os.path.join(ROOT, 'tools', 'lanes.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lanes_run_side_by_side_and_a_failure_ends_only_its_lane(tmp_path, monkeypatch, capsys):
    (tmp_path / 'Makefile').write_text(MAKEFILE, encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    rc = _lanes().main(['--log-dir', str(tmp_path / 'logs'), 'slow', 'fast broken after', 'fast'])
    out = capsys.readouterr().out
    assert rc == 1
    # the lanes ran at once: both fast targets finished before the slow one of the first lane
    assert (tmp_path / 'order').read_text(encoding='utf-8').split() == ['fast', 'fast', 'slow']
    # the failed target's output is printed with its lane; the target after it in that lane was skipped
    assert 'broken-output' in out and 'broken-output' in (tmp_path / 'logs' / 'lane-1.log').read_text(encoding='utf-8')
    rows = [line.split() for line in out.splitlines() if line.startswith('  lane ')]
    assert [(row[1], row[2], row[5]) for row in rows] == [
        ('0', 'slow', 'passed'), ('1', 'fast', 'passed'), ('1', 'broken', 'failed'), ('1', 'after', 'skipped'), ('2', 'fast', 'passed')]


def test_lanes_pass_when_every_target_passes(tmp_path, monkeypatch, capsys):
    (tmp_path / 'Makefile').write_text(MAKEFILE, encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    assert _lanes().main(['--log-dir', str(tmp_path / 'logs'), 'fast', 'fast after']) == 0
    assert 'skipped' not in capsys.readouterr().out
