"""Write docs/reliability.md from the figures the reliability suites recorded.

The suites (tests/reliability) append one JSON line per scenario to
build/reliability/figures.jsonl (tests/reliability/figures.py); the session
hook of tests/reliability/conftest.py calls this at the end of a run.  By hand::

    python -m tools.reliability_report [--figures build/reliability/figures.jsonl] [--output docs/reliability.md]
"""

import argparse
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.reliability import figures  # noqa: E402  pylint: disable=wrong-import-position

DEFAULT_OUTPUT = os.path.join(ROOT, 'docs', 'reliability.md')
TITLES = {
    'interruption': 'Interruptions (SIGKILL, then re-run)',
    'concurrency': 'Concurrency (playbooks at once)',
    'fault': 'Faults (daemons, storage, Kubernetes API)',
    'fuzz': 'Bad input (generated arguments per module)',
    'secrets': 'Secrets (canary password and token)',
}
UNITS = {'interruption': 'kill points', 'concurrency': 'runs', 'fault': 'faults', 'fuzz': 'inputs', 'secrets': 'checks'}


def totals(entries):
    """Per category: scenarios, scenarios survived, cases, cases survived, data lost; plus an ``all`` row."""
    out = {}
    for category in figures.CATEGORIES:
        rows = [e for e in entries if e['category'] == category]
        out[category] = {
            'scenarios': len(rows),
            'survived': sum(1 for e in rows if e['survived']),
            'cases': sum(e['count'] for e in rows),
            'cases_survived': sum(e['count'] for e in rows if e['survived']),
            'data_lost': sum(e['data_lost'] for e in rows),
        }
    out['all'] = dict((key, sum(out[c][key] for c in figures.CATEGORIES)) for key in ('scenarios', 'survived', 'cases', 'cases_survived', 'data_lost'))
    return out


def merged(entries):
    """Entries of the same category and scenario added up (a scenario may be recorded once per test)."""
    rows = {}
    for entry in entries:
        key = (entry['category'], entry['scenario'])
        row = rows.setdefault(key, {'category': entry['category'], 'scenario': entry['scenario'], 'runs': 0, 'survived': 0, 'count': 0,
                                    'data_lost': 0, 'details': []})
        row['runs'] += 1
        row['survived'] += 1 if entry['survived'] else 0
        row['count'] += entry['count']
        row['data_lost'] += entry['data_lost']
        if entry.get('detail') and entry['detail'] not in row['details']:
            row['details'].append(entry['detail'])
    return [rows[k] for k in sorted(rows)]


