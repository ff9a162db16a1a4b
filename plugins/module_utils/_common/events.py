# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection's Event-Driven Ansible sources share outside ansible-rulebook.

- :func:`safe_event`: what a source emits never carries template syntax. ansible-rulebook writes the whole event
  into the extra vars of every ``run_playbook`` (``ansible_eda.event``) and the rulebook author may pass event fields
  on; ansible-core evaluates template syntax found in extra vars. A string that could be a template (see
  :func:`carries_template`) goes out as ``null``, with its percent-encoded form (``<field>_percent_encoded``, which
  cannot be a template) and its field named in the object's ``withheld`` list.
- :func:`own_words`: the state words of an event are the collection's own vocabularies (states.py, status.py);
  a recorded word that is not one of them (the records are editable by whoever can edit the VM) becomes the
  vocabulary's unknown word and the raw value goes only under ``untrusted_raw`` (itself passed through safe_event).
- :class:`Outbox`: a bounded hand-over to ansible-rulebook's queue that keeps per key (per VM) only the latest
  event while it waits (coalescing).

``python <source>.py ...`` runs a source's ``main(queue, args)`` with a queue that prints every event as one JSON
line on standard output: a look at the events without a rulebook, and how the tests run the sources.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import json
import re
import sys
import threading

try:
    from urllib.parse import quote
except ImportError:  # pragma: no cover - Python 2 is not supported by the sources
    quote = None

from ansible_collections.converge.virt.plugins.module_utils._phase import states, status

# Jinja's default delimiters ({{ }}, {% %}, {# #}: ansible-core never changes them) need a curly brace; ansible-core
# (2.19 and earlier) also honours a '#jinja2:' header that may redefine them. A string with either is withheld.
TEMPLATE_MARKS = ('{', '}', '#jinja2:')
UUID = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')

# field -> (the collection's words, the word for anything else); None (no word) is always allowed
VOCABULARIES = {
    'vm_state': (states.VM_STATES, 'UNKNOWN'),
    'power_state': (states.POWER_STATES, 'UNKNOWN'),
    'task_state': (states.TASK_STATES, 'UNKNOWN'),
    'status': (status.STATUSES, status.UNKNOWN),
    'printable_status': (status.STATUSES, status.UNKNOWN),
    'phase': (states.PHASES, states.UNKNOWN),
    'run_strategy': (status.RUN_STRATEGIES, 'UNKNOWN'),
}

# the bound of an Outbox: events waiting at most (distinct keys; a source keys its events per VM and kind)
DEFAULT_LIMIT = 4096


def carries_template(text):
    """True when ``text`` could be (part of) a template for ansible-core: it has a curly brace or '#jinja2:'."""
    return any(mark in text for mark in TEMPLATE_MARKS)


def percent_encoded(text):
    """``text`` with every byte but ASCII letters, digits and ``_.-~`` as %XX (UTF-8): never a template."""
    return quote(text, safe='')


