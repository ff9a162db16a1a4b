"""converge.virt.snapshot and snapshot_info on real private libvirt hosts, driven through the ansible CLI.

Data safety is proven by checksums of the volume's data (read through qemu-img as raw): taken before the
snapshot, changed by writes into the volume, equal again after the restore; deleting a snapshot never
changes the current data. Also: check mode changes nothing, re-runs are no-ops, keep_last deletes only
the snapshots its plan names, a raw disk and a VM held by another task are refused and nothing changes,
a running VM's memory snapshot is restored running, and the kubevirt backend is refused.
"""

import hashlib
import os
import socket
import subprocess
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from tests.integration.ansible_run import ok, run_module
from tools.virtlab import domains, hosts as virtlab_hosts

NS = 'https://converge.virt/xmlns/vm/1'
MIB = 1024 * 1024


@pytest.fixture(scope='module')
def disk_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp('snapdisks'))


def make_disk(directory, name, fmt='qcow2', size='8M'):
    path = os.path.join(directory, name)
    subprocess.run(['qemu-img', 'create', '-q', '-f', fmt, path, size], check=True)
    return path


def define_vm(conn, name, path, fmt='qcow2', start=False):
    """A diskless guest (SeaBIOS waits forever) with one data disk ``path``."""
    domains.remove_domain(conn, name)
    root = ET.fromstring(domains.diskless_domain_xml(name, virtlab_hosts.diskless_domain_type()))
    disk = ET.SubElement(root.find('devices'), 'disk', {'type': 'file', 'device': 'disk'})
    ET.SubElement(disk, 'driver', {'name': 'qemu', 'type': fmt})
    ET.SubElement(disk, 'source', {'file': path})
    ET.SubElement(disk, 'target', {'dev': 'vdb', 'bus': 'virtio'})
    dom = conn.defineXML(ET.tostring(root, encoding='unicode'))
    if start:
        dom.create()
    return dom


def remove_vm(conn, name):
    try:
        dom = conn.lookupByName(name)
    except libvirt.libvirtError:
        return
    if dom.isActive():
        dom.destroy()
    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA)


def write(path, pattern, offset=0, length=MIB):
    """Write a byte pattern into the qcow2 volume of a stopped VM (qemu-io: the guest's view of the data)."""
    subprocess.run(['qemu-io', '-f', 'qcow2', '-c', 'write -P %d %d %d' % (pattern, offset, length), path], check=True, capture_output=True)


def data_sha(path, tmp_path, fmt='qcow2'):
    """sha256 of the volume's current data as the guest sees it (converted to raw)."""
    out = str(tmp_path / ('data-%s.raw' % time.monotonic_ns()))
    subprocess.run(['qemu-img', 'convert', '-f', fmt, '-O', 'raw', path, out], check=True)
    with open(out, 'rb') as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    os.unlink(out)
    return digest


def snap_names(dom):
    return sorted(s.getName() for s in dom.listAllSnapshots(0))


def args(host, vm, name, **extra):
    result = {'uri': host.uri, 'vm': vm, 'name': name}
    result.update(extra)
    return result


