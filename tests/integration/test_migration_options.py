"""The live-migration options of converge.virt.migration (libvirt) on two private hosts, through the ansible CLI.

Covers what test_migration_module.py leaves out: ``post_copy`` with
``completion_timeout`` + ``completion_action: postcopy`` (the switch to
post-copy is observed through libvirt lifecycle events), ``completion_timeout``
with ``completion_action: abort``, ``wait_timeout`` shorter than the migration,
``copy_storage`` of a local disk (checksum identical on the target), and a run
killed after its migration had finished but before it wrote its result.

One booted TCG guest rewriting its memory (``SLOW`` bandwidth: it never
converges on its own) is shared by the timeout, post-copy and killed-run tests,
in that order; the storage test uses a diskless guest with a data disk.
"""

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from tests.integration.ansible_run import BIN, ansible_env, run_module
from tests.integration.test_migration_module import SLOW, defined_on, mig, record, running_on, wait_job
from tests.reliability.reliability_lab import kill_tree, process_tree
from tools.virtlab import domains, hosts as virtlab_hosts

BUSY = 'opt-busy'
POOL = 'opt-pool'
POOL_PATH = '/var/lib/libvirt/images/opt-pool'   # inside each host: its own private directory


@pytest.fixture(scope='module')
def events():
    """Lifecycle events (domain name, event, detail) of the connections opened after this fixture."""
    seen = []
    libvirt.virEventRegisterDefaultImpl()

    def loop():
        while True:
            libvirt.virEventRunDefaultImpl()
    threading.Thread(target=loop, daemon=True).start()
    return seen


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    state_dir = str(tmp_path_factory.mktemp('optlab'))
    started = virtlab_hosts.start_hosts(2, state_dir, **virtlab_layout(2))
    try:
        yield started
    finally:
        virtlab_hosts.stop_hosts(state_dir)


@pytest.fixture(scope='module')
def conns(lab, events):
    opened = [libvirt.open(h.uri) for h in lab]
    callbacks = []
    for index, conn in enumerate(opened):
        def on_event(_conn, dom, event, detail, _opaque, index=index):
            events.append((index, dom.name(), event, detail))
        callbacks.append(conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, on_event, None))
    yield opened
    for conn, callback in zip(opened, callbacks):
        try:
            conn.domainEventDeregisterAny(callback)
            conn.close()
        except libvirt.libvirtError:
            pass


@pytest.fixture(scope='module')
def busy(lab, conns, guest_image):
    """The booted guest dirtying memory, running on host 0 (``ensure()`` boots it again if a test moved it)."""
    def ensure():
        if running_on(conns[0], BUSY) and not defined_on(conns[1], BUSY):
            return conns[0].lookupByName(BUSY)
        domains.remove_domain(conns[1], BUSY)
        domains.remove_domain(conns[0], BUSY)
        dom, log = domains.start_kernel_guest(conns[0], lab[0], BUSY, guest_image)
        domains.wait_for_console(log)
        return dom
    yield ensure
    domains.remove_domain(conns[0], BUSY)
    domains.remove_domain(conns[1], BUSY)


def guest_runs(dom):
    """The guest's vCPUs make progress (its CPU time grows)."""
    before = dom.info()[4]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if dom.info()[4] > before:
            return True
    return False


def history(conn, name):
    out = run_module('migration_info', {'uris': [conn.getURI()], 'name': [name]})
    entries = [m for m in out['migrations'] if m['name'] == name]
    return entries[0] if entries else None


def assert_aborted_on_source(result, conns, name, timeout_word):
    assert result['_rc'] != 0 and result['phase'] == 'Failed' and result['reason'] == 'aborted', result
    assert timeout_word in result['msg'] and 'keeps running on the source' in result['msg'], result['msg']
    assert any(timeout_word + ' reached' in note for note in result['notes']), result['notes']
    assert 'Running' in result['phases'] and result['phases'][-1] == 'Failed'
    assert running_on(conns[0], name) and not defined_on(conns[1], name), 'the guest stays on the source, nothing is left on the target'
    assert conns[0].lookupByName(name).jobStats().get('type', 0) == 0, 'no migration job left on the source'
    rec = record(conns[0], name)
    assert rec.get('task_state') is None and rec['vm_state'] == 'ACTIVE', rec
    assert result['vm']['host'] == conns[0].getHostname() and result['vm']['vm_state'] == 'ACTIVE' and not result['on_target']
    assert guest_runs(conns[0].lookupByName(name))
    last = history(conns[0], name)['last']
    assert last['phase'] == 'Failed' and last['reason'] == 'aborted' and last['target'] == result['target_uri'], last


def test_completion_timeout_abort(lab, conns, busy):
    busy()
    result = run_module('migration', mig(lab[0], lab[1], BUSY, bandwidth=SLOW, completion_timeout=2, completion_action='abort'))
    assert_aborted_on_source(result, conns, BUSY, 'completion_timeout')


