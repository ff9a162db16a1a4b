"""The floor of ansible-inventory --list: a do-nothing inventory plugin adding N hosts.

This file is both an inventory plugin (``inventory_floor``, loaded from this
directory with ANSIBLE_INVENTORY_PLUGINS) that reads nothing and adds
``hosts`` hosts with ``variables`` constant host variables (value types given
by ``kinds``: str, int or none, cycled; strings are untrusted, as an inventory
plugin's values are: on ansible-core < 2.19 marked unsafe), and the helper the inventory benchmarks use to time it
next to the real plugins (``--floor``). Whatever a real plugin does, it cannot
be faster than this floor with the same number of hosts and variables.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import time

from ansible.plugins.inventory import BaseInventoryPlugin
from ansible.utils.unsafe_proxy import wrap_var

DOCUMENTATION = r'''
name: inventory_floor
short_description: adds N hosts with K constant variables and reads nothing (benchmark floor)
description: Adds N hosts with K constant variables and reads nothing (benchmark floor).
options:
  plugin:
    description: The name of this plugin.
    required: true
  hosts:
    description: Number of hosts.
    type: int
    default: 10000
  variables:
    description: Number of host variables per host.
    type: int
    default: 0
  kinds:
    description: Value types of the variables, cycled (str, int, none).
    type: list
    elements: str
    default: [str]
'''

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
# ansible-core 2.19+ untrusts an inventory plugin's plain strings itself; before 2.19 a plugin must mark them unsafe
# (as converge.virt's plugins do), which also changes what ansible-core does with them later: the floor does the same,
# once per value
VALUES = {'str': 'RUNNING' if hasattr(BaseInventoryPlugin, 'trusted_by_default') else wrap_var('RUNNING'), 'int': 65536, 'none': None}


class InventoryModule(BaseInventoryPlugin):
    """Adds hosts and constant variables; reads nothing."""

    NAME = 'inventory_floor'

    def verify_file(self, path):
        return path.endswith('.floor.yml')

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        kinds = [VALUES[kind] for kind in self.get_option('kinds')]
        names = ['var%02d' % index for index in range(self.get_option('variables'))]
        values = [kinds[index % len(kinds)] for index in range(len(names))]
        for index in range(self.get_option('hosts')):
            host = self.inventory.add_host('floor-%05d' % index)
            for name, value in zip(names, values):
                self.inventory.set_variable(host, name, value)


def floor_config(work, hosts, variables, kinds=('str',)):
    """Write a floor inventory file; returns its path."""
    path = os.path.join(work, 'h%d-v%d-%s.floor.yml' % (hosts, variables, '-'.join(kinds)))
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump({'plugin': 'inventory_floor', 'hosts': hosts, 'variables': variables, 'kinds': list(kinds)}, handle)
    return path


def floor_env(env):
    """``env`` with this directory as an inventory plugin path and only the floor plugin enabled."""
    return dict(env, ANSIBLE_INVENTORY_PLUGINS=BENCH_DIR, ANSIBLE_INVENTORY_ENABLED='inventory_floor')


def run_measured(cmd, env):
    """Run ``cmd``; returns (completed process, wall seconds, CPU seconds of the process and its children).

    CPU seconds hardly depend on the machine's load, wall seconds do (other work shares the cores); the
    CPU of a daemon that answers (libvirtd, the API server) is not in them."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def inventory_hosts(data):
    """Every host name of an ansible-inventory --list output (hosts without variables have no hostvars entry)."""
    names = set(data.get('_meta', {}).get('hostvars', {}))
    for name, group in data.items():
        if name != '_meta':
            names.update(group.get('hosts', ()))
    return names


def load_average():
    """The 1-minute load average (the machine may be shared: every figure carries it)."""
    with open('/proc/loadavg', encoding='ascii') as handle:
        return float(handle.read().split()[0])


