"""A randomized chaos campaign on private libvirt hosts, checked by :mod:`tests.chaos.checker`.

K workers (threads), each running real ``ansible-playbook`` processes one after the other, issue random declarations
against shared objects on three (or two) private libvirt hosts of :mod:`tools.virtlab.hosts`:

* on each host two diskless VMs (``c<h>a``, ``c<h>b``): power states (running, stopped, paused), delete and re-create;
* on each host a ``keep`` volume (4 MiB, a pattern written once: its checksum must never change) attached to one VM
  or the other or detached (bus scsi, force), and a ``scratch`` volume created, grown and deleted;
* ``movers`` (diskless, running) migrated between the hosts.

A nemesis, at random moments, SIGKILLs a worker's whole ansible process tree (each run has a private TMPDIR, so no
``/tmp/ansible_*_payload_*`` directory is left behind), restarts a libvirtd (SIGTERM or SIGKILL), SIGSTOPs one
for a few seconds, fills a host's pool (each pool lives on a small tmpfs of its own, mounted before the hosts start so
that their private mount namespaces share it: a file takes every free byte for a few seconds, then goes), or SIGKILLs
the libvirtd of a migration's destination while that migration runs (and starts it again). Every module appends to one
audit journal (``$CONVERGE_VIRT_AUDIT_JOURNAL``).

When the time is up the nemesis stops, every daemon runs again, the world is read (the values the acknowledged
declarations are checked against), then a final converge, a reconcile with fix on each host, a reconcile without
fix (it must find nothing) and a second final converge (it must change nothing), and the world is read again for
orphans, jobs and tasks left. The history (``history.json``) goes to the checker.

The choices are drawn from ``random.Random`` seeded from the seed (one stream per worker and one for the nemesis):
a campaign is reproduced from its seed as far as the timing of processes lets it (the same declarations in the
same order per worker, the same faults at the same offsets).

    python -m tests.chaos.campaign --seed 1 --minutes 20 --out build/chaos   (inside tools.virtlab netns)
"""

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

import libvirt

from tests.chaos import checker
from tests.integration.ansible_run import ansible_env
from tests.reliability import reliability_lab as rl
from tools.virtlab import hosts as virtlab_hosts

MIB = 1024 * 1024
POOL = 'chaos'
KEEP_SIZE = 4 * MIB
POOL_FS_SIZE = 40 * MIB  # a keep (4 MiB) and a scratch volume (up to 12 MiB) with room to spare, until the nemesis fills it
POWER = {libvirt.VIR_DOMAIN_RUNNING: 'running', libvirt.VIR_DOMAIN_PAUSED: 'paused', libvirt.VIR_DOMAIN_SHUTOFF: 'stopped',
         libvirt.VIR_DOMAIN_BLOCKED: 'running', libvirt.VIR_DOMAIN_PMSUSPENDED: 'paused'}
PLAYBOOK_TIMEOUT = 240


class World:
    """The names of one campaign's objects on ``hosts`` private hosts."""

    def __init__(self, lab, movers=1, pool_fs=None):
        self.lab = lab
        self.hosts = [h.name for h in lab.hosts]
        self.uris = dict((h.name, h.uri) for h in lab.hosts)
        self.vms = dict((h, ['c%da' % i, 'c%db' % i]) for i, h in enumerate(self.hosts))
        self.movers = ['cm%d' % i for i in range(movers)]
        self.keep = dict((h, 'keep%d.raw' % i) for i, h in enumerate(self.hosts))
        self.scratch = dict((h, 'scratch%d.raw' % i) for i, h in enumerate(self.hosts))
        # pool_fs: the tmpfs of each host (by index) the pools live on (the fill-pool fault), else a directory of the state dir
        self.pool_fs = dict((h.name, pool_fs[i]) for i, h in enumerate(lab.hosts)) if pool_fs else {}
        self.pool_paths = dict((h.name, os.path.join(self.pool_fs[h.name], 'pool') if pool_fs else os.path.join(lab.state_dir, 'pool-%s' % h.name))
                               for h in lab.hosts)
        self.mover_at = dict((m, self.hosts[i % len(self.hosts)]) for i, m in enumerate(self.movers))
        # the last migration declared for each mover: (source host, target host, the task's arguments)
        self.last_migration = {}
        self.lock = threading.Lock()

    def track(self, mover, target, outcome, error):
        """Where ``mover`` is now, as far as a migration's outcome tells (a guess after a failure that found it on neither host)."""
        with self.lock:
            if outcome == 'ok':
                self.mover_at[mover] = target
            elif 'not found' in error:
                named = [h for h in self.hosts if self.uris[h] in error]
                others = [h for h in self.hosts if h not in named]
                if others:
                    self.mover_at[mover] = others[0]

    def vm_args(self, host, name, state):
        return {'uri': self.uris[host], 'name': name, 'state': state, 'memory': '32MiB', 'domain_type': virtlab_hosts.diskless_domain_type(),
                'shutdown_timeout': 1, 'lock_timeout': 10}

    def volume_args(self, host, volumes):
        return {'uri': self.uris[host], 'pool': POOL, 'pool_path': self.pool_paths[host], 'volumes': volumes, 'force': True, 'detach_timeout': 5}

    def keep_volume(self, host, vm):
        attachments = [] if vm is None else [{'vm': vm, 'dev': 'sdb', 'bus': 'scsi'}]
        return {'name': self.keep[host], 'capacity': '4MiB', 'attachments': attachments}


