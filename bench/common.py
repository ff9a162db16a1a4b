"""What every benchmark shares: the repository root, running a playbook by wall
clock, and writing results to bench/results/<name>.json (and stdout)."""

import json
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_env(bin_dir):
    """Environment in which the bench venv's ansible finds this checkout as converge.virt."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'),
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(bin_dir, 'python'), ANSIBLE_NOCOLOR='1')
    env.pop('ANSIBLE_STDOUT_CALLBACK', None)
    return env


def playbook(tasks):
    """A one-play playbook on localhost."""
    return [{'name': 'bench', 'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]


def run_playbook(bin_dir, plays, env, expect_changed=False):
    """Wall-clock seconds of one ansible-playbook run.

    Fails on error; ``expect_changed`` False: the run must change nothing,
    True: it must change something, None: either.
    """
    with tempfile.NamedTemporaryFile('w', suffix='.yml', delete=False) as handle:
        json.dump(plays, handle)
        path = handle.name
    try:
        start = time.perf_counter()
        proc = subprocess.run([os.path.join(bin_dir, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', path],
                              env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError('playbook failed:\n%s\n%s' % (proc.stdout[-4000:], proc.stderr[-2000:]))
    if expect_changed is False and 'changed=0' not in proc.stdout:
        raise RuntimeError('a no-op benchmark run reported a change:\n%s' % proc.stdout[-4000:])
    if expect_changed is True and 'changed=0' in proc.stdout:
        raise RuntimeError('a changing benchmark run reported no change:\n%s' % proc.stdout[-4000:])
    return elapsed


def report(name, results):
    """Write results to bench/results/<name>.json and print them."""
    os.makedirs(os.path.join(ROOT, 'bench', 'results'), exist_ok=True)
    with open(os.path.join(ROOT, 'bench', 'results', name + '.json'), 'w', encoding='utf-8') as handle:
        json.dump(results, handle, indent=2)
    print(json.dumps(results, indent=2))
