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


JUNIT = '''<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.a.test_slow" name="test_one" file="tests/a/test_slow.py" time="30.5"/>
<testcase classname="tests.a.test_slow" name="test_two" file="tests/a/test_slow.py" time="12.0"/>
<testcase classname="tests.b.test_quick.TestThing" name="test_x" time="3.25"/>
<testcase classname="tests.b.test_mid" name="test_y" time="20"/>
</testsuite></testsuites>'''


def test_targets_run_first_and_the_summary_names_tiers_lanes_and_slowest_files(tmp_path, monkeypatch, capsys):
    (tmp_path / 'Makefile').write_text(MAKEFILE + 'junit:\n> @cp given.xml junit-tier.xml\n', encoding='utf-8')
    (tmp_path / 'given.xml').write_text(JUNIT, encoding='utf-8')
    # a JUnit file of an earlier run (older than this one) is not counted
    (tmp_path / 'junit-old.xml').write_text(JUNIT.replace('test_slow', 'test_stale'), encoding='utf-8')
    os.utime(tmp_path / 'junit-old.xml', (1, 1))
    monkeypatch.chdir(tmp_path)
    rc = _lanes().main(['--log-dir', str(tmp_path / 'logs'), '--first', 'fast', '--junit', str(tmp_path / 'junit-*.xml'), 'slow junit', 'after'])
    out = capsys.readouterr().out
    assert rc == 0
    # the first targets ran before any lane
    assert (tmp_path / 'order').read_text(encoding='utf-8').split() == ['fast', 'after', 'slow']
    summary = (tmp_path / 'logs' / 'summary.txt').read_text(encoding='utf-8')
    assert summary in out
    lines = summary.splitlines()
    assert [line.split()[:3] for line in lines if line.startswith('  first ') or line.startswith('  lane ')] == [
        ['first', 'fast', '0'], ['lane', '0', 'slow'], ['lane', '0', 'junit'], ['lane', '1', 'after']]
    assert any(line.startswith('  total of lane 0: 1 s') for line in lines), summary
    files = [line.split()[:3] for line in lines[lines.index(next(line for line in lines if line.startswith('slowest test files'))) + 1:]]
    assert files == [['42', 's', 'tests/a/test_slow.py'], ['20', 's', 'tests/b/test_mid.py'], ['3', 's', 'tests/b/test_quick.py']]


def test_a_failure_of_a_first_target_skips_the_lanes(tmp_path, monkeypatch, capsys):
    (tmp_path / 'Makefile').write_text(MAKEFILE, encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    assert _lanes().main(['--log-dir', str(tmp_path / 'logs'), '--first', 'broken fast', 'after']) == 1
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(('  first ', '  lane '))]
    assert [row[:2] for row in rows] == [['first', 'broken'], ['first', 'fast'], ['lane', '0']]
    assert rows[0][4] == 'failed' and rows[1][-1] == 'skipped' and rows[2][-1] == 'skipped', rows
    assert not (tmp_path / 'order').exists()


def test_stages_run_in_order_and_a_stage_runs_its_lanes_side_by_side(tmp_path, monkeypatch, capsys):
    (tmp_path / 'Makefile').write_text(MAKEFILE, encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    rc = _lanes().main(['--log-dir', str(tmp_path / 'logs'), '--first', 'after', '--first', 'slow | fast', 'fast'])
    out = capsys.readouterr().out
    assert rc == 0
    # stage 1, then stage 2's lanes side by side (fast ends before slow), then the lanes
    assert (tmp_path / 'order').read_text(encoding='utf-8').split() == ['after', 'fast', 'slow', 'fast']
    rows = [line.split()[:4] for line in out.splitlines() if line.startswith('  first') or line.startswith('  lane ')]
    assert rows == [['first', 'stage', '1', 'after'], ['first', '2.0', 'slow', '1'], ['first', '2.1', 'fast', '0'], ['lane', '0', 'fast', '0']]
    assert any(line.startswith('  wall of first stage 2: 1 s (slow | fast)') for line in out.splitlines()), out