# ------------------------------------------------------------------ declarations

def random_declaration(rng, world):
    """One random declaration: (object, fields, touches, ansible task)."""
    kind = rng.choices(['power', 'delete', 'attach', 'scratch', 'migrate'], weights=[5, 1, 2, 2, 2 if len(world.hosts) > 1 else 0])[0]
    host = rng.choice(world.hosts)
    if kind == 'power':
        name = rng.choice(world.vms[host])
        state = rng.choice(['running', 'stopped', 'paused'])
        return name, {'power': state}, [], {'converge.virt.vm': world.vm_args(host, name, state)}
    if kind == 'delete':
        name = rng.choice(world.vms[host])
        return name, {'power': 'absent'}, [world.keep[host]], {'converge.virt.vm': world.vm_args(host, name, 'absent')}
    if kind == 'attach':
        vm = rng.choice(world.vms[host] + [None])
        return world.keep[host], {'attached': vm or 'none'}, [], {'converge.virt.volume': world.volume_args(host, [world.keep_volume(host, vm)])}
    if kind == 'scratch':
        if rng.random() < 0.3:
            return (world.scratch[host], {'exists': 'absent'}, [],
                    {'converge.virt.volume': world.volume_args(host, [{'name': world.scratch[host], 'state': 'absent'}])})
        size = rng.choice([4, 8, 12])
        return (world.scratch[host], {'exists': 'present', 'capacity': size * MIB}, [],
                {'converge.virt.volume': world.volume_args(host, [{'name': world.scratch[host], 'capacity': '%dMiB' % size}])})
    mover = rng.choice(world.movers)
    with world.lock:
        source = world.mover_at[mover]
    if rng.random() < 0.2:
        source = rng.choice(world.hosts)
    target = rng.choice([h for h in world.hosts if h != source])
    args = {'uri': world.uris[source], 'target_uri': world.uris[target], 'name': mover, 'bandwidth': 1000, 'wait_timeout': 60}
    with world.lock:
        world.last_migration[mover] = (source, target, args)
    return mover, {'host': target}, [], {'converge.virt.migration': args}


