"""Run converge.virt modules the way users do: through the ansible CLI.

Each call is a real ``ansible`` (ad-hoc) or ``ansible-playbook`` process with
the json stdout callback, so the tests see exactly the result a playbook would
register, including check mode and diff.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def ansible_env(extra=None):
    """Environment in which ansible finds this checkout as converge.virt."""
    env = dict(os.environ)
    env.update({
        'ANSIBLE_COLLECTIONS_PATH': os.path.join(ROOT, 'build', 'collections'),
        'ANSIBLE_STDOUT_CALLBACK': 'results_json',
        'ANSIBLE_CALLBACK_PLUGINS': os.path.join(ROOT, 'tests', 'integration', 'callback_plugins'),
        'ANSIBLE_LOAD_CALLBACK_PLUGINS': '1',
        'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_HOST_KEY_CHECKING': '0',
        'ANSIBLE_LOCALHOST_WARNING': '0',
        'ANSIBLE_INVENTORY_UNPARSED_WARNING': '0',
        'ANSIBLE_PYTHON_INTERPRETER': sys.executable,
        'PATH': BIN + os.pathsep + env.get('PATH', ''),
    })
    env.update(extra or {})
    return env


def run_module(module, args, check=False, diff=False, timeout=600, env=None):  # pylint: disable=too-many-arguments
    """Run ``converge.virt.<module>`` once on localhost; return its result dict (env: extra environment)."""
    cmd = [os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', 'converge.virt.' + module,
           '-a', json.dumps(args)]
    if check:
        cmd.append('--check')
    if diff:
        cmd.append('--diff')
    proc = subprocess.run(cmd, env=ansible_env(env), capture_output=True, text=True, timeout=timeout, check=False)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    result = data['plays'][0]['tasks'][0]['hosts']['localhost']
    result['_rc'] = proc.returncode
    result['_stderr'] = proc.stderr
    return result


def start_module(module, args):
    """Start ``converge.virt.<module>`` in the background; return the Popen (stdout is the JSON)."""
    cmd = [os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', 'converge.virt.' + module,
           '-a', json.dumps(args)]
    return subprocess.Popen(cmd, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=600):
    """Wait for a :func:`start_module` process; return its result dict."""
    out, err = proc.communicate(timeout=timeout)
    data = json.loads(out)
    result = data['plays'][0]['tasks'][0]['hosts']['localhost']
    result['_rc'] = proc.returncode
    result['_stderr'] = err
    return result


def run_playbook(path, extra_vars=None, check=False, diff=False, timeout=900, env=None, inventory='localhost,', limit=None):
    """Run a playbook; return (returncode, parsed json output)."""
    cmd = [os.path.join(BIN, 'ansible-playbook'), '-i', inventory, '-c', 'local', path]
    if limit:
        cmd += ['--limit', limit]
    if extra_vars:
        cmd += ['-e', json.dumps(extra_vars)]
    if check:
        cmd.append('--check')
    if diff:
        cmd.append('--diff')
    proc = subprocess.run(cmd, env=ansible_env(env), capture_output=True, text=True, timeout=timeout, check=False)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