def test_wait_timeout_aborts_and_fails(lab, conns, busy):
    busy()
    result = run_module('migration', mig(lab[0], lab[1], BUSY, bandwidth=SLOW, wait_timeout=3))
    assert_aborted_on_source(result, conns, BUSY, 'wait_timeout')


def test_post_copy_after_completion_timeout(lab, conns, busy, events):
    busy()
    run_module('vm', {'uri': lab[0].uri, 'name': BUSY, 'state': 'running'})
    del events[:]
    result = run_module('migration', mig(lab[0], lab[1], BUSY, bandwidth=SLOW, post_copy=True, completion_timeout=2,
                                         completion_action='postcopy'))
    assert result['_rc'] == 0 and result['changed'] and result['phase'] == 'Succeeded' and result['on_target'], result
    assert result['phases'] == ['Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Succeeded']
    assert 'completion_timeout reached: switched to post-copy' in result['notes'], result['notes']
    assert result['progress'].get('data_processed', 0) > 0 and result['progress'].get('data_total', 0) > 0, result['progress']
    # libvirt's own word that the migration went post-copy: the source paused for post-copy, the target resumed in post-copy
    deadline = time.monotonic() + 60  # a guard: the events are libvirt's, delivered by this process's event loop thread
    wanted = {(0, BUSY, libvirt.VIR_DOMAIN_EVENT_SUSPENDED, libvirt.VIR_DOMAIN_EVENT_SUSPENDED_POSTCOPY),
              (1, BUSY, libvirt.VIR_DOMAIN_EVENT_RESUMED, libvirt.VIR_DOMAIN_EVENT_RESUMED_POSTCOPY)}
    while not wanted <= set(events) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert wanted <= set(events), events
    assert (1, BUSY, libvirt.VIR_DOMAIN_EVENT_RESUMED, libvirt.VIR_DOMAIN_EVENT_RESUMED_POSTCOPY_FAILED) not in events
    assert running_on(conns[1], BUSY) and not defined_on(conns[0], BUSY)
    assert guest_runs(conns[1].lookupByName(BUSY))
    rec = record(conns[1], BUSY)
    assert rec['vm_state'] == 'ACTIVE' and rec.get('task_state') is None, rec
    assert result['vm']['vm_state'] == 'ACTIVE' and result['vm']['host'] == conns[1].getHostname()
    assert history(conns[1], BUSY)['last']['phase'] == 'Succeeded'