class Run:
    """One ansible-playbook process of the campaign (its own process group, private TMPDIR, JSON output to a file)."""

    def __init__(self, directory, ident, tasks, journal):
        self.path = rl.write_playbook(os.path.join(directory, '%s.json' % ident), tasks, name=ident)
        self.out = self.path + '.out'
        env = {'CONVERGE_VIRT_AUDIT_JOURNAL': journal, 'TMPDIR': rl.private_tmpdir(self.path)}
        with open(self.out, 'w', encoding='utf-8') as stdout, open(self.path + '.err', 'w', encoding='utf-8') as stderr:
            self.proc = subprocess.Popen(rl.playbook_cmd(self.path), env=ansible_env(env), stdout=stdout, stderr=stderr,  # pylint: disable=consider-using-with
                                         start_new_session=True)
        self.killed = False
        self.target = None  # the destination host of the migration this run declares (the kill-target fault)

    def wait(self, timeout=PLAYBOOK_TIMEOUT):
        """(rc, parsed output or None)."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.wait()
        try:
            with open(self.out, encoding='utf-8') as handle:
                return rc, json.load(handle)
        except ValueError:
            return rc, None

    def kill(self):
        """SIGKILL the whole tree; the pids killed."""
        self.killed = True
        return rl.kill_tree(self.proc)

    def leaked_payloads(self):
        """AnsiballZ payload directories a killed run left (in its private TMPDIR: removed with it)."""
        tmpdir = self.path + '.tmp'
        return [name for name in os.listdir(tmpdir) if name.startswith('ansible_')] if os.path.isdir(tmpdir) else []


class Campaign:  # pylint: disable=too-many-instance-attributes
    """Workers, nemesis and the final checks of one campaign."""

    def __init__(self, lab, seed, seconds, directory, workers=3, movers=1, nemesis_every=(4.0, 10.0), pool_fs=None,  # pylint: disable=too-many-arguments
                 first_faults=(), min_ok=0):
        self.lab, self.seed, self.seconds, self.directory = lab, seed, seconds, directory
        # the chaos goes on (up to three times as long) until min_ok declarations were acknowledged: on a loaded machine
        # a short campaign may otherwise end before any run finished, and prove nothing
        self.min_ok = min_ok
        self.first_faults = list(first_faults)  # the nemesis's first faults, in this order (a short campaign sees each kind)
        self.world = World(lab, movers, pool_fs)
        self.workers = workers
        self.nemesis_every = nemesis_every
        self.journal = os.path.join(directory, 'journal.jsonl')
        self.history = {'seed': seed, 'declarations': [], 'kills': [], 'writes': [], 'faults': [], 'final': {}}
        self.lock = threading.Lock()
        self.current = {}
        self.stop = threading.Event()
        self.stopped_daemons = set()
        self.counter = 0

    # --------------------------------------------------------------- set-up
    def setup(self):
        """Create every object; write the keep volumes' pattern (the declared writes)."""
        tasks = []
        for host in self.world.hosts:
            for name in self.world.vms[host]:
                tasks.append({'name': 'make %s' % name, 'converge.virt.vm': self.world.vm_args(host, name, 'running')})
            tasks.append({'name': 'volumes %s' % host, 'converge.virt.volume': self.world.volume_args(
                host, [self.world.keep_volume(host, self.world.vms[host][0])])})
        for mover in self.world.movers:
            tasks.append({'name': 'make %s' % mover, 'converge.virt.vm': self.world.vm_args(self.world.mover_at[mover], mover, 'running')})
        rc, data = Run(self.directory, 'setup', tasks, os.path.join(self.directory, 'setup-journal.jsonl')).wait()
        if rc != 0:
            raise AssertionError('chaos set-up failed: %s' % (rl.failures(data) if data else 'no output'))
        for host in self.world.hosts:
            path = os.path.join(self.world.pool_paths[host], self.world.keep[host])
            digest = rl.write_pattern(path, KEEP_SIZE, 'keep-%s-%s' % (self.seed, host))
            self.history['writes'].append({'volume': self.world.keep[host], 'digest': digest, 'time': time.monotonic()})

    # --------------------------------------------------------------- workers
    def worker(self, index):
        rng = random.Random('%s-worker-%d' % (self.seed, index))
        while not self.stop.is_set():
            obj, fields, touches, task = random_declaration(rng, self.world)
            with self.lock:
                self.counter += 1
                ident = 'd%04d-w%d' % (self.counter, index)
            start = time.monotonic()
            run = Run(self.directory, ident, [dict(task, name=ident)], self.journal)
            run.target = fields.get('host')
            with self.lock:
                self.current[index] = run
            rc, data = run.wait()
            finish = time.monotonic()
            with self.lock:
                self.current.pop(index, None)
            outcome = 'killed' if run.killed else ('ok' if rc == 0 else 'failed')
            entry = {'id': ident, 'worker': index, 'object': obj, 'fields': fields, 'touches': touches, 'start': start, 'end': finish,
                     'outcome': outcome, 'leaked': run.leaked_payloads() if run.killed else []}
            if outcome == 'failed':
                fails = rl.failures(data) if data else [('no output', rc)]
                entry['error'] = str(fails)[:300]
            if 'host' in fields:
                self.world.track(obj, fields['host'], outcome, entry.get('error', ''))
            with self.lock:
                self.history['declarations'].append(entry)

    # --------------------------------------------------------------- nemesis
    def nemesis(self):
        rng = random.Random('%s-nemesis' % self.seed)
        started = time.monotonic()
        if not self.world.pool_fs and 'fill-pool' in self.first_faults:
            self.first_faults.remove('fill-pool')
        while not self.stop.wait(rng.uniform(*self.nemesis_every)):
            fault = rng.choices(['kill', 'restart', 'sigkill-daemon', 'sigstop', 'fill-pool', 'kill-target'],
                                weights=[5, 2, 1, 2, 1 if self.world.pool_fs else 0, 2])[0]
            if self.first_faults:
                fault = self.first_faults[0]
            at = time.monotonic()
            record = {'fault': fault, 'offset': round(at - started, 2)}
            if fault == 'fill-pool':
                record.update(self.fill_pool(rng))
            elif fault == 'kill-target':
                found = self.kill_target(rng, self.seconds if self.first_faults else 3.0)
                if found is None:
                    continue
                record.update(found)
            elif fault == 'kill':
                with self.lock:
                    runs = sorted(self.current.items())
                if not runs:
                    continue
                index, run = rng.choice(runs)
                pids = run.kill()
                self.history['kills'].append({'time': time.monotonic(), 'pids': pids})
                record.update(worker=index, processes=len(pids))
            else:
                index = rng.randrange(len(self.lab.hosts))
                record['host'] = self.lab.hosts[index].name
                if fault == 'sigstop':
                    pid = self.lab.hosts[index].pids['libvirtd']
                    pause = rng.uniform(2.0, 6.0)
                    os.kill(pid, signal.SIGSTOP)
                    self.stopped_daemons.add(pid)
                    self.stop.wait(pause)
                    os.kill(pid, signal.SIGCONT)
                    self.stopped_daemons.discard(pid)
                    record['seconds'] = round(pause, 1)
                else:
                    self.lab.restart_daemon(index, kill=fault == 'sigkill-daemon')
            if self.first_faults and fault == self.first_faults[0]:
                self.first_faults.pop(0)
            self.history['faults'].append(record)

    def fill_pool(self, rng):
        """Take every free byte of one host's pool filesystem for a few seconds, then free it."""
        host = rng.choice(self.world.hosts)
        hold = rng.uniform(3.0, 8.0)
        path = os.path.join(self.world.pool_fs[host], 'fill')
        stat = os.statvfs(self.world.pool_fs[host])
        free = stat.f_bavail * stat.f_frsize
        filled = 0
        try:
            with open(path, 'wb') as handle:
                if free:
                    try:
                        os.posix_fallocate(handle.fileno(), 0, free)
                    except OSError:
                        pass  # what fits is allocated: the pool is full either way
                    filled = os.fstat(handle.fileno()).st_blocks * 512
            self.stop.wait(hold)
        finally:
            os.unlink(path)
        return {'host': host, 'seconds': round(hold, 1), 'bytes': filled}

    def kill_target(self, rng, wait):
        """SIGKILL the libvirtd of the destination of a migration in flight (waiting up to ``wait`` s for one), then start it again."""
        deadline = time.monotonic() + wait
        while not self.stop.is_set():
            with self.lock:
                moving = [(index, run.target) for index, run in sorted(self.current.items()) if run.target and run.proc.poll() is None]
            if moving:
                break
            if time.monotonic() > deadline:
                return None
            self.stop.wait(0.05)
        else:
            return None
        index, target = rng.choice(moving)
        self.lab.restart_daemon(self.world.hosts.index(target), kill=True)
        return {'host': target, 'worker': index}

    # --------------------------------------------------------------- the run
    def run(self):
        """Set up, run workers and nemesis for the time given, then the final phase; return the history."""
        phases = self.history['phases'] = {}
        mark = time.monotonic()
        self.setup()
        phases['setup'] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()
        threads = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(self.workers)]
        threads.append(threading.Thread(target=self.nemesis, daemon=True))
        for thread in threads:
            thread.start()
        self.stop.wait(self.seconds)
        longest = time.monotonic() + 2 * self.seconds
        while self._acknowledged() < self.min_ok and time.monotonic() < longest:
            time.sleep(0.5)
        self.stop.set()
        # the campaign ends as a controller machine dies: whatever is still in flight is SIGKILLed (the final converge recovers it)
        with self.lock:
            runs = sorted(self.current.items())
        for index, run in runs:
            pids = run.kill()
            self.history['kills'].append({'time': time.monotonic(), 'pids': pids})
            self.history['faults'].append({'fault': 'kill', 'worker': index, 'processes': len(pids), 'at_end': True})
        for thread in threads:
            thread.join(PLAYBOOK_TIMEOUT + 30)
        for pid in list(self.stopped_daemons):
            os.kill(pid, signal.SIGCONT)
        phases['chaos'] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()
        self.final()
        phases['final'] = round(time.monotonic() - mark, 1)
        self.history['journal'] = read_journal(self.journal)
        return self.history

    def _acknowledged(self):
        with self.lock:
            return sum(1 for decl in self.history['declarations'] if decl['outcome'] == 'ok')

    # --------------------------------------------------------------- final phase
    def _conns(self):
        conns = {}
        for index, host in enumerate(self.lab.hosts):
            if not virtlab_hosts.pid_alive(host.pids['libvirtd']):
                self.lab.start_daemon(index)
            conns[host.name] = self.lab.reconnect(index)
        return conns

    def read_values(self, conns):
        """The value of every declared field, as the world holds it."""
        values = []
        for host, conn in conns.items():
            for name in self.world.vms[host]:
                state = rl.state_of(conn, name)
                values.append({'object': name, 'field': 'power', 'value': 'absent' if state is None else POWER.get(state, str(state))})
            keep_path = os.path.join(self.world.pool_paths[host], self.world.keep[host])
            users = sorted(name for name in self.world.vms[host] if uses(persistent_sources(conn, name), keep_path, self.world.keep[host]))
            values.append({'object': self.world.keep[host], 'field': 'attached', 'value': ','.join(users) or 'none'})
            info = volume_info(conn, self.world.scratch[host])
            values.append({'object': self.world.scratch[host], 'field': 'exists', 'value': 'present' if info else 'absent'})
            values.append({'object': self.world.scratch[host], 'field': 'capacity', 'value': info[1] if info else None})
        for mover in self.world.movers:
            where = [host for host, conn in conns.items() if rl.state_of(conn, mover) is not None]
            values.append({'object': mover, 'field': 'host', 'value': ','.join(where) or 'absent'})
        return values

    def final_tasks(self, conns):
        tasks = []
        for host in self.world.hosts:
            first, second = self.world.vms[host]
            tasks.append({'name': '%s running' % first, 'converge.virt.vm': self.world.vm_args(host, first, 'running')})
            tasks.append({'name': '%s stopped' % second, 'converge.virt.vm': self.world.vm_args(host, second, 'stopped')})
            tasks.append({'name': 'volumes %s' % host, 'converge.virt.volume': self.world.volume_args(
                host, [self.world.keep_volume(host, first), {'name': self.world.scratch[host], 'state': 'absent'}])})
        for mover in self.world.movers:
            where = [host for host, conn in conns.items() if rl.state_of(conn, mover) is not None] or [self.world.mover_at[mover]]
            if len(where) > 1 and mover in self.world.last_migration:
                # a migration killed half-way left the VM defined on two hosts: run that migration again, as a user
                # re-runs the interrupted task (a vm task on one host cannot know of the other copy)
                _source, target, args = self.world.last_migration[mover]
                tasks.append({'name': '%s migration again' % mover, 'converge.virt.migration': args})
                where = [target]
            tasks.append({'name': '%s running' % mover, 'converge.virt.vm': self.world.vm_args(where[0], mover, 'running')})
        return tasks

    def final(self):
        """Read the world, converge it once, reconcile with fix, reconcile, converge again; read the world again."""
        conns = self._conns()
        final = self.history['final']
        final['values'] = self.read_values(conns)
        tasks = self.final_tasks(conns)
        # two playbooks (each ansible-playbook start costs seconds): converge + reconcile with fix; reconcile + converge again
        fix = [{'name': 'reconcile fix %s' % h, 'converge.virt.reconcile': {'uri': self.world.uris[h], 'fix': True}} for h in self.world.hosts]
        rc, data = Run(self.directory, 'final-converge', tasks + fix, self.journal).wait()
        final['final_converge'] = {'rc': rc, 'failures': str(rl.failures(data))[:2000] if data else 'no output'}
        look = [{'name': 'reconcile %s' % h, 'converge.virt.reconcile': {'uri': self.world.uris[h]}} for h in self.world.hosts]
        again = [dict(task, name='again: ' + task['name']) for task in tasks]
        rc, data = Run(self.directory, 'final-check', look + again, self.journal).wait()
        findings, changed = [], []
        for name, res in rl.task_results(data or {}):
            if name.startswith('reconcile '):
                findings.extend(dict(item, host=name) for item in res.get('disagreements') or [])
            elif res.get('changed'):
                changed.append(name)
        final['reconcile_after_fix'] = findings
        final['second_converge_changed'] = changed + (['failed: %s' % str(rl.failures(data) if data else 'no output')[:500]] if rc != 0 else [])
        conns = self._conns()
        self.read_world(conns)

    def read_world(self, conns):
        final = self.history['final']
        final['domains'], final['volumes'], final['jobs'], final['tasks'], final['checksums'] = {}, {}, [], [], {}
        final['expected_domains'] = dict((name, [host]) for host in self.world.hosts for name in self.world.vms[host])
        final['expected_domains'].update((mover, list(self.world.hosts)) for mover in self.world.movers)
        final['expected_volumes'] = dict((host, [self.world.keep[host]]) for host in self.world.hosts)
        for host, conn in conns.items():
            final['domains'][host] = rl.domain_names(conn)
            for name in final['domains'][host]:
                dom = conn.lookupByName(name)
                if rl.job_active(dom):
                    final['jobs'].append({'host': host, 'name': name})
                task = rl.record(dom).get('task_state')
                if task:
                    final['tasks'].append({'host': host, 'name': name, 'task_state': task})
            try:
                pool = conn.storagePoolLookupByName(POOL)
                pool.refresh(0)
                final['volumes'][host] = sorted(pool.listVolumes())
            except libvirt.libvirtError:
                final['volumes'][host] = []
            path = os.path.join(self.world.pool_paths[host], self.world.keep[host])
            final['checksums'][self.world.keep[host]] = rl.sha256_region(path, KEEP_SIZE) if os.path.exists(path) else 'missing'


