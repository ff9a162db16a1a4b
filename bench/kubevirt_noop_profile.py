"""Profile of one no-op KubeVirt vm task: converge.virt.vm vs kubevirt.core.kubevirt_vm (issue 39 item 1).

Against the real stack of tools/kubelab (kube-apiserver, etcd, KubeVirt's virt-api and CRDs; the controllers emulated
by tests/kubeapi/real.py, paused once every VM settled), three running VMs, each made by its own module:
``single`` by converge.virt.vm's single-VM form, ``fleet`` by its fleet form (``vms``), ``core`` by
kubevirt.core.kubevirt_vm (``wait: false`` on create). For each, one no-op task (the same arguments as its create;
kubevirt.core with ``wait: true``) is measured:

* the API requests it makes: kube-apiserver's ``apiserver_request_total`` (GET /metrics, as the lab's admin) before
  and after the playbook, minus the same counters over a quiet interval as long as the run (the paused emulation, the
  handler emulation and virt-api also talk to the API server), by verb and resource;
* the whole playbook (wall, CPU), and the module process alone: its AnsiballZ payload (kept with
  ANSIBLE_KEEP_REMOTE_FILES) run directly ``--runs`` (odd) times, medians; the controller side is the rest;
* where the module process's time goes: one run under cProfile, cumulative seconds in imports
  (importlib's _find_and_load, outermost), client construction (converge.virt's KubeClient.__init__;
  kubernetes.core's get_api_client), API round trips (urllib3's HTTPConnectionPool.urlopen, the TLS handshake
  included) and JSON (json.loads/dumps), the rest as 'other'. cProfile slows Python code down: its seconds say
  where time goes, not how much there is; the direct runs say how much.

Printed and written to bench/results/kubevirt_noop_profile.json (BENCH_RESULTS_DIR for a trial run).

    python -m tools.virtlab netns -- build/bench-venv/bin/python -m bench.kubevirt_noop_profile
"""

import argparse
import glob
import json
import os
import pstats
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import ssl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench.common import kube_api, load_average, median_of_odd, odd_repeat, report  # noqa: E402 pylint: disable=wrong-import-position
from bench.kubevirt_fleet import (BENCH_BIN, converge_fleet, converge_looped, env_for,  # noqa: E402 pylint: disable=wrong-import-position
                                  kubevirt_core_looped, run_playbook)

METRIC = re.compile(r'^apiserver_request_total\{([^}]*)\} (\S+)$')
CATEGORIES = (
    ('imports', lambda f: f[0].startswith('<frozen importlib._bootstrap>') and f[2] == '_find_and_load'),
    ('client construction', lambda f: (f[0].endswith('_kubevirt/client.py') and f[2] == '__init__')
     or (f[0].endswith('k8s/client.py') and f[2] == 'get_api_client')),
    ('API round trips', lambda f: f[0].endswith('urllib3/connectionpool.py') and f[2] == 'urlopen'),
    ('JSON', lambda f: f[0].endswith('json/__init__.py') and f[2] in ('loads', 'dumps', 'load', 'dump')),
)


PROFILER = """
import cProfile, runpy, sys
payload, out = sys.argv[1], sys.argv[2]
sys.argv = [payload]
profiler = cProfile.Profile()
try:
    profiler.runcall(runpy.run_path, payload, run_name='__main__')
except SystemExit as exc:
    if exc.code not in (None, 0):
        raise
finally:
    profiler.dump_stats(out)
"""


def request_counts(stack):
    """{(verb, resource, subresource, code): count} of kube-apiserver's apiserver_request_total."""
    req = urllib.request.Request(stack.server + '/metrics', headers={'Authorization': 'Bearer ' + stack.admin_token})
    with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=stack.ca_file), timeout=30) as resp:
        text = resp.read().decode()
    counts = {}
    for line in text.splitlines():
        match = METRIC.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            key = (labels.get('verb', ''), labels.get('resource', ''), labels.get('subresource', ''), labels.get('code', ''))
            counts[key] = counts.get(key, 0) + float(match.group(2))
    return counts


