"""Interruption of snapshot runs: the module SIGKILLed in the middle of a snapshot create, restore and delete, then re-run.

A running guest (SeaBIOS waiting forever, so nothing in it touches its disk) has a qcow2 data volume holding a
known pattern. Each round starts the converge.virt.snapshot module's process (the module as ansible runs it, with
its arguments file, without the ansible CLI's two seconds of start-up) and SIGKILLs it, frozen first, once the VM's
task for that step is recorded in libvirt (``IMAGE_SNAPSHOT``, ``RESTORING_SNAPSHOT``, ``DELETING_SNAPSHOT``): the
snapshot with memory, its revert or its deletion is under way in libvirtd, and the run that held the task is gone.
The next run of the module with the same arguments must converge: the task is cleared (its owner is dead), the
snapshot exists / the VM runs the snapshot's data / the snapshot is gone, and a second run reports no change (a
restore always reverts and reports a change). The volume's data, read as raw (qemu-img, shared read), must have the
checksum it should have after every round: nothing lost, and a deletion never changes it.
"""

# pylint: disable=redefined-outer-name

import hashlib
import json
import os
import socket
import subprocess
import sys
import time

import libvirt

from tests.integration.ansible_run import ROOT, ansible_env
from tests.integration.test_snapshot_module import define_vm, forge, make_disk, remove_vm, write
from tests.reliability import figures
from tests.reliability import reliability_lab as rl

VM = 'ri-snap'
TASK_OF = {'present': 'IMAGE_SNAPSHOT', 'restored': 'RESTORING_SNAPSHOT', 'absent': 'DELETING_SNAPSHOT'}


def data_sha(path, tmp_path):
    """sha256 of the volume's data as the guest sees it (a shared read: the guest keeps it open)."""
    out = str(tmp_path / ('data-%d.raw' % time.monotonic_ns()))
    subprocess.run(['qemu-img', 'convert', '-U', '-f', 'qcow2', '-O', 'raw', path, out], check=True)
    with open(out, 'rb') as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    os.unlink(out)
    return digest


def task_recorded(conn, journal, wanted):
    """True when the VM records the task ``wanted`` (or the run's audit journal says it began one)."""
    try:
        with open(journal, encoding='utf-8') as stream:
            if any(json.loads(line).get('vm') == VM and json.loads(line).get('event') == 'begin' for line in stream if line.strip()):
                return True
    except FileNotFoundError:
        pass
    try:
        return rl.record(conn.lookupByName(VM)).get('task_state') == wanted
    except libvirt.libvirtError:
        return False


