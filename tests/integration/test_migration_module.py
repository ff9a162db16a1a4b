"""converge.virt.migration and migration_info on three private libvirt hosts, through the ansible CLI.

Covers: success with the phases list and progress, the record (task_state
MIGRATING during the move, vm_state unchanged after, the finished record on the
destination), already-on-target idempotence, check mode, refusals (STOPPED for
live naming the state, bad options naming the field, a draining target),
offline migration of a stopped VM, cancel from a second process while
``started``, an interrupted run picked up by the next one, placement over
candidate targets, migration_info's history, and the destination daemon killed
mid-way (the guest survives on the source).
"""

import os
import signal
import subprocess
import time

import libvirt
import pytest

from tests.integration.ansible_run import ansible_env, BIN, run_module, start_module, finish
from tests.reliability.reliability_lab import kill_tree
from tools.virtlab import domains, hosts as virtlab_hosts

NS = 'https://converge.virt/xmlns/vm/1'
SLOW = 1  # MiB/s: keeps a booted guest's migration running for a while


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    state_dir = str(tmp_path_factory.mktemp('miglab'))
    started = virtlab_hosts.start_hosts(3, state_dir, **virtlab_layout(1))
    try:
        yield started
    finally:
        virtlab_hosts.stop_hosts(state_dir)


@pytest.fixture(scope='module')
def conns(lab):
    opened = [libvirt.open(h.uri) for h in lab]
    yield opened
    for conn in opened:
        try:
            conn.close()
        except libvirt.libvirtError:
            pass


def running_on(conn, name):
    try:
        return conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    except libvirt.libvirtError:
        return False


def defined_on(conn, name):
    try:
        conn.lookupByName(name)
        return True
    except libvirt.libvirtError:
        return False


def record(conn, name):
    dom = conn.lookupByName(name)
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG if dom.isPersistent() else libvirt.VIR_DOMAIN_AFFECT_LIVE
    try:
        text = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, flags)
    except libvirt.libvirtError:
        return {}
    import xml.etree.ElementTree as ET  # pylint: disable=import-outside-toplevel
    return dict((child.tag.split('}')[-1], child.text) for child in ET.fromstring(text))


def diskless(conn, name, memory_mib=64):
    domains.remove_domain(conn, name)
    return domains.start_diskless_guest(conn, name, memory_mib=memory_mib)


def booted(conn, host, name, guest_image):
    domains.remove_domain(conn, name)
    dom, log = domains.start_kernel_guest(conn, host, name, guest_image)
    domains.wait_for_console(log)
    return dom


def mig(src, dst, name, **extra):
    args = {'uri': src.uri, 'name': name}
    if dst is not None:
        args['target_uri'] = dst.uri
    args.update(extra)
    return args