def persistent_sources(conn, name):
    """The ``<source>`` attributes of the disks in the persistent definition of ``name`` (empty when it does not exist)."""
    try:
        xml = conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    except libvirt.libvirtError:
        return []
    return [dict(s.attrib) for s in ET.fromstring(xml).findall('./devices/disk/source')]


def uses(sources, path, volume):
    """Whether one of ``sources`` is the volume (a file source with its path, or a pool source naming it)."""
    return any(s.get('file') == path or (s.get('pool') == POOL and s.get('volume') == volume) for s in sources)


def volume_info(conn, name):
    try:
        pool = conn.storagePoolLookupByName(POOL)
        pool.refresh(0)
        return pool.storageVolLookupByName(name).info()
    except libvirt.libvirtError:
        return None


def read_journal(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding='utf-8') as handle:
        return [json.loads(line) for line in handle if line.strip()]


def figures(history, violations, seconds):
    """The campaign's numbers."""
    decls = history['declarations']
    outcomes = {}
    for decl in decls:
        outcomes[decl['outcome']] = outcomes.get(decl['outcome'], 0) + 1
    faults = {}
    for fault in history['faults']:
        faults[fault['fault']] = faults.get(fault['fault'], 0) + 1
    begins = [e for e in history['journal'] if e['event'] == 'begin']
    spans, _unended = checker.intervals(history)
    return {'delete_preemptions': len(checker.preemptions(spans)),
            'seed': history['seed'], 'seconds': round(seconds), 'declarations': len(decls), 'outcomes': outcomes, 'faults': faults,
            'journal_intervals': len(begins), 'leaked_payload_dirs': sum(len(d.get('leaked', ())) for d in decls),
            'violations': len(violations), 'violation_kinds': sorted(set(v['kind'] for v in violations)),
            'digest': hashlib.sha256(json.dumps([d['id'] + json.dumps(d['fields'], sort_keys=True) for d in decls]).encode()).hexdigest()[:12]}