# What the collection guarantees about security, and what is the user's to configure (issue 24). Kept here, beside the
# figures, so that the generated report always carries it; each line names the tests that hold the guarantee.
SECURITY = [
    '## Security: what is guaranteed, and what is yours to configure', '',
    '### Guaranteed (each by a regression test)', '',
    '- **No code runs on the controller through a VM name.** Both inventory plugins mark host names unsafe (as every host variable): '
    'a domain named `x-{{ lookup(\'pipe\', ...) }}` is listed under its real name and never evaluated through `inventory_hostname`, '
    '`keyed_groups`, `compose` or a connection without `ansible_host`, on every ansible-core the collection supports (2.16-2.19, '
    '`make matrix`; tests/integration/test_inventory_libvirt.py, test_inventory_kubevirt.py).',
    '- **Secrets are masked before anything logs them.** Every module registers the passwords and secret query values of every URL it is '
    'given, cloud-init user/network data and DataVolume import credentials as no_log values before AnsibleModule writes its invocation to '
    'the journal; results, diffs, errors, `changes`, the HTML report and the roles\' output never show them (tests/reliability/'
    'test_secrets_canary.py, tests/unit/plugins/modules/test_module_journal.py).',
    '- **An image import checks the file it uploads.** `import_from` opens the path once without following a symbolic link, requires a '
    'regular file, refuses a qcow2 with a backing file or an external data file, and inspects, hashes and uploads that one descriptor '
    '(tests/unit/plugins/module_utils/_libvirt/test_image_import.py).',
    '- **A forged task record cannot hold a VM forever or delete it.** A lease that is not finite or ends past the longest possible task '
    '(every timeout is at most one day) is stale and recovered; a forged libvirt mutex is broken; `reconcile` with `fix` never deletes a VM '
    'because of a record and turns a guest off only when two readings agree (tests/integration/test_forged_records*.py).',
    '- **Connection defaults fail closed.** A `K8S_AUTH_VERIFY_SSL` value that is not a boolean is refused; falling back to the in-cluster '
    'service account and sending a token over `http://` are warned about; a guest address used as `ansible_host` must be an IP address of '
    'another machine.',
    '- **The test labs open no door on the machine.** Private libvirt hosts are built from scratch (nothing of the machine\'s libvirt is '
    'copied), run only in a network namespace of their own with owner-only sockets, and are stopped only when proven to be the lab\'s '
    '(tests/integration/test_lab_isolation.py).',
    # issue 33: the event path, tried as a tenant would (the attacks and the tests that try them)
    '',
    '### Event-Driven Ansible: events never become code (issue 33, tried 2026-11-28)',
    '',
    'The attacks a tenant can try through the event path - the tenant chooses the name of a VM the collection manages,',
    "or may edit the VM's records (libvirt metadata, KubeVirt annotations) - and the tests that try them:",
    '',
    '| Attack | What stops it | Test |',
    '|---|---|---|',
    "| A libvirt domain named `x-{{ lookup('pipe', ...) }}` (and a `{% if %}` form), created by `converge.virt.vm` and then destroyed "
    'outside the collection, under the shipped rulebook: ansible-rulebook writes the whole event (`ansible_eda.event`) and any event '
    "field a rule passes into the playbook's extra vars, which ansible-core templates | the source withholds every string with a curly "
    'brace or `#jinja2:` (null + `<field>_percent_encoded` + `withheld`); the shipped rulebook passes only `vm_uuid` (checked against '
    'the UUID pattern by the source); `playbooks/reconcile.yml` refuses anything but a UUID, never reads `ansible_eda`, and takes the '
    "name from the host's own answer (`vm_info`, marked unsafe) | "
    'tests/integration/test_rulebook_e2e.py::test_a_vm_name_with_template_syntax_is_never_evaluated, once per ansible-core 2.16, 2.17, '
    "2.18, 2.19 (the rule fires, both VMs run again, the marker file is never written). Without the source's check and with a playbook "
    'that reads `ansible_eda.rule` (the old one), 2.16 wrote the marker |',
    '| KubeVirt annotations `converge.virt/vm-state` / `task-state` holding `{{ ... }}`, `{% ... %}`, a `#jinja2:` header; a playbook '
    'that prints the whole event (`debug: var=ansible_eda`, which templates all of it on ansible-core < 2.19) | the words are checked '
    "against the collection's vocabularies (UNKNOWN; raw value only under `untrusted_raw`, itself withheld); `vm.uid` checked against "
    'the UUID pattern | tests/integration/test_kubevirt_rulebook_e2e.py, once per ansible-core 2.16-2.19 (on a sync and on a change; '
    'the marker is never written) |',
    '| A string ansible-core would take for a template, in any field or key, of any event | `safe_event` is applied to every payload '
    "by the Outbox; its test is checked against ansible-core's own `is_possibly_template` | tests/unit/extensions/test_event_safety.py "
    '(hypothesis, 400 examples + the `#jinja2:` header) |',
    '| A guest that opens and closes its agent channel in a loop, a VM started and stopped in a loop, annotations rewritten thousands '
    'of times: unbounded memory in the source | per VM one waiting event of each kind (a newer one replaces it; the state is read when '
    'its turn comes), at most `queue_limit` (4096) waiting; beyond that events are dropped and a full sync follows | '
    'tests/unit/extensions/test_event_flood.py (tracemalloc peak, 2026-11-28, load 10): 20,000 libvirt events (lifecycle + agent) for '
    '3 VMs peak at 31 KiB (23 KiB for 2,000), 9 waiting at most; 10,000 KubeVirt watch events 29 KiB (28 KiB for 1,000), 3 waiting at '
    "most; the last state of every VM delivered; Nova's delayed STOPPED kept; without coalescing 4096 wait |",
    '| The documented RBAC lacks what cloud-init needs (Secrets), unnoticed because tests ran as admin | '
    '`docs/examples/kubevirt-rbac.yaml` grants Secrets `get`, `create`, `patch` (no list/watch) | '
    "tests/integration/test_kubevirt_cloud_init.py runs the modules as the lab's `kubeconfig-restricted` (built from the example) |",
    "| The lab's sshd (`StrictModes no`) trusting a state directory someone else can write | the lab refuses a state directory not "
    'owned by the user, writable by group/others, a symbolic link, or under a writable non-sticky directory | '
    'tests/unit/test_virtlab_state_dir.py |',
    '',
    'Left to you: a rulebook you write must pass only identities the collection checked (`event.converge_virt.vm.uuid`,',
    '`.uid`) into `run_playbook` or `run_job_template` extra vars, never a name, a record or a reason; the playbook must',
    "treat them as input (check the pattern) and find the VM on the host. The KubeVirt source's token belongs in a",
    'kubeconfig or `K8S_AUTH_API_KEY`, never in the rulebook: `ansible-rulebook -vv` logs the source arguments.',
    '', '### Yours to configure', '',
    '- **Credentials**: keep passwords and tokens in Ansible Vault, extra vars or the environment, not written literally in a task: '
    'ansible-core 2.19 prints a failing task\'s source line (playbooks) or its arguments (ad-hoc) whatever `no_log` says.',
    '- **Inventory cache**: `cache_connection` must be a private directory (for example under `~/.cache`); a directory others can write, '
    'or one owned by another user, is refused.',
    '- **Who may write task records**: on libvirt, whoever may define domains or secrets on the host; on KubeVirt, RBAC cannot separate '
    'annotations from the rest of a VirtualMachine: apply an admission policy such as docs/examples/annotations-policy.yaml so that only '
    'your automation\'s identity may change `converge.virt/*` annotations.',
    '- **Image directories**: only the last part of an `import_from` path is opened without following links; keep images in directories '
    'that only trusted users can write.',
]


