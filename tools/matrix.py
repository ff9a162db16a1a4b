"""The ansible-core test matrix (`make matrix`): the collection's tests on every ansible-core it claims.

For each version in VERSIONS a virtual environment holds requirements.txt, the test tools of
test-requirements.txt (not the linters, molecule and the packaging tools: those run once, in
``.venv``) and ``ansible-core==<version>.*``. It lives outside the checkout, in
``$CONVERGE_VIRT_MATRIX_CACHE`` (``~/.cache/converge-virt/matrix``), named
``<version>-<digest>`` by what it holds (the requirement files, the version and the Python), so a
clean clone reuses it and a change of the requirements makes a new one; pip's wheel cache keeps a
remake cheap. What a run leaves (logs, hypothesis database, ansible home) stays in ``build/matrix/<version>``.

Then, per version, pytest with that environment's Python runs UNIT_TESTS, and
INTEGRATION_TESTS inside a private network namespace (``python -m tools.virtlab netns``:
they start private libvirt hosts): the unit tests, both inventory plugins, the secrets canary and a
few integration tests of the vm, volume and migration modules. The tests call
``ansible``/``ansible-playbook`` from the directory of the Python that runs pytest
(tests/integration/ansible_run.py), so every ansible process is of that version.

    python -m tools.matrix                 # every version
    python -m tools.matrix 2.16 2.18       # some
    python -m tools.matrix --setup-only    # make the environments, run nothing

``meta/runtime.yml``'s requires_ansible and test-requirements.txt's ansible-core say exactly
these versions: :func:`check_claims` (run first, and by tests/unit/test_requires_ansible.py)
fails when they do not.
"""