def interleaved(runs, repeat):
    """Run each (label, callable returning a dict with 'seconds' and 'cpu_seconds') ``repeat`` times, round robin, so
    that a change of load hits every label alike; returns label -> {'median_seconds', 'min_seconds', 'runs',
    'median_cpu_seconds'} plus the first run's other keys, and the load averages seen."""
    if repeat < 1 or repeat % 2 == 0:
        raise SystemExit('--repeat must be an odd number (a median of an even count is not one of the runs), got %d' % repeat)
    raw = dict((label, []) for label, _call in runs)
    loads = []
    for _attempt in range(repeat):
        loads.append(load_average())
        for label, call in runs:
            raw[label].append(call())
    loads.append(load_average())
    results = {}
    for label, values in raw.items():
        seconds = sorted(v['seconds'] for v in values)
        cpu = sorted(v['cpu_seconds'] for v in values)
        entry = dict((k, v) for k, v in values[0].items() if k not in ('seconds', 'cpu_seconds'))
        entry.update(median_seconds=round(seconds[len(seconds) // 2], 3), min_seconds=round(seconds[0], 3),
                     runs=[round(v['seconds'], 3) for v in values], median_cpu_seconds=round(cpu[len(cpu) // 2], 3))
        results[label] = entry
    results['load_average_1min'] = loads
    return results


def timed_inventory(bin_dir, path, env, enabled):
    """One ``ansible-inventory -i path --list`` with only plugin ``enabled``: seconds, CPU seconds, hosts, stderr lines, variables per host."""
    env = dict(env, ANSIBLE_INVENTORY_ENABLED=enabled)
    proc, elapsed, cpu = run_measured([os.path.join(bin_dir, 'ansible-inventory'), '-i', path, '--list'], env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    data = json.loads(proc.stdout)
    hostvars = data.get('_meta', {}).get('hostvars', {})
    return {'seconds': elapsed, 'cpu_seconds': cpu, 'hosts': len(inventory_hosts(data)), 'stderr_lines': proc.stderr.count('\n'),
            'variables_per_host': max([len(v) for v in hostvars.values()] or [0])}


def side_by_side(bin_dir, env, work, options, ours, peer, floor_like_ours):  # pylint: disable=too-many-arguments
    """Time an empty inventory, ours and the peer plugin (and with ``options.floor`` the floor with 0 variables and
    ``floor_like_ours``), interleaved ``options.repeat`` times; returns the results with the ratios.

    ``ours`` / ``peer``: (label, inventory file, plugin to enable); ``floor_like_ours``: (label, variables, kinds).
    """
    empty = os.path.join(work, 'empty.yml')
    with open(empty, 'w', encoding='utf-8') as handle:
        json.dump({'all': {'hosts': {}}}, handle)
    runs = [(label, functools.partial(timed_inventory, bin_dir, path, env, enabled)) for label, path, enabled in (('empty', empty, 'yaml'), ours, peer)]
    if options.floor:
        for label, variables, kinds in (('floor: no variable', 0, ['str']), floor_like_ours):
            runs.append((label, functools.partial(timed_inventory, bin_dir, floor_config(work, options.vms, variables, kinds), floor_env(env),
                                                  'inventory_floor')))
    # imported here: this file is also loaded by ansible-inventory as a plugin, where the bench package is not importable
    from bench.common import comparison  # pylint: disable=import-outside-toplevel
    results = interleaved(runs, options.repeat)
    mine, theirs = results[ours[0]], results[peer[0]]
    note = 'variables per host: ours %s, peer %s' % (mine.get('variables_per_host'), theirs.get('variables_per_host'))
    if options.floor:
        note += '; floor plugin with as many hosts: no variable %.3f s, %s %.3f s' % (
            results['floor: no variable']['median_seconds'], floor_like_ours[0], results[floor_like_ours[0]]['median_seconds'])
    results['comparisons'] = [comparison(
        'ansible-inventory --list, %d VMs' % options.vms,
        {'label': ours[0], 'form': 'inventory', 'seconds': mine['median_seconds'], 'cpu_seconds': mine['median_cpu_seconds']},
        {'label': peer[0], 'form': 'inventory', 'seconds': theirs['median_seconds'], 'cpu_seconds': theirs['median_cpu_seconds']},
        'peer/ours', {'label': 'empty inventory', 'seconds': results['empty']['median_seconds']}, note=note,
        stat='median of %d' % options.repeat)]
    results['ratio_peer_vs_converge'] = round(theirs['median_seconds'] / mine['median_seconds'], 2)
    results['ratio_peer_vs_converge_cpu'] = round(theirs['median_cpu_seconds'] / mine['median_cpu_seconds'], 2)
    if options.floor:
        results['converge_minus_floor_seconds'] = round(mine['median_seconds'] - results[floor_like_ours[0]]['median_seconds'], 3)
        # no plugin is faster than the floor with no variable: the best ratio any plugin could reach against the peer
        results['best_possible_ratio'] = round(theirs['median_seconds'] / results['floor: no variable']['median_seconds'], 2)
    return results