def kill_when_task_recorded(conn, args, tmp_path, state, timeout=120):
    """Start the module's process, SIGKILL it as soon as the VM's task is recorded; return the task left behind."""
    base = str(tmp_path / ('killed-%s' % state))
    journal = base + '.journal'
    with open(base + '.args.json', 'w', encoding='utf-8') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    env = ansible_env({'PYTHONPATH': os.path.join(ROOT, 'build', 'collections'), 'CONVERGE_VIRT_AUDIT_JOURNAL': journal,
                       'TMPDIR': rl.private_tmpdir(base)})
    with open(base + '.log', 'w+', encoding='utf-8') as log:
        argv = [sys.executable, '-m', 'ansible_collections.converge.virt.plugins.modules.snapshot', base + '.args.json']
        proc = subprocess.Popen(argv,  # pylint: disable=consider-using-with
                                env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if task_recorded(conn, journal, TASK_OF[state]):
                    rl.kill_tree(proc)
                    break
                time.sleep(0.002)
            else:
                log.seek(0)
                raise AssertionError('the %s run ended (rc %s) before its task was recorded:\n%s' % (state, proc.returncode, log.read()[-3000:]))
        finally:
            if proc.poll() is None:
                rl.kill_tree(proc)
    assert proc.returncode == -9
    return rl.record(conn.lookupByName(VM)).get('task_state')


def run_direct(args, tmp_path):
    """Run the module's process to its end (as ansible runs it); return its result."""
    path = str(tmp_path / ('args-%d.json' % time.monotonic_ns()))
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump({'ANSIBLE_MODULE_ARGS': args}, handle)
    proc = subprocess.run([sys.executable, '-m', 'ansible_collections.converge.virt.plugins.modules.snapshot', path], capture_output=True, text=True,
                          env=ansible_env({'PYTHONPATH': os.path.join(ROOT, 'build', 'collections')}), timeout=300, check=False)
    return json.loads(proc.stdout)


def snapshot_args(host, state):
    args = {'uri': host.uri, 'vm': VM, 'name': 's1', 'state': state}
    if state == 'restored':
        args['safety_snapshot'] = False
    return args


def rerun(host, tmp_path, state, twice=True):
    """The next run (and, ``twice``, a second one after it); return whether each changed (none may fail)."""
    changed = []
    for _attempt in range(2 if twice else 1):
        result = run_direct(snapshot_args(host, state), tmp_path)
        assert not result.get('failed'), result
        changed.append(result['changed'])
    return changed


def names(conn):
    return sorted(snap.getName() for snap in conn.lookupByName(VM).listAllSnapshots(0))


def test_sigkill_during_snapshot_create_restore_delete_then_rerun(host, tmp_path):
    conn = libvirt.open(host.uri)
    path = make_disk(str(tmp_path), 'ri-snap.qcow2', size='16M')
    rounds = []
    try:
        write(path, 0x5a, length=4 * rl.MIB)
        write(path, 0xa5, offset=8 * rl.MIB, length=4 * rl.MIB)
        dom = define_vm(conn, VM, path, start=True)
        at_snapshot = data_sha(path, tmp_path)

        # create (a snapshot with the guest's memory), killed while libvirtd writes it
        left = kill_when_task_recorded(conn, snapshot_args(host, 'present'), tmp_path, 'present')
        assert rerun(host, tmp_path, 'present')[1] is False, 'the second run after the killed create changed something'
        assert names(conn) == ['s1'] and rl.record(dom).get('task_state') is None
        assert dom.isActive() and data_sha(path, tmp_path) == at_snapshot, 'the killed create changed the data'
        rounds.append(('create', left))

        # new data after the snapshot (written while the VM is stopped), then a restore killed while libvirtd reverts
        dom.destroy()
        write(path, 0x3c, offset=2 * rl.MIB, length=4 * rl.MIB)
        dom.create()
        changed = data_sha(path, tmp_path)
        assert changed != at_snapshot
        left = kill_when_task_recorded(conn, snapshot_args(host, 'restored'), tmp_path, 'restored')
        # a restore always reverts (changed): the re-run brings the snapshot's data back
        assert rerun(host, tmp_path, 'restored', twice=False) == [True]
        assert data_sha(path, tmp_path) == at_snapshot, 'the re-run after a killed restore did not bring back the data of s1'
        assert dom.isActive() and rl.record(dom).get('task_state') is None and names(conn) == ['s1']
        rounds.append(('restore', left))

        # delete killed while libvirtd deletes: the current data never changes
        left = kill_when_task_recorded(conn, snapshot_args(host, 'absent'), tmp_path, 'absent')
        assert rerun(host, tmp_path, 'absent')[1] is False, 'the second run after the killed delete changed something'
        assert names(conn) == [] and rl.record(dom).get('task_state') is None and dom.isActive()
        assert data_sha(path, tmp_path) == at_snapshot, 'the killed delete changed the current data'
        rounds.append(('delete', left))

        # the window of a delete is a few milliseconds, so the kill above may land after it: the case it leaves (the
        # snapshot gone, the task of the dead run still on the VM) made deterministic - the next run has no step to
        # take and must still clear that task, reporting it
        dead = subprocess.Popen(['true'])  # pylint: disable=consider-using-with
        dead.wait()
        forge(dom, vm_state='ACTIVE', task_state='DELETING_SNAPSHOT', task_id='killed-delete', last_action='delete_snapshot',
              lease_until=repr(time.time() + 300), owner='%s:%d' % (socket.gethostname(), dead.pid), generation='90')
        cleared = run_direct(snapshot_args(host, 'absent'), tmp_path)
        assert cleared['changed'] and cleared['operations'] == [
            {'op': 'clear_stale_task', 'task_state': 'DELETING_SNAPSHOT', 'task_id': 'killed-delete'}], cleared
        assert rl.record(dom).get('task_state') is None and not run_direct(snapshot_args(host, 'absent'), tmp_path)['changed']
    finally:
        for step, left in rounds:
            figures.record('interruption', 'SIGKILL of the module during snapshot %s (libvirt), then re-run' % step, True, count=1,
                           detail='task left by the killed run: %s' % (left or 'none (the step had finished)'))
        remove_vm(conn, VM)
        conn.close()
    # the kills of the create and the restore (hundreds of milliseconds: the guest's memory is written or read) landed while
    # the killed run held the VM's task, so the recovery of a dead run's task was exercised; a delete may have finished
    # (a revert that finished brings back the record the snapshot holds: the create's task, of a dead run as well)
    assert rounds[0][1] == TASK_OF['present'] and rounds[1][1] in (TASK_OF['restored'], TASK_OF['present']), rounds
    assert rounds[2][1] in (TASK_OF['absent'], None), rounds