def mount_pool_filesystems(state_dir, count):
    """A small tmpfs for the pool of each of ``count`` hosts (the fill-pool fault), mounted before the hosts start: their
    private mount namespaces are copies of this one. [] when this process may not mount (the fault is then left out)."""
    paths = []
    for index in range(count):
        path = os.path.join(state_dir, 'pool-fs-%d' % index)
        os.makedirs(path, exist_ok=True)
        done = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%d,mode=0755' % POOL_FS_SIZE, 'tmpfs', path],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            unmount_pool_filesystems(paths)
            print('chaos: no tmpfs for the pools (%s): the fill-pool fault is left out' % done.stderr.strip(), file=sys.stderr)
            return []
        paths.append(path)
    return paths


def unmount_pool_filesystems(paths):
    for path in paths:
        if subprocess.run(['umount', path], capture_output=True, check=False).returncode != 0:
            subprocess.run(['umount', '--lazy', path], capture_output=True, check=False)


def run_campaign(state_dir, layout, seed, seconds, hosts=3, workers=3, movers=1, first_faults=(), min_ok=0):  # pylint: disable=too-many-arguments
    """Start a lab, run a campaign, stop the lab; (history, violations, figures). Files stay in ``state_dir``."""
    mark = time.monotonic()
    pool_fs = mount_pool_filesystems(state_dir, hosts)
    try:
        lab = rl.start_lab(state_dir, layout, count=hosts)
        lab_start = round(time.monotonic() - mark, 1)
        directory = os.path.join(state_dir, 'runs')
        os.makedirs(directory, exist_ok=True)
        started = time.monotonic()
        try:
            history = Campaign(lab, seed, seconds, directory, workers=workers, movers=movers, pool_fs=pool_fs,
                               first_faults=first_faults, min_ok=min_ok).run()
        finally:
            rl.stop_lab(lab)
    finally:
        unmount_pool_filesystems(pool_fs)
    history['pool_fs'] = bool(pool_fs)
    violations = checker.check(history)
    numbers = figures(history, violations, time.monotonic() - started)
    numbers['phases'] = dict(history.get('phases', {}), lab_start=lab_start)
    with open(os.path.join(state_dir, 'history.json'), 'w', encoding='utf-8') as handle:
        json.dump(dict(history, violations=violations, figures=numbers), handle, indent=1, sort_keys=True)
    return history, violations, numbers


RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'campaigns.json')


def record(numbers, hosts, workers, movers, path=RECORD, note=''):  # pylint: disable=too-many-arguments
    """Append one campaign's figures to ``path`` (tests/chaos/campaigns.json: the chaos section of docs/reliability.md)."""
    entries = []
    if os.path.exists(path):
        with open(path, encoding='utf-8') as handle:
            entries = json.load(handle)
    entries.append(dict(numbers, hosts=hosts, workers=workers, movers=movers, note=note,
                        date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())))
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(entries, handle, indent=1, sort_keys=True)
        handle.write('\n')


def main(argv=None):
    from tests.integration.virtlab_fixtures import virtlab_layout_for  # pylint: disable=import-outside-toplevel
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seed', type=int, default=int(time.time()))
    parser.add_argument('--minutes', type=float, default=5.0)
    parser.add_argument('--hosts', type=int, default=3)
    parser.add_argument('--workers', type=int, default=3)
    parser.add_argument('--movers', type=int, default=1)
    parser.add_argument('--out', default=os.path.join('build', 'chaos'))
    parser.add_argument('--record', action='store_true', help='append the figures to tests/chaos/campaigns.json (docs/reliability.md)')
    args = parser.parse_args(argv)
    state_dir = os.path.abspath(os.path.join(args.out, 'seed-%d' % args.seed))
    os.makedirs(state_dir, exist_ok=True)
    history, violations, numbers = run_campaign(state_dir, virtlab_layout_for(2), args.seed, args.minutes * 60, args.hosts, args.workers,
                                                args.movers)
    print(json.dumps(numbers, sort_keys=True))
    if args.record:
        record(numbers, args.hosts, args.workers, args.movers)
    if violations:
        print(checker.report(history, violations))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
