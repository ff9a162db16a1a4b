"""Concurrency: four ansible-playbook runs at once over the same VMs, each declaring other target states.

The libvirt backend writes an audit journal when ``CONVERGE_VIRT_AUDIT_JOURNAL``
names a file: one JSON line (O_APPEND) when an acting task begins (after the
task is taken with the compare-and-swap on the domain's metadata) and one when
it ends (before the task is released). From it and from the world:

* at most one task acts on a VM at a time: the [begin, end] intervals of a VM
  never overlap, and every begin has its end;
* no lost update: every step a run reported as done is one journal interval
  (a failed run reports none of its earlier steps: at most one unreported
  interval per failure), the done actions of each VM form a sequence the
  action table accepts one after the other (each acted on the state the
  previous one left, not on a stale copy), whose end state is the recorded
  vm_state, which agrees with the hypervisor;
* the metadata is never corrupt: it is parsed all along the runs by a sampler
  and at the end;
* each loser failed with a clear message (the VM is busy, naming the task, or a
  refused transition naming the state) or waited (lock_timeout);
* the end state of each VM is one of the declared ones.

Default: 1 round; RELIABILITY_LONG=1: 4.
"""

import json
from collections import Counter
import re
import threading
import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import actions
from tests.integration.ansible_run import run_module
from tests.reliability import figures
from tests.reliability import reliability_lab as rl
from tools.virtlab import hosts as virtlab_hosts

VMS = ('rc-a', 'rc-b', 'rc-c')
ROUNDS = 4 if rl.LONG else 1
# (declared state, memory, lock_timeout) of each of the four playbooks
DECLARATIONS = (('running', '64MiB', 0), ('stopped', '64MiB', 20), ('paused', '64MiB', 0), ('stopped', '96MiB', 20))
CLEAR_FAILURE = re.compile(r"is busy: task \S+ \(task_state [A-Z_]+\) is in flight|vm_state is [A-Z_]+|stayed taken")
POWER = {libvirt.VIR_DOMAIN_RUNNING: 'running', libvirt.VIR_DOMAIN_PAUSED: 'paused', libvirt.VIR_DOMAIN_SHUTOFF: 'stopped'}
RECORDED = {'running': 'ACTIVE', 'paused': 'PAUSED', 'stopped': 'STOPPED'}


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    started = rl.start_lab(str(tmp_path_factory.mktemp('rclab')), virtlab_layout(3), count=1)
    try:
        yield started
    finally:
        rl.stop_lab(started)


def playbook(lab, index, rotation):
    state, memory, lock_timeout = DECLARATIONS[index]
    order = VMS[rotation % len(VMS):] + VMS[:rotation % len(VMS)]
    tasks = []
    for repeat in range(2):
        for name in (order if repeat == 0 else tuple(reversed(order))):
            tasks.append({'name': '%s %s' % (name, repeat), 'ignore_errors': True, 'converge.virt.vm': {
                'uri': lab.hosts[0].uri, 'name': name, 'state': state, 'memory': memory, 'domain_type': virtlab_hosts.diskless_domain_type(),
                'shutdown_timeout': 1, 'lock_timeout': lock_timeout}})
    return tasks


class Sampler(threading.Thread):
    """Parses every VM's metadata over and over while the runs go on."""

    def __init__(self, uri):
        super().__init__(daemon=True)
        self.uri = uri
        self.stop = threading.Event()
        self.samples = 0
        self.errors = []

    def run(self):
        conn = libvirt.open(self.uri)
        try:
            while not self.stop.is_set():
                for name in VMS:
                    try:
                        rl.record(conn.lookupByName(name))
                        self.samples += 1
                    except libvirt.libvirtError:
                        continue
                    except Exception as exc:  # pylint: disable=broad-except
                        self.errors.append('%s: %r' % (name, exc))
                time.sleep(0.02)
        finally:
            conn.close()


def read_journal(path):
    with open(path, encoding='utf-8') as handle:
        return [json.loads(line) for line in handle]


def intervals(entries):
    """{vm: [(begin, end, task_id, action, outcome)]} sorted by begin; asserts each begin has one end."""
    begins, out = {}, {}
    for entry in entries:
        key = (entry['vm'], entry['task_id'])
        if entry['event'] == 'begin':
            assert key not in begins, 'task %s began twice on %s' % key[::-1]
            begins[key] = entry
        else:
            start = begins.pop(key)
            assert start['pid'] == entry['pid']
            out.setdefault(entry['vm'], []).append((start['monotonic'], entry['monotonic'], entry['task_id'], entry['action'], entry.get('outcome')))
    assert not begins, 'tasks that never ended: %s' % sorted(begins)
    for spans in out.values():
        spans.sort()
    return out


