"""What every benchmark shares: the repository root, running a playbook by wall
clock, and writing results to bench/results/<name>.json (and stdout)."""

import argparse
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


def results_dir():
    """Where results go: bench/results, or the directory in BENCH_RESULTS_DIR (a trial run on a loaded machine must
    not overwrite the stored figures)."""
    return os.environ.get('BENCH_RESULTS_DIR') or os.path.join(ROOT, 'bench', 'results')


def report(name, results):
    """Write results to <results_dir()>/<name>.json and print them."""
    os.makedirs(results_dir(), exist_ok=True)
    with open(os.path.join(results_dir(), name + '.json'), 'w', encoding='utf-8') as handle:
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


def odd_repeat(text):
    """argparse type of ``--repeat``/``--rounds``: a positive odd count, so that the median is the middle run (the
    median of an even count is the mean of two runs, or, taken as the upper middle, the larger of two)."""
    value = int(text)
    if value < 1 or value % 2 == 0:
        raise argparse.ArgumentTypeError('must be a positive odd number (the median is then one of the runs), got %d' % value)
    return value


def median_of_odd(values):
    """The middle value of an odd number of ``values``; an even count is refused."""
    values = sorted(values)
    if len(values) % 2 == 0:
        raise ValueError('a median of %d runs is not one of the runs: use an odd count' % len(values))
    return values[len(values) // 2]


def alternating(kinds, repeat):
    """Run every ``(label, callable)`` of ``kinds`` ``repeat`` times (odd), round robin, the order reversed every
    other round so that neither side always runs first after the other; each callable returns a dict with 'seconds'
    and 'cpu_seconds' (and anything else, kept from its first run).

    Returns label -> {'median_seconds', 'median_cpu_seconds', 'runs', 'cpu_runs', ...} and 'load_average_1min':
    the 1-minute load average before every round and after the last.
    """
    if repeat < 1 or repeat % 2 == 0:
        raise ValueError('repeat must be a positive odd number, got %d' % repeat)
    raw = dict((label, []) for label, _call in kinds)
    loads = []
    for index in range(repeat):
        loads.append(load_average())
        for label, call in (kinds if index % 2 == 0 else list(reversed(kinds))):
            raw[label].append(call())
    loads.append(load_average())
    results = {}
    for label, values in raw.items():
        entry = dict((k, v) for k, v in values[0].items() if k not in ('seconds', 'cpu_seconds'))
        entry.update(median_seconds=round(median_of_odd(v['seconds'] for v in values), 3),
                     median_cpu_seconds=round(median_of_odd(v['cpu_seconds'] for v in values), 3),
                     runs=[round(v['seconds'], 3) for v in values], cpu_runs=[round(v['cpu_seconds'], 3) for v in values])
        results[label] = entry
    results['load_average_1min'] = loads
    return results


def startup_floor(bin_dir, env, repeat):
    """Ansible's start-up floor, measured with the same venv and environment as the bench: ``ansible localhost -m
    ping`` (one ad-hoc task) and a playbook of one ``ansible.builtin.ping`` task, medians of ``repeat`` (odd)
    alternating runs, wall and CPU seconds."""
    def adhoc():
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([os.path.join(bin_dir, 'ansible'), 'localhost', '-i', 'localhost,', '-c', 'local', '-m', 'ansible.builtin.ping'],
                              env=env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0 or 'SUCCESS' not in proc.stdout:
            raise RuntimeError('ansible -m ping failed:\n%s\n%s' % (proc.stdout[-2000:], proc.stderr[-2000:]))
        return {'seconds': elapsed, 'cpu_seconds': (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}

    def one_ping_task():
        _proc, elapsed, cpu = timed_playbook(bin_dir, playbook([{'ansible.builtin.ping': {}}]), env, ['-i', 'localhost,', '-c', 'local'])
        return {'seconds': elapsed, 'cpu_seconds': cpu}

    return alternating([('ansible -m ping', adhoc), ('playbook: one ping task', one_ping_task)], repeat)


def comparison(name, ours, peer, ratio_of, floor=None, note='', stat=''):  # pylint: disable=too-many-arguments
    """One line of the table tools/bench_summary.py prints after ``make bench``.

    ``ours`` / ``peer``: dicts with 'label', 'form' ('looped' - one task per object -, 'fleet' - one task over every
    object -, 'single', 'command' ...), 'seconds' (a median) and optionally 'cpu_seconds'; ``ratio_of``: 'peer/ours'
    (above 1: ours faster) or 'ours/peer' (below 1: ours faster), as the bench's target is stated; ``floor``: the
    ansible start-up floor of the same measurement ({'label', 'seconds'}); ``stat``: what the seconds are (default, in
    the table: 'median of <the file's repeat>'). A comparison of different forms says so in
    'same_form' (False), and the table shows it.
    """
    line = {'name': name, 'ours': ours, 'peer': peer, 'same_form': ours.get('form') == peer.get('form'), 'ratio_of': ratio_of}
    top, bottom = (peer, ours) if ratio_of == 'peer/ours' else (ours, peer)
    line['ratio'] = round(top['seconds'] / bottom['seconds'], 3)
    if top.get('cpu_seconds') and bottom.get('cpu_seconds'):
        line['ratio_cpu'] = round(top['cpu_seconds'] / bottom['cpu_seconds'], 3)
    if floor:
        line['floor'] = floor
        line['ours_over_floor'] = round(ours['seconds'] / floor['seconds'], 3)
        line['peer_over_floor'] = round(peer['seconds'] / floor['seconds'], 3)
    if note:
        line['note'] = note
    if stat:
        line['stat'] = stat
    return line
