"""From one golden image to configured guests, end to end: playbooks/demo_golden.yml (what `make demo` runs).

Play 1 imports the golden ISO9660 disk of tools/virtlab/golden.py once and, through the lifecycle role's golden tasks,
gives each of two login guests a qcow2 overlay on it grown to 64 MiB, its own host name and one SSH key (cloud-init
NoCloud), in one fleet task that returns once port 22 of each answers; their NICs are on an isolated libvirt network
inside the test's network namespace. The converge.virt.libvirt inventory (refreshed) finds them with ansible_host; play
2 logs in over SSH, reads back the host name cloud-init set, mounts the golden disk and reads its release file, sees
the grown size, writes a file and a marker into the grown part of its disk; play 3 checks the golden volume's sha256
is the imported image's and removes the guests, their volumes and the network. Three guests run in `make demo`; two here
(TCG boots cost about 30 s each on a loaded machine).
"""

import base64
import ipaddress
import json
import os
import subprocess

import libvirt
import pytest

from tests.integration.ansible_run import BIN, ROOT, ansible_env

NAMES = ['gold-web-1', 'gold-web-2']


@pytest.fixture(scope='module')
def host(libvirt_hosts):
    return libvirt_hosts[1]


def play_tasks(out, index):
    return dict((task['task']['name'], task['hosts']) for task in out['plays'][index]['tasks'])


def test_golden_image_to_configured_guests_over_ssh(host, tmp_path):
    work = str(tmp_path / 'golden')
    inventory = os.path.join(work, 'guests.converge_libvirt.yml')
    cmd = [os.path.join(BIN, 'ansible-playbook'), '-i', os.path.join(ROOT, 'playbooks', 'inventory', 'localhost.yml'), '-i', inventory,
           os.path.join(ROOT, 'playbooks', 'demo_golden.yml'),
           '-e', json.dumps({'golden_uri': host.uri, 'golden_count': len(NAMES), 'golden_dir': work})]
    proc = subprocess.run(cmd, env=ansible_env(), capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    failures = [(t['task']['name'], h, r.get('msg')) for p in out['plays'] for t in p['tasks'] for h, r in t['hosts'].items() if r.get('failed')]
    assert proc.returncode == 0 and not failures, (failures, proc.stderr[-2000:])

    provision = play_tasks(out, 0)
    report = provision['What the role reported']['localhost']['lifecycle_golden_report']
    assert [(r['name'], r['readiness'], r['volume']) for r in report] == [
        (name, 'port', 'golden-pool/%s-vda.qcow2' % name) for name in NAMES], report
    addresses = dict((r['name'], r['address']) for r in report)
    assert len(set(addresses.values())) == len(NAMES)
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network('192.168.232.0/24') for a in addresses.values()), addresses
    volumes = provision['converge.virt.lifecycle : Golden image - import it (once) and give every VM its overlay or copy, grown to the declared size']
    by_name = dict((v['name'], v) for v in volumes['localhost']['volumes'])
    assert by_name['golden.raw']['format'] == 'raw'
    assert all(by_name['%s-vda.qcow2' % n]['capacity'] == 64 * 1024 * 1024 and by_name['%s-vda.qcow2' % n]['backing_chain'][0]['volume']
               == 'golden-pool/golden.raw' for n in NAMES), by_name

    # the second play ran on exactly the guests the inventory found, at the addresses the module reported
    configure = play_tasks(out, 1)
    assert sorted(configure['The host name cloud-init set']) == NAMES
    assert {h: r['stdout'] for h, r in configure['The host name cloud-init set'].items()} == {n: n for n in NAMES}
    assert {h: base64.b64decode(r['content']).decode() for h, r in configure['Read the golden release file'].items()} == {
        n: 'converge-golden 1\n' for n in NAMES}
    sizes = configure["The disk's size in 512-byte sectors (grown from the golden image's 64 KiB)"]
    assert {h: int(base64.b64decode(r['content'])) * 512 for h, r in sizes.items()} == {n: 64 * 1024 * 1024 for n in NAMES}
    assert all(r['changed'] for r in configure['Write a file'].values())
    assert {h: r['msg'].split(' ', 2)[1] for h, r in configure['Summary line'].items()} == {n: '(%s):' % addresses[n] for n in NAMES}

    cleanup = play_tasks(out, 2)
    assert not cleanup['The guests wrote only to their overlays']['localhost'].get('failed')
    assert cleanup['Remove the VMs (their cloud-init seeds go with them)']['localhost']['changed']
    conn = libvirt.open(host.uri)
    try:
        assert not set(NAMES) & set(dom.name() for dom in conn.listAllDomains(0))
        assert 'cvgolden' not in conn.listNetworks() + conn.listDefinedNetworks()
        pool = conn.storagePoolLookupByName('golden-pool')
        pool.refresh(0)
        assert pool.listVolumes() == []
        pool.destroy()
        pool.undefine()
    finally:
        conn.close()
