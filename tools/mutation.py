"""Mutation testing of the phase logic (``make mutation``): cosmic-ray over plugins/module_utils/_phase/*.py.

Each ``_phase`` file is mutated in a private copy of the plugins and the ``_phase`` tests (``build/mutation/<file>/``),
never in the work tree, one file after another; every mutant runs the ``_phase`` unit tests (the file's own tests first, ``-x``)
with hypothesis derandomized. A mutant counts as killed when a test fails or the run errs or times out.

Surviving mutants that cannot be killed because they do not change behaviour are listed, with the reason, in
``tests/mutation/equivalent.json`` (keyed by file, operator and the source line before and after the mutation); a
listed mutant that is killed, or no longer exists, is reported as stale. Every other survivor is a gap. The score of
a file is killed / (mutants - listed equivalents); ``--min-score`` (default 95) is required of every file.

Writes ``docs/mutation.md``; exits 1 when a file is under the minimum, 2 on a usage or set-up error.
"""

import argparse
import ast
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PHASE = os.path.join('plugins', 'module_utils', '_phase')
COMMON = os.path.join('plugins', 'module_utils', '_common')
TESTS = os.path.join('tests', 'unit', 'plugins', 'module_utils', '_phase')
EQUIVALENT = os.path.join(ROOT, 'tests', 'mutation', 'equivalent.json')
REPORT = os.path.join(ROOT, 'docs', 'mutation.md')
COLLECTION = os.path.join('ansible_collections', 'converge', 'virt')

# The test files that exercise each module most directly run first (-x stops at the first failure); every other _phase
# test file that imports the module (directly or not) follows, so a mutant is judged by every test that can see it.
FIRST = {
    'actions.py': ['test_actions.py', 'test_upstream_nova.py', 'test_vm_plan.py'],
    'deviations.py': ['test_deviations.py'],
    'diagrams.py': ['test_diagrams.py'],
    'migration.py': ['test_migration.py', 'test_upstream_kubevirt.py'],
    'prediction.py': ['test_prediction.py'],
    'snapshots.py': ['test_snapshots.py'],
    'reconcile.py': ['test_reconcile.py', 'test_upstream_nova.py'],
    'states.py': ['test_states.py', 'test_upstream_kubevirt.py', 'test_views_libvirt.py'],
    'status.py': ['test_status.py', 'test_upstream_kubevirt.py', 'test_views_kubevirt.py'],
    'tasks.py': ['test_tasks.py'],
    'views.py': ['test_views_stale.py', 'test_views_libvirt.py', 'test_views_kubevirt.py', 'test_upstream_kubevirt.py', 'test_upstream_nova.py'],
    'vm_plan.py': ['test_vm_plan.py'],
    'volumes.py': ['test_volumes.py', 'test_upstream_kubelet.py'],
}


PREFIX = 'ansible_collections.converge.virt.'


def _module_file(dotted):
    """The file of a module of the collection (``plugins.module_utils._phase.status``), or None."""
    path = os.path.join(ROOT, *dotted.split('.'))
    for candidate in (path + '.py', os.path.join(path, '__init__.py')):
        if os.path.isfile(candidate):
            return os.path.relpath(candidate, ROOT)
    return None


def _imports(path):
    """The collection's modules ``path`` imports, anywhere in it (functions included), as files relative to ROOT."""
    with open(os.path.join(ROOT, path), encoding='utf-8') as handle:
        tree = ast.parse(handle.read(), path)
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            base = node.module[len(PREFIX):]
            names = [base + '.' + alias.name for alias in node.names] + [base]
        elif isinstance(node, ast.Import):
            names = [alias.name[len(PREFIX):] for alias in node.names if alias.name.startswith(PREFIX)]
        for name in names:
            target = _module_file(name)
            if target:
                found.add(target)
    return found


def tests_importing(module):
    """The _phase test files that import ``module`` (a _phase file name), directly or through other modules.

    A test that never imports the mutated module cannot see the mutation, so it is not run for it.
    """
    target = os.path.join(PHASE, module)
    graph = {}

    def reaches(path, seen):
        if path == target:
            return True
        if path in seen:
            return False
        seen.add(path)
        if path not in graph:
            graph[path] = _imports(path)
        return any(reaches(dep, seen) for dep in graph[path])

    return sorted(f for f in os.listdir(os.path.join(ROOT, TESTS))
                  if f.startswith('test_') and f.endswith('.py') and reaches(os.path.join(TESTS, f), set()))