def delta(before, after):
    return dict((key, after.get(key, 0) - before.get(key, 0)) for key in set(before) | set(after) if after.get(key, 0) != before.get(key, 0))


def counted_run(stack, tasks, env_extra, expect_changed):
    """(run result, {verb resource: requests of the run less a quiet interval as long}) of one playbook."""
    before = request_counts(stack)
    result = run_playbook(tasks, expect_changed=expect_changed, env_extra=env_extra)
    after = request_counts(stack)
    quiet_before = request_counts(stack)
    time.sleep(result['seconds'])
    quiet_after = request_counts(stack)
    run, quiet = delta(before, after), delta(quiet_before, quiet_after)
    requests = {}
    for key in set(run) | set(quiet):
        count = run.get(key, 0) - quiet.get(key, 0)
        # non-resource requests (/metrics itself) and Lease renewals (the lab's kube-controller-manager, scheduler, emulations
        # renew theirs every few seconds; neither module touches a Lease) left out
        if count > 0.5 and key[1] not in ('', 'leases'):
            label = '%s %s%s (%s)' % (key[0], key[1], '/' + key[2] if key[2] else '', key[3])
            requests[label] = requests.get(label, 0) + int(round(count))
    return result, dict(sorted(requests.items()))


def keep_env(directory):
    """Environment additions that keep the AnsiballZ payload of a run in ``directory``."""
    return {'ANSIBLE_KEEP_REMOTE_FILES': '1', 'ANSIBLE_REMOTE_TMP': directory}


def module_runs(payload, runs):
    """Medians of ``runs`` direct runs of an AnsiballZ payload: wall and CPU seconds; and its output's 'changed'."""
    walls, cpus, changed = [], [], set()
    for _run in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([os.path.join(BENCH_BIN, 'python'), payload], capture_output=True, text=True, check=False,
                              cwd=os.path.dirname(payload), env=env_for())
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        if proc.returncode != 0:
            raise RuntimeError('payload failed: %s %s' % (proc.stdout[-2000:], proc.stderr[-2000:]))
        changed.add(json.loads(proc.stdout[proc.stdout.index('{'):]).get('changed'))
    return {'median_seconds': round(median_of_odd(walls), 3), 'median_cpu_seconds': round(median_of_odd(cpus), 3),
            'runs': [round(w, 3) for w in walls], 'changed': sorted(changed, key=str)}