def test_killed_after_the_migration_finished(lab, conns, busy):
    """The run is frozen mid-transfer, the migration then completes (the source daemon drives it), the run is killed."""
    if not running_on(conns[1], BUSY):   # run alone: put the guest on host 1 first
        busy()
        moved = run_module('migration', mig(lab[0], lab[1], BUSY, bandwidth=100000))
        assert moved['_rc'] == 0 and running_on(conns[1], BUSY), moved
    cmd = [os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', 'converge.virt.migration',
           '-a', json.dumps(mig(lab[1], lab[0], BUSY, bandwidth=SLOW))]
    proc = subprocess.Popen(cmd, env=ansible_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_job(conns[1], BUSY)
        frozen = set()
        while True:
            tree = set(process_tree(proc.pid)) - frozen
            if not tree:
                break
            for pid in tree:
                os.kill(pid, signal.SIGSTOP)
            frozen |= tree
        task_id = record(conns[1], BUSY)['task_id']
        conns[1].lookupByName(BUSY).migrateSetMaxSpeed(100000, 0)   # lets it converge while the run is frozen
        deadline = time.monotonic() + 120
        while not (running_on(conns[0], BUSY) and not defined_on(conns[1], BUSY)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running_on(conns[0], BUSY) and not defined_on(conns[1], BUSY), 'the migration should finish without the frozen run'
    finally:
        killed = kill_tree(proc)
    assert len(killed) >= 2, killed
    rec = record(conns[0], BUSY)
    assert rec['task_state'] == 'MIGRATING' and rec['task_id'] == task_id, 'the killed run never finished its record: %r' % rec
    dom_id = conns[0].lookupByName(BUSY).ID()

    checked = run_module('migration', mig(lab[1], lab[0], BUSY), check=True)
    assert checked['_rc'] == 0 and checked['changed'] and checked['on_target'], checked
    assert record(conns[0], BUSY)['task_state'] == 'MIGRATING', 'check mode writes nothing'

    rerun = run_module('migration', mig(lab[1], lab[0], BUSY))
    assert rerun['_rc'] == 0 and rerun['phase'] == 'Succeeded' and rerun['on_target'], rerun
    # the record was finished here (a write, reported as changed, as on KubeVirt); where the guest runs did not change
    assert rerun['changed'] and any('interrupted run' in note and task_id in note for note in rerun['notes']), rerun
    assert 'Running' not in rerun['phases'], 'no second migration'
    assert conns[0].lookupByName(BUSY).ID() == dom_id and not defined_on(conns[1], BUSY), 'no second migration'
    rec = record(conns[0], BUSY)
    assert rec.get('task_state') is None and rec['vm_state'] == 'ACTIVE', rec
    info = history(conns[0], BUSY)
    assert info['in_flight'] is None and info['last']['id'] == task_id and info['last']['phase'] == 'Succeeded', info
    assert [e['id'] for e in info['recent']].count(task_id) == 1

    again = run_module('migration', mig(lab[1], lab[0], BUSY))
    assert again['_rc'] == 0 and not again['changed'] and again['on_target'], again
    assert conns[0].lookupByName(BUSY).ID() == dom_id


# ------------------------------------------------------------------ copy_storage
def ensure_pool(conn):
    try:
        pool = conn.storagePoolLookupByName(POOL)
    except libvirt.libvirtError:
        root = ET.Element('pool', {'type': 'dir'})
        ET.SubElement(root, 'name').text = POOL
        ET.SubElement(ET.SubElement(root, 'target'), 'path').text = POOL_PATH
        pool = conn.storagePoolDefineXML(ET.tostring(root, encoding='unicode'), 0)
        pool.build(0)
    if not pool.isActive():
        pool.create(0)
    return pool


def pattern(size):
    """Deterministic bytes; the first sector stays zero (no boot signature, SeaBIOS leaves the disk alone)."""
    block = hashlib.sha256(b'converge-copy-storage').digest() * 128   # 4 KiB
    data = bytearray(block * (size // len(block)))
    data[:512] = bytes(512)
    return bytes(data)


def guest_with_disk_xml(name, path):
    domain = ET.fromstring(domains.diskless_domain_xml(name, virtlab_hosts.diskless_domain_type()))
    disk = ET.SubElement(domain.find('devices'), 'disk', {'type': 'file', 'device': 'disk'})
    ET.SubElement(disk, 'driver', {'name': 'qemu', 'type': 'raw'})
    ET.SubElement(disk, 'source', {'file': path})
    ET.SubElement(disk, 'target', {'dev': 'vda', 'bus': 'virtio'})
    return ET.tostring(domain, encoding='unicode')


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def test_copy_storage_moves_a_local_disk(lab, conns):
    name = 'opt-disk'
    vol_name = name + '.raw'
    path = POOL_PATH + '/' + vol_name
    for conn in conns:
        domains.remove_domain(conn, name)
        pool = ensure_pool(conn)
        try:
            pool.storageVolLookupByName(vol_name).delete(0)
        except libvirt.libvirtError:
            pass
    data = pattern(16 << 20)
    vol = ET.Element('volume')
    ET.SubElement(vol, 'name').text = vol_name
    ET.SubElement(vol, 'capacity', {'unit': 'bytes'}).text = str(len(data))
    ET.SubElement(ET.SubElement(vol, 'target'), 'format', {'type': 'raw'})
    conns[0].storagePoolLookupByName(POOL).createXML(ET.tostring(vol, encoding='unicode'), 0)
    src_file, dst_file = lab[0].real_path(path), lab[1].real_path(path)
    assert src_file != dst_file, 'the pool must not be shared between the hosts'
    with open(src_file, 'r+b') as handle:
        handle.write(data)
    want = hashlib.sha256(data).hexdigest()
    conns[0].defineXML(guest_with_disk_xml(name, path)).create()
    assert not os.path.exists(dst_file)

    shared = run_module('migration', mig(lab[0], lab[1], name))
    assert shared['_rc'] != 0 and shared['phase'] == 'Failed', 'without copy_storage libvirt refuses a non-shared disk: %r' % shared
    assert running_on(conns[0], name) and not defined_on(conns[1], name)
    assert record(conns[0], name).get('task_state') is None

    result = run_module('migration', mig(lab[0], lab[1], name, copy_storage=True))
    assert result['_rc'] == 0 and result['changed'] and result['phase'] == 'Succeeded' and result['on_target'], result
    assert running_on(conns[1], name) and not defined_on(conns[0], name)
    assert guest_runs(conns[1].lookupByName(name))
    assert os.path.getsize(dst_file) == len(data)
    assert sha256_file(dst_file) == want, 'the disk data must arrive identical on the target'
    assert result['progress'].get('disk_total', 0) >= len(data) or result['progress'].get('data_total', 0) >= len(data), result['progress']
    rec = record(conns[1], name)
    assert rec['vm_state'] == 'ACTIVE' and rec.get('task_state') is None
    domains.remove_domain(conns[1], name)
    for conn in conns:
        try:
            conn.storagePoolLookupByName(POOL).storageVolLookupByName(vol_name).delete(0)
        except libvirt.libvirtError:
            pass
