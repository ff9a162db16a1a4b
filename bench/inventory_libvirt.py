"""Benchmark: ansible-inventory --list over one libvirt host with many domains.

converge.virt.libvirt vs community.libvirt.libvirt (from the ``ansible`` package
in build/bench-venv) vs an empty inventory (the cost of ansible-inventory
itself), side by side on one private host with N defined domains (a few
running). Best of ``--repeat`` runs; results in bench/results/inventory_libvirt.json.

    build/bench-venv/bin/python -m bench.inventory_libvirt --vms 10000
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import libvirt

from bench.common import ROOT, report
from tools.virtlab import domains, hosts


def timed_inventory(bin_dir, path, env, enabled):
    env = dict(env, ANSIBLE_INVENTORY_ENABLED=enabled)
    start = time.perf_counter()
    proc = subprocess.run([os.path.join(bin_dir, 'ansible-inventory'), '-i', path, '--list'], env=env, capture_output=True, text=True,
                          check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    data = json.loads(proc.stdout)
    return elapsed, len(data.get('_meta', {}).get('hostvars', {})), proc.stderr.count('\n')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=10000)
    parser.add_argument('--running', type=int, default=3)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-inv-lab'))
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
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
        empty = os.path.join(work, 'empty.yml')
        with open(empty, 'w', encoding='utf-8') as handle:
            json.dump({'all': {'hosts': {}}}, handle)
        results = {'vms': args.vms, 'running': args.running, 'define_seconds': round(define_seconds, 1)}
        for label, path, enabled in (('empty', empty, 'yaml'), ('converge.virt.libvirt', ours, 'converge.virt.libvirt'),
                                     ('community.libvirt.libvirt', peer, 'community.libvirt.libvirt')):
            runs = [timed_inventory(bin_dir, path, env, enabled) for _attempt in range(args.repeat)]
            results[label] = {'seconds': round(min(r[0] for r in runs), 3), 'hosts': runs[0][1], 'stderr_lines': runs[0][2]}
        results['ratio_community_vs_converge'] = round(results['community.libvirt.libvirt']['seconds'] / results['converge.virt.libvirt']['seconds'], 1)
        report('inventory_libvirt', results)
        conn.close()
    finally:
        hosts.stop_hosts(args.state_dir)
    return 0


if __name__ == '__main__':
    sys.exit(main())