import argparse
import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what a run leaves (logs, hypothesis database, ansible home) per version
MATRIX = os.path.join(ROOT, 'build', 'matrix')
# the virtual environments, outside the checkout so that clean clones reuse them: one per version and digest of
# what it holds (requirements, ansible-core, Python), <cache>/<version>-<digest>; `make` exports the variable
VENVS = os.environ.get('CONVERGE_VIRT_MATRIX_CACHE') or os.path.join(
    os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache'), 'converge-virt', 'matrix')
VERSIONS = ('2.16', '2.17', '2.18', '2.19')
# run once in .venv (make sanity / lint / molecule / docs), not per ansible-core
NOT_IN_MATRIX = ('ansible-core', 'ansible-lint', 'molecule', 'antsibull-changelog', 'ansible-builder')
UNIT_TESTS = ('tests/unit',)
# in a private network namespace, two workers, whole files per worker, longest first
INTEGRATION_TESTS = (
    # the canary's two halves first, so that xdist's first round gives one to each worker
    'tests/reliability/test_secrets_canary.py',
    'tests/reliability/test_secrets_canary_kubevirt.py',
    'tests/integration/test_inventory_kubevirt.py',
    'tests/integration/test_inventory_libvirt.py',
    # a representative subset of the modules: live migrations of two VMs placed over two targets, a volume's
    # create/check/diff/idempotence, a fleet of VMs
    'tests/integration/test_migration_module.py::test_placement_over_candidates',
    'tests/integration/test_volume_module.py::test_create_check_mode_idempotence_and_diff',
    'tests/integration/test_vm_module.py::test_fleet_form',
    # direct execution (plugins/plugin_utils/direct_execution.py) leans on each version's module plumbing
    'tests/integration/test_direct_execution.py',
)


def claimed_range(patch='.0'):
    """The ansible-core versions the matrix tests, as a requirement specifier: '>=2.16.0,<2.20.0' ('>=2.16,<2.20' with patch='')."""
    major, minor = VERSIONS[-1].split('.')
    return '>=%s%s,<%s.%d%s' % (VERSIONS[0], patch, major, int(minor) + 1, patch)


def check_claims():
    """[] when meta/runtime.yml and test-requirements.txt claim exactly VERSIONS, else what differs."""
    import yaml  # pylint: disable=import-outside-toplevel
    problems = []
    with open(os.path.join(ROOT, 'meta', 'runtime.yml'), encoding='utf-8') as handle:
        claimed = yaml.safe_load(handle).get('requires_ansible')
    if claimed != claimed_range():
        problems.append('meta/runtime.yml: requires_ansible is %r; the matrix tests %r' % (claimed, claimed_range()))
    with open(os.path.join(ROOT, 'test-requirements.txt'), encoding='utf-8') as handle:
        pinned = [line.split('#', 1)[0].strip() for line in handle if _requirement_name(line) == 'ansible-core']
    wanted = 'ansible-core' + claimed_range(patch='')
    if pinned != [wanted]:
        problems.append('test-requirements.txt: %s; the matrix tests %s' % (pinned, wanted))
    return problems


def _requirement_name(line):
    name = line.split('#', 1)[0].strip()
    for sep in '<>=!~;[ ':
        name = name.split(sep, 1)[0]
    return name.lower()


def requirements(version):
    """The requirement lines of the environment of ``version``."""
    lines = []
    for name in ('requirements.txt', 'test-requirements.txt'):
        with open(os.path.join(ROOT, name), encoding='utf-8') as handle:
            for line in handle:
                line = line.split('#', 1)[0].strip()
                if line and _requirement_name(line) not in NOT_IN_MATRIX:
                    lines.append(line)
    lines.append('ansible-core==%s.*' % version)
    return lines


def _stamp(version):
    text = '\n'.join(requirements(version) + [sys.version.split()[0]])
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def venv_home(version):
    """The directory of the environment of ``version`` as the requirements are now."""
    return os.path.join(VENVS, '%s-%s' % (version, _stamp(version)[:16]))


def venv_python(version):
    return os.path.join(venv_home(version), 'bin', 'python')


def ensure_venv(version):
    """Make (or reuse) the environment of ``version``; return its Python.

    The directory is named by the digest of what it holds, so a change of the requirements makes a new one;
    the version's older environments are removed then.
    """
    home = venv_home(version)
    stamp_path = os.path.join(home, '.stamp')
    stamp = _stamp(version)
    try:
        with open(stamp_path, encoding='utf-8') as handle:
            if handle.read().strip() == stamp:
                return venv_python(version)
    except OSError:
        pass
    print('matrix: making %s (ansible-core %s.*)' % (home, version), flush=True)
    os.makedirs(VENVS, exist_ok=True)
    for name in os.listdir(VENVS):
        if name.startswith(version + '-'):
            shutil.rmtree(os.path.join(VENVS, name), ignore_errors=True)
    subprocess.run([sys.executable, '-m', 'venv', home], check=True)
    req_path = os.path.join(home, 'requirements.txt')
    with open(req_path, 'w', encoding='utf-8') as handle:
        handle.write('\n'.join(requirements(version)) + '\n')
    subprocess.run([venv_python(version), '-m', 'pip', 'install', '-q', '-r', req_path], check=True)
    with open(stamp_path, 'w', encoding='utf-8') as handle:
        handle.write(stamp + '\n')
    return venv_python(version)


def installed_version(python):
    out = subprocess.run([python, '-c', 'import ansible.release; print(ansible.release.__version__)'], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run_tests(version, python, tests=None):
    """The unit tests, then the integration subset in a private network namespace, with ``python``.

    Return (exit code, seconds, path of the log that holds the output of both runs).
    """
    home = os.path.join(MATRIX, version)
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ)
    env.update({
        'PYTHONPATH': os.path.join(ROOT, 'build', 'collections'),
        'ANSIBLE_COLLECTIONS_PATH': os.path.join(ROOT, 'build', 'collections'),
        'ANSIBLE_NOCOLOR': '1',
        'HYPOTHESIS_STORAGE_DIRECTORY': os.path.join(home, 'hypothesis'),
        # ansible's own files (temporary files, collections cache) of one version never meet another's
        'ANSIBLE_HOME': os.path.join(home, 'ansible-home'),
        # the reliability figures and report of this run stay here: docs/reliability.md is the integration tier's
        'RELIABILITY_FIGURES': os.path.join(home, 'reliability-figures.jsonl'),
        'RELIABILITY_REPORT': os.path.join(home, 'reliability.md'),
    })
    pytest = [python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-rfE', '-o', 'junit_family=xunit1']
    netns = [sys.executable, '-m', 'tools.virtlab', 'netns', '--']
    if tests:
        runs = [netns + pytest + list(tests)]
    else:
        # each run in its own network namespace: two versions at once never meet on an address or a port
        # JUnit files for the summary of `make test` (tools/lanes.py --junit)
        runs = [pytest + ['--junitxml=' + os.path.join(home, 'junit-units.xml')] + list(UNIT_TESTS),
                netns + pytest + ['--durations=5', '-n', '2', '--dist', 'loadfile', '--no-loadscope-reorder',
                                  '--junitxml=' + os.path.join(home, 'junit-integration.xml')] + list(INTEGRATION_TESTS)]
    log_path = os.path.join(home, 'tests.log')
    status = 0
    start = time.monotonic()
    with open(log_path, 'w', encoding='utf-8') as log:
        for cmd in runs:
            log.write('$ %s\n' % ' '.join(cmd))
            log.flush()
            status = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode or status
    return status, time.monotonic() - start, log_path


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m tools.matrix', description=__doc__.split('\n\n', 1)[0])
    parser.add_argument('versions', nargs='*', help='ansible-core versions (default: %s)' % ' '.join(VERSIONS))
    parser.add_argument('--setup-only', action='store_true', help='make the environments, run no test')
    parser.add_argument('--tests', nargs='+', help='pytest arguments instead of the matrix subset')
    parser.add_argument('--jobs', type=int, default=2,
                        help='versions tested at once (default 2: one version waits on libvirt, qemu and ansible while the other computes)')
    args = parser.parse_args(argv)
    unknown = [v for v in args.versions if v not in VERSIONS]
    if unknown:
        parser.error('unknown version(s) %s; the matrix has %s' % (', '.join(unknown), ', '.join(VERSIONS)))
    problems = check_claims()
    if problems:
        raise SystemExit('matrix: the claimed ansible-core versions are not the tested ones:\n  ' + '\n  '.join(problems))
    versions = args.versions or list(VERSIONS)
    pythons = dict((version, ensure_venv(version)) for version in versions)
    if args.setup_only:
        return 0
    releases = {}
    for version in versions:
        releases[version] = installed_version(pythons[version])
        if not releases[version].startswith(version + '.'):
            raise SystemExit('matrix: %s holds ansible-core %s, not %s.*' % (pythons[version], releases[version], version))
    print('matrix: testing ansible-core %s, %d at a time (output in build/matrix/<version>/tests.log)' % (
        ', '.join(releases[v] for v in versions), max(1, args.jobs)), flush=True)
    outcome = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = dict((pool.submit(run_tests, version, pythons[version], args.tests), version) for version in versions)
        for future in concurrent.futures.as_completed(futures):
            version = futures[future]
            status, seconds, log_path = outcome[version] = future.result()
            with open(log_path, encoding='utf-8') as log:
                sys.stdout.write('==== ansible-core %s: %s in %.0fs\n%s' % (releases[version], 'FAILED' if status else 'passed', seconds, log.read()))
            sys.stdout.flush()
    print('matrix: ' + '; '.join('%s %s %.0fs' % (releases[v], 'FAILED' if outcome[v][0] else 'passed', outcome[v][1]) for v in versions))
    failed = [releases[v] for v in versions if outcome[v][0]]
    if failed:
        print('matrix: failed on ansible-core %s' % ', '.join(failed))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
