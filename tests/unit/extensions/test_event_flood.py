# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33 item 3: a flood of events for a few VMs (a guest that keeps opening and closing its agent channel, a VM
started and stopped in a loop, a VM whose annotations are rewritten thousands of times) keeps each source's memory
bounded, and the last state of every VM still reaches ansible-rulebook.

The sources run as they do under ansible-rulebook (their classes, the Outbox, a queue of one event as
ansible-rulebook gives, a consumer slower than the producer), with libvirt's callbacks / the KubeVirt watch fed by
the test instead of a daemon. Memory: tracemalloc's peak of the flood, for N and 10 N events - it must not grow with
N (the Outbox's high-water mark is the bound: per VM one event of each kind).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import tracemalloc
import types

from ansible_collections.converge.virt.plugins.module_utils._common.events import Outbox

HERE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'extensions', 'eda', 'plugins', 'event_source')


def _load(name):
    spec = importlib.util.spec_from_file_location(name + '_under_test_flood', os.path.join(HERE, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


libvirt_events = _load('libvirt_events')
kubevirt_events = _load('kubevirt_events')

VMS = 3
STARTED, STOPPED = 2, 5          # virDomainEventType
AGENT_CONNECTED, AGENT_DISCONNECTED, AGENT_CHANNEL = 1, 2, 2


class Dom:
    def __init__(self, number):
        self.number = number

    def name(self):
        return 'vm-%d' % self.number

    def UUIDString(self):  # pylint: disable=invalid-name
        return '00000000-0000-4000-8000-%012d' % self.number


class Received:
    """What the consumer keeps: a count, the last lifecycle/sync/change event per VM, the STOPPED ones, the sync_done
    counts (not every event: the consumer's memory is not the source's)."""

    def __init__(self):
        self.count = 0
        self.last = {}
        self.stopped = []
        self.sync_done = []

    def add(self, event):
        self.count += 1
        if event['type'] in ('lifecycle', 'sync', 'change'):
            self.last[event['vm'].get('uuid') or event['vm']['name']] = event
        if event['type'] == 'lifecycle' and event['event'] == 'STOPPED':
            self.stopped.append(event['vm']['uuid'])
        if event['type'] == 'sync_done':
            self.sync_done.append(event['count'])
        assert event['type'] != 'error', event


async def _consume(queue, received, delay):
    while True:
        received.add((await queue.get())['converge_virt'])
        await asyncio.sleep(delay)   # ansible-rulebook is slower than the flood


async def _drained(outbox, received, quiet=0.3):
    """Until nothing waits and nothing has come for ``quiet`` seconds."""
    count = -1
    while outbox.pending() or received.count != count:
        assert not outbox.task.done(), outbox.task
        count = received.count
        await asyncio.sleep(quiet)


def _libvirt_flood(events, stopped_delay=0.0, queue_limit=4096, vms=VMS):
    """Run a libvirt_events source through ``events`` lifecycle+agent events; (received, outbox, peak bytes, final)."""
    doms = [Dom(number) for number in range(vms)]
    power = {dom.UUIDString(): 'RUNNING' for dom in doms}

    def list_vms(_handle, domains=None, threads=1):  # pylint: disable=unused-argument
        return [{'name': dom.name(), 'uuid': dom.UUIDString(), 'exists': True, 'vm_state': 'ACTIVE', 'power_state': power[dom.UUIDString()],
                 'task_state': None, 'status': 'Running' if power[dom.UUIDString()] == 'RUNNING' else 'Stopped'}
                for dom in (domains or doms)]

    libvirt_events.fleet = types.SimpleNamespace(list_vms=list_vms)   # the daemon's answer (this test's own copy of the module)

    async def scenario():
        queue = asyncio.Queue(maxsize=1)
        source = libvirt_events.LibvirtEvents(queue, {'uri': 'test:///default', 'stopped_delay': stopped_delay, 'queue_limit': queue_limit})
        source.loop = asyncio.get_running_loop()
        source.host = 'hv1'
        source.outbox = Outbox(queue, source.loop, limit=queue_limit, overflow=source._overflow,  # pylint: disable=protected-access
                               reserved=(libvirt_events.SYNC, libvirt_events.DISCONNECTED))
        source.delayer = libvirt_events.Delayer(stopped_delay, source._launch)  # pylint: disable=protected-access
        received = Received()
        consumer = source.loop.create_task(_consume(queue, received, 0.0005))
        tracemalloc.start()
        for index in range(events):
            dom = doms[index % vms]
            running = (index // vms) % 2 == 0
            power[dom.UUIDString()] = 'RUNNING' if running else 'SHUTDOWN'
            source._lifecycle(None, dom, STARTED if running else STOPPED, 0, None)  # pylint: disable=protected-access
            source._agent(None, dom, AGENT_CONNECTED if running else AGENT_DISCONNECTED, AGENT_CHANNEL, None)  # pylint: disable=protected-access
            if index % 64 == 0:
                await asyncio.sleep(0)
        # the last word of each VM: vm-0 stops, the others run
        final = {}
        for dom in doms:
            running = dom.number != 0
            power[dom.UUIDString()] = final[dom.UUIDString()] = 'RUNNING' if running else 'SHUTDOWN'
            source._lifecycle(None, dom, STARTED if running else STOPPED, 0, None)  # pylint: disable=protected-access
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        await asyncio.sleep(stopped_delay)
        await _drained(source.outbox, received)
        consumer.cancel()
        source.outbox.task.cancel()
        source.reader.shutdown(wait=False)
        return received, source.outbox, peak, final
    return asyncio.run(scenario())


def test_libvirt_a_flood_is_coalesced_bounded_and_the_last_state_of_every_vm_arrives():
    small = _libvirt_flood(1000)
    received, outbox, peak, final = _libvirt_flood(10000)
    # 10,000 lifecycle + 10,000 agent events for 3 VMs: at most one of each kind (STARTED, STOPPED, agent) per VM waited
    assert outbox.high_water <= 3 * VMS, outbox.high_water
    assert outbox.dropped == 0 and outbox.replaced > 10000, (outbox.dropped, outbox.replaced)
    assert received.count < 20000 / 2, received.count
    # memory does not grow with the flood: 10 times the events, about the same peak
    assert peak < small[2] * 1.5 + 256 * 1024, (small[2], peak)
    last = received.last
    assert {uuid: event['vm']['power_state'] for uuid, event in last.items()} == final, last
    assert last[Dom(0).UUIDString()]['event'] == 'STOPPED' and last[Dom(1).UUIDString()]['event'] == 'STARTED'


def test_libvirt_nova_delayed_stopped_survives_the_flood():
    # with the delay, the STOPPED events of the flood are dropped by the later ones; the last one waits and is sent
    received, outbox, _peak, final = _libvirt_flood(3000, stopped_delay=0.2)
    assert outbox.high_water <= 3 * VMS
    assert {uuid: event['vm']['power_state'] for uuid, event in received.last.items()} == final
    assert received.stopped == [Dom(0).UUIDString()], 'only the final stop outlives the delay'


def test_libvirt_an_overflow_is_answered_by_a_full_sync():
    # more VMs than the bound: events are dropped, and a sync says every VM's last state
    received, outbox, _peak, final = _libvirt_flood(2000, queue_limit=4, vms=12)
    assert outbox.dropped > 0 and outbox.high_water <= 4 + 2
    assert 12 in received.sync_done, received.sync_done
    assert {uuid: event['vm']['power_state'] for uuid, event in received.last.items()} == final


# ----------------------------------------------------------------------------------------------------- KubeVirt
def _vm(name, rev, stopping):
    return {'metadata': {'name': name, 'namespace': 'ns', 'uid': '00000000-0000-4000-8000-0000000000%02d' % int(name[-1]),
                         'resourceVersion': str(rev),
                         'annotations': dict({'converge.virt/vm-state': 'ACTIVE'}, **({'converge.virt/task-state': 'STOPPING'} if stopping else {}))},
            'spec': {'runStrategy': 'Halted' if stopping else 'Always'}, 'status': {'printableStatus': 'Stopping' if stopping else 'Stopped'}}


class _Watch:
    """A client whose first watch of virtualmachines yields the flood, the next one ends the source."""

    def __init__(self, source, events, final):
        self.source = source
        self.events = events
        self.final = final
        self.calls = 0

    def watch(self, *_args):
        self.calls += 1
        if self.calls > 1:
            self.source.stopping.set()
            return iter(())
        return self._flood()

    def _flood(self):
        for index in range(self.events):
            name = 'vm-%d' % (index % VMS)
            yield {'type': 'MODIFIED', 'object': _vm(name, index, (index // VMS) % 2 == 0)}
        for number, stopping in enumerate(self.final):
            yield {'type': 'MODIFIED', 'object': _vm('vm-%d' % number, self.events + number, stopping)}

    def close(self):
        pass


def _kubevirt_flood(events, final=(True, False, True)):
    async def scenario():
        queue = asyncio.Queue(maxsize=1)
        source = kubevirt_events.KubevirtEvents(queue, {'namespace': 'ns'})
        source.loop = asyncio.get_running_loop()
        source.outbox = Outbox(queue, source.loop, limit=source.args['queue_limit'], overflow=source._overflow,  # pylint: disable=protected-access
                               reserved=(kubevirt_events.SYNC, kubevirt_events.HEARTBEAT, kubevirt_events.ERROR))
        source.objects['virtualmachines'] = {'vm-%d' % n: _vm('vm-%d' % n, 0, False) for n in range(VMS)}
        source.sent = {name: source._words(name) for name in source.objects['virtualmachines']}  # pylint: disable=protected-access
        received = Received()
        consumer = source.loop.create_task(_consume(queue, received, 0.0005))
        tracemalloc.start()
        watcher = threading.Thread(target=source._watch,  # pylint: disable=protected-access
                                   args=(_Watch(source, events, final), 'virtualmachines', 'VirtualMachine', '1', source.generation))
        watcher.start()
        while watcher.is_alive():
            await asyncio.sleep(0.01)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        await _drained(source.outbox, received)
        consumer.cancel()
        source.outbox.task.cancel()
        return received, source.outbox, peak
    return asyncio.run(scenario())


def test_kubevirt_a_flood_is_coalesced_bounded_and_the_last_words_of_every_vm_arrive():
    small = _kubevirt_flood(1000)
    received, outbox, peak = _kubevirt_flood(10000)
    assert outbox.high_water <= VMS, outbox.high_water
    assert outbox.dropped == 0 and received.count < 10000 / 2, (outbox.dropped, received.count)
    assert peak < small[2] * 1.5 + 256 * 1024, (small[2], peak)
    last = {event['vm']['name']: event for event in received.last.values()}
    assert {name: (event['vm']['task_state'], event['vm']['run_strategy']) for name, event in last.items()} == {
        'vm-0': ('STOPPING', 'Halted'), 'vm-1': (None, 'Always'), 'vm-2': ('STOPPING', 'Halted')}, last
    assert all(event['task_in_progress'] == (event['vm']['task_state'] is not None) for event in last.values())


def test_outbox_memory_for_the_old_behaviour_would_grow():
    """The measure can fail: without coalescing (every event its own key) the same flood keeps every event."""
    async def scenario(events):
        queue = asyncio.Queue(maxsize=1)
        outbox = Outbox(queue, asyncio.get_running_loop(), limit=10 ** 9)
        outbox.task.cancel()
        tracemalloc.start()
        for index in range(events):
            outbox.put({'converge_virt': {'type': 'agent', 'vm': {'name': 'vm-%d' % (index % VMS)}}})   # no key: no coalescing
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak
    assert asyncio.run(scenario(10000)) > asyncio.run(scenario(1000)) * 1.5 + 256 * 1024