def safe_event(value):
    """``value`` (an event payload) with every string that carries template syntax withheld (see the module doc).

    A string field ``F`` of an object becomes ``F: null``, ``F_percent_encoded: '...'`` and ``F`` is listed in that
    object's ``withheld``; a string in a list becomes null; a key with template syntax is percent-encoded.
    """
    if isinstance(value, dict):
        out = {}
        withheld = list(value.get('withheld') or [])
        for key, item in value.items():
            key = str(key)
            if carries_template(key):
                key = percent_encoded(key)
            if isinstance(item, str) and carries_template(item):
                out[key] = None
                out[key + '_percent_encoded'] = percent_encoded(item)
                withheld.append(key)
            elif key != 'withheld':
                out[key] = safe_event(item)
        if withheld or 'withheld' in value:
            out['withheld'] = sorted(set(withheld))
        return out
    if isinstance(value, (list, tuple)):
        return [None if isinstance(item, str) and carries_template(item) else safe_event(item) for item in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    return None if carries_template(text) else text


def own_words(vm):
    """``vm`` (a view) with its state words checked against the collection's vocabularies (see the module doc)."""
    out = dict(vm)
    raw = {}
    for field, (words, unknown) in VOCABULARIES.items():
        value = out.get(field)
        if value is not None and value not in words:
            raw[field] = value if isinstance(value, str) else repr(value)
            out[field] = unknown
    if raw:
        out['untrusted_raw'] = raw
    return out


def trusted_uuid(value):
    """``value`` lower-cased when it is a UUID (libvirt's domain UUID, KubeVirt's metadata.uid), else None."""
    if isinstance(value, str) and UUID.match(value.lower()):
        return value.lower()
    return None


class Outbox:
    """The events of a source to ansible-rulebook's queue, which is bounded (``asyncio.Queue(1)``: a ``put_nowait``
    raises QueueFull as soon as the rulebook has not yet taken the previous event).

    ``put(item, key)`` never blocks and never raises, from any thread. An item waits here until one task hands it
    over with ``await queue.put``: a slow rulebook slows the hand-over, not the source. While an item of a key
    waits, a new item of the same key replaces it (coalescing: only the latest event per VM is kept, and it moves to
    the end of the line); at most ``limit`` keys wait. An item of a new key when ``limit`` keys wait is dropped and
    ``overflow(count)`` is called (the source answers with a full sync); the keys in ``reserved`` (the sync itself)
    are never refused. Memory is so bounded by ``limit`` + len(``reserved``) waiting items, whatever the event rate.

    An item is a payload (dict), a list of payloads (sent in order), or a callable returning an awaitable of one of
    them (run when the item's turn comes: a state read then is the latest). Every payload goes through
    :func:`safe_event` before it leaves.
    """

    def __init__(self, queue, loop, limit=DEFAULT_LIMIT, overflow=None, reserved=()):
        self.queue = queue
        self.loop = loop
        self.limit = limit
        self.overflow = overflow
        self.reserved = frozenset(reserved)
        self.lock = threading.Lock()
        self.waiting = collections.OrderedDict()
        self.dropped = 0
        self.replaced = 0
        self.high_water = 0
        self.unique = itertools.count()
        self.wake_scheduled = False
        self.ready = asyncio.Event()
        self.task = loop.create_task(self._pump())

    def put(self, item, key=None):
        """Queue ``item`` under ``key`` (None: its own key); from any thread. False when it was dropped."""
        if key is None:
            key = ('unique', next(self.unique))
        dropped = 0
        with self.lock:
            if key in self.waiting:
                self.waiting[key] = item
                self.waiting.move_to_end(key)
                self.replaced += 1
            elif len(self.waiting) >= self.limit and key not in self.reserved:
                self.dropped += 1
                dropped = self.dropped
            else:
                self.waiting[key] = item
                self.high_water = max(self.high_water, len(self.waiting))
        if dropped:
            if self.overflow is not None:
                self.overflow(dropped)
            return False
        self._wake()
        return True

    # the same from another thread (kept for the sources' callers)
    put_threadsafe = put

    def _wake(self):
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.ready.set()
            return
        # from another thread: at most one wake-up waits in the loop, however many items come
        with self.lock:
            if self.wake_scheduled:
                return
            self.wake_scheduled = True
        self.loop.call_soon_threadsafe(self._set_ready)

    def _set_ready(self):
        with self.lock:
            self.wake_scheduled = False
        self.ready.set()

    def drop(self, predicate):
        """Forget the waiting items whose key matches ``predicate``; how many."""
        with self.lock:
            keys = [key for key in self.waiting if predicate(key)]
            for key in keys:
                del self.waiting[key]
        return len(keys)

    def pending(self):
        """How many items wait."""
        with self.lock:
            return len(self.waiting)

    def _take(self):
        with self.lock:
            if not self.waiting:
                self.ready.clear()
                return None
            return self.waiting.popitem(last=False)[1]

    async def _pump(self):
        while True:
            item = self._take()
            if item is None:
                await self.ready.wait()
                continue
            if callable(item):
                try:
                    item = item()
                    if inspect.isawaitable(item):
                        item = await item
                except Exception as exc:  # pylint: disable=broad-except
                    # one failed read must not stop every later event: say so and go on
                    item = {'converge_virt': {'type': 'error', 'message': '%s: %s' % (type(exc).__name__, exc)}}
            for payload in (item if isinstance(item, list) else [item]):
                if payload is not None:
                    await self.queue.put(safe_event(payload))


class JsonLines:
    """A queue for ``main(queue, args)`` that writes each event as a JSON line (flushed at once)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def put_nowait(self, item):
        """Write ``item``."""
        self.stream.write(json.dumps(item, sort_keys=True) + '\n')
        self.stream.flush()

    async def put(self, item):
        """Write ``item`` (as ``asyncio.Queue.put``)."""
        self.put_nowait(item)


def print_events(main, args):
    """Run an event source's ``main`` with ``args`` until it ends (or is killed), printing its events."""
    asyncio.run(main(JsonLines(), args))
