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
"""

import time

import libvirt
import pytest

from tests.integration.ansible_run import run_module
from tests.reliability import reliability_lab as rl
from tools.virtlab import hosts as virtlab_hosts

RUNNING = libvirt.VIR_DOMAIN_RUNNING


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


def running_on(lab, name):
    """Indexes of the lab hosts where a domain ``name`` is running."""
    return [index for index, conn in enumerate(lab.conns) if rl.state_of(conn, name) == RUNNING]


def source_busy(lab, name):
    try:
        return rl.job_active(lab.conns[0].lookupByName(name))
    except libvirt.libvirtError:
        return False


def remove_everywhere(lab, name):
    for conn in lab.conns:
        try:
            dom = conn.lookupByName(name)
        except libvirt.libvirtError:
            continue
        if dom.isActive():
            dom.destroy()
        dom.undefine()


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
        for index in (0, 1):
            run_module('vm', vm_args(lab.hosts[index], name, state='absent'))


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
        with open(str(tmp_path / 'move.log'), 'w', encoding='utf-8') as log:
            proc = rl.start_playbook(path, output=log)
            deadline = time.monotonic() + 120
            try:
                # the guest is defined on the target: the move is under way (or done)
                while rl.state_of(lab.conns[1], name) is None and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.005)
                assert proc.poll() is None, 'the migration ended before the kill point'
            finally:
                rl.kill_tree(proc)
        deadline = time.monotonic() + 60
        while source_busy(lab, name) and time.monotonic() < deadline:
            time.sleep(0.1)
        where = running_on(lab, name)
        assert len(where) == 1, 'after the kill the guest runs on %s' % where
        if where == [0]:
            pytest.skip('libvirt cancelled the move with the run (the guest stayed on the source): the departure was cleared '
                        'by the re-run, nothing to refuse')  # never seen with peer_to_peer; kept honest
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
        for index in (0, 1):
            run_module('vm', vm_args(lab.hosts[index], name, state='absent'))