def wait_job(conn, name, timeout=60):
    dom = conn.lookupByName(name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dom.jobStats().get('type', 0) in (1, 2) and dom.jobStats().get('data_processed', 0) > 0:
            return
        time.sleep(0.1)
    raise AssertionError('no migration job on %s' % name)


def test_live_migration_succeeds_with_phases_progress_and_record(lab, conns):
    name = 'mig-ok'
    diskless(conns[0], name)
    run_module('vm', {'uri': lab[0].uri, 'name': name, 'state': 'running'})  # the collection records vm_state ACTIVE
    checked = run_module('migration', mig(lab[0], lab[1], name), check=True)
    assert checked['changed'] and checked['phases'][-1] == 'Succeeded'
    assert running_on(conns[0], name) and not defined_on(conns[1], name), 'check mode must not migrate'

    result = run_module('migration', mig(lab[0], lab[1], name, max_downtime=500, auto_converge=True))
    assert result['_rc'] == 0, result
    assert result['changed'] and result['phase'] == 'Succeeded' and result['on_target']
    assert result['phases'] == ['Pending', 'Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running', 'Succeeded']
    assert result['progress'].get('data_processed', 0) > 0 and 'data_total' in result['progress']
    assert running_on(conns[1], name) and not defined_on(conns[0], name), 'the source definition is undefined by default'
    rec = record(conns[1], name)
    assert rec['vm_state'] == 'ACTIVE' and rec.get('task_state') is None
    assert result['vm']['vm_state'] == 'ACTIVE' and result['vm']['task_state'] is None
    # the host's name, as vm_info reports it (was the literal 'target')
    listed = run_module('vm_info', {'uri': lab[1].uri})
    assert result['vm']['host'] == lab[1].name == [vm['host'] for vm in listed['vms'] if vm['name'] == name][0]

    again = run_module('migration', mig(lab[0], lab[1], name))
    assert again['_rc'] == 0 and not again['changed'] and again['on_target'], again
    assert again['vm']['host'] == lab[1].name, again

    info = run_module('migration_info', {'uris': [lab[0].uri, lab[1].uri], 'name': [name]})
    entries = [m for m in info['migrations'] if m['name'] == name]
    assert len(entries) == 1 and entries[0]['last']['phase'] == 'Succeeded' and entries[0]['in_flight'] is None
    assert entries[0]['last']['phases'][-1] == 'Succeeded'

    back = run_module('migration', mig(lab[1], lab[0], name, undefine_source=False, peer_to_peer=False, bandwidth=1000))
    assert back['_rc'] == 0 and back['changed'] and running_on(conns[0], name), back
    left = record(conns[1], name)
    assert conns[1].lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_SHUTOFF
    assert left.get('task_state') is None and left['vm_state'] == 'STOPPED', 'the source leftover must not claim MIGRATING'
    info = run_module('migration_info', {'uris': [lab[0].uri], 'name': [name]})
    assert [e['phase'] for e in info['migrations'][0]['recent']] == ['Succeeded', 'Succeeded']
    domains.remove_domain(conns[1], name)
    domains.remove_domain(conns[0], name)


def test_refusals_name_the_state_or_field(lab, conns):
    name = 'mig-stopped'
    domains.remove_domain(conns[0], name)
    conns[0].defineXML(domains.diskless_domain_xml(name, virtlab_hosts.diskless_domain_type()))
    refused = run_module('migration', mig(lab[0], lab[1], name))
    assert refused['_rc'] != 0 and 'STOPPED' in refused['msg'] and 'live_migrate' in refused['msg']
    assert not defined_on(conns[1], name)
    bad = run_module('migration', mig(lab[0], lab[1], name, bandwidth=-5))
    assert bad['_rc'] != 0 and bad['msg'].startswith('bandwidth')
    bad = run_module('migration', mig(lab[0], lab[1], name, mode='offline', post_copy=True))
    assert bad['_rc'] != 0 and bad['msg'].startswith('post_copy')
    missing = run_module('migration', {'uri': lab[0].uri, 'name': name})
    assert missing['_rc'] != 0 and missing['msg'].startswith('target_uri')

    moved = run_module('migration', mig(lab[0], lab[1], name, mode='offline'))
    assert moved['_rc'] == 0 and moved['changed'] and moved['phase'] == 'Succeeded', moved
    assert defined_on(conns[1], name) and not defined_on(conns[0], name)
    assert record(conns[1], name)['vm_state'] == 'STOPPED' and record(conns[1], name).get('task_state') is None
    again = run_module('migration', mig(lab[0], lab[1], name, mode='offline'))
    assert again['_rc'] == 0 and not again['changed']
    domains.remove_domain(conns[1], name)


def test_target_naming_the_source_host_is_refused(lab, conns):
    name = 'mig-same-host'
    diskless(conns[0], name)
    # the same daemon reached another way (loopback TCP instead of the unix socket)
    same = run_module('migration', {'uri': lab[0].uri, 'name': name, 'target_uri': lab[0].tcp_uri})
    assert same['_rc'] != 0 and same['msg'].startswith('target_uri') and 'same host' in same['msg'], same
    assert lab[0].host_uuid in same['msg']
    assert running_on(conns[0], name) and record(conns[0], name).get('task_state') is None
    domains.remove_domain(conns[0], name)


def test_draining_target_is_refused(lab, conns):
    name = 'mig-drain'
    diskless(conns[0], name)
    marked = run_module('host', {'uri': lab[2].uri, 'state': 'drained', 'reason': 'maintenance'})
    assert marked['_rc'] == 0 and marked['changed'] and marked['host']['draining']
    try:
        refused = run_module('migration', mig(lab[0], lab[2], name))
        assert refused['_rc'] != 0 and refused['reason'] == 'the target host is being drained', refused
        assert refused['phases'][-1] == 'Failed' and 'Running' not in refused['phases']
        assert refused['changed'] is False, 'a refused target changes nothing'
        assert running_on(conns[0], name) and not defined_on(conns[2], name)
        assert record(conns[0], name).get('task_state') is None
    finally:
        run_module('host', {'uri': lab[2].uri, 'state': 'active'})
    ok = run_module('migration', mig(lab[0], lab[2], name))
    assert ok['_rc'] == 0 and ok['changed'], ok
    domains.remove_domain(conns[2], name)


def test_unreachable_target_changes_nothing_and_is_listed(lab, conns):
    name = 'mig-unreachable'
    diskless(conns[0], name)
    run_module('vm', {'uri': lab[0].uri, 'name': name, 'state': 'running'})
    nowhere = 'qemu+tcp://%s:1/system' % lab[1].address    # a lab host's address, a port where nothing listens
    result = run_module('migration', mig(lab[0], None, name, target_uri=nowhere))
    assert result['_rc'] != 0 and result['changed'] is False, result
    assert result['phase'] == 'Failed' and result['reason'] == 'the target could not be reached', result
    assert 'died or vanished' not in str(result), result
    assert running_on(conns[0], name)
    assert record(conns[0], name).get('task_state') is None, 'no task was taken'
    info = run_module('migration_info', {'uris': [lab[0].uri], 'name': [name]})
    entries = [m for m in info['migrations'] if m['name'] == name]
    assert len(entries) == 1 and entries[0]['in_flight'] is None, info
    last = entries[0]['last']
    assert last['phase'] == 'Failed' and last['reason'] == 'the target could not be reached' and last['target'] == nowhere, last
    assert last.get('error'), last
    domains.remove_domain(conns[0], name)


def test_cancel_from_a_second_process_while_started(lab, conns, guest_image):
    name = 'mig-cancel'
    booted(conns[0], lab[0], name, guest_image)
    started = run_module('migration', mig(lab[0], lab[1], name, state='started', bandwidth=SLOW))
    assert started['_rc'] == 0 and started['changed'] and started['phase'] == 'Running', started
    assert record(conns[0], name)['task_state'] == 'MIGRATING'
    info = run_module('migration_info', {'uris': [lab[0].uri], 'name': [name]})
    flight = info['migrations'][0]['in_flight']
    assert flight['phase'] == 'Running' and 'data_total' in flight['progress'] and 'memory_dirty_rate' in flight['progress']

    cancelled = run_module('migration', {'uri': lab[0].uri, 'name': name, 'state': 'cancelled'})
    assert cancelled['_rc'] == 0 and cancelled['changed'] and cancelled['reason'] == 'aborted', cancelled
    assert running_on(conns[0], name) and not running_on(conns[1], name)
    rec = record(conns[0], name)
    assert rec.get('task_state') is None and rec['vm_state'] == 'ACTIVE'
    # the detached run records the outcome
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = run_module('migration_info', {'uris': [lab[0].uri], 'name': [name]})
        last = info['migrations'][0]['last']
        if last and last.get('phase') == 'Failed':
            break
        time.sleep(0.5)
    assert last['phase'] == 'Failed' and last['reason'] == 'aborted', last
    nothing = run_module('migration', {'uri': lab[0].uri, 'name': name, 'state': 'cancelled'})
    assert nothing['_rc'] == 0 and not nothing['changed']
    domains.remove_domain(conns[0], name)
    domains.remove_domain(conns[1], name)


def orphaned_migration(lab, conns, name, guest_image):
    """A booted guest whose slow migration runs on while the ansible run that started it is killed (whole tree)."""
    booted(conns[0], lab[0], name, guest_image)
    cmd = [os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-i', 'localhost,', '-m', 'converge.virt.migration',
           '-a', __import__('json').dumps(mig(lab[0], lab[1], name, bandwidth=SLOW))]
    proc = subprocess.Popen(cmd, env=ansible_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_job(conns[0], name)
    assert record(conns[0], name)['task_state'] == 'MIGRATING'
    # the whole tree, module included (ansible's workers call setsid(), so killpg would miss the module)
    killed = kill_tree(proc)
    assert len(killed) >= 2, killed


def test_interrupted_run_is_picked_up(lab, conns, guest_image):
    name = 'mig-interrupted'
    orphaned_migration(lab, conns, name, guest_image)
    resumed = run_module('migration', mig(lab[0], lab[1], name, bandwidth=1000))
    assert resumed['_rc'] == 0 and resumed['changed'] and resumed['phase'] == 'Succeeded', resumed
    assert any('attached' in note or 'interrupted' in note for note in resumed['notes'])
    assert running_on(conns[1], name)
    rec = record(conns[1], name)
    assert rec.get('task_state') is None and rec['vm_state'] == 'ACTIVE'
    domains.remove_domain(conns[1], name)


def test_vm_leaving_the_source_while_a_rerun_reads_it(lab, conns, guest_image, monkeypatch):
    """The clean-clone CI run of 770dda5: a run killed mid-migration (peer-to-peer: the source daemon carries on),
    the re-run looks the VM up on the source, then the migration finishes and the source domain is gone before
    the re-run reads it. The re-run must look again and finish the task on the target, not fail on 'Domain not found'."""
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as mb  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_observe, migration_options  # pylint: disable=import-outside-toplevel
    name = 'mig-left-while-read'
    orphaned_migration(lab, conns, name, guest_image)
    assert record(conns[0], name)['task_state'] == 'MIGRATING'
    real_view = mb.vm_view
    moved = []

    def view_after_the_move(dom):
        if not moved and dom.name() == name and migration_observe.host_uuid(dom.connect()) == migration_observe.host_uuid(conns[0]):
            # the orphaned migration speeds up and finishes right now, between the re-run's lookup and its read
            moved.append(True)
            conns[0].lookupByName(name).migrateSetMaxSpeed(1000, 0)
            deadline = time.monotonic() + 60
            while defined_on(conns[0], name) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not defined_on(conns[0], name) and running_on(conns[1], name)
        return real_view(dom)

    monkeypatch.setattr(mb, 'vm_view', view_after_the_move)
    result = mb.Migration((lab[0].uri, None, None), lab[1].uri, name, migration_options.MigrationOptions()).converge()
    assert moved, 'the re-run never read the VM on the source'
    assert not result['failed'] and result['on_target'] and result['changed'], result
    assert any('left the source' in note for note in result['notes']), result
    assert any('interrupted run on the target' in note for note in result['notes']), result
    rec = record(conns[1], name)
    assert rec.get('task_state') is None and rec['vm_state'] == 'ACTIVE', rec
    domains.remove_domain(conns[1], name)


def test_placement_over_candidates(lab, conns):
    names = ['mig-many-1', 'mig-many-2']
    for name in names:
        diskless(conns[0], name)
    result = run_module('migration', {'uri': lab[0].uri, 'names': names, 'target_uris': [lab[1].uri, lab[2].uri], 'parallel': 2})
    assert result['_rc'] == 0 and result['changed'], result
    assert sorted(r['name'] for r in result['results']) == names and all(r['phase'] == 'Succeeded' for r in result['results'])
    for name in names:
        assert running_on(conns[1], name) or running_on(conns[2], name)
        assert not defined_on(conns[0], name)
    again = run_module('migration', {'uri': lab[0].uri, 'names': names, 'target_uris': [lab[1].uri, lab[2].uri]})
    assert again['_rc'] == 0 and not again['changed'], again
    for name in names:
        domains.remove_domain(conns[1], name)
        domains.remove_domain(conns[2], name)


def test_list_form_applies_every_top_level_option_and_refuses_parallel_alone(lab, conns):
    names = ['mig-list-1', 'mig-list-2']
    for name in names:
        domains.remove_domain(conns[0], name)
        conns[0].defineXML(domains.diskless_domain_xml(name, virtlab_hosts.diskless_domain_type()))
    # parallel means nothing for one VM: refused naming it, not silently ignored
    alone = run_module('migration', mig(lab[0], lab[1], names[0], mode='offline', parallel=2))
    assert alone['_rc'] != 0 and alone['msg'].startswith('parallel') and not alone.get('changed'), alone
    assert defined_on(conns[0], names[0]) and not defined_on(conns[1], names[0])
    # the top-level mode applies to every VM of the list (a live migration of these stopped VMs would be refused)
    moved = run_module('migration', {'uri': lab[0].uri, 'names': names, 'target_uri': lab[1].uri, 'mode': 'offline', 'parallel': 2})
    assert moved['_rc'] == 0 and moved['changed'], moved
    assert all(r['phase'] == 'Succeeded' for r in moved['results']), moved
    for name in names:
        assert defined_on(conns[1], name) and not defined_on(conns[0], name) and not running_on(conns[1], name)
        assert record(conns[1], name)['vm_state'] == 'STOPPED'
        domains.remove_domain(conns[1], name)


def test_destination_daemon_killed_midway(lab, conns, guest_image):
    """Last: it kills host 2's libvirtd."""
    name = 'mig-dest-dies'
    booted(conns[0], lab[0], name, guest_image)
    proc = start_module('migration', mig(lab[0], lab[1], name, bandwidth=SLOW))
    wait_job(conns[0], name)
    os.kill(lab[1].pids['libvirtd'], signal.SIGKILL)
    result = finish(proc, timeout=300)
    assert result['_rc'] != 0 and result['phase'] == 'Failed' and result['reason'] == 'the target died or vanished', result
    assert running_on(conns[0], name), 'the guest must survive on the source'
    rec = record(conns[0], name)
    assert rec.get('task_state') is None and rec['vm_state'] == 'ACTIVE'
    assert result['vm']['host'] == lab[0].name and not result['on_target']
    domains.remove_domain(conns[0], name)
