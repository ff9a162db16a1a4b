"""Run converge.virt modules the way users do: through the ansible CLI.

Each call is a real ``ansible`` (ad-hoc) or ``ansible-playbook`` run with
the json stdout callback, so the tests see exactly the result a playbook would
register, including check mode and diff. The run is the CLI's own ``main`` in a
process of its own, forked from a zygote that has already imported ansible-core
(tests/integration/ansible_zygote.py: the same code path as the console script,
without re-importing ansible per call); a call whose configuration the zygote
cannot take runs the console script itself.
"""

import json
import os
import subprocess
import sys

from ansible.release import __version__ as _ansible_version

from tests.integration import ansible_zygote

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the ansible commands of the Python that runs the tests (make matrix runs them with one virtualenv per ansible-core)
BIN = os.path.dirname(sys.executable)
ANSIBLE_CORE = tuple(int(part) for part in _ansible_version.split('.')[:2])    # (2, 16) ... of the ansible those commands are


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
    returncode, stdout, stderr = run_cli('ansible', cmd, ansible_env(env), timeout)
    try:
        data = json.loads(stdout)
    except ValueError:
        raise AssertionError('ansible printed no JSON (rc %d):\n%s\n%s' % (returncode, stdout[-3000:], stderr[-3000:]))
    result = data['plays'][0]['tasks'][0]['hosts']['localhost']
    result['_rc'] = returncode
    result['_stderr'] = stderr
    return result


def run_cli(cli, cmd, env, timeout):
    """(returncode, stdout, stderr) of the CLI command ``cmd``: forked from the zygote, or the console script."""
    answer = ansible_zygote.run(cli, cmd, env, timeout=timeout)
    if answer is not None:
        return answer
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def ok(result):
    """``result`` of a task that succeeded (rc 0, not failed); an AssertionError showing its message otherwise."""
    assert result['_rc'] == 0 and not result.get('failed'), result.get('msg') or result
    return result


def kubevirt_args(defaults, srv, **args):
    """Module arguments of backend kubevirt against the Kubernetes API test server ``srv`` (tests/kubeapi).

    ``defaults`` (a file's namespace, wait_timeout ...) come first, ``args`` win: ``kv = functools.partial(kubevirt_args,
    {'namespace': NS})`` gives a test file its ``kv(srv, name=...)``.
    """
    return dict(dict(dict(backend='kubevirt', kubeconfig=srv.kubeconfig_path), **defaults), **args)


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
    returncode, stdout, stderr = run_cli('ansible-playbook', cmd, ansible_env(env), timeout)
    try:
        return returncode, json.loads(stdout)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (returncode, stdout[-3000:], stderr[-3000:]))


def write_name_probe_play(path):
    """A play that evaluates what a VM name reaches: inventory_hostname, the composed ``composed_name``, group_names, and a
    connection to a host with no ansible_host (ssh, whose executable is /bin/false: nothing leaves the machine). Its task
    'templates' prints ``inventory_hostname|composed_name|group_names``; the task 'connects' is unreachable."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump([{'hosts': 'all', 'gather_facts': False, 'tasks': [
            {'name': 'templates', 'ansible.builtin.debug': {'msg': '{{ inventory_hostname }}|{{ composed_name }}|{{ group_names | join(",") }}'}},
            {'name': 'connects', 'ansible.builtin.ping': None, 'ignore_unreachable': True,
             'vars': {'ansible_connection': 'ssh', 'ansible_ssh_executable': '/bin/false'}}]}], handle)
    return path


def task_results(out):
    """{task name: {host: result}} of the first play of a run_playbook output."""
    return dict((task['task']['name'], task['hosts']) for task in out['plays'][0]['tasks'])


def flushed_hostvars(inventory, plugin, env=None):
    """(host variables of every host, stderr) of an inventory source read again, not served from its cache.

    ansible-inventory has --flush-cache only from ansible-core 2.19 on; ansible-playbook has it on every version,
    so a play shows each host's variables.
    """
    import tempfile  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as tmp:
        play = os.path.join(tmp, 'hostvars.yml')
        with open(play, 'w', encoding='utf-8') as handle:
            yaml.safe_dump([{'hosts': 'all', 'gather_facts': False, 'tasks': [
                {'name': 'hostvars', 'ansible.builtin.debug': {'var': 'hostvars[inventory_hostname]'}}]}], handle)
        cmd = [os.path.join(BIN, 'ansible-playbook'), '-i', inventory, '-c', 'local', '--flush-cache', play]
        proc = subprocess.run(cmd, env=ansible_env(dict(env or {}, ANSIBLE_INVENTORY_ENABLED=plugin)), capture_output=True, text=True,
                              timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    hosts = task_results(json.loads(proc.stdout))['hostvars']
    return dict((host, result['hostvars[inventory_hostname]']) for host, result in hosts.items()), proc.stderr
