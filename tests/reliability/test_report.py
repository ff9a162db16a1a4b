"""tools/reliability_report.py: the totals and tables of docs/reliability.md come from the figures, exactly."""

import json

from tests.reliability import figures
from tools import reliability_report

ENTRIES = [
    {'category': 'interruption', 'scenario': 'SIGKILL during volume grow', 'survived': True, 'count': 7, 'data_lost': 0, 'detail': ''},
    {'category': 'interruption', 'scenario': 'SIGKILL during create', 'survived': True, 'count': 5, 'data_lost': 0, 'detail': ''},
    {'category': 'fault', 'scenario': 'kubevirt vm: 409 on create', 'survived': True, 'count': 1, 'data_lost': 0, 'detail': 'first run failed cleanly'},
    {'category': 'fault', 'scenario': 'libvirtd restarted | mid-grow', 'survived': False, 'count': 2, 'data_lost': 1, 'detail': 'volume lost'},
    {'category': 'fuzz', 'scenario': 'vm arguments (libvirt)', 'survived': True, 'count': 500, 'data_lost': 0, 'detail': ''},
    {'category': 'fuzz', 'scenario': 'vm arguments (libvirt)', 'survived': True, 'count': 20, 'data_lost': 0, 'detail': ''},
    {'category': 'fuzz', 'scenario': 'volume arguments (libvirt)', 'survived': True, 'count': 501, 'data_lost': 0, 'detail': ''},
    {'category': 'secrets', 'scenario': 'canary', 'survived': True, 'count': 42, 'data_lost': 0, 'detail': '8 modules'},
]


def test_totals_add_up_per_category():
    tot = reliability_report.totals(ENTRIES)
    assert tot['interruption'] == {'scenarios': 2, 'survived': 2, 'cases': 12, 'cases_survived': 12, 'data_lost': 0}
    assert tot['fault'] == {'scenarios': 2, 'survived': 1, 'cases': 3, 'cases_survived': 1, 'data_lost': 1}
    assert tot['fuzz'] == {'scenarios': 3, 'survived': 3, 'cases': 1021, 'cases_survived': 1021, 'data_lost': 0}
    assert tot['concurrency'] == {'scenarios': 0, 'survived': 0, 'cases': 0, 'cases_survived': 0, 'data_lost': 0}
    assert tot['all'] == {'scenarios': 8, 'survived': 7, 'cases': 1078, 'cases_survived': 1076, 'data_lost': 1}


def test_report_shows_the_totals_and_one_row_per_scenario(tmp_path):
    path = tmp_path / 'figures.jsonl'
    path.write_text(''.join(json.dumps(e) + '\n' for e in ENTRIES), encoding='utf-8')
    out = tmp_path / 'reliability.md'
    written = reliability_report.main(['--figures', str(path), '--output', str(out), '--command', 'make integration', '--date', '2026-11-22'])
    assert written == str(out)
    text = out.read_text(encoding='utf-8')
    assert '- Date: 2026-11-22' in text and '- Command: `make integration`' in text
    assert '| interruption | 2 of 2 | 12 of 12 kill points | 0 |' in text
    assert '| fault | 1 of 2 | 1 of 3 faults | 1 |' in text
    assert '| fuzz | 3 of 3 | 1021 of 1021 inputs | 0 |' in text
    assert '- Interruptions survived: 12' in text and '- Faults survived: 1 of 3' in text
    assert '- Inputs tried: 1021 (every one refused cleanly: yes)' in text and '- Data lost: 1' in text
    # a scenario recorded twice is one row with the counts added; a | in a name does not break the table
    assert '| vm arguments (libvirt) | 520 | yes | 0 |  |' in text
    assert '| volume arguments (libvirt) | 501 | yes | 0 |  |' in text
    assert '| libvirtd restarted \\| mid-grow | 2 | NO (0 of 1) | 1 | volume lost |' in text
    assert '## Concurrency (playbooks at once)\n\nNothing recorded in this run.' in text


def test_report_reads_what_figures_records(tmp_path, monkeypatch):
    monkeypatch.setenv('RELIABILITY_FIGURES', str(tmp_path / 'f.jsonl'))
    figures.record('fuzz', 'host arguments (libvirt)', True, count=500)
    figures.record('secrets', 'canary', True, count=9)
    text = reliability_report.render(figures.read(), 'today', 'pytest')
    assert '| fuzz | 1 of 1 | 500 of 500 inputs | 0 |' in text and '| secrets | 1 of 1 | 9 of 9 checks | 0 |' in text


def test_report_carries_the_security_section():
    """Every generated report says what is guaranteed and what is the user's to configure (issue 24)."""
    text = reliability_report.render([], 'today', 'pytest')
    assert '## Security: what is guaranteed, and what is yours to configure' in text
    guaranteed, yours = text.split('### Guaranteed', 1)[1].split('### Yours to configure', 1)
    assert guaranteed.count('\n- **') == 6 and yours.count('\n- **') == 4
    for topic in ('inventory plugins mark host names unsafe', 'without following a symbolic link',
                  'Ansible Vault', 'annotations-policy.yaml', 'cache_connection'):
        assert topic in text, topic