def _cell(text):
    return str(text).replace('|', '\\|').replace('\n', ' ')


CHAOS_RECORD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests', 'chaos', 'campaigns.json')


def chaos_section(path=CHAOS_RECORD):
    """The chaos campaigns' section (tests/chaos/campaign.py --record writes the file it reads); [] when none was recorded."""
    if not os.path.exists(path):
        return []
    with open(path, encoding='utf-8') as handle:
        campaigns = json.load(handle)
    lines = ['## Chaos campaigns (randomized histories, checked)', '',
             'Recorded by `tests/chaos/campaign.py --record` (`make chaos SEED=... MINUTES=...`); the bounded campaign of `make test` is '
             '`tests/chaos/test_campaign_libvirt.py`. Workers run real ansible-playbook processes with random declarations while a nemesis '
             'kills process trees and faults libvirt daemons; `tests/chaos/checker.py` checks the audit journal and the final world. Every acting '
             'task appends begin/end records to `$CONVERGE_VIRT_AUDIT_JOURNAL`: vm steps, attach/detach and snapshots (under the VM\'s task), '
             'migrations, a host\'s drain mark, volume create/grow/delete.', '',
             '| Date | Seed | Hosts, workers | Seconds | Declarations (ok / failed / killed) | Task intervals journaled | Faults | Violations | Notes |',
             '|---|---|---|---|---|---|---|---|---|']
    for run in campaigns:
        outcomes = run.get('outcomes', {})
        faults = ', '.join('%s %d' % (name, count) for name, count in sorted(run.get('faults', {}).items())) or 'none'
        found = '%d%s' % (run['violations'], ' (%s)' % ', '.join(run['violation_kinds']) if run.get('violation_kinds') else '')
        lines.append('| %s | %s | %d, %d | %d | %d (%d / %d / %d) | %d | %s | %s | %s |' % (
            run.get('date', ''), run['seed'], run['hosts'], run['workers'], run['seconds'], run['declarations'], outcomes.get('ok', 0),
            outcomes.get('failed', 0), outcomes.get('killed', 0), run['journal_intervals'], _cell(faults), _cell(found), _cell(run.get('note', ''))))
    return lines + ['']


LONG_RECORD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tests', 'reliability', 'long_runs.json')


