"""Benchmark: N VMs from one golden image to port 22 answering, converge.virt in one fleet task vs community.libvirt looped.

On one private libvirt host (tools.virtlab) with an isolated libvirt network, both sides boot the same login guest
(tools/virtlab/loginguest.py) with a qcow2 overlay on one golden volume (tools/virtlab/golden.py) and a cloud-init
seed (host name, one SSH key), and end when port 22 of every guest answers:

* converge.virt: one ``converge.virt.volume`` task (the overlays, from ``volumes``) and one ``converge.virt.vm`` task
  (``vms``, ``cloud_init``, ``wait_for: port``) - the module finds each address (guest agent / DHCP lease by MAC);
* community.libvirt 2.0 (from the ``ansible`` package), what its users write: ``virt_volume`` looped for the
  overlays (``xml`` with a backing store) and for the seeds (``command: create_cidata_cdrom``), ``virt`` looped to
  define (the same domain XML converge.virt wrote, renamed, without UUID/MAC) and to start, then - since
  community.libvirt reports no address - ``virsh net-dhcp-leases`` retried until every host name has a lease, then
  ``ansible.builtin.wait_for`` port 22 looped over the addresses.

Each side's task times come from bench/callback_plugins/task_timer.py (where the time goes), the whole
ansible-playbook wall time too; the golden volume is imported beforehand on both sides (not timed). TCG boots
dominate: the ratio says how much each side adds on top. Results: bench/results/golden_fleet.json. Run inside a
private network namespace, after ``make bench-venv`` and ``make guest``:

    python -m tools.virtlab netns -- .venv/bin/python -m bench.golden_fleet --vms 10
"""

import argparse
import hashlib
import json
import os
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET

import libvirt

from bench.common import ROOT, bench_env, lab_layout, load_average, playbook, report
from tools.virtlab import domains, golden, hosts, loginguest

POOL = 'bgolden-pool'
NETWORK = 'bgolden'


