# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt_events: an Event-Driven Ansible event source for libvirt domain lifecycle events.

Each event carries the collection's state words for the VM, computed by the same phase logic as
converge.virt.vm_info (vm_state, power_state, task_state, status, phase, phase_reason), read again from the
daemon when the event is emitted - an event says what the VM is now, not only what happened.

Nova's rules for lifecycle events (nova/virt/libvirt/host.py ``_event_emit_delayed``, seed 002):

- a STOPPED event is held back ``stopped_delay`` seconds (Nova: 15) and dropped if another event of the same
  VM comes in the meantime: a reboot is stopped + started, and a rule should not react to its first half;
- the state is read again before an event goes out;
- a VM with a task of the collection in flight is marked (``task_in_progress``), so rules can skip it as
  Nova's power-state sync skips an instance with a task_state.

Events are lost while the connection is down: after the daemon comes back, the source reconnects (backoff up to
``reconnect_max`` seconds) and emits a ``sync`` event for every VM, then ``sync_done`` - the same it emits
at start - so a rule sees the state it missed.

Events never become code (issue 33): no string of an event carries template syntax (a curly brace or '#jinja2:'):
such a string (a VM name chosen by a tenant, say) goes out as null, with ``<field>_percent_encoded`` and the field
named in ``withheld`` (_common/events.py safe_event); ``vm.uuid`` is libvirt's domain UUID checked against the UUID
pattern - what a rule should pass to a playbook. The state words are the collection's own: a recorded word that is
not one of them becomes UNKNOWN (Unknown for status and phase), the raw value only under ``vm.untrusted_raw``.

