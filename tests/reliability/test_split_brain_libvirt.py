"""No second copy of a VM that migrated away: departure records (libvirt).

A host knows only its own domains. Once a VM migrated to another host, a ``vm``
task that declares it on its old host used to define and start a new copy there
(a split brain on shared disks), with no error. This happens after a plain
successful migration when a playbook "create on A, migrate A->B" is re-run, and
after a migration whose ansible run was SIGKILLed: peer-to-peer migrations are
driven by the source libvirtd, so libvirt finishes moving the guest without the
client.

The migration module now records a departure on the source host
(``_libvirt/departures.py``); the vm module refuses to declare the VM present
there (naming the target and the task), ``if_moved: skip`` leaves it alone,
``state: absent`` forgets the departure, and a migration back removes it.

Each test fails without the departure records: the vm task would report
``changed`` with a create and start, and two guests of one name would run.

A copy left on the source (a migration that keeps, or could not yet remove, the source definition):

``tests/reliability/test_split_brain_libvirt.py`` covers a VM that is gone from its old host. Here the old host still
holds a definition of the guest that now runs on the target, the state a killed migration leaves before libvirt
undefines the source and the one ``undefine_source: false`` leaves for good:

* a migration with ``undefine_source: false`` SIGKILLed (its whole ansible process tree) while the guest moves, at a
  point where the domain is defined on both hosts; then ``vm: state: running`` on the SOURCE must refuse (the message
  names the unfinished migration and the target) and leave the source copy shut off, or - when libvirt cancelled the
  move with the run - the guest still runs on the source only; never two running guests;
* after a finished ``undefine_source: false`` migration the source copy is shut off: ``running`` and ``paused`` there
  are refused; when that copy was started paused behind the collection's back (as an operator's ``virsh start
  --paused`` would), ``running`` must not resume it while the guest runs on the target.

The guests are diskless: both private hosts run on one machine, where libvirt refuses to live-migrate a file disk
that is not on a shared filesystem (the test would need VIR_MIGRATE_UNSAFE, which the module never sets). The check
under test is per VM name, not per disk, so a diskless guest stands for one on shared disks.
"""

import time

import libvirt
import pytest

from tests.integration.ansible_run import run_module
from tests.reliability import reliability_lab as rl
from tools.virtlab import hosts as virtlab_hosts

RUNNING = libvirt.VIR_DOMAIN_RUNNING
PAUSED = libvirt.VIR_DOMAIN_PAUSED
SHUTOFF = libvirt.VIR_DOMAIN_SHUTOFF


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    started = rl.start_lab(str(tmp_path_factory.mktemp('sblab')), virtlab_layout(3))
    try:
        yield started
    finally:
        rl.stop_lab(started)


def vm_args(host, name, **extra):
    args = {'uri': host.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(), 'state': 'running'}
    args.update(extra)
    return args


def active_on(lab, name):
    """Indexes of the lab hosts where a guest ``name`` exists (running or paused: a qemu process holds it)."""
    return [index for index, conn in enumerate(lab.conns) if rl.state_of(conn, name) in (RUNNING, PAUSED, libvirt.VIR_DOMAIN_BLOCKED)]


def running_on(lab, name):
    """Indexes of the lab hosts where a domain ``name`` is running."""
    return [index for index, conn in enumerate(lab.conns) if rl.state_of(conn, name) == RUNNING]


def source_busy(lab, name):
    try:
        return rl.job_active(lab.conns[0].lookupByName(name))
    except libvirt.libvirtError:
        return False


def kill_when_on_target(lab, path, log_path, name):
    """Run the migration playbook ``path`` and SIGKILL its process tree once ``name`` is defined on the target (the move
    is under way or done); then wait until the source's job (if any) has ended."""
    with open(log_path, 'w', encoding='utf-8') as log:
        proc = rl.start_playbook(path, output=log)
        deadline = time.monotonic() + 120
        try:
            while rl.state_of(lab.conns[1], name) is None and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            assert proc.poll() is None, 'the migration ended before the kill point'
            on_both = rl.state_of(lab.conns[0], name) is not None
        finally:
            rl.kill_tree(proc)
    deadline = time.monotonic() + 60
    while source_busy(lab, name) and time.monotonic() < deadline:
        time.sleep(0.1)
    return on_both


def remove_everywhere(lab, name):
    for conn in lab.conns:
        try:
            dom = conn.lookupByName(name)
        except libvirt.libvirtError:
            continue
        if dom.isActive():
            dom.destroy()
        dom.undefine()
    for host in lab.hosts:
        run_module('vm', vm_args(host, name, state='absent'))  # forgets a departure record


