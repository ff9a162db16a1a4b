"""From a real golden image to configured guests that boot from their own disks: playbooks/demo_cloud.yml (what `make demo`
runs), through the collection only, and checked inside the guests.

The golden image is a bootable Debian cloud disk built at set-up from Debian's packages (tools/virtlab/cloudimage.py:
MBR + GRUB, Debian's cloud kernel, systemd, Debian's cloud-init 22.4 with NoCloud, growpart, sshd, qemu-guest-agent);
the guests boot it under TCG. Two such boots in this file (about 2-5 minutes each on 2 loaded cores, side by side).

Run 1 (keep_guests=true): play 1 imports the image once into a pool, gives cloud-web-1 a qcow2 overlay on it and
cloud-web-2 a full copy of it, both grown to 3 GiB, and starts both with a cloud-init seed (write_files, a user with an
SSH key and sudo, runcmd; the host name in the meta data; network-config v2 with DHCP on cloud-web-1 and a static
address on cloud-web-2) in one converge.virt.vm task that waits for port 22. Play 2 logs in as the user cloud-init made
(found by the converge.virt.libvirt inventory) and reads back in each guest the host name, the write_files file (content,
mode, owner), the user and its key, runcmd's output, the addresses, the root partition and file system grown to the end
of the 3 GiB disk, and the status cloud-init reports (done, no errors in /run/cloud-init/result.json). The assertions are made
again here from the registered results.

Then: user data cloud-init's schema rejects is refused by the vm module before anything changes (no domain, no seed).
Run 2 (--limit localhost, keep_guests=false): nothing changes (volumes, VMs, network), the golden volume's sha256 is
still the image's, and absent removes the VMs, their seeds and volumes, the golden volume and the network.
"""

import base64
import hashlib
import ipaddress
import json
import os
import subprocess

import libvirt
import pytest

from tests.integration.ansible_run import BIN, ROOT, ansible_env, run_module
from tools.virtlab import cloudimage, netns

NAMES = ['cloud-web-1', 'cloud-web-2']
POOL = 'cloud-pool'
NETWORK = 'cvcloud'
STATIC = '192.168.233.200'
GIB3 = 3 * 1024 * 1024 * 1024


@pytest.fixture(scope='module')
def image():
    """The golden image (built by make guest; a cache hit here)."""
    return cloudimage.build_cloud_image()


def play_tasks(out, index):
    return dict((task['task']['name'], task['hosts']) for task in out['plays'][index]['tasks'])


def run_playbook(uri, work, inventory, *extra):
    cmd = [os.path.join(BIN, 'ansible-playbook'), '-i', os.path.join(ROOT, 'playbooks', 'inventory', 'localhost.yml'), '-i', inventory,
           os.path.join(ROOT, 'playbooks', 'demo_cloud.yml'), '-e', json.dumps({'cloud_uri': uri, 'cloud_dir': work})] + list(extra)
    proc = subprocess.run(cmd, env=ansible_env(), capture_output=True, text=True, timeout=2400, check=False, cwd=ROOT)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    failures = [(t['task']['name'], h, r.get('msg')) for p in out['plays'] for t in p['tasks'] for h, r in t['hosts'].items()
                if r.get('failed') or r.get('unreachable')]
    assert proc.returncode == 0 and not failures, '\n'.join('%s [%s]: %s' % failure for failure in failures) + '\n' + proc.stderr[-2000:]
    return out


def sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def test_cloud_image_to_configured_guests(libvirt_hosts, image, tmp_path):  # pylint: disable=too-many-locals,too-many-statements
    assert netns.in_private_network_namespace(), 'the guest network must live in the test network namespace'
    host = libvirt_hosts[0]
    work = str(tmp_path / 'cloud')
    inventory = os.path.join(work, 'guests.converge_libvirt.yml')
    conn = libvirt.open(host.uri)
    try:
        out = run_playbook(host.uri, work, inventory, '-e', json.dumps({'keep_guests': True}))

        provision = play_tasks(out, 0)
        volumes = provision['Import the golden image once; an overlay on it for cloud-web-1, a full copy of it for cloud-web-2, both grown']
        by_name = dict((v['name'], v) for v in volumes['localhost']['volumes'])
        assert by_name['golden.qcow2']['format'] == 'qcow2' and by_name['golden.qcow2']['capacity'] == image['virtual_size'], by_name
        overlay, copy = by_name['cloud-web-1-vda.qcow2'], by_name['cloud-web-2-vda.qcow2']
        assert overlay['capacity'] == copy['capacity'] == GIB3, by_name
        assert overlay['backing_chain'][0]['volume'] == '%s/golden.qcow2' % POOL, overlay
        assert not copy.get('backing_chain'), copy  # a full copy: nothing under it
        started = provision['Start both VMs from their own disks with their cloud-init seeds, and wait until port 22 of each answers']['localhost']
        results = dict((r['name'], r) for r in started['results'])
        assert {n: (r['changed'], r['readiness']) for n, r in results.items()} == {n: (True, 'port') for n in NAMES}, results
        addresses = {n: r['address'] for n, r in results.items()}
        assert addresses['cloud-web-2'] == STATIC, addresses
        assert ipaddress.ip_address(addresses['cloud-web-1']) in ipaddress.ip_network('192.168.233.0/24') and addresses['cloud-web-1'] != STATIC

        # inside the guests (play 2 asserted the same; here from the registered results, so a weakened playbook fails here too)
        guests = play_tasks(out, 1)
        assert sorted(guests['Check what the guest says']) == NAMES and not any(r.get('failed') for r in guests['Check what the guest says'].values())
        assert {h: r['stdout'] for h, r in guests['Host name'].items()} == {n: n for n in NAMES}
        assert {h: (r['stat']['mode'], r['stat']['pw_name']) for h, r in guests['The write_files file'].items()} == {n: ('0640', 'root') for n in NAMES}
        assert {h: base64.b64decode(r['content']).decode() for h, r in guests["The write_files file's content"].items()} == {
            n: 'written by cloud-init on %s\n' % n for n in NAMES}
        assert {h: r['stdout'].split(':')[0] for h, r in guests['The user cloud-init made'].items()} == {n: 'converge' for n in NAMES}
        with open(os.path.join(work, 'id_ed25519.pub'), encoding='utf-8') as handle:
            public_key = handle.read().strip()
        assert all(public_key in base64.b64decode(r['content']).decode() for r in guests['Its authorized keys'].values())
        assert {h: base64.b64decode(r['content']).decode() for h, r in guests['The output of runcmd'].items()} == {
            n: 'runcmd ran on %s\n' % n for n in NAMES}
        inet = {h: [line.split()[3] for line in r['stdout_lines']] for h, r in guests['IPv4 addresses'].items()}
        assert inet == {n: [addresses[n] + '/24'] for n in NAMES}, inet
        assert all(' dynamic ' in line for line in guests['IPv4 addresses']['cloud-web-1']['stdout_lines'])  # DHCP
        assert not any(' dynamic ' in line for line in guests['IPv4 addresses']['cloud-web-2']['stdout_lines'])  # static
        sizes = {h: dict(line.split(' ', 1) for line in r['stdout_lines'][:4]) for h, r in
                 guests['The disk, the root partition and the root file system, in bytes (root partition from its declared size)'].items()}
        assert {h: r['stdout_lines'][4] for h, r in
                guests['The disk, the root partition and the root file system, in bytes (root partition from its declared size)'].items()} == {
            n: '/dev/vda1' for n in NAMES}  # the guest runs from its own disk
        for name in NAMES:
            size = sizes[name]
            # growpart: to the disk's end but for the few sectors it keeps free (33 with sfdisk on MBR)
            assert int(size['disk']) == GIB3 and GIB3 - 1024 * 1024 < int(size['partition_end']) <= GIB3, size
            assert int(size['partition']) - 4096 < int(size['filesystem']) <= int(size['partition']), size  # resize2fs filled it
            assert int(size['filesystem']) > 2 * image['virtual_size'], size  # grown from the image's size
        status = {h: r['stdout_lines'] for h, r in guests["The status cloud-init reports"].items()}
        assert all(r['rc'] == 0 for r in guests["The status cloud-init reports"].values()) and all('status: done' in lines for lines in status.values()), status
        result = {h: json.loads(base64.b64decode(r['content']))['v1'] for h, r in guests["The result cloud-init wrote"].items()}
        assert {h: (r['errors'], 'DataSourceNoCloud' in r['datasource']) for h, r in result.items()} == {n: ([], True) for n in NAMES}, result
        kept = play_tasks(out, 2)
        assert 'failed' not in kept['The guests wrote only to their own volumes']['localhost']
        assert kept['Remove the VMs (their cloud-init seeds go with them)']['localhost'].get('skipped'), kept
        golden_path = os.path.join(work, 'pool', 'golden.qcow2')
        assert sha256(golden_path) == image['sha256']

        # user data cloud-init's schema rejects: refused before anything changes, naming the field
        pool = conn.storagePoolLookupByName(POOL)
        pool.refresh(0)
        volumes_before = sorted(pool.listVolumes())
        refused = run_module('vm', {'uri': host.uri, 'name': 'cloud-web-bad', 'state': 'running', 'memory': '256MiB', 'domain_type': 'qemu',
                                    'disks': [{'dev': 'vda', 'pool': POOL, 'volume': 'golden.qcow2', 'format': 'qcow2', 'readonly': True}],
                                    'cloud_init': {'user_data': {'write_files': [{'path': '/etc/x', 'permissions': 640}]}, 'pool': POOL}})
        assert refused.get('failed') and not refused['changed'], refused
        assert refused['msg'].startswith('cloud_init.user_data.write_files[0].permissions: must be string, got integer'), refused['msg']
        assert 'cloud-web-bad' not in [dom.name() for dom in conn.listAllDomains(0)]
        pool.refresh(0)
        assert sorted(pool.listVolumes()) == volumes_before

        again = run_playbook(host.uri, work, inventory, '--limit', 'localhost', '-e', json.dumps({'keep_guests': False}))
        second = play_tasks(again, 0)
        assert not second['Import the golden image once; an overlay on it for cloud-web-1, a full copy of it for cloud-web-2, both grown'][
            'localhost']['changed']
        rerun = second['Start both VMs from their own disks with their cloud-init seeds, and wait until port 22 of each answers']['localhost']
        assert [(r['name'], r['changed'], r['address']) for r in rerun['results']] == [(n, False, addresses[n]) for n in NAMES], rerun
        assert not second['An isolated libvirt network for the guests (inside this network namespace only)']['localhost']['changed']
        cleanup = play_tasks(again, len(again['plays']) - 1)
        assert 'failed' not in cleanup['The guests wrote only to their own volumes']['localhost']
        assert cleanup['Remove the VMs (their cloud-init seeds go with them)']['localhost']['changed']
        assert not set(NAMES) & set(dom.name() for dom in conn.listAllDomains(0))
        assert NETWORK not in conn.listNetworks() + conn.listDefinedNetworks()
        pool.refresh(0)
        assert pool.listVolumes() == []  # overlays, the copy, both seeds and the golden volume
        pool.destroy()
        pool.undefine()
    finally:
        for name in set(NAMES) & set(dom.name() for dom in conn.listAllDomains(0)):  # only after a failure above (run 1 keeps them)
            run_module('vm', {'uri': host.uri, 'name': name, 'state': 'absent', 'shutdown_timeout': 1})
        conn.close()
