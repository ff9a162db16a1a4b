# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection's Event-Driven Ansible sources share outside ansible-rulebook.

``python <source>.py ...`` runs a source's ``main(queue, args)`` with a queue that prints every event as one JSON
line on standard output: a look at the events without a rulebook, and how the tests run the sources.
"""

from __future__ import annotations

import asyncio
import json
import sys


class Outbox:
    """The events of a source, in order, to ansible-rulebook's queue, which is bounded (``asyncio.Queue(1)``: a
    ``put_nowait`` raises QueueFull as soon as the rulebook has not yet taken the previous event).

    ``put`` (on the event loop) and ``put_threadsafe`` (from any thread) never block and never raise: the event waits
    in an unbounded queue of our own, and one task hands the events over one by one with ``await queue.put``, so a
    slow rulebook slows the hand-over, not the source, and nothing is lost or reordered.
    """

    def __init__(self, queue, loop):
        self.queue = queue
        self.loop = loop
        self.waiting = asyncio.Queue()
        self.task = loop.create_task(self._pump())

    async def _pump(self):
        while True:
            item = await self.waiting.get()
            await self.queue.put(item)

    def put(self, item):
        """Queue ``item`` (call on the event loop's thread)."""
        self.waiting.put_nowait(item)

    def put_threadsafe(self, item):
        """Queue ``item`` from any thread."""
        self.loop.call_soon_threadsafe(self.waiting.put_nowait, item)


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
