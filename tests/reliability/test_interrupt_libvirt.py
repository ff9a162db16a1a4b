"""Interruption: ansible-playbook SIGKILLed (whole process group) at deterministic points, then re-run.

One playbook declares a small world on two private libvirt hosts: VMs
``ri-new`` (created/started or deleted), ``ri-toggle`` (started or stopped),
``ri-holder`` (stopped, holds the data volume when attached), volumes
``ri-data.raw`` (grown, attached, detached) and ``ri-keep.raw``, the live
migration of ``ri-mig`` between the hosts, and the reconcile module (fix) on
both hosts. Each round changes one thing in the declaration (create, stop,
attach, grow, detach, migrate, delete, start, grow, migrate, cycling), starts
the playbook and SIGKILLs it with every process it started (its process group and the
workers' sessions) when a chosen transition of that
operation is observed in libvirt (a task recorded on the VM, the domain defined,
running, the migration job running, the disk in the definition, the file
grown...) or when the module's process is seen running. Then the same playbook
is re-run and must converge, a second run must report no change, and the world
must hold exactly what is declared: no orphan domain (no half-migrated copy on
the other host), no orphan volume, no migration job, no task_state left on any
VM, the volumes' capacity as declared and the sha256 of the data written into
them before the first round unchanged.

Default: 20 kill points; RELIABILITY_LONG=1: 40. The first half of the rounds runs here, the second half in
test_interrupt_libvirt_late.py (its own lab, on the other xdist worker), from the world the first half leaves.

A second test leaves the VM task of a volume run whose process was killed
after taking it (the window is too short to hit from outside reliably) and
checks that the next volume run recovers it and converges.
"""

import json
import os
import subprocess
import sys
import time

import libvirt
import pytest

from tests.integration.ansible_run import ROOT, ansible_env, run_module
from tests.reliability import figures
from tests.reliability import reliability_lab as rl
from tools.virtlab import hosts as virtlab_hosts

POOL = 'ripool'
DATA, KEEP = 'ri-data.raw', 'ri-keep.raw'
DATA_LEN, KEEP_LEN = 8 * rl.MIB, 4 * rl.MIB
CYCLE = ('create', 'stop', 'attach', 'grow', 'detach', 'migrate', 'delete', 'start', 'grow', 'migrate')
ROUNDS = 40 if rl.LONG else 20


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    started = rl.start_lab(str(tmp_path_factory.mktemp('rilab')), virtlab_layout(3))
    try:
        yield started
    finally:
        rl.stop_lab(started)


def initial_world():
    return {'new': 'absent', 'toggle': 'running', 'attached': False, 'capacity': 8, 'mig': 0}


def apply(op, world):
    world = dict(world)
    if op == 'create':
        world['new'] = 'running'
    elif op == 'delete':
        world['new'] = 'absent'
    elif op == 'stop':
        world['toggle'] = 'stopped'
    elif op == 'start':
        world['toggle'] = 'running'
    elif op == 'attach':
        world['attached'] = True
    elif op == 'detach':
        world['attached'] = False
    elif op == 'grow':
        world['capacity'] += 2
    elif op == 'migrate':
        world['mig'] = 1 - world['mig']
    return world