def long_section(path=LONG_RECORD):
    """The RELIABILITY_LONG runs (tests/reliability/long_runs.json, written by hand after a run); [] when none."""
    if not os.path.exists(path):
        return []
    with open(path, encoding='utf-8') as handle:
        runs = json.load(handle)
    lines = ['## RELIABILITY_LONG runs', '',
             'RELIABILITY_LONG=1: fuzz 5000 examples, 40 kill points, 4 concurrency rounds, the real 30 s KubeVirt client timeout.', '',
             '| Date | Command | Collected | Passed | Failed | Not run | Seconds | Notes |', '|---|---|---|---|---|---|---|---|']
    for run in runs:
        lines.append('| %s | %s | %d | %d | %d | %d | %d | %s |' % (
            run['date'], _cell(run['command']), run['collected'], run['passed'], run['failed'], run['not_run'], run['seconds'],
            _cell(run.get('note', ''))))
    return lines + ['']


def render(entries, date, command, note=None):
    """The report as Markdown text (``note``: one more line under the command, e.g. the run's outcome and time)."""
    tot = totals(entries)
    lines = ['# Reliability report', '',
             'Generated by the reliability suites (`tests/reliability`, issue 9) with `tools/reliability_report.py`; do not edit by hand.', '',
             '- Date: %s' % date,
             '- Command: `%s`' % command] + (['- Run: %s' % note] if note else [])
    lines += ['', '## Totals', '',
              '| Category | Scenarios survived | Cases survived | Data lost |',
              '|---|---|---|---|']
    for category in figures.CATEGORIES:
        row = tot[category]
        lines.append('| %s | %d of %d | %d of %d %s | %d |' % (category, row['survived'], row['scenarios'], row['cases_survived'], row['cases'],
                                                               UNITS[category], row['data_lost']))
    all_fuzz_clean = 'yes' if tot['fuzz']['survived'] == tot['fuzz']['scenarios'] else 'no'
    no_secret_shown = 'yes' if tot['secrets']['survived'] == tot['secrets']['scenarios'] else 'no'
    lines += ['', '- Interruptions survived: %d' % tot['interruption']['cases_survived'],
              '- Concurrent runs survived: %d' % tot['concurrency']['cases_survived'],
              '- Faults survived: %d of %d' % (tot['fault']['cases_survived'], tot['fault']['cases']),
              '- Inputs tried: %d (every one refused cleanly: %s)' % (tot['fuzz']['cases'], all_fuzz_clean),
              '- Secrets checks: %d (canary never shown: %s)' % (tot['secrets']['cases'], no_secret_shown),
              '- Data lost: %d' % tot['all']['data_lost']]
    rows = merged(entries)
    for category in figures.CATEGORIES:
        mine = [r for r in rows if r['category'] == category]
        lines += ['', '## %s' % TITLES[category], '']
        if not mine:
            lines.append('Nothing recorded in this run.')
            continue
        lines += ['| Scenario | %s | Survived | Data lost | Notes |' % UNITS[category].capitalize(), '|---|---|---|---|---|']
        for row in mine:
            lines.append('| %s | %d | %s | %d | %s |' % (_cell(row['scenario']), row['count'],
                                                         'yes' if row['survived'] == row['runs'] else 'NO (%d of %d)' % (row['survived'], row['runs']),
                                                         row['data_lost'], _cell('; '.join(row['details']))))
    lines += [''] + chaos_section() + long_section() + SECURITY
    return '\n'.join(lines) + '\n'


def main(argv=None):
    """Command line entry point; returns the path written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--figures', default=None, help='figures file (default: build/reliability/figures.jsonl or $RELIABILITY_FIGURES)')
    parser.add_argument('--output', default=os.environ.get('RELIABILITY_REPORT', DEFAULT_OUTPUT))
    parser.add_argument('--command', default='python -m tools.reliability_report', help='the command shown in the report')
    parser.add_argument('--date', default=None, help='the date shown (default: now, UTC)')
    parser.add_argument('--note', default=None, help="a line on the run under the command (tests passed, failed, time)")
    args = parser.parse_args(argv)
    entries = figures.read(args.figures)
    date = args.date or datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    text = render(entries, date, args.command, args.note)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, 'w', encoding='utf-8') as stream:
        stream.write(text)
    return args.output


if __name__ == '__main__':
    print(main())