def test_four_playbooks_at_once_never_act_together(lab, tmp_path):
    uri = lab.hosts[0].uri
    for name in VMS:
        made = run_module('vm', {'uri': uri, 'name': name, 'state': 'running', 'memory': '64MiB',
                                 'domain_type': virtlab_hosts.diskless_domain_type()})
        assert made['_rc'] == 0, made
    journal = str(tmp_path / 'journal.jsonl')
    env = {'CONVERGE_VIRT_AUDIT_JOURNAL': journal}
    reported, failures, acted = [], [], 0
    sampler = Sampler(uri)
    sampler.start()
    survived = False
    try:
        for rotation in range(ROUNDS):
            paths = [rl.write_playbook(str(tmp_path / ('p%d-%d.yml' % (rotation, i))), playbook(lab, i, rotation + i)) for i in range(4)]
            procs = [rl.start_playbook(path, env=env) for path in paths]
            for proc in procs:
                rc, data = rl.finish_playbook(proc)
                assert rc == 0, 'ignore_errors: a run must end normally'
                for task, res in rl.task_results(data):
                    if res.get('failed'):
                        failures.append((task, res.get('msg')))
                    else:
                        reported.extend(step['action'] for step in res.get('steps', []) if step.get('action') != 'record')
        sampler.stop.set()
        sampler.join()
        assert sampler.errors == [], 'corrupt metadata seen during the runs: %s' % sampler.errors[:3]
        assert sampler.samples > 0

        spans = intervals(read_journal(journal))
        for vm, vm_spans in spans.items():
            for before, after in zip(vm_spans, vm_spans[1:]):
                assert before[1] <= after[0], 'two tasks acted on %s at once: %s and %s' % (vm, before, after)
        done = [span for vm_spans in spans.values() for span in vm_spans if span[4] == 'done']
        acted = sum(len(v) for v in spans.values())
        unjournaled = Counter(reported) - Counter(s[3] for s in done)
        assert not unjournaled, 'steps reported done that no task journaled (a lost update): %s' % dict(unjournaled)
        # a run that failed on a later step reports none of the steps it did before: at most one per failure
        unreported = Counter(s[3] for s in done) - Counter(reported)
        assert sum(unreported.values()) <= len(failures), 'journaled steps no run reported: %s' % dict(unreported)
        assert len(done) >= len(VMS), 'the runs were expected to act'
        for task, msg in failures:
            assert msg and CLEAR_FAILURE.search(msg), 'unclear failure of %s: %s' % (task, msg)

        conn = lab.conns[0]
        declared_states = {state for state, _memory, _lock in DECLARATIONS}
        declared_memory = {int(memory[:-3]) * 1024 for _state, memory, _lock in DECLARATIONS}
        for name in VMS:
            dom = conn.lookupByName(name)
            rec = rl.record(dom)  # parses
            state = POWER[dom.state()[0]]
            assert rec.get('task_state') is None, '%s: task left %s' % (name, rec)
            assert rec.get('vm_state') == RECORDED[state], '%s: record %s, hypervisor %s' % (name, rec.get('vm_state'), state)
            memory = int(ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)).findtext('memory'))
            assert state in declared_states and memory in declared_memory, '%s ended %s with %s KiB' % (name, state, memory)
            vm_state = 'ACTIVE'
            for span in spans.get(name, []):
                if span[4] != 'done':
                    continue
                assert actions.accepts(span[3], vm_state), '%s: %s done on a VM whose state was %s: an update was lost' % (name, span[3], vm_state)
                vm_state = actions.vm_state_after(span[3], vm_state) or vm_state
            assert vm_state == rec.get('vm_state'), '%s: the journaled actions end in %s, the record says %s' % (name, vm_state, rec.get('vm_state'))
        survived = True
    finally:
        sampler.stop.set()
        scenario = 'four ansible-playbook runs at once over %d shared VMs (libvirt), %d round%s' % (len(VMS), ROUNDS, 's' if ROUNDS > 1 else '')
        figures.record('concurrency', scenario, survived, count=acted, detail='%d acting tasks journaled, %d losers failed cleanly, %d metadata samples parsed'
                       % (acted, len(failures), sampler.samples))