def test_stopped_vm_snapshot_restore_checksums(host, conn, disk_dir, tmp_path):
    vm = 'snap-stopped'
    path = make_disk(disk_dir, 'stopped.qcow2')
    try:
        dom = define_vm(conn, vm, path)
        write(path, 0x11)
        original = data_sha(path, tmp_path)

        checked = ok(run_module('snapshot', args(host, vm, 's1', description='before the change'), check=True, diff=True))
        assert checked['changed'] and [o['op'] for o in checked['operations']] == ['create_snapshot']
        assert checked['diff'] == {'before': {'snapshots': []}, 'after': {'snapshots': ['s1']}}
        assert snap_names(dom) == [], 'check mode must create nothing'

        created = ok(run_module('snapshot', args(host, vm, 's1', description='before the change')))
        assert created['changed'] and snap_names(dom) == ['s1']
        snap = created['snapshot']
        assert (snap['phase'], snap['vm_state_at_snapshot'], snap['memory'], snap['consistency'], snap['description']) == (
            'Ready', 'shutoff', False, 'crash-consistent', 'before the change')
        assert snap['created'].endswith('Z') and abs(snap['creation_time'] - time.time()) < 120
        assert data_sha(path, tmp_path) == original

        again = ok(run_module('snapshot', args(host, vm, 's1', description='before the change')))
        assert not again['changed'] and again['operations'] == []
        assert not ok(run_module('snapshot', args(host, vm, 's1'), check=True))['changed']

        write(path, 0x22)
        write(path, 0x33, offset=4 * MIB)
        changed = data_sha(path, tmp_path)
        assert changed != original

        # a second snapshot, then deleting it: the current data is untouched
        ok(run_module('snapshot', args(host, vm, 's2')))
        deleted = ok(run_module('snapshot', args(host, vm, 's2', state='absent'), diff=True))
        assert deleted['changed'] and deleted['diff']['after'] == {'snapshots': ['s1']} and deleted['snapshot'] == {'phase': 'absent'}
        assert snap_names(dom) == ['s1'] and data_sha(path, tmp_path) == changed
        assert not ok(run_module('snapshot', args(host, vm, 's2', state='absent')))['changed']

        # restore in check mode changes nothing; then for real, after a safety snapshot
        planned = ok(run_module('snapshot', args(host, vm, 's1', state='restored'), check=True))
        assert [o['op'] for o in planned['operations']] == ['create_snapshot', 'restore_snapshot']
        assert planned['snapshot']['phase'] == 'Ready' and planned['safety_snapshot'].startswith('s1-before-restore-')
        assert data_sha(path, tmp_path) == changed and snap_names(dom) == ['s1']
        restored = ok(run_module('snapshot', args(host, vm, 's1', state='restored')))
        safety = restored['safety_snapshot']
        assert restored['changed'] and restored['snapshot']['phase'] == 'Restored'
        assert snap_names(dom) == sorted(['s1', safety])
        assert data_sha(path, tmp_path) == original, 'the restore must bring back the data of the snapshot'
        # the snapshot's own XML held the record of the task that took it: the restore must not bring that back
        assert not dom.isActive() and task_state(dom) is None

        # the safety snapshot undoes the restore
        ok(run_module('snapshot', args(host, vm, safety, state='restored', safety_snapshot=False)))
        assert data_sha(path, tmp_path) == changed and snap_names(dom) == sorted(['s1', safety])
        ok(run_module('snapshot', args(host, vm, 's1', state='restored', safety_snapshot=False)))
        assert data_sha(path, tmp_path) == original

        info = ok(run_module('snapshot_info', {'uri': host.uri, 'vm': vm}))
        assert [s['name'] for s in info['snapshots']] == ['s1', safety] and info['current'] == 's1' and info['task_state'] is None
        missing = ok(run_module('snapshot_info', {'uri': host.uri, 'vm': vm, 'name': ['nope']}))
        assert missing['snapshots'] == [{'name': 'nope', 'vm': vm, 'exists': False, 'phase': 'absent'}]
    finally:
        remove_vm(conn, vm)


def test_keep_last_deletes_only_what_it_names(host, conn, disk_dir, tmp_path):
    vm = 'snap-keep'
    path = make_disk(disk_dir, 'keep.qcow2')
    try:
        dom = define_vm(conn, vm, path)
        for index, name in enumerate(('k1', 'k2', 'k3')):
            write(path, 0x40 + index)
            ok(run_module('snapshot', args(host, vm, name)))
        current = data_sha(path, tmp_path)
        planned = ok(run_module('snapshot', args(host, vm, 'k4', keep_last=2), check=True))
        assert [(o['op'], o['snapshot']) for o in planned['operations']] == [
            ('create_snapshot', 'k4'), ('delete_snapshot', 'k1'), ('delete_snapshot', 'k2')]
        assert snap_names(dom) == ['k1', 'k2', 'k3']
        done = ok(run_module('snapshot', args(host, vm, 'k4', keep_last=2)))
        assert [(o['op'], o['snapshot']) for o in done['operations']] == [
            ('create_snapshot', 'k4'), ('delete_snapshot', 'k1'), ('delete_snapshot', 'k2')]
        assert snap_names(dom) == ['k3', 'k4'] and done['snapshots'] == ['k3', 'k4']
        assert data_sha(path, tmp_path) == current
        assert not ok(run_module('snapshot', args(host, vm, 'k4', keep_last=2)))['changed']
        # a snapshot run killed on this host left its task: the next run clears it (Nova clears IMAGE_SNAPSHOT) and goes on
        dead = subprocess.Popen(['true'])
        dead.wait()
        forge(dom, vm_state='STOPPED', task_state='IMAGE_SNAPSHOT', task_id='killed-run', last_action='snapshot',
              lease_until=repr(time.time() + 300), owner='%s:%d' % (socket.gethostname(), dead.pid), generation='50')
        assert task_state(dom) == 'IMAGE_SNAPSHOT'
        ok(run_module('snapshot', args(host, vm, 'k5')))
        assert task_state(dom) is None and 'k5' in snap_names(dom)
        ok(run_module('snapshot', args(host, vm, 'k5', state='absent')))
        # delete with children: k3 is the parent of k4
        gone = ok(run_module('snapshot', args(host, vm, 'k3', state='absent', children=True)))
        assert [(o['op'], o['snapshot'], o['children']) for o in gone['operations']] == [('delete_snapshot', 'k3', True)]
        assert snap_names(dom) == [] and data_sha(path, tmp_path) == current
    finally:
        remove_vm(conn, vm)


