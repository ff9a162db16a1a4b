"""A campaign's figures are recorded and rendered in docs/reliability.md's chaos section."""

from tests.chaos import campaign
from tools import reliability_report


def test_recorded_figures_are_rendered(tmp_path):
    path = str(tmp_path / 'campaigns.json')
    numbers = {'seed': 41, 'seconds': 1500, 'declarations': 321, 'outcomes': {'ok': 200, 'failed': 100, 'killed': 21}, 'journal_intervals': 290,
               'faults': {'kill': 21, 'sigstop': 9}, 'violations': 1, 'violation_kinds': ['lost-declaration']}
    campaign.record(numbers, 3, 3, 2, path=path, note='fixed: see seed 41')
    campaign.record(dict(numbers, seed=42, violations=0, violation_kinds=[]), 2, 3, 1, path=path)
    lines = reliability_report.chaos_section(path)
    rows = [line for line in lines if line.startswith('| ') and '---' not in line][1:]
    assert len(rows) == 2
    assert '| 41 | 3, 3 | 1500 | 321 (200 / 100 / 21) | 290 | kill 21, sigstop 9 | 1 (lost-declaration) | fixed: see seed 41 |' in rows[0]
    assert '| 42 | 2, 3 |' in rows[1] and '| 0 |' in rows[1]
    assert reliability_report.chaos_section(str(tmp_path / 'none.json')) == []


def test_a_run_note_is_rendered_under_the_command():
    text = reliability_report.render([], 'today', 'RELIABILITY_LONG=1 pytest tests/reliability', note='120 passed, 0 failed, 2,400 s')
    lines = text.splitlines()
    command = lines.index('- Command: `RELIABILITY_LONG=1 pytest tests/reliability`')
    assert lines[command + 1] == '- Run: 120 passed, 0 failed, 2,400 s'
    assert '- Run:' not in reliability_report.render([], 'today', 'pytest')


def test_long_runs_are_rendered(tmp_path):
    path = str(tmp_path / 'long.json')
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write('[{"date": "d", "command": "RELIABILITY_LONG=1 pytest", "collected": 87, "passed": 59, "failed": 6, "not_run": 22, '
                     '"seconds": 3415, "note": "stopped"}]')
    lines = reliability_report.long_section(path)
    assert '| d | RELIABILITY_LONG=1 pytest | 87 | 59 | 6 | 22 | 3415 | stopped |' in lines
    assert reliability_report.long_section(str(tmp_path / 'none.json')) == []
