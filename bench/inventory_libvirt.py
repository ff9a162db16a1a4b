"""Benchmark: ansible-inventory --list over one libvirt host with many domains.

converge.virt.libvirt vs community.libvirt.libvirt (from the ``ansible`` package
in build/bench-venv) vs an empty inventory (the cost of ansible-inventory
itself), side by side on one private host with N defined domains (a few
running). ``--repeat`` rounds, round robin; medians (and minima, every run, the
load average) in bench/results/inventory_libvirt.json.

``--floor`` adds ansible-core's own floor: a do-nothing plugin
(bench/inventory_floor.py) adding the same number of hosts with no variable,
and with as many variables of the same types as converge.virt.libvirt sets by
default - no plugin can be faster than that.

    build/bench-venv/bin/python -m bench.inventory_libvirt --vms 10000 --floor
"""

import argparse
import json
import os
import sys
import tempfile
import time

import libvirt

from bench.common import ROOT, odd_repeat, report, results_name, venv_ansible_core
from bench.inventory_floor import side_by_side
from tools.virtlab import domains, hosts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=10000)
    parser.add_argument('--running', type=int, default=3)
    parser.add_argument('--repeat', type=odd_repeat, default=3, help='alternating rounds, odd (the median is the middle run)')
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-inv-lab'))
    parser.add_argument('--results-name', help='results file bench/results/<name>.json (default: inventory_libvirt, or inventory_libvirt_core<X.Y> '
                        'with a --venv other than build/bench-venv)')
    parser.add_argument('--floor', action='store_true', help='also time a do-nothing plugin adding as many hosts (0 and 11 variables)')
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    name = results_name('inventory_libvirt', args.venv, args.results_name)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'), ANSIBLE_NOCOLOR='1')
    lab = hosts.start_hosts(1, args.state_dir, first_address='127.0.0.51', name_prefix='binv-', first_tcp_port=16911,
                            first_migration_port=49900)
    work = tempfile.mkdtemp()
    try:
        uri = lab[0].uri
        conn = libvirt.open(uri)
        t0 = time.perf_counter()
        for i in range(args.vms):
            conn.defineXML(domains.diskless_domain_xml('binv-%05d' % i, domain_type='qemu', memory_mib=64))
        define_seconds = time.perf_counter() - t0
        for i in range(args.running):
            conn.lookupByName('binv-%05d' % i).create()
        ours = os.path.join(work, 'lab.converge_libvirt.yml')
        with open(ours, 'w', encoding='utf-8') as handle:
            json.dump({'plugin': 'converge.virt.libvirt', 'uris': [uri], 'address_from_leases': False}, handle)
        peer = os.path.join(work, 'lab.libvirt.yml')
        with open(peer, 'w', encoding='utf-8') as handle:
            json.dump({'plugin': 'community.libvirt.libvirt', 'uri': uri}, handle)
        results = {'vms': args.vms, 'running': args.running, 'define_seconds': round(define_seconds, 1), 'repeat': args.repeat,
                   'ansible_core': venv_ansible_core(args.venv)}
        # converge.virt.libvirt's default host variables are 8 strings, 2 integers and task_state (None when idle)
        results.update(side_by_side(bin_dir, env, work, args, ('converge.virt.libvirt', ours, 'converge.virt.libvirt'),
                                    ('community.libvirt.libvirt', peer, 'community.libvirt.libvirt'),
                                    ('floor: 11 variables like ours', 11, ['str'] * 8 + ['int'] * 2 + ['none'])))
        report(name, results)
        conn.close()
    finally:
        hosts.stop_hosts(args.state_dir)
    return 0


if __name__ == '__main__':
    sys.exit(main())
