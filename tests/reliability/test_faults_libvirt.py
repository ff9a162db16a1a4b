"""Faults of the libvirt side, each ending with a clear result and a world the next run converges.

* the libvirt daemon restarted in the middle of a slow stop (a guest without
  ACPI waits for its shutdown timeout): the run fails naming the VM and the
  operation, the guest and its record survive the restart, the next run
  converges and the one after reports no change;
* the destination daemon killed in the middle of a live migration (a booted
  guest, slow bandwidth): the guest survives on the source with an idle record,
  nothing is left on the destination once its daemon is back, and the next run
  migrates it;
* a storage pool on a small filesystem made for the test (tmpfs, 24 MiB) that
  fills up during a volume import: a clear error naming the volume and the
  cause, the other volume's data unchanged, no half-imported volume taken for a
  complete one; once space is freed the next run imports (sha256 read back)
  and the one after reports no change.
"""

import os
import subprocess
import time

import libvirt
import pytest

from tests.integration.ansible_run import finish, run_module, start_module
from tests.reliability import figures
from tests.reliability import reliability_lab as rl
from tools.virtlab import domains, hosts as virtlab_hosts

POOL = 'rfpool'


@pytest.fixture(scope='module')
def small_fs(tmp_path_factory):
    """A 24 MiB tmpfs, mounted before the hosts start so that their mount namespaces share it."""
    path = str(tmp_path_factory.mktemp('rf-small-fs'))
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=24m', 'rf-small-fs', path], check=True)
    try:
        yield path
    finally:
        subprocess.run(['umount', '-l', path], check=False)


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout, small_fs):
    del small_fs
    started = rl.start_lab(str(tmp_path_factory.mktemp('rflab')), virtlab_layout(3))
    try:
        yield started
    finally:
        rl.stop_lab(started)


def small(lab, name, **extra):
    args = {'uri': lab.hosts[0].uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type()}
    args.update(extra)
    return args