Bounded: per VM at most one event of each kind (libvirt's nine lifecycle events, the agent event) waits to be handed
to ansible-rulebook (a newer one of that kind replaces the waiting one and goes to the end of the line; the state is
read when the event's turn comes, so it is the latest), and at most ``queue_limit`` events wait in all; an event
beyond that is dropped and a full sync follows instead.

Arguments (``sources: - converge.virt.libvirt_events: {...}``):

    uri             libvirt URI (default: $LIBVIRT_DEFAULT_URI, as an AWX/EDA credential injects it, then qemu:///system,
                    the modules' order)
    stopped_delay   seconds a STOPPED event is held back (default 15; 0 emits at once)
    reconnect_max   longest wait between two reconnection attempts, seconds (default 30)
    initial_sync    emit a sync event for every VM at start (default true)
    queue_limit     most events waiting to be handed to ansible-rulebook (default 4096; each VM needs at most 10)

Event (``event.converge_virt``): ``type`` (lifecycle, agent, sync, sync_done, disconnected), ``host`` (the daemon's
host name), ``event`` and ``detail`` (libvirt's words for a lifecycle event, e.g. STOPPED / destroyed),
``agent`` (connected, disconnected) and ``reason`` (domain_started, channel, unknown) for an agent event (the
guest agent of a VM with ``guest_agent`` opened or closed its channel: libvirt's agent lifecycle event, sent at
once), ``vm`` (name, uuid, exists and the state words, read again when the event is sent), ``task_in_progress``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import types
from concurrent.futures import ThreadPoolExecutor

try:
    import libvirt
    import libvirtaio
except ImportError:  # pragma: no cover - said when the source starts
    libvirt = libvirtaio = None

try:
    import ansible_collections.converge.virt.plugins.module_utils  # noqa: F401  pylint: disable=unused-import
except ImportError:
    # ansible-rulebook runs a source by its path (runpy.run_path) and puts no collections root on sys.path: in a decision
    # environment (the collection installed under <root>/ansible_collections/converge/virt, no PYTHONPATH) the imports
    # below failed with "No module named 'ansible_collections'". The root this file is installed under is added then.
    _PARTS = os.path.abspath(__file__).split(os.sep)
    if _PARTS[-8:-5] == ['ansible_collections', 'converge', 'virt']:
        sys.path.append(os.sep.join(_PARTS[:-8]) or os.sep)

from ansible_collections.converge.virt.plugins.module_utils._common.events import Outbox, own_words, print_events, trusted_uuid
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt import fleet
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import resolve_uri
from ansible_collections.converge.virt.plugins.module_utils._phase.views import absent_view

DEFAULTS = {'uri': 'qemu:///system', 'stopped_delay': 15.0, 'reconnect_max': 30.0, 'initial_sync': True, 'queue_limit': 4096}
# the outbox's keys never refused (a full sync answers an overflow)
SYNC = ('sync',)
DISCONNECTED = ('disconnected',)

# virDomainEventType -> name, and per type the names of its detail codes (libvirt's virDomainEvent*DetailType)
EVENTS = ('DEFINED', 'UNDEFINED', 'STARTED', 'SUSPENDED', 'RESUMED', 'STOPPED', 'SHUTDOWN', 'PMSUSPENDED', 'CRASHED')
DETAILS = {
    'DEFINED': ('added', 'updated', 'renamed', 'from_snapshot'),
    'UNDEFINED': ('removed', 'renamed'),
    'STARTED': ('booted', 'migrated', 'restored', 'from_snapshot', 'wakeup'),
    'SUSPENDED': ('paused', 'migrated', 'ioerror', 'watchdog', 'restored', 'from_snapshot', 'api_error', 'postcopy', 'postcopy_failed'),
    'RESUMED': ('unpaused', 'migrated', 'from_snapshot', 'postcopy', 'postcopy_failed'),
    'STOPPED': ('shutdown', 'destroyed', 'crashed', 'migrated', 'saved', 'failed', 'from_snapshot'),
    'SHUTDOWN': ('finished', 'guest', 'host'),
    'PMSUSPENDED': ('memory', 'disk'),
    'CRASHED': ('panicked', 'crashloaded'),
}


# VIR_CONNECT_DOMAIN_EVENT_AGENT_LIFECYCLE_STATE_* and _REASON_*
AGENT_STATES = {1: 'connected', 2: 'disconnected'}
AGENT_REASONS = {0: 'unknown', 1: 'domain_started', 2: 'channel'}


def event_words(event, detail):
    """(event name, detail name) for libvirt's numeric lifecycle event and detail codes."""
    name = EVENTS[event] if 0 <= event < len(EVENTS) else 'UNKNOWN'
    details = DETAILS.get(name, ())
    return name, details[detail] if 0 <= detail < len(details) else 'unknown'


def check_args(args):
    """The arguments with defaults; ValueError naming the argument and the reason."""
    unknown = sorted(set(args or {}) - set(DEFAULTS))
    if unknown:
        raise ValueError('libvirt_events: %s: unknown argument (known: %s)' % (unknown[0], ', '.join(sorted(DEFAULTS))))
    out = dict(DEFAULTS, **(args or {}))
    if 'uri' not in (args or {}):
        out['uri'] = resolve_uri()
    if not isinstance(out['uri'], str) or not out['uri']:
        raise ValueError('libvirt_events: uri: must be a libvirt URI')
    for key in ('stopped_delay', 'reconnect_max'):
        try:
            out[key] = float(out[key])
        except (TypeError, ValueError):
            raise ValueError('libvirt_events: %s: must be a number of seconds, got %r' % (key, out[key])) from None
        if out[key] < 0:
            raise ValueError('libvirt_events: %s: must be 0 or more, got %r' % (key, out[key]))
    if not isinstance(out['initial_sync'], bool):
        raise ValueError('libvirt_events: initial_sync: must be true or false')
    try:
        out['queue_limit'] = int(out['queue_limit'])
    except (TypeError, ValueError):
        raise ValueError('libvirt_events: queue_limit: must be a whole number, got %r' % (out['queue_limit'],)) from None
    if out['queue_limit'] < 2:
        raise ValueError('libvirt_events: queue_limit: must be 2 or more, got %r' % (out['queue_limit'],))
    return out


class Delayer:
    """Nova's delayed STOPPED: hold it back, drop it when any later event of the same VM arrives.

    ``launch(key, name, factory)`` sends an event; ``factory`` makes its payload when it is sent (the state is read then).
    """

    def __init__(self, delay, launch):
        self.delay = delay
        self.launch = launch
        self.pending = {}

    def event(self, key, name, factory):
        """A lifecycle event of VM ``key``: cancel its held-back STOPPED, then send this one now or hold it."""
        held = self.pending.pop(key, None)
        if held is not None:
            held.cancel()
        if name == 'STOPPED' and self.delay > 0:
            self.pending[key] = asyncio.get_running_loop().call_later(self.delay, self._fire, key, name, factory)
        else:
            self.launch(key, name, factory)

    def _fire(self, key, name, factory):
        self.pending.pop(key, None)
        self.launch(key, name, factory)

    def cancel_all(self):
        """Drop everything held back (the connection is gone: a full sync follows)."""
        for held in self.pending.values():
            held.cancel()
        self.pending.clear()


class LibvirtEvents:
    """One connection's lifecycle events, re-read and put on ``queue`` as the collection's words."""

    def __init__(self, queue, args):
        self.queue = queue
        self.outbox = None
        self.args = check_args(args)
        self.conn = None
        self.host = None
        self.closed = None
        self.loop = None
        self.delayer = None
        # one reader thread: reads (and so events) go out in the order the events came
        self.reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix='libvirt-events')

    def _put(self, item, key):
        self.outbox.put(item, key)

    def _read(self, dom=None):
        # blocking: runs on the reader thread
        return fleet.list_vms(types.SimpleNamespace(conn=self.conn), domains=None if dom is None else [dom], threads=1)

    @staticmethod
    def _public(vm):
        """The event's ``vm``: the collection's words only, the UUID only when it is one (safe_event does the rest)."""
        keep = ('name', 'uuid', 'exists', 'vm_state', 'power_state', 'task_state', 'status', 'phase', 'phase_reason', 'state', 'state_reason')
        out = own_words({key: vm.get(key) for key in keep if key in vm})
        out['uuid'] = trusted_uuid(out.get('uuid'))
        out['withheld'] = []
        return out

    def _launch(self, key, name, factory):
        # the latest event of a kind (STARTED, STOPPED, ...) of a VM replaces the one of that kind still waiting (its
        # payload is made when its turn comes, so it says the latest state)
        self._put(factory, ('lifecycle', key, name))

    def _lifecycle(self, _conn, dom, event, detail, _opaque):
        name, detail_name = event_words(event, detail)
        uuid = dom.UUIDString()
        self.delayer.event(uuid, name, functools.partial(self._lifecycle_payload, dom, dom.name(), uuid, name, detail_name))

    async def _lifecycle_payload(self, dom, vm_name, uuid, name, detail_name):
        vm = await self._read_again(dom, vm_name, uuid)
        public = self._public(vm)
        return {'converge_virt': {'type': 'lifecycle', 'host': self.host, 'event': name, 'detail': detail_name, 'vm': public,
                                  'task_in_progress': bool(public.get('task_state'))}}

    async def _read_again(self, dom, vm_name, uuid):
        try:
            vms = await self.loop.run_in_executor(self.reader, self._read, dom)
        except libvirt.libvirtError:
            vms = []
        # undefined (or gone) by the time it is read again
        return vms[0] if vms else dict(absent_view(), name=vm_name, uuid=uuid, exists=False)

    def _agent(self, _conn, dom, state, reason, _opaque):
        # the guest agent (the qemu-guest-agent channel) connected or disconnected: not held back, re-read like the others
        uuid = dom.UUIDString()
        self._put(functools.partial(self._agent_payload, dom, dom.name(), uuid, AGENT_STATES.get(state, 'unknown'),
                                    AGENT_REASONS.get(reason, 'unknown')), ('agent', uuid))

    async def _agent_payload(self, dom, vm_name, uuid, state, reason):
        vm = await self._read_again(dom, vm_name, uuid)
        public = self._public(vm)
        return {'converge_virt': {'type': 'agent', 'host': self.host, 'agent': state, 'reason': reason, 'vm': public,
                                  'task_in_progress': bool(public.get('task_state'))}}

    async def _sync_payloads(self):
        # one item of the outbox: every VM read once, in name order, then sync_done
        try:
            vms = await self.loop.run_in_executor(self.reader, self._read, None)
        except libvirt.libvirtError:
            return None  # the connection is going: the reconnection syncs again
        out = []
        for vm in sorted(vms, key=lambda item: str(item['name'])):
            public = self._public(vm)
            out.append({'converge_virt': {'type': 'sync', 'host': self.host, 'vm': public, 'task_in_progress': bool(public.get('task_state'))}})
        out.append({'converge_virt': {'type': 'sync_done', 'host': self.host, 'count': len(vms)}})
        return out

    def _sync(self):
        self._put(self._sync_payloads, SYNC)

    def _overflow(self, _dropped):
        # an event was dropped (queue_limit events wait): a full sync, after what waits, says every VM's state
        self._sync()

    def _on_close(self, _conn, _reason, _opaque):
        self.loop.call_soon_threadsafe(self.closed.set)

    async def _connect(self):
        delay = 0.5
        while True:
            try:
                conn = await self.loop.run_in_executor(self.reader, libvirt.open, self.args['uri'])
                conn.registerCloseCallback(self._on_close, None)
                conn.setKeepAlive(5, 3)
                return conn
            except libvirt.libvirtError:
                await asyncio.sleep(delay)
                delay = min(delay * 2, max(self.args['reconnect_max'], 0.5))

    async def run(self):
        """Connect, sync, follow events; reconnect and sync again whenever the connection drops."""
        if libvirt is None:
            raise RuntimeError('libvirt_events needs libvirt-python (with libvirtaio) where ansible-rulebook runs')
        self.loop = asyncio.get_running_loop()
        self.outbox = Outbox(self.queue, self.loop, limit=self.args['queue_limit'], overflow=self._overflow, reserved=(SYNC, DISCONNECTED))
        libvirtaio.virEventRegisterAsyncIOImpl(loop=self.loop)
        self.delayer = Delayer(self.args['stopped_delay'], self._launch)
        first = True
        while True:
            self.closed = asyncio.Event()
            self.conn = await self._connect()
            self.host = await self.loop.run_in_executor(self.reader, self.conn.getHostname)
            callbacks = [self.conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._lifecycle, None),
                         self.conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, self._agent, None)]
            if self.args['initial_sync'] or not first:
                self._sync()
            first = False
            await self.closed.wait()
            self.delayer.cancel_all()
            for callback in callbacks:
                try:
                    self.conn.domainEventDeregisterAny(callback)
                except libvirt.libvirtError:
                    pass
            # what waits was read from the lost connection: the sync after the reconnection replaces it
            self.outbox.drop(lambda key: key[0] in ('lifecycle', 'agent'))
            self._put({'converge_virt': {'type': 'disconnected', 'host': self.host, 'uri': redact_uri(self.args['uri'])}}, DISCONNECTED)


async def main(queue, args):
    """ansible-rulebook's entry point."""
    await LibvirtEvents(queue, args).run()


if __name__ == '__main__':
    # python libvirt_events.py URI: print the events as JSON lines (for a person, and for the tests)
    print_events(main, {'uri': sys.argv[1] if len(sys.argv) > 1 else DEFAULTS['uri'], 'reconnect_max': 2.0,
                        'stopped_delay': float(os.environ.get('LIBVIRT_EVENTS_STOPPED_DELAY', DEFAULTS['stopped_delay']))})
