"""Benchmark: CPU seconds of one module process, a no-op converge.virt.vm against ansible.builtin.ping (issue 16).

bench/vm_vs_ping.py measures whole playbooks, the form the 1.10x target is stated in; on a machine loaded by other
work its wall clock says little. This one runs the two modules' AnsiballZ payloads themselves (kept from one
playbook run with ANSIBLE_KEEP_REMOTE_FILES, on a stopped VM of one private libvirt host), one process at a time,
interleaved (ping, vm warm, vm cold, ping, ...), ``--runs`` times each, and reports the median user + system CPU
milliseconds of each kind: the per-task cost that the module adds, which load distorts much less than wall time.

* ``vm_warm``: as a user runs it (no PYTHONDONTWRITEBYTECODE): the collection's bytecode cache
  (_common/bytecache.py) holds the code compiled by an earlier run;
* ``libvirt_floor``: bench/library/libvirt_noop_floor.py, ping's work plus the least a libvirt no-op check does through
  libvirt-python (import, connect, look up, state, XML): what any libvirt module pays before its own logic;
* ``vm_cold``: with CONVERGE_VIRT_BYTECODE_CACHE=0, i.e. what every run costs when the cache is never filled
  (PYTHONDONTWRITEBYTECODE set and no earlier run without it).

``--collections DIR`` (repeatable) adds ``vm_tree<N>`` (warm): the same vm payload built from another tree of the
collection (e.g. ``git archive`` of an older commit under ``DIR/ansible_collections/converge/virt``), for a
before/after in the same interleaved runs (each with a bytecode cache of its own). ``BENCH_RESULTS_DIR`` writes the
JSON there instead (a trial on a loaded machine).

Printed as JSON with the payload sizes and the 1-minute load average; written to bench/results/module_cpu.json.

    python -m tools.virtlab netns -- build/bench-venv/bin/python -m bench.module_cpu --runs 30
"""

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench.common import ROOT, bench_env, lab_layout, load_average, playbook, results_dir, timed_playbook
from tools.virtlab import domains, hosts


def cpu_ms(python, payload, env):
    """User + system CPU milliseconds of one run of an AnsiballZ payload."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([python, payload], env=env, stdout=subprocess.DEVNULL, check=True, cwd=os.path.dirname(payload))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=30)
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-module-cpu-lab'))
    parser.add_argument('--collections', action='append', default=[],
                        help='another collections path whose vm payload runs as vm_tree<N> (before/after; repeatable)')
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    python = os.path.join(bin_dir, 'python')
    keep = tempfile.mkdtemp(prefix='bench-module-cpu-')
    lab = hosts.start_hosts(1, args.state_dir, **lab_layout('127.0.0.48', 'bmc-', 16881, 49880))
    try:
        uri = lab[0].uri
        import libvirt  # pylint: disable=import-outside-toplevel
        conn = libvirt.open(uri)
        try:
            conn.defineXML(domains.diskless_domain_xml('bmc-noop', domain_type='qemu', memory_mib=64))
        finally:
            conn.close()
        env = bench_env(bin_dir)
        env.pop('PYTHONDONTWRITEBYTECODE', None)
        payloads = {}
        floor_env = dict(env, ANSIBLE_LIBRARY=os.path.join(ROOT, 'bench', 'library'))
        vm_task = {'converge.virt.vm': {'uri': uri, 'name': 'bmc-noop', 'state': 'stopped'}}
        builds = [('ping', {'ansible.builtin.ping': {}}, env), ('vm', vm_task, env),
                  ('libvirt_floor', {'libvirt_noop_floor': {'uri': uri, 'name': 'bmc-noop'}}, floor_env)]
        trees = dict(('vm_tree%d' % (index + 1), os.path.abspath(path)) for index, path in enumerate(args.collections))
        builds += [(kind, vm_task, dict(env, ANSIBLE_COLLECTIONS_PATH=path)) for kind, path in trees.items()]
        for kind, task, kind_env in builds:
            where = os.path.join(keep, kind)
            timed_playbook(bin_dir, playbook([task]), dict(kind_env, ANSIBLE_KEEP_REMOTE_FILES='1', ANSIBLE_REMOTE_TMP=where),
                           ['-i', 'localhost,', '-c', 'local'])
            found = glob.glob(os.path.join(where, '*', 'AnsiballZ_*.py'))
            if len(found) != 1:
                raise RuntimeError('expected one AnsiballZ payload in %s, found %s' % (where, found))
            payloads[kind] = found[0]
        kinds = [('ping', payloads['ping'], env), ('libvirt_floor', payloads['libvirt_floor'], env), ('vm_warm', payloads['vm'], env),
                 ('vm_cold', payloads['vm'], dict(env, CONVERGE_VIRT_BYTECODE_CACHE='0'))]
        # each tree its own bytecode cache: the cache keeps one entry per module, so two trees sharing it would compile
        # every module that differs between them again on every run
        kinds += [(kind, payloads[kind], dict(env, XDG_CACHE_HOME=tempfile.mkdtemp(dir=keep))) for kind in trees]
        for _kind, payload, kind_env in kinds:  # fills the bytecode cache (vm_warm) and the page cache: not measured
            cpu_ms(python, payload, kind_env)
        load_before = load_average()
        series = dict((kind, []) for kind, _payload, _env in kinds)
        for _index in range(args.runs):
            for kind, payload, kind_env in kinds:
                series[kind].append(round(cpu_ms(python, payload, kind_env), 1))
        medians = dict((kind, round(statistics.median(values), 1)) for kind, values in series.items())
        result = {'runs': args.runs, 'load': [load_before, load_average()], 'trees': trees,
                  'payload_bytes': dict((kind, os.path.getsize(path)) for kind, path in payloads.items()),
                  'median_cpu_ms': medians,
                  'extra_over_ping_ms': dict((kind, round(value - medians['ping'], 1)) for kind, value in medians.items()),
                  'cpu_ms': series}
        print(json.dumps(dict((k, v) for k, v in result.items() if k != 'cpu_ms'), indent=1))
        os.makedirs(results_dir(), exist_ok=True)
        with open(os.path.join(results_dir(), 'module_cpu.json'), 'w', encoding='utf-8') as handle:
            json.dump(result, handle, indent=1)
    finally:
        hosts.stop_hosts(args.state_dir)
        shutil.rmtree(keep, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