def phase_files():
    """The _phase modules, sorted (``__init__.py`` has no code)."""
    return sorted(f for f in os.listdir(os.path.join(ROOT, PHASE)) if f.endswith('.py') and f != '__init__.py')


def _copy_tree(workdir):
    base = os.path.join(workdir, COLLECTION)
    if os.path.exists(workdir):
        shutil.rmtree(workdir)
    for rel in ('plugins', TESTS):
        shutil.copytree(os.path.join(ROOT, rel), os.path.join(base, rel), ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
    # the package markers on the way down, so that the copy imports exactly like the work tree
    for rel in ('plugins', os.path.join('plugins', 'module_utils'), 'tests', os.path.join('tests', 'unit'),
                os.path.join('tests', 'unit', 'plugins'), os.path.join('tests', 'unit', 'plugins', 'module_utils')):
        marker = os.path.join(ROOT, rel, '__init__.py')
        if os.path.exists(marker):
            shutil.copy(marker, os.path.join(base, rel, '__init__.py'))
    os.makedirs(os.path.join(base, 'docs'))
    shutil.copy(os.path.join(ROOT, 'docs', 'states.md'), os.path.join(base, 'docs', 'states.md'))
    return base


def _test_command(module, python, base, sock):
    relevant = tests_importing(module)
    first = [f for f in FIRST.get(module, []) if f in relevant]
    rest = [f for f in relevant if f not in first]
    if not first:
        first, rest = rest, []
    return '%s %s run %s %s %s -- %s' % (python, os.path.join(HERE, 'mutation_worker.py'), sock, base,
                                         ' '.join(os.path.join(TESTS, f) for f in first), ' '.join(os.path.join(TESTS, f) for f in rest))


def _config(base, module, timeout, python, sock):
    path = os.path.join(base, 'cosmic-ray.toml')
    with open(path, 'w', encoding='utf-8') as handle:
        handle.write('[cosmic-ray]\nmodule-path = "%s"\ntimeout = %.1f\nexcluded-modules = []\ntest-command = "%s"\n\n'
                     '[cosmic-ray.distributor]\nname = "local"\n' % (os.path.join(PHASE, module), timeout, _test_command(module, python, base, sock)))
    return path


def _run(args, cwd, env):
    proc = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError('%s failed (%d):\n%s' % (' '.join(args), proc.returncode, proc.stdout[-4000:]))
    return proc.stdout


def _line(text, row):
    lines = text.splitlines()
    return lines[row - 1].strip() if 0 < row <= len(lines) else ''


def _mutated_line(diff):
    """The first added line of a unified diff, stripped (the mutated source line)."""
    for line in (diff or '').splitlines():
        if line.startswith('+') and not line.startswith('+++'):
            return line[1:].strip()
    return ''


def _results(session, source):
    """[(outcome, operator, line number, original line, mutated line)] of a cosmic-ray session database."""
    db = sqlite3.connect(session)
    try:
        rows = db.execute('SELECT m.operator_name, m.start_pos_row, r.test_outcome, r.worker_outcome, r.diff '
                          'FROM mutation_specs m JOIN work_results r ON m.job_id = r.job_id').fetchall()
    finally:
        db.close()
    out = []
    for operator, row, test_outcome, worker_outcome, diff in rows:
        test_outcome, worker_outcome = (test_outcome or '').lower(), (worker_outcome or '').lower()
        if worker_outcome == 'normal' and test_outcome == 'survived':
            outcome = 'survived'
        elif worker_outcome in ('normal', 'abnormal', 'exception') and test_outcome in ('killed', 'incompetent'):
            outcome = 'killed' if test_outcome == 'killed' else 'incompetent'
        else:
            outcome = 'not run (%s/%s)' % (worker_outcome, test_outcome)
        out.append((outcome, operator.split('/')[-1], row, _line(source, row), _mutated_line(diff)))
    return sorted(out, key=lambda r: (r[2], r[1], r[4]))


def _recheckable(workdir, module, source):
    """True when a finished session of ``module`` exists for exactly this source (only the tests changed since)."""
    stamp = os.path.join(workdir, 'source.py')
    if not (os.path.exists(stamp) and os.path.exists(os.path.join(workdir, 'session.sqlite'))):
        return False
    with open(stamp, encoding='utf-8') as handle:
        return handle.read() == source


def mutate_file(module, timeout, equivalents, python_env, python, sock, recheck=False):
    """Run cosmic-ray over one _phase module; return its summary dict.

    ``recheck``: when the module's source is unchanged since its last run, run again only the mutants that survived
    it (after test changes); otherwise a full run.
    """
    workdir = os.path.join(ROOT, 'build', 'mutation', module[:-3])
    session = os.path.join(workdir, 'session.sqlite')
    with open(os.path.join(ROOT, PHASE, module), encoding='utf-8') as handle:
        source = handle.read()
    env = dict(python_env, PYTHONPATH=workdir, CONVERGE_HYPOTHESIS_PROFILE='mutation')
    cosmic = os.path.join(os.path.dirname(sys.executable), 'cosmic-ray')
    started = time.monotonic()
    base = os.path.join(workdir, COLLECTION)
    if recheck and _recheckable(workdir, module, source):
        for rel in ('plugins', TESTS):    # the module itself is unchanged (checked); everything else is refreshed
            shutil.rmtree(os.path.join(base, rel))
            shutil.copytree(os.path.join(ROOT, rel), os.path.join(base, rel), ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
        shutil.copy(os.path.join(ROOT, 'docs', 'states.md'), os.path.join(base, 'docs', 'states.md'))
        config = _config(base, module, timeout, python, sock)
        db = sqlite3.connect(session)
        with db:
            db.execute("DELETE FROM work_results WHERE lower(test_outcome) = 'survived'")
        db.close()
    else:
        base = _copy_tree(workdir)
        config = _config(base, module, timeout, python, sock)
        _run([cosmic, 'init', config, session], base, env)
        _run([cosmic, 'baseline', config], base, env)
    _run([cosmic, 'exec', config, session], base, env)
    with open(os.path.join(workdir, 'source.py'), 'w', encoding='utf-8') as handle:
        handle.write(source)
    seconds = time.monotonic() - started
    results = _results(session, source)
    listed = equivalents.get(module, [])
    keys = {(e['operator'], e['line'], e['mutated']): e for e in listed}
    survivors, equivalent, used = [], [], set()
    for outcome, operator, row, line, mutated in results:
        if outcome != 'survived':
            continue
        key = (operator, line, mutated)
        if key in keys:
            equivalent.append(dict(keys[key], row=row))
            used.add(key)
        else:
            survivors.append({'operator': operator, 'row': row, 'line': line, 'mutated': mutated})
    killed = sum(1 for r in results if r[0] in ('killed', 'incompetent'))
    killable = len(results) - len(equivalent)
    return {
        'module': module, 'mutants': len(results), 'killed': killed,
        'incompetent': sum(1 for r in results if r[0] == 'incompetent'),
        'not_run': sum(1 for r in results if r[0].startswith('not run')),
        'equivalent': equivalent, 'survivors': survivors,
        'stale': [e for k, e in keys.items() if k not in used],
        'score': 100.0 * killed / killable if killable else 100.0, 'seconds': seconds,
    }


def render(summaries, total_seconds, min_score):
    """docs/mutation.md."""
    out = ['<!-- Written by `make mutation` (tools/mutation.py); do not edit by hand. -->', '', '# Mutation testing of the phase logic', '',
           'cosmic-ray mutates each file of `plugins/module_utils/_phase/` in a private copy; every mutant runs the `_phase` unit '
           'tests. Killed: a test failed, or the run erred or timed out. Score: killed / (mutants - equivalent), at least %d%% '
           'required of every file. Equivalent mutants (they cannot change behaviour) are listed below with the reason '
           '(`tests/mutation/equivalent.json`).' % min_score, '',
           '| file | mutants | killed | of which errors/timeouts | survived | equivalent | score | seconds |',
           '|---|---|---|---|---|---|---|---|']
    for s in summaries:
        out.append('| %s | %d | %d | %d | %d | %d | %.1f%% | %.0f |' % (
            s['module'], s['mutants'], s['killed'], s['incompetent'], len(s['survivors']), len(s['equivalent']), s['score'], s['seconds']))
    out += ['', 'Total time: %.0f s (%.1f min).' % (total_seconds, total_seconds / 60.0), '']
    for s in summaries:
        if not (s['equivalent'] or s['survivors'] or s['stale']):
            continue
        out += ['## %s' % s['module'], '']
        if s['equivalent']:
            out += ['Equivalent mutants:', '', '| line | operator | source | mutated | why it cannot be killed |', '|---|---|---|---|---|']
            for e in s['equivalent']:
                line, mutated = e['line'].replace('|', '\\|'), e['mutated'].replace('|', '\\|')
                out.append('| %d | %s | `%s` | `%s` | %s |' % (e['row'], e['operator'], line, mutated, e['reason']))
            out.append('')
        if s['survivors']:
            out += ['Surviving mutants not explained (test gaps):', '', '| line | operator | source | mutated |', '|---|---|---|---|']
            for e in s['survivors']:
                out.append('| %d | %s | `%s` | `%s` |' % (e['row'], e['operator'], e['line'].replace('|', '\\|'), e['mutated'].replace('|', '\\|')))
            out.append('')
        if s['stale']:
            out += ['Listed as equivalent but no longer surviving (remove from equivalent.json): %s' %
                    '; '.join('%s `%s`' % (e['operator'], e['mutated']) for e in s['stale']), '']
    return '\n'.join(out).rstrip('\n') + '\n'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('files', nargs='*', help='_phase files to mutate (default: all)')
    parser.add_argument('--timeout', type=float, default=120.0, help='seconds one test run of a mutant may take')
    parser.add_argument('--min-score', type=float, default=95.0)
    parser.add_argument('--report', default=REPORT, help='Markdown report to write (docs/mutation.md)')
    parser.add_argument('--json', help='also write the summaries as JSON here')
    parser.add_argument('--recheck', action='store_true',
                        help='for files whose source did not change since their last run, run only the mutants that survived it')
    parser.add_argument('--python', default=os.path.join(ROOT, '.venv', 'bin', 'python'),
                        help='the Python that runs the tests (the project virtual environment: some _phase tests import the backends)')
    args = parser.parse_args(argv)
    # the test command runs inside each private copy: a relative interpreter path would not exist there, and every
    # mutant would count as killed by the error
    args.python = os.path.abspath(args.python)
    known = phase_files()
    files = args.files or known
    unknown = [f for f in files if f not in known]
    if unknown:
        parser.error('not a _phase file: %s (known: %s)' % (', '.join(unknown), ', '.join(known)))
    with open(EQUIVALENT, encoding='utf-8') as handle:
        equivalents = json.load(handle)
    env = dict(os.environ)
    env.pop('PYTHONPATH', None)
    summaries, started = [], time.monotonic()
    os.makedirs(os.path.join(ROOT, 'build', 'mutation'), exist_ok=True)
    sock = os.path.join(ROOT, 'build', 'mutation', 'worker.sock')
    worker = subprocess.Popen([args.python, os.path.join(HERE, 'mutation_worker.py'), 'serve', sock], env=env)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(sock):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError('the test worker did not start')
            time.sleep(0.1)
        for module in files:
            summary = mutate_file(module, args.timeout, equivalents, env, args.python, sock, args.recheck)
            summaries.append(summary)
            print('%-14s %4d mutants %4d killed %3d survived %3d equivalent  %5.1f%%  %5.0f s' % (
                module, summary['mutants'], summary['killed'], len(summary['survivors']), len(summary['equivalent']), summary['score'],
                summary['seconds']), flush=True)
    finally:
        worker.terminate()
        worker.wait()
        if os.path.exists(sock):
            os.unlink(sock)
    total = time.monotonic() - started
    with open(args.report, 'w', encoding='utf-8') as handle:
        handle.write(render(summaries, total, args.min_score))
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as handle:
            json.dump(summaries, handle, indent=1)
    low = [s['module'] for s in summaries if s['score'] < args.min_score]
    print('mutation: %d file(s), %.0f s; %s' % (len(summaries), total, 'under %.0f%%: %s' % (args.min_score, ', '.join(low)) if low else 'all files pass'))
    return 1 if low else 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except RuntimeError as exc:
        print('mutation: %s' % exc, file=sys.stderr)
        sys.exit(2)