def test_raw_disk_and_memory_of_a_stopped_vm_are_refused(host, conn, disk_dir, tmp_path):
    vm = 'snap-raw'
    path = make_disk(disk_dir, 'data.raw', fmt='raw')
    try:
        dom = define_vm(conn, vm, path, fmt='raw')
        before = data_sha(path, tmp_path, fmt='raw')
        for check in (True, False):
            refused = run_module('snapshot', args(host, vm, 'r1'), check=check)
            assert refused.get('failed') and 'vdb' in refused['msg'] and 'raw' in refused['msg'] and 'qcow2' in refused['msg'], refused
            assert 'qcow2' in refused['reason']
        assert snap_names(dom) == [] and data_sha(path, tmp_path, fmt='raw') == before
        memory = run_module('snapshot', args(host, vm, 'r1', memory=True))
        assert memory.get('failed') and 'memory: true needs a running or paused VM' in memory['msg'], memory
        missing = run_module('snapshot', args(host, vm, 'r1', state='restored'))
        assert missing.get('failed') and missing['field'] == 'name' and 'does not exist' in missing['msg']
        # a libvirt option with backend kubevirt is refused naming it, before anything is read or written
        other = run_module('snapshot', args(host, vm, 'r1', backend='kubevirt'))
        assert other.get('failed') and 'libvirt option' in other['msg'] and other['field'] == 'uri', other
        assert snap_names(dom) == []
        # the fleet form: one task for several VMs; the raw one fails naming itself, the qcow2 one is snapshotted
        fine = define_vm(conn, 'snap-fleet-ok', make_disk(disk_dir, 'fleet-ok.qcow2'))
        fleet = {'uri': host.uri, 'vms': ['snap-fleet-ok', vm], 'name': 'f1', 'parallel': 2}
        mixed = run_module('snapshot', fleet)
        assert mixed.get('failed') and mixed['msg'] == '1 of 2 VMs failed: %s' % vm and mixed['changed'], mixed
        by_vm = dict((r['vm'], r) for r in mixed['results'])
        assert by_vm['snap-fleet-ok']['changed'] and not by_vm['snap-fleet-ok']['failed'] and by_vm['snap-fleet-ok']['snapshots'] == ['f1']
        assert by_vm[vm]['failed'] and 'raw' in by_vm[vm]['msg'] and snap_names(fine) == ['f1'] and snap_names(dom) == []
        again = ok(run_module('snapshot', dict(fleet, vms=['snap-fleet-ok'])))
        assert not again['changed'] and [r['vm'] for r in again['results']] == ['snap-fleet-ok']
    finally:
        remove_vm(conn, vm)
        remove_vm(conn, 'snap-fleet-ok')


def forge(dom, **fields):
    """Write a task record into the domain's metadata as another run would."""
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata  # pylint: disable=import-outside-toplevel
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG | (libvirt.VIR_DOMAIN_AFFECT_LIVE if dom.isActive() else 0)
    dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata.converge_metadata_element(fields), 'converge', NS, flags)


def task_state(dom):
    root = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    meta = root.find('metadata/{%s}vm' % NS)
    return None if meta is None else (meta.findtext('{%s}task_state' % NS) or None)


def test_running_vm_memory_snapshot_and_busy_refusal(host, conn, disk_dir, tmp_path):
    vm = 'snap-running'
    path = make_disk(disk_dir, 'running.qcow2')
    try:
        write(path, 0x55)
        dom = define_vm(conn, vm, path, start=True)
        disk_only = run_module('snapshot', args(host, vm, 'm1', memory=False))
        assert disk_only.get('failed') and 'external' in disk_only['msg'], disk_only
        assert snap_names(dom) == []

        # another task holds the VM (a live lease of another run): refused, in check mode too, nothing changes
        forge(dom, vm_state='ACTIVE', task_state='MIGRATING', task_id='forged-mig', last_action='live_migrate',
              lease_until=repr(time.time() + 300), owner='elsewhere:1', generation='40')
        for check in (True, False):
            busy = run_module('snapshot', args(host, vm, 'm1'), check=check)
            assert busy.get('failed') and 'busy' in busy['msg'] and busy['task_state'] == 'MIGRATING', busy
        assert snap_names(dom) == [] and task_state(dom) == 'MIGRATING'
        forge(dom, vm_state='ACTIVE', generation='41')

        taken = ok(run_module('snapshot', args(host, vm, 'm1')))
        assert (taken['snapshot']['vm_state_at_snapshot'], taken['snapshot']['memory']) == ('running', True)
        assert task_state(dom) is None and dom.isActive()
        dom.destroy()
        restored = ok(run_module('snapshot', args(host, vm, 'm1', state='restored', safety_snapshot=False)))
        assert restored['changed'] and 'safety_snapshot' not in restored
        assert dom.isActive(), 'a snapshot with memory is restored running'
        state = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)).find('metadata/{%s}vm' % NS).findtext('{%s}vm_state' % NS)
        assert state == 'ACTIVE' and task_state(dom) is None
        ok(run_module('snapshot', args(host, vm, 'm1', state='absent')))
        assert snap_names(dom) == [] and dom.isActive()
    finally:
        remove_vm(conn, vm)