def profile(payload, work):
    """Cumulative seconds per category of one cProfile'd run of the payload, and the top functions by own time."""
    out = os.path.join(work, 'profile.out')
    # not python -m cProfile: the AnsiballZ wrapper strips its __main__'s directory from sys.path, which would then be
    # cProfile's (the standard library's); run_path makes the payload __main__, as when it runs alone
    proc = subprocess.run([os.path.join(BENCH_BIN, 'python'), '-c', PROFILER, payload, out], capture_output=True, text=True,
                          check=False, cwd=os.path.dirname(payload), env=env_for())
    if proc.returncode != 0:
        raise RuntimeError('profiled payload failed: %s' % proc.stderr[-2000:])
    stats = pstats.Stats(out)
    total = stats.total_tt
    categories = dict((name, 0.0) for name, _match in CATEGORIES)
    for func, (_cc, _nc, _tt, cumulative, _callers) in stats.stats.items():  # pylint: disable=no-member
        for name, match in CATEGORIES:
            if match(func):
                # recursion (imports inside imports) is counted once by cProfile's cumulative time
                categories[name] += cumulative
    own = sorted(((tt, '%s:%d(%s)' % (os.path.basename(func[0]), func[1], func[2])) for func, (_cc, _nc, tt, _cum, _callers)
                  in stats.stats.items()), reverse=True)[:12]  # pylint: disable=no-member
    result = dict((name, round(value, 3)) for name, value in categories.items())
    result['total (profiled)'] = round(total, 3)
    result['top own time'] = [[name, round(tt, 3)] for tt, name in own]
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--runs', type=odd_repeat, default=5, help='direct runs of each payload, odd')
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix='bench-kvprof-')
    srv = kube_api('real', work)
    results = {'api': 'real', 'runs': args.runs, 'load_average_1min': [load_average()],
               'controllers': 'emulated (tests/kubeapi/real.py), paused after every VM settled'}
    try:
        run_playbook([converge_looped(srv, ['single-0'], 'running')], expect_changed=True)
        run_playbook([converge_fleet(srv, ['fleet-0', 'fleet-1', 'fleet-2'], 'running')], expect_changed=True)
        run_playbook([kubevirt_core_looped(srv, ['core-0'], 'running', False)], expect_changed=True)
        srv.controller.settle()
        srv.controller.pause()
        cases = {'converge.virt.vm, VM made by the single-VM form': (converge_looped(srv, ['single-0'], 'running'), False),
                 'converge.virt.vm, VM made by the fleet form': (converge_looped(srv, ['fleet-1'], 'running'), False),
                 'kubevirt.core.kubevirt_vm (wait true)': (kubevirt_core_looped(srv, ['core-0'], 'running', True), None)}
        keeps, plays = {}, dict((label, []) for label in cases)
        for label, (task, expect) in cases.items():
            keeps[label] = tempfile.mkdtemp(prefix='kvprof-keep-', dir=work)
            run_playbook([task], expect_changed=expect, env_extra=keep_env(keeps[label]))   # warm-up: bytecode caches
        floor = []
        for index in range(args.runs):
            # round robin, reversed every other round: a change of load hits every case alike
            for label in (list(cases) if index % 2 == 0 else list(reversed(list(cases)))):
                task, expect = cases[label]
                plays[label].append(counted_run(srv.stack, [task], keep_env(keeps[label]), expect))
            floor.append(run_playbook([{'ansible.builtin.ping': {}}]))
            results['load_average_1min'].append(load_average())
        for label, runs in plays.items():
            found = sorted(glob.glob(os.path.join(keeps[label], '*', 'AnsiballZ_*.py')), key=os.path.getmtime)
            if not found:
                raise RuntimeError('no AnsiballZ payload kept in %s' % keeps[label])
            payload = found[-1]
            module = module_runs(payload, args.runs)
            playbook_wall = median_of_odd(p[0]['seconds'] for p in runs)
            # other clients' requests only ever add to a run's count: the smallest is the task's own
            fewest = min(runs, key=lambda p: sum(p[1].values()))[1]
            results[label] = {
                'requests_per_task': fewest, 'requests_every_run': [sum(p[1].values()) for p in runs],
                'writes': sum(count for name, count in fewest.items() if name.split()[0] not in ('GET', 'LIST', 'WATCH')),
                'playbook_median_seconds': round(playbook_wall, 3),
                'playbook_median_cpu_seconds': round(median_of_odd(p[0]['cpu_seconds'] for p in runs), 3),
                'module_process': module, 'controller_side_seconds': round(playbook_wall - module['median_seconds'], 3),
                'payload_bytes': os.path.getsize(payload), 'profile': profile(payload, work)}
        results['playbook: one ping task'] = {'median_seconds': round(median_of_odd(f['seconds'] for f in floor), 3),
                                              'median_cpu_seconds': round(median_of_odd(f['cpu_seconds'] for f in floor), 3)}
        results['pythondontwritebytecode'] = bool(env_for().get('PYTHONDONTWRITEBYTECODE'))
    finally:
        results['load_average_1min'].append(load_average())
        srv.stop()
        # the lab's state (its PKI and tokens) and the kept payloads
        shutil.rmtree(work, ignore_errors=True)
    report('kubevirt_noop_profile', results)
    return 0


if __name__ == '__main__':
    sys.exit(main())