def test_playbook_create_then_migrate_reruns_without_a_second_copy(lab, tmp_path):
    """'vm running on A; migrate A->B' run twice: the second run used to create a new guest on A."""
    h0, h1 = lab.hosts
    name = 'sb-plain'
    tasks = [
        {'name': 'create', 'converge.virt.vm': vm_args(h0, name, if_moved='skip')},
        {'name': 'move', 'converge.virt.migration': {'uri': h0.uri, 'target_uri': h1.uri, 'name': name}},
    ]
    path = rl.write_playbook(str(tmp_path / 'plain.yml'), tasks)
    try:
        rc, data = rl.run_playbook(path)
        assert rc == 0 and not rl.failures(data), rl.failures(data)
        assert rl.changed_tasks(data) == ['create', 'move']
        assert running_on(lab, name) == [1]
        rc, data = rl.run_playbook(path)
        assert rc == 0 and not rl.failures(data), rl.failures(data)
        assert rl.changed_tasks(data) == [], 'the re-run changed %s' % rl.changed_tasks(data)
        results = dict(rl.task_results(data))
        assert results['create']['moved_to'] == h1.uri, results['create']
        assert results['create']['departure']['phase'] == 'left' and results['create']['vm']['exists'] is False
        assert running_on(lab, name) == [1], 'a second copy runs'
        # vm_info on A says where the VM went; on B (where it runs) nothing of the kind
        info_a = run_module('vm_info', {'uri': h0.uri, 'name': [name]})['vms']
        assert [(v['exists'], v.get('moved_to'), v.get('departure', {}).get('phase')) for v in info_a] == [(False, h1.uri, 'left')], info_a
        info_b = run_module('vm_info', {'uri': h1.uri, 'name': [name]})['vms']
        assert info_b[0]['exists'] and 'moved_to' not in info_b[0], info_b

        # without skip: refused, naming the target and the state; nothing defined on A
        refused = run_module('vm', vm_args(h0, name))
        assert refused['_rc'] != 0 and refused.get('failed'), refused
        assert 'left this host' in refused['msg'] and 'migrated to' in refused['msg'] and refused['moved_to'], refused['msg']
        assert rl.state_of(lab.conns[0], name) is None and running_on(lab, name) == [1]
        # check mode is refused the same way
        checked = run_module('vm', vm_args(h0, name), check=True)
        assert checked.get('failed') and 'left this host' in checked['msg']

        # a migration back removes the departure on A and records one on B
        back = run_module('migration', {'uri': h1.uri, 'target_uri': h0.uri, 'name': name})
        assert back['_rc'] == 0 and back['changed'], back
        assert running_on(lab, name) == [0]
        again = run_module('vm', vm_args(h0, name))
        assert again['_rc'] == 0 and not again['changed'], again
        on_b = run_module('vm', vm_args(h1, name))
        assert on_b.get('failed') and 'left this host' in on_b['msg'], on_b
        assert running_on(lab, name) == [0]

        # state: absent on B forgets the departure there (the VM on A is untouched); then B may have a VM of that name
        forgot = run_module('vm', vm_args(h1, name, state='absent'))
        assert forgot['_rc'] == 0 and forgot['changed'] and forgot['departure_forgotten']['phase'] == 'left', forgot
        assert running_on(lab, name) == [0]
        assert run_module('vm', vm_args(h1, name, state='absent'))['changed'] is False
    finally:
        remove_everywhere(lab, name)


def test_killed_migration_then_vm_on_source_refuses_and_the_rerun_finishes(lab, tmp_path):
    """SIGKILL of the migration's run while the guest moves: libvirt (peer to peer) finishes the move without it.

    Before departure records, ``vm: running`` on the source then defined and started a second guest.
    """
    h0, h1 = lab.hosts
    name = 'sb-killed'
    made = run_module('vm', vm_args(h0, name))
    assert made['_rc'] == 0, made
    path = rl.write_playbook(str(tmp_path / 'move.yml'), [
        {'name': 'move', 'converge.virt.migration': {'uri': h0.uri, 'target_uri': h1.uri, 'name': name, 'bandwidth': 4}}])
    try:
        kill_when_on_target(lab, path, str(tmp_path / 'move.log'), name)
        where = running_on(lab, name)
        assert len(where) == 1, 'after the kill the guest runs on %s' % where
        if where == [0]:
            # libvirt cancelled the move with the run (never seen with peer_to_peer): the guest stayed, so the source's
            # vm task recovers the task and runs it here, and nothing runs on the target
            stayed = run_module('vm', vm_args(h0, name))
            assert stayed['_rc'] == 0 and not stayed.get('failed') and running_on(lab, name) == [0], stayed
            return
        source = run_module('vm', vm_args(h0, name))
        assert source.get('failed') and 'left this host' in source['msg'], source
        assert 'did not finish' in source['msg'] and source['departure']['phase'] == 'leaving', source['msg']
        assert running_on(lab, name) == [1], 'a second copy runs: %s' % running_on(lab, name)

        # the re-run of the migration finds the guest on the target and finishes the departure
        rc, data = rl.run_playbook(path)
        assert rc == 0 and not rl.failures(data), rl.failures(data)
        assert rl.changed_tasks(data) == ['move']
        refused = run_module('vm', vm_args(h0, name))
        assert refused.get('failed') and refused['departure']['phase'] == 'left', refused
        rc, data = rl.run_playbook(path)
        assert rc == 0 and rl.changed_tasks(data) == []
        assert running_on(lab, name) == [1]
    finally:
        remove_everywhere(lab, name)


