"""The libvirt cloud-init seed is written only while the VM's task is held (converge.virt.vm, real private libvirt host).

A run that observed the VM idle and then lost it to another run's task (the race between the observation and the
write, made deterministic here: the other run takes its task right after this run read the seed) must leave the seed
volume as it was and be refused naming that task; a VM whose task is held before the run is refused the same way; once
the task is gone the seed is replaced, and the run leaves no task behind. The module runs in this process so that the
other run can be slipped in between its reads.
"""

import contextlib
import hashlib
import io
import json
import time

from ansible.module_utils import basic

from tests.integration.ansible_run import ok, run_module
from tools.virtlab import hosts as virtlab_hosts

POOL = 'citaskpool'
NAME = 'ci-task'


def in_process(args):
    """converge.virt.vm's main() with ``args`` in this process: its JSON result."""
    from ansible_collections.converge.virt.plugins.modules import vm  # pylint: disable=import-outside-toplevel
    basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode()  # pylint: disable=protected-access
    basic._ANSIBLE_PROFILE = 'legacy'  # pylint: disable=protected-access
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            vm.main()
        except SystemExit:
            pass
    return json.loads(out.getvalue())


def args(host, text, **extra):
    out = {'uri': host.uri, 'name': NAME, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(), 'state': 'stopped',
           'shutdown_timeout': 1, 'disks': [], 'lock_timeout': 0,
           'cloud_init': {'pool': POOL, 'meta_data': {'local-hostname': NAME}, 'user_data': {'runcmd': [['echo', text]]}}}
    out.update(extra)
    return out


def seed_bytes(conn):
    """sha256 of the seed volume's bytes (pycdlib stamps every image it builds with its time: a rewrite changes them)."""
    vol = conn.storagePoolLookupByName(POOL).storageVolLookupByName(NAME + '-cidata.iso')
    stream = conn.newStream(0)
    vol.download(stream, 0, vol.info()[1], 0)
    digest = hashlib.sha256()
    while True:
        data = stream.recv(1 << 16)
        if isinstance(data, int) or not data:
            break
        digest.update(data)
    stream.finish()
    return digest.hexdigest()


def test_seed_written_only_under_the_vm_task(host, conn, tmp_path, monkeypatch):
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import cloud_init  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.module_utils._phase import tasks  # pylint: disable=import-outside-toplevel

    ok(run_module('volume', {'uri': host.uri, 'pool': POOL, 'pool_path': str(tmp_path / 'pool'), 'name': 'spare.raw', 'capacity': '1MiB'}))
    first = ok(run_module('vm', args(host, 'first')))
    assert first['changed'] and first['cloud_init']['changed']
    before = seed_bytes(conn)
    store = LibvirtTaskStore(conn, conn.lookupByName(NAME), 'other-run', inferred_vm_state='STOPPED')
    try:
        # another run takes the VM's task right after this run read the seed (and found it differs)
        observed = cloud_init.observed_digest

        def then_other_run_takes_the_task(*a, **kw):
            digest = observed(*a, **kw)
            tasks.take_task(store, 'start', 'other-run-task', time.time(), owner='other-run', name=NAME)
            return digest
        monkeypatch.setattr(cloud_init, 'observed_digest', then_other_run_takes_the_task)
        raced = in_process(args(host, 'second'))
        monkeypatch.undo()
        assert raced.get('failed') and not raced.get('changed') and 'other-run-task' in raced['msg'], raced
        assert seed_bytes(conn) == before, 'a refused run rewrote the seed'
        # the VM's task already held when the run starts (lock_timeout 0): refused before anything is written
        held = run_module('vm', args(host, 'second'))
        assert held.get('failed') and not held.get('changed') and 'other-run-task' in held['msg'], held
        assert seed_bytes(conn) == before, 'a refused run rewrote the seed'
    finally:
        tasks.abandon_task(store, 'other-run-task', name=NAME)
    replaced = ok(run_module('vm', args(host, 'second')))
    assert replaced['changed'] and replaced['cloud_init']['changed'] and seed_bytes(conn) != before
    assert replaced['vm']['task_state'] is None and not ok(run_module('vm', args(host, 'second')))['changed']
    ok(run_module('vm', {'uri': host.uri, 'name': NAME, 'state': 'absent', 'shutdown_timeout': 1}))
    conn.storagePoolLookupByName(POOL).refresh(0)
    assert NAME + '-cidata.iso' not in conn.storagePoolLookupByName(POOL).listVolumes()