def playbook(lab, pool_dir, world):
    h0, h1 = lab.hosts
    small = {'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type()}
    vms = [dict(small, name='ri-new', state=world['new']), dict(small, name='ri-toggle', state=world['toggle']),
           dict(small, name='ri-holder', state='stopped')]
    src, dst = (h0, h1) if world['mig'] else (h1, h0)
    attachments = [{'vm': 'ri-holder', 'dev': 'vdb'}] if world['attached'] else []
    return [
        {'name': 'vms', 'converge.virt.vm': {'uri': h0.uri, 'shutdown_timeout': 1, 'vms': vms}},
        {'name': 'volumes', 'converge.virt.volume': {'uri': h0.uri, 'pool': POOL, 'pool_path': pool_dir, 'volumes': [
            {'name': DATA, 'capacity': '%dMiB' % world['capacity'], 'attachments': attachments},
            {'name': KEEP, 'capacity': '4MiB'}]}},
        {'name': 'migration', 'converge.virt.migration': {'uri': src.uri, 'target_uri': dst.uri, 'name': 'ri-mig', 'bandwidth': 4}},
        {'name': 'reconcile host 1', 'converge.virt.reconcile': {'uri': h0.uri, 'fix': True}},
        {'name': 'reconcile host 2', 'converge.virt.reconcile': {'uri': h1.uri, 'fix': True}},
    ]


# ------------------------------------------------------------------ triggers

def module_running(module, delay=0.0):
    """Trigger: the module's process (AnsiballZ_<module>.py) of the run has been seen for ``delay`` seconds."""
    seen = {}

    def check(lab, proc, world):
        del lab, world
        if 'at' not in seen and _module_in_tree(proc.pid, module):
            seen['at'] = time.monotonic()
        return 'at' in seen and time.monotonic() - seen['at'] >= delay
    check.label = 'module %s running%s' % (module, ' +%ss' % delay if delay else '')
    return check


def _journal_began(path, name):
    try:
        with open(path, encoding='utf-8') as stream:
            return any(json.loads(line).get('vm') == name and json.loads(line).get('event') == 'begin' for line in stream if line.strip())
    except FileNotFoundError:
        return False


def _module_in_tree(root, module):
    needle = ('AnsiballZ_%s.py' % module).encode()
    return any(needle in rl.cmdline(pid) for pid in rl.process_tree(root))


def vm_task(name, host=0):
    """Trigger: a task is recorded on VM ``name`` (seen in its record, or in the run's audit journal: deleting a
    diskless guest holds its task for a few milliseconds only, less than one poll on a loaded machine)."""
    def check(lab, proc, world):
        del world
        if _journal_began(proc.journal, name):
            return True
        try:
            return bool(rl.record(lab.conns[host].lookupByName(name)).get('task_state'))
        except libvirt.libvirtError:
            return False
    check.label = 'task recorded on %s' % name
    return check


def vm_libvirt_state(name, wanted, host=0):
    """Trigger: ``name`` is defined (wanted 'defined'), gone ('gone'), running or shut off on the host."""
    def check(lab, proc, world):
        del proc, world
        state = rl.state_of(lab.conns[host], name)
        return {'defined': state is not None, 'gone': state is None, 'running': state == libvirt.VIR_DOMAIN_RUNNING,
                'shutoff': state == libvirt.VIR_DOMAIN_SHUTOFF}[wanted]
    check.label = '%s %s' % (name, wanted)
    return check


def holder_disk(present):
    """Trigger: the data volume is (or is no longer) in ri-holder's persistent definition."""
    def check(lab, proc, world):
        del proc, world
        try:
            dom = lab.conns[0].lookupByName('ri-holder')
            return ('vdb' in rl.disk_sources(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)) == present
        except libvirt.libvirtError:
            return False
    check.label = 'disk %s the holder definition' % ('in' if present else 'gone from')
    return check


def data_grown():
    """Trigger: the data volume's file has its new size."""
    def check(lab, proc, world):
        del lab, proc
        return os.path.getsize(world['data_path']) >= world['capacity'] * rl.MIB
    check.label = 'data file grown'
    return check


def migration_job():
    """Trigger: the migration job runs on the source."""
    def check(lab, proc, world):
        del proc
        try:
            return rl.job_active(lab.conns[1 - world['mig']].lookupByName('ri-mig'))
        except libvirt.libvirtError:
            return False
    check.label = 'migration job running on the source'
    return check


def on_target():
    """Trigger: ri-mig is defined (incoming) on the target."""
    def check(lab, proc, world):
        del proc
        return rl.state_of(lab.conns[world['mig']], 'ri-mig') is not None
    check.label = 'ri-mig defined on the target'
    return check


TRIGGERS = {
    'create': [lambda: vm_libvirt_state('ri-new', 'defined'), lambda: vm_libvirt_state('ri-new', 'running'),
               lambda: module_running('vm', 0.2)],
    'stop': [lambda: vm_task('ri-toggle'), lambda: module_running('vm', 0.6), lambda: vm_libvirt_state('ri-toggle', 'shutoff')],
    'attach': [lambda: module_running('volume'), lambda: holder_disk(True), lambda: module_running('volume', 0.3)],
    'grow': [lambda: module_running('volume'), data_grown, lambda: module_running('volume', 0.2), lambda: module_running('volume', 0.4)],
    'detach': [lambda: module_running('volume', 0.2), lambda: holder_disk(False), lambda: module_running('volume')],
    'migrate': [migration_job, on_target, lambda: module_running('migration', 0.3), lambda: module_running('migration')],
    'delete': [lambda: vm_task('ri-new'), lambda: vm_libvirt_state('ri-new', 'gone'), lambda: module_running('vm', 0.1)],
    'start': [lambda: vm_task('ri-toggle'), lambda: vm_libvirt_state('ri-toggle', 'running'), lambda: module_running('vm', 0.3)],
}


def run_killed(lab, path, trigger, world, timeout=300):
    """Start the playbook and SIGKILL its process group when ``trigger`` fires (an AssertionError when it ends first)."""
    journal = path + '.journal'
    with open(path + '.killed.log', 'w+', encoding='utf-8') as log:
        proc = rl.start_playbook(path, output=log, env={'CONVERGE_VIRT_AUDIT_JOURNAL': journal})
        proc.journal = journal
        _run_killed(lab, proc, trigger, world, timeout, log)


def _run_killed(lab, proc, trigger, world, timeout, log):
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if trigger(lab, proc, world):
                rl.kill_tree(proc)
                return
            time.sleep(0.01)
        if proc.poll() is None:
            raise AssertionError('the run neither ended nor reached %s' % trigger.label)
        proc.communicate()
        log.seek(0)
        raise AssertionError('the run ended (rc %s) before %s:\n%s' % (proc.returncode, trigger.label, log.read()[-5000:]))
    finally:
        if proc.poll() is None:
            rl.kill_tree(proc)


# ------------------------------------------------------------------ checks

def check_world(lab, world, digests):
    """The world holds exactly the declaration; nothing lost."""
    h0, h1 = (c for c in lab.conns)
    expected0 = {'ri-toggle', 'ri-holder'} | ({'ri-new'} if world['new'] != 'absent' else set())
    expected0 |= {'ri-mig'} if world['mig'] == 0 else set()
    expected1 = {'ri-mig'} if world['mig'] == 1 else set()
    assert set(rl.domain_names(h0)) == expected0, 'orphan or missing domain on host 1'
    assert set(rl.domain_names(h1)) == expected1, 'orphan, half-migrated or missing domain on host 2'
    for conn in (h0, h1):
        for dom in conn.listAllDomains(0):
            rec = rl.record(dom)
            assert not rec.get('task_state'), '%s still has task_state %s' % (dom.name(), rec.get('task_state'))
            assert not rl.live_record(dom).get('task_state'), '%s: live definition still has a task' % dom.name()
            assert not rl.job_active(dom), '%s: a job (migration) is still running' % dom.name()
    mig = lab.conns[world['mig']].lookupByName('ri-mig')
    assert mig.state()[0] == libvirt.VIR_DOMAIN_RUNNING and mig.isPersistent()
    toggle = h0.lookupByName('ri-toggle').state()[0]
    assert (toggle == libvirt.VIR_DOMAIN_RUNNING) == (world['toggle'] == 'running')
    if world['new'] != 'absent':
        assert h0.lookupByName('ri-new').state()[0] == libvirt.VIR_DOMAIN_RUNNING
    holder = h0.lookupByName('ri-holder')
    assert ('vdb' in rl.disk_sources(holder, libvirt.VIR_DOMAIN_XML_INACTIVE)) == world['attached']
    pool = h0.storagePoolLookupByName(POOL)
    pool.refresh(0)
    assert sorted(pool.listVolumes()) == sorted([DATA, KEEP]), 'orphan or missing volume'
    assert pool.storageVolLookupByName(DATA).info()[1] == world['capacity'] * rl.MIB
    lost = [name for name, (path, length, digest) in digests.items() if rl.sha256_region(path, length) != digest]
    return lost


def replay(first):
    """(world, occurrences of each operation) after rounds 1 .. first - 1 of the cycle, without running them."""
    world, seen = initial_world(), {}
    for number in range(1, first):
        op = CYCLE[(number - 1) % len(CYCLE)]
        seen[op] = seen.get(op, 0) + 1
        world = apply(op, world)
    return world, seen


def run_rounds(lab, tmp_path, first, last):
    """Rounds first .. last of the cycle: the world declared (and converged) as rounds 1 .. first - 1 left it, then each
    round's kill point (the same one the round has in a single run of every round), re-run, second run, checks.

    The rounds are split over two files (FIRST_HALF here, the rest in test_interrupt_libvirt_late.py) so that the two
    xdist workers of the integration tier (--dist loadfile: whole files) run them at the same time, each on its own lab."""
    pool_dir = str(tmp_path / 'pool')
    os.makedirs(pool_dir)
    world, seen = replay(first)
    made = run_module('vm', {'uri': lab.hosts[world['mig']].uri, 'name': 'ri-mig', 'memory': '64MiB',
                             'domain_type': virtlab_hosts.diskless_domain_type(), 'state': 'running'})
    assert made['_rc'] == 0, made
    path = rl.write_playbook(str(tmp_path / 'round0.yml'), playbook(lab, pool_dir, world))
    rc, data = rl.run_playbook(path)
    assert rc == 0 and not rl.failures(data), rl.failures(data)
    digests = {}
    for name, length in ((DATA, DATA_LEN), (KEEP, KEEP_LEN)):
        vpath = os.path.join(pool_dir, name)
        digests[name] = (vpath, length, rl.write_pattern(vpath, length, name))
    world['data_path'] = os.path.join(pool_dir, DATA)
    assert check_world(lab, world, digests) == []

    per_op = {}
    points = []
    lost_total = 0
    try:
        for number in range(first, last + 1):
            op = CYCLE[(number - 1) % len(CYCLE)]
            occurrence = seen.get(op, 0)
            seen[op] = occurrence + 1
            trigger = TRIGGERS[op][occurrence % len(TRIGGERS[op])]()
            world = apply(op, world)
            path = rl.write_playbook(str(tmp_path / ('round%d.yml' % number)), playbook(lab, pool_dir, world))
            run_killed(lab, path, trigger, world)
            points.append('%s: %s' % (op, trigger.label))
            rc, data = rl.run_playbook(path)
            assert rc == 0 and not rl.failures(data), 'round %d (%s, killed at %s): the re-run failed: %s' % (
                number, op, trigger.label, rl.failures(data))
            rc, data = rl.run_playbook(path)
            assert rc == 0 and rl.changed_tasks(data) == [], 'round %d (%s, killed at %s): the second run changed %s' % (
                number, op, trigger.label, rl.changed_tasks(data))
            lost = check_world(lab, world, digests)
            lost_total += len(lost)
            assert lost == [], 'round %d (%s, killed at %s): data changed in %s' % (number, op, trigger.label, lost)
            per_op[op] = per_op.get(op, 0) + 1
    finally:
        for op, count in sorted(per_op.items()):
            figures.record('interruption', 'SIGKILL of ansible-playbook during %s (libvirt), then re-run' % op, True, count=count,
                           detail='; '.join(sorted(set(p.split(': ', 1)[1] for p in points if p.startswith(op + ':')))))
        failed = len(points) - sum(per_op.values())
        if failed:
            figures.record('interruption', 'SIGKILL during %s (libvirt): re-run did not converge' % points[-1].split(':')[0], False,
                           count=failed, data_lost=lost_total, detail=points[-1])
    # every round of this half at a kill point of its own (the other half's are the next occurrences of each operation)
    assert len(points) == last - first + 1 and len(set(points)) == len(points), points
    return points


FIRST_HALF = ROUNDS // 2


def test_sigkill_at_the_first_ten_points_then_rerun_converges(lab, tmp_path):
    run_rounds(lab, tmp_path, 1, FIRST_HALF)


HOLD_TASK_AND_DIE = '''
import os, socket, sys, time
import libvirt
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import LibvirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks
conn = libvirt.open(sys.argv[1])
owner = '%s:%d' % (socket.gethostname(), os.getpid())
store = LibvirtTaskStore(conn, conn.lookupByName(sys.argv[2]), owner)
tasks.take_task(store, 'attach_volume', 'killed-run', time.time(), owner=owner, name=sys.argv[2])
os.kill(os.getpid(), 9)
'''


def test_volume_run_killed_holding_the_vm_task(lab, tmp_path):
    """A volume run killed while it held the VM's task (after taking it, before releasing it): the next volume run goes on."""
    h0 = lab.hosts[0]
    pool_dir = str(tmp_path / 'pool')
    os.makedirs(pool_dir)
    name = 'ri-held'
    made = run_module('vm', {'uri': h0.uri, 'name': name, 'memory': '64MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
                             'state': 'stopped'})
    assert made['_rc'] == 0, made
    volume = {'uri': h0.uri, 'pool': 'riheld', 'pool_path': pool_dir, 'name': 'held.raw', 'capacity': '4MiB'}
    created = run_module('volume', volume)
    assert created['_rc'] == 0, created
    digest = rl.write_pattern(created['volume']['path'], 4 * rl.MIB, 'held')
    env = ansible_env({'PYTHONPATH': os.path.join(ROOT, 'build', 'collections')})
    killed = subprocess.run([sys.executable, '-c', HOLD_TASK_AND_DIE, h0.uri, name], env=env, check=False)
    assert killed.returncode == -9
    assert rl.record(lab.conns[0].lookupByName(name)).get('task_state'), 'the killed run left its task'
    survived = False
    try:
        path = rl.write_playbook(str(tmp_path / 'attach.yml'), [
            {'name': 'attach', 'converge.virt.volume': dict(volume, attachments=[{'vm': name, 'dev': 'vdb'}])}])
        rc, data = rl.run_playbook(path)
        assert rc == 0 and not rl.failures(data) and rl.changed_tasks(data) == ['attach'], rl.failures(data)
        rc, data = rl.run_playbook(path)
        assert rc == 0 and rl.changed_tasks(data) == []
        dom = lab.conns[0].lookupByName(name)
        assert rl.record(dom).get('task_state') is None and 'vdb' in rl.disk_sources(dom, libvirt.VIR_DOMAIN_XML_INACTIVE)
        assert rl.sha256_region(created['volume']['path'], 4 * rl.MIB) == digest
        survived = True
    finally:
        figures.record('interruption', 'volume run killed while holding the VM task (libvirt), then re-run', survived, count=1)