def test_killed_migration_keeping_the_source_never_runs_two_guests(lab, tmp_path):
    h0, h1 = lab.hosts
    name = 'sbk-killed'
    made = run_module('vm', vm_args(h0, name))
    assert made['_rc'] == 0, made
    path = rl.write_playbook(str(tmp_path / 'move.yml'), [
        {'name': 'move', 'converge.virt.migration': {'uri': h0.uri, 'target_uri': h1.uri, 'name': name, 'bandwidth': 4,
                                                     'undefine_source': False}}])
    try:
        assert kill_when_on_target(lab, path, str(tmp_path / 'move.log'), name), 'the kill point: defined on both hosts'
        where = active_on(lab, name)
        assert len(where) == 1, 'after the kill a guest is active on hosts %s' % where
        source = run_module('vm', vm_args(h0, name))
        if where == [0]:
            # libvirt cancelled the move with the run: the source's guest is the only one and declaring it is fine
            assert source['_rc'] == 0, source
        else:
            assert rl.state_of(lab.conns[0], name) == SHUTOFF, 'the source keeps its definition (undefine_source: false)'
            assert source.get('failed') and 'left this host' in source['msg'], source
            assert h1.uri in source['msg'] or source['departure']['target'] in source['msg'], source['msg']
            assert source['departure']['phase'] in ('leaving', 'left'), source['departure']
            assert rl.state_of(lab.conns[0], name) == SHUTOFF, 'the refused task changed the source copy'
        assert active_on(lab, name) == where, 'a second guest: active on %s' % active_on(lab, name)
        # the re-run of the migration settles it: the guest runs on the target (or moves now), the source refuses after
        rc, data = rl.run_playbook(path)
        assert rc == 0 and not rl.failures(data), rl.failures(data)
        assert active_on(lab, name) == [1]
        again = run_module('vm', vm_args(h0, name))
        assert again.get('failed') and again['departure']['phase'] == 'left', again
        assert active_on(lab, name) == [1]
    finally:
        remove_everywhere(lab, name)


def test_target_running_and_the_source_copy_shut_off_or_paused(lab):
    h0, h1 = lab.hosts
    name = 'sbk-kept'
    made = run_module('vm', vm_args(h0, name))
    assert made['_rc'] == 0, made
    try:
        moved = run_module('migration', {'uri': h0.uri, 'target_uri': h1.uri, 'name': name, 'undefine_source': False})
        assert moved['_rc'] == 0 and moved['changed'], moved
        assert rl.state_of(lab.conns[0], name) == SHUTOFF and running_on(lab, name) == [1]
        # shut off on the source: neither running nor paused may start it there
        for state in ('running', 'paused'):
            refused = run_module('vm', vm_args(h0, name, state=state))
            assert refused.get('failed') and 'left this host' in refused['msg'] and 'migrated to' in refused['msg'], (state, refused)
            assert rl.state_of(lab.conns[0], name) == SHUTOFF and running_on(lab, name) == [1], state
        # if_moved: skip leaves the copy alone and says where the VM went
        skipped = run_module('vm', vm_args(h0, name, if_moved='skip'))
        assert skipped['_rc'] == 0 and not skipped['changed'] and skipped['moved_to'], skipped
        assert rl.state_of(lab.conns[0], name) == SHUTOFF
        # vm_info lists the leftover copy with where the guest went (listing every VM of the host, not by name)
        copy = [v for v in run_module('vm_info', {'uri': h0.uri})['vms'] if v['name'] == name]
        assert [(v['exists'], v['state'], v.get('moved_to')) for v in copy] == [(True, 'shutoff', h1.uri)], copy

        # the leftover started paused behind the collection's back: running must not resume a second guest
        lab.conns[0].lookupByName(name).createWithFlags(libvirt.VIR_DOMAIN_START_PAUSED)
        assert rl.state_of(lab.conns[0], name) == PAUSED
        resumed = run_module('vm', vm_args(h0, name))
        assert running_on(lab, name) == [1], 'the source copy was resumed while the guest runs on the target: %s' % resumed
        assert resumed.get('failed') and 'left this host' in resumed['msg'], resumed
        assert rl.state_of(lab.conns[0], name) == PAUSED
    finally:
        remove_everywhere(lab, name)