def timed(bin_dir, plays, env):
    """(whole ansible-playbook seconds, [(task, seconds)]) of one run; fails on any failed task."""
    handle, times = tempfile.mkstemp(prefix='bench-task-times-')
    os.close(handle)
    run_env = dict(env, BENCH_TASK_TIMES=times, ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, 'bench', 'callback_plugins'),
                   ANSIBLE_CALLBACKS_ENABLED='task_timer', ANSIBLE_LOAD_CALLBACK_PLUGINS='1')
    with tempfile.NamedTemporaryFile('w', suffix='.yml', delete=False) as book:
        json.dump(plays, book)
    start = time.monotonic()
    proc = subprocess.run([os.path.join(bin_dir, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', book.name],
                          env=run_env, capture_output=True, text=True, check=False)
    whole = time.monotonic() - start
    os.unlink(book.name)
    with open(times, encoding='utf-8') as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    os.unlink(times)
    if proc.returncode != 0 or any(r['status'] != 'ok' for r in records):
        raise RuntimeError('playbook failed (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-4000:], proc.stderr[-2000:]))
    return whole, [(r['task'], round(r['seconds'], 2)) for r in records]


def converge_plays(uri, names, guest, public_key, console_dir):
    volumes = [{'name': '%s-vda.qcow2' % n, 'backing_volume': 'golden.raw', 'capacity': '64MiB'} for n in names]
    vms = [{'name': n, 'serial': os.path.join(console_dir, n + '.log'),
            'disks': [{'dev': 'vda', 'pool': POOL, 'volume': '%s-vda.qcow2' % n, 'format': 'qcow2'}],
            'cloud_init': {'meta_data': {'local-hostname': n}, 'ssh_authorized_keys': [public_key], 'pool': POOL}} for n in names]
    return playbook([
        {'name': 'overlays', 'converge.virt.volume': {'uri': uri, 'pool': POOL, 'volumes': volumes}},
        {'name': 'vms to port 22', 'converge.virt.vm': {
            'uri': uri, 'memory': '448MiB', 'vcpus': 1, 'domain_type': 'qemu', 'state': 'running', 'guest_agent': True,
            'boot': {'kernel': guest.kernel, 'initrd': guest.initrd, 'cmdline': guest.cmdline}, 'interfaces': [{'network': NETWORK}],
            'wait_for': 'port', 'wait_timeout': 900, 'parallel': len(names), 'vms': vms}}])


def peer_domain_xml(template, name, console):
    """converge.virt's domain XML of one guest, as a community.libvirt user's own XML for ``name``."""
    root = ET.fromstring(template)
    root.find('name').text = name
    for tag in ('uuid', 'metadata', 'title', 'description'):
        for elem in root.findall(tag):
            root.remove(elem)
    for mac in root.findall('devices/interface/mac'):
        root.find('devices/interface').remove(mac)
    for disk in root.findall('devices/disk'):
        source = disk.find('source')
        if disk.get('device') == 'cdrom':
            source.set('volume', name + '-cidata.iso')
        else:
            source.set('volume', name + '-vda.qcow2')
    for serial in root.findall('devices/serial'):
        for log in serial.findall('log'):
            log.set('file', console)
        src = serial.find('source')
        if src is not None and src.get('path'):
            src.set('path', console)
    return ET.tostring(root, encoding='unicode')


def peer_plays(uri, names, public_key, golden_path, templates):
    overlay = ('<volume><name>{name}-vda.qcow2</name><capacity unit="bytes">67108864</capacity><target><format type="qcow2"/></target>'
               '<backingStore><path>%s</path><format type="raw"/></backingStore></volume>' % golden_path)
    rows = [{'name': n, 'xml': templates[n], 'overlay': overlay.replace('{name}', n)} for n in names]
    lease_names = ' '.join(names)
    return playbook([
        {'name': 'overlays (virt_volume looped)', 'community.libvirt.virt_volume': {
            'uri': uri, 'pool': POOL, 'name': '{{ item.name }}-vda.qcow2', 'state': 'present', 'xml': '{{ item.overlay }}'},
         'loop': rows, 'loop_control': {'label': '{{ item.name }}'}},
        {'name': 'seeds (virt_volume create_cidata_cdrom looped)', 'community.libvirt.virt_volume': {
            'uri': uri, 'pool': POOL, 'name': '{{ item.name }}-cidata.iso', 'command': 'create_cidata_cdrom',
            'cloudinit_config': {'METADATA': {'local-hostname': '{{ item.name }}'}, 'USERDATA': {'ssh_authorized_keys': [public_key]}}},
         'loop': rows, 'loop_control': {'label': '{{ item.name }}'}},
        {'name': 'define (virt looped)', 'community.libvirt.virt': {'uri': uri, 'command': 'define', 'xml': '{{ item.xml }}'},
         'loop': rows, 'loop_control': {'label': '{{ item.name }}'}},
        {'name': 'start (virt looped)', 'community.libvirt.virt': {'uri': uri, 'name': '{{ item.name }}', 'state': 'running'},
         'loop': rows, 'loop_control': {'label': '{{ item.name }}'}},
        {'name': 'addresses (virsh net-dhcp-leases retried)', 'ansible.builtin.command': {'argv': ['virsh', '-c', uri, 'net-dhcp-leases', NETWORK]},
         'register': 'leases', 'changed_when': False, 'retries': 450, 'delay': 2,
         'until': "'%s'.split() | reject('in', leases.stdout.split()) | list | length == 0" % lease_names},
        {'name': 'port 22 (wait_for looped)', 'ansible.builtin.wait_for': {
            'host': "{{ (leases.stdout_lines | select('search', ' ' ~ item ~ ' ') | first).split()[4].split('/')[0] }}",
            'port': 22, 'timeout': 900}, 'loop': names}])


def cleanup(conn, names):
    for name in names:
        domains.remove_domain(conn, name)
    pool = conn.storagePoolLookupByName(POOL)
    pool.refresh(0)
    for vol in pool.listAllVolumes(0):
        if vol.name() != 'golden.raw':
            vol.delete(0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--vms', type=int, default=10)
    parser.add_argument('--venv', default=os.path.join(ROOT, 'build', 'bench-venv'))
    parser.add_argument('--state-dir', default=os.path.join(ROOT, 'build', 'bench-golden'))
    args = parser.parse_args(argv)
    bin_dir = os.path.join(args.venv, 'bin')
    env = bench_env(bin_dir)
    guest = loginguest.build_login_guest()
    os.makedirs(args.state_dir, exist_ok=True)
    key = os.path.join(args.state_dir, 'id_ed25519')
    if not os.path.exists(key):
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', 'bench-golden', '-f', key], check=True)
    with open(key + '.pub', encoding='utf-8') as handle:
        public_key = handle.read().strip()
    lab = hosts.start_hosts(1, os.path.join(args.state_dir, 'lab'), **lab_layout('127.0.0.51', 'bgold-host-', 16851, 49900))
    uri = lab[0].uri
    conn = libvirt.open(uri)
    try:
        golden.network('start', uri, name=NETWORK, bridge='bgolden0', gateway='192.168.234.1')
        image = golden.build_golden_image(os.path.join(args.state_dir, 'golden.iso'))
        pool_path = os.path.join(args.state_dir, 'pool')
        timed(bin_dir, playbook([{'converge.virt.volume': {'uri': uri, 'pool': POOL, 'pool_path': pool_path, 'name': 'golden.raw',
                                                           'import_from': image['path']}}]), env)
        names = ['bgold-%02d' % i for i in range(1, args.vms + 1)]
        load_before = load_average()
        ours_whole, ours_tasks = timed(bin_dir, converge_plays(uri, names, guest, public_key, args.state_dir), env)
        templates = {}
        for i, name in enumerate(names):
            peer = 'bpeer-%02d' % (i + 1)
            templates[peer] = peer_domain_xml(conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), peer,
                                              os.path.join(args.state_dir, peer + '.log'))
        cleanup(conn, names)
        peers = sorted(templates)
        peer_whole, peer_tasks = timed(bin_dir, peer_plays(uri, peers, public_key, os.path.join(pool_path, 'golden.raw'), templates), env)
        cleanup(conn, peers)
        load_after = load_average()
        with open(os.path.join(pool_path, 'golden.raw'), 'rb') as handle:
            untouched = hashlib.sha256(handle.read()).hexdigest() == image['sha256']
        report('golden_fleet', {
            'vms': args.vms, 'load_average': [load_before, load_after], 'golden_untouched': untouched,
            'converge_virt': {'whole_s': round(ours_whole, 2), 'tasks': ours_tasks},
            'community_libvirt': {'whole_s': round(peer_whole, 2), 'tasks': peer_tasks},
            'ratio_whole': round(peer_whole / ours_whole, 2)})
    finally:
        conn.close()
        hosts.stop_hosts(os.path.join(args.state_dir, 'lab'))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