def wait_until(check, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError('timed out waiting for %s' % what)
        time.sleep(0.05)


def test_daemon_restarted_during_a_slow_stop(lab):
    name = 'rf-slowstop'
    survived = False
    outcome = 'not reached'
    try:
        made = run_module('vm', small(lab, name, state='running'))
        assert made['_rc'] == 0, made
        proc = start_module('vm', small(lab, name, state='stopped', shutdown_timeout=8))
        conn = lab.conns[0]
        wait_until(lambda: rl.record(conn.lookupByName(name)).get('task_state'), 'the stop task to be recorded')
        time.sleep(0.5)
        lab.restart_daemon(0)
        result = finish(proc, timeout=120)
        conn = lab.conns[0]
        dom = conn.lookupByName(name)
        outcome = 'the interrupted run failed: %s' % result.get('msg') if result['_rc'] != 0 else 'the interrupted run completed the stop'
        if result['_rc'] != 0:
            assert 'Traceback' not in result.get('msg', '') and name in result['msg'] and 'stop' in result['msg'], result['msg']
        else:
            assert result['vm']['power_state'] == 'SHUTDOWN'
        assert dom.state()[0] in (libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_SHUTOFF), 'the guest survives the restart'
        rl.record(dom)  # the record still parses

        again = run_module('vm', small(lab, name, state='stopped', shutdown_timeout=1))
        assert again['_rc'] == 0 and again['vm']['vm_state'] == 'STOPPED', again
        assert conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_SHUTOFF
        assert not run_module('vm', small(lab, name, state='stopped', shutdown_timeout=1))['changed']
        assert rl.record(conn.lookupByName(name)).get('task_state') is None
        survived = True
    finally:
        figures.record('fault', 'libvirt daemon restarted during a slow stop', survived,
                       detail='%s; the next run converged' % outcome)
    run_module('vm', small(lab, name, state='absent'))


def test_destination_daemon_killed_during_migration(lab, guest_image):
    name = 'rf-mig'
    src, dst = lab.hosts
    survived = False
    try:
        domains.remove_domain(lab.conns[0], name)
        dom, log = domains.start_kernel_guest(lab.conns[0], src, name, guest_image)
        domains.wait_for_console(log)
        del dom
        proc = start_module('migration', {'uri': src.uri, 'target_uri': dst.uri, 'name': name, 'bandwidth': 1})
        wait_until(lambda: rl.job_active(lab.conns[0].lookupByName(name)), 'the migration job')
        os.kill(dst.pids['libvirtd'], 9)
        result = finish(proc, timeout=300)
        assert result['_rc'] != 0 and result['phase'] == 'Failed' and result['reason'] == 'the target died or vanished', result
        assert rl.state_of(lab.conns[0], name) == libvirt.VIR_DOMAIN_RUNNING, 'the guest must survive on the source'
        assert rl.record(lab.conns[0].lookupByName(name)).get('task_state') is None
        assert not rl.job_active(lab.conns[0].lookupByName(name))

        lab.start_daemon(1)
        # the restarted daemon reconnects to the incoming QEMU it left behind and, finding its migration
        # interrupted, kills it (libvirt's own recovery, run in the background after start-up)
        wait_until(lambda: rl.state_of(lab.conns[1], name) is None, 'the half-migrated copy on the destination to be cleaned up')
        assert rl.state_of(lab.conns[0], name) == libvirt.VIR_DOMAIN_RUNNING
        moved = run_module('migration', {'uri': src.uri, 'target_uri': dst.uri, 'name': name, 'bandwidth': 1000})
        assert moved['_rc'] == 0 and moved['phase'] == 'Succeeded', moved
        assert rl.state_of(lab.conns[1], name) == libvirt.VIR_DOMAIN_RUNNING and rl.state_of(lab.conns[0], name) is None
        again = run_module('migration', {'uri': src.uri, 'target_uri': dst.uri, 'name': name, 'bandwidth': 1000})
        assert again['_rc'] == 0 and not again['changed'], again
        assert rl.record(lab.conns[1].lookupByName(name)).get('task_state') is None
        survived = True
    finally:
        figures.record('fault', 'destination libvirt daemon killed during a live migration', survived,
                       detail='the guest kept running on the source; the next run migrated it')
    domains.remove_domain(lab.conns[1], name)


def test_pool_fills_up_during_an_import(lab, small_fs, tmp_path):
    uri = lab.hosts[0].uri
    pool_dir = os.path.join(small_fs, 'pool')
    os.makedirs(pool_dir)
    image = str(tmp_path / 'image.raw')
    with open(image, 'wb') as handle:
        handle.truncate(16 * rl.MIB)
    image_digest = rl.write_pattern(image, 16 * rl.MIB, 'image')
    keep = run_module('volume', {'uri': uri, 'pool': POOL, 'pool_path': pool_dir, 'name': 'rf-keep.raw', 'capacity': '4MiB'})
    assert keep['_rc'] == 0, keep
    keep_path = keep['volume']['path']
    keep_digest = rl.write_pattern(keep_path, 4 * rl.MIB, 'keep')
    filler = os.path.join(small_fs, 'filler')
    with open(filler, 'wb') as handle:
        handle.write(b'\1' * (12 * rl.MIB))
    args = {'uri': uri, 'pool': POOL, 'name': 'rf-import.raw', 'import_from': image}
    lost = 0
    survived = False
    try:
        full = run_module('volume', args)
        assert full['_rc'] != 0 and full.get('failed'), full
        assert 'rf-import.raw' in full['msg'] and 'No space left on device' in full['msg'], full['msg']
        assert 'Traceback' not in full['msg']
        lost += rl.sha256_region(keep_path, 4 * rl.MIB) != keep_digest
        pool = lab.conns[0].storagePoolLookupByName(POOL)
        pool.refresh(0)
        assert 'rf-import.raw' not in pool.listVolumes(), 'a half-imported volume must not be left to pass for a complete one'

        os.unlink(filler)
        imported = run_module('volume', args)
        assert imported['_rc'] == 0 and imported['changed'], imported
        assert rl.sha256_region(imported['volume']['path'], 16 * rl.MIB) == image_digest
        assert not run_module('volume', args)['changed']
        lost += rl.sha256_region(keep_path, 4 * rl.MIB) != keep_digest
        assert lost == 0
        survived = True
    finally:
        figures.record('fault', 'storage pool filesystem full during a volume import', survived, data_lost=lost,
                       detail='24 MiB tmpfs; clear error naming the volume and the cause; converged once space was freed')
