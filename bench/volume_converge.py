"""Benchmark: converging N volumes in one converge.virt.volume task vs community.libvirt.virt_volume looped.

Run on one private libvirt host (tools.virtlab), with two directory pools:

* converge.virt.volume, the ``volumes:`` list form: one task declaring N raw
  volumes (create), then the same task again (no-op: observe and plan only);
* community.libvirt.virt_volume (from the ``ansible`` package on PyPI, which
  has a volume module) with ``loop:`` over the same N volumes, each item
  ``state: present`` with the volume XML (create), then the same loop again.

Each measurement is a playbook run (ping + the measured task) minus the best
of a playbook of two ping tasks, so ansible's start-up cancels; the converge
runs are the best of ``--repeat`` (the pool is emptied before each create). Results are printed as JSON and written to
bench/results/volume_converge.json with ratios (community / converge; target
at least 20x). Needs ``make bench-venv`` and root.

    build/bench-venv/bin/python -m bench.volume_converge --volumes 500
"""

import argparse
import os
import sys
import xml.etree.ElementTree as ET

import libvirt

from bench.common import ROOT, playbook, report, run_playbook
from tools.virtlab import hosts

MIB = 1024 * 1024


def volume_xml(name, capacity):
    root = ET.Element('volume')
    ET.SubElement(root, 'name').text = name
    ET.SubElement(root, 'capacity', {'unit': 'bytes'}).text = str(capacity)
    ET.SubElement(root, 'allocation').text = '0'
    ET.SubElement(ET.SubElement(root, 'target'), 'format', {'type': 'raw'})
    return ET.tostring(root, encoding='unicode')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--volumes', type=int, default=500)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-lab-volume'))
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, 'build', 'collections'),
               ANSIBLE_PYTHON_INTERPRETER=os.path.join(bin_dir, 'python'), ANSIBLE_NOCOLOR='1')
    env.pop('ANSIBLE_STDOUT_CALLBACK', None)
    lab = hosts.start_hosts(1, args.state_dir, first_address='127.0.0.46', name_prefix='benchvol-', first_tcp_port=16816,
                            first_migration_port=49850, migration_ports_per_host=10)
    try:
        uri = lab[0].uri
        conn = libvirt.open(uri)
        pools = {}
        for pool_name in ('conv', 'peer'):
            path = os.path.join(args.state_dir, 'pool-' + pool_name)
            os.makedirs(path, exist_ok=True)
            pool_root = ET.Element('pool', {'type': 'dir'})
            ET.SubElement(pool_root, 'name').text = pool_name
            ET.SubElement(ET.SubElement(pool_root, 'target'), 'path').text = path
            pool = conn.storagePoolDefineXML(ET.tostring(pool_root, encoding='unicode'), 0)
            pool.create(0)
            pools[pool_name] = pool
        names = ['vol-%05d.raw' % i for i in range(args.volumes)]
        ping = {'ansible.builtin.ping': {}}
        fleet = {'converge.virt.volume': {'uri': uri, 'pool': 'conv', 'capacity': '1MiB', 'volumes': [{'name': n} for n in names]}}
        peer = {'community.libvirt.virt_volume': {'uri': uri, 'pool': 'peer', 'state': 'present', 'name': '{{ item.name }}',
                                                  'xml': '{{ item.xml }}'},
                'loop': [{'name': n, 'xml': volume_xml(n, MIB)} for n in names]}
        # the baseline has as many tasks as a measured playbook, so only the measured task's own work remains
        empty = min(run_playbook(bin_dir, playbook([ping, ping]), env, None) for _attempt in range(args.repeat))

        def converge_create():
            for vol in pools['conv'].listAllVolumes(0):
                vol.delete(0)
            return run_playbook(bin_dir, playbook([ping, fleet]), env, True)

        totals = {
            'converge.virt.volume create': min(converge_create() for _attempt in range(args.repeat)),
            'converge.virt.volume no-op': min(run_playbook(bin_dir, playbook([ping, fleet]), env, False) for _attempt in range(args.repeat)),
            'community.libvirt.virt_volume create (loop)': run_playbook(bin_dir, playbook([ping, peer]), env, True),
        }
        totals['community.libvirt.virt_volume re-run (loop)'] = run_playbook(bin_dir, playbook([ping, peer]), env, None)
        seconds = {k: max(0.001, v - empty) for k, v in totals.items()}
        for pool_name in ('conv', 'peer'):
            pools[pool_name].refresh(0)
            count = pools[pool_name].numOfVolumes()
            if count != args.volumes:
                raise RuntimeError('pool %s holds %d volumes, expected %d' % (pool_name, count, args.volumes))
        results = {
            'volumes': args.volumes, 'host': 'one private libvirt host (tools.virtlab), unix socket URI',
            'peer': 'community.libvirt.virt_volume from the ansible package in build/bench-venv, loop over the volumes',
            'baseline_playbook_seconds': round(empty, 3),
            'playbook_seconds': {k: round(v, 3) for k, v in totals.items()},
            'task_seconds': {k: round(v, 3) for k, v in seconds.items()},
            'ratios': {
                'create: community loop / converge fleet': round(seconds['community.libvirt.virt_volume create (loop)']
                                                                 / seconds['converge.virt.volume create'], 1),
                're-run: community loop / converge no-op': round(seconds['community.libvirt.virt_volume re-run (loop)']
                                                                 / seconds['converge.virt.volume no-op'], 1),
            },
        }
        report('volume_converge', results)
        conn.close()
    finally:
        hosts.stop_hosts(args.state_dir)
    return 0


if __name__ == '__main__':
    sys.exit(main())
