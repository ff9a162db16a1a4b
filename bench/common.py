"""What every benchmark shares: the repository root, running a playbook by wall
clock, and writing results to bench/results/<name>.json (and stdout)."""

import json
import os
import resource
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lab_layout(first_address, name_prefix, first_tcp_port, first_migration_port, migration_ports_per_host=20):
    """start_hosts() keyword arguments for a benchmark's private hosts.

    Without VIRTLAB_WORKER: the benchmark's own fixed addresses and ports. With
    VIRTLAB_WORKER=N (several test runs share the machine): slot 3 of worker N
    in the layout of tests/integration/virtlab_fixtures.py (addresses
    127.0.N.51..., TCP ports 16651 + 40 N..., migration ports 49700 + 400 N...),
    which no test uses, so a benchmark never collides with a parallel test run.
    """
    worker = os.environ.get('VIRTLAB_WORKER', '')
    if worker.isdigit():
        worker = int(worker)
        first_address = '127.0.%d.51' % worker
        first_tcp_port = 16651 + 40 * worker
        first_migration_port = 49700 + 400 * worker
    return {'first_address': first_address, 'name_prefix': name_prefix, 'first_tcp_port': first_tcp_port,
            'first_migration_port': first_migration_port, 'migration_ports_per_host': migration_ports_per_host}


def load_average():
    """The 1-minute load average (os.getloadavg), rounded, to record next to every figure."""
    return round(os.getloadavg()[0], 2)


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
    return run_playbook_times(bin_dir, plays, env, expect_changed)[0]


def run_playbook_times(bin_dir, plays, env, expect_changed=False):
    """(wall-clock seconds, CPU seconds) of one ansible-playbook run (see :func:`run_playbook`).

    The CPU seconds are user + system time of the ansible-playbook process and
    every process it waited for (workers, module interpreters): on a machine
    loaded by other work they move much less than the wall clock does.
    """
    proc, elapsed, cpu = timed_playbook(bin_dir, plays, env, ['-i', 'localhost,', '-c', 'local'])
    if expect_changed is False and 'changed=0' not in proc.stdout:
        raise RuntimeError('a no-op benchmark run reported a change:\n%s' % proc.stdout[-4000:])
    if expect_changed is True and 'changed=0' in proc.stdout:
        raise RuntimeError('a changing benchmark run reported no change:\n%s' % proc.stdout[-4000:])
    return elapsed, cpu


def timed_playbook(bin_dir, plays, env, args):
    """Run ``plays`` with ansible-playbook and ``args`` (inventory, connection, forks ...); return (process, wall s, CPU s).

    A failed run raises RuntimeError with the end of its output.
    """
    with tempfile.NamedTemporaryFile('w', suffix='.yml', delete=False) as handle:
        json.dump(plays, handle)
        path = handle.name
    try:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([os.path.join(bin_dir, 'ansible-playbook')] + list(args) + [path], env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError('playbook failed:\n%s\n%s' % (proc.stdout[-4000:], proc.stderr[-2000:]))
    return proc, elapsed, cpu


def venv_ansible_core(venv):
    """The ansible-core version (e.g. '2.16.19') installed in the virtual environment ``venv``."""
    proc = subprocess.run([os.path.join(venv, 'bin', 'python'), '-c', 'from ansible.release import __version__; print(__version__)'],
                          capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def results_name(base, venv, explicit=None):
    """Name of the results file of a benchmark run with the venv ``venv``.

    ``explicit`` (option --results-name) wins; the default venv (build/bench-venv, what ``make bench``
    uses) writes ``base``; any other venv writes ``base_core<major>.<minor>`` after its ansible-core,
    so runs on several ansible-core versions (build/bench-venv-core2.16 ...) keep their own files.
    """
    if explicit:
        return explicit
    if os.path.abspath(venv) == os.path.join(ROOT, 'build', 'bench-venv'):
        return base
    return '%s_core%s' % (base, '.'.join(venv_ansible_core(venv).split('.')[:2]))


def report(name, results):
    """Write results to bench/results/<name>.json and print them."""
    os.makedirs(os.path.join(ROOT, 'bench', 'results'), exist_ok=True)
    with open(os.path.join(ROOT, 'bench', 'results', name + '.json'), 'w', encoding='utf-8') as handle:
        json.dump(results, handle, indent=2)
    print(json.dumps(results, indent=2))


class RealKubeApi:
    """The real stack for a KubeVirt benchmark: tools/kubelab's kube-apiserver + etcd + KubeVirt's virt-api and CRDs
    (tests/kubeapi/real.py, the controller emulation in this process as KubeVirt's controller account). Both
    collections get ``kubeconfig_path``, the lab's admin kubeconfig straight to kube-apiserver (not through the tests'
    fault proxy, which would add its own latency to every request)."""

    real = True

    def __init__(self, work):
        from tests.kubeapi.real import RealKubeServer, RealStack  # pylint: disable=import-outside-toplevel
        self.stack = RealStack(os.path.join(work, 'kubelab'))
        self.server = RealKubeServer(self.stack, kubeconfig_path=os.path.join(work, 'kubeconfig-proxy')).start()
        self.kubeconfig_path = self.stack.info['kubeconfig']
        self.store = self.server.store
        self.controller = self.server.controller
        self.versions = self.stack.info.get('versions')

    def api_client(self):
        """An admin ApiClient (through the proxy: only for setting up)."""
        return self.server.api_client()

    def stop(self):
        """Stop the controller emulation and the whole stack."""
        self.server.close()
        self.stack.close()


def kube_api(mode, work):
    """The KubeVirt API a benchmark runs against: ``real`` (default: ``RealKubeApi``) or ``emulated`` (tests/kubeapi)."""
    if mode == 'real':
        return RealKubeApi(work)
    from tests.kubeapi import KubeTestServer  # pylint: disable=import-outside-toplevel
    return KubeTestServer(kubeconfig_path=os.path.join(work, 'kubeconfig'), step_delay=0.0).start()


def add_api_option(parser):
    """``--api real|emulated``."""
    parser.add_argument('--api', choices=('real', 'emulated'), default='real',
                        help='the real stack of tools/kubelab (default) or the API emulator of tests/kubeapi')
