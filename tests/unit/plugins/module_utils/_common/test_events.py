# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event sources' Outbox: ansible-rulebook hands a source a bounded queue (asyncio.Queue(1))."""

from __future__ import annotations

import asyncio
import threading

from ansible_collections.converge.virt.plugins.module_utils._common.events import Outbox


def test_a_burst_reaches_a_bounded_queue_whole_and_in_order():
    async def scenario():
        queue = asyncio.Queue(maxsize=1)        # what ansible-rulebook gives a source
        outbox = Outbox(queue, asyncio.get_running_loop())
        for number in range(50):                # a full sync at once: put_nowait on the queue itself raises QueueFull here
            outbox.put({'n': number})
        received = []
        while len(received) < 50:
            received.append((await asyncio.wait_for(queue.get(), 5))['n'])
            await asyncio.sleep(0)              # a slow consumer
        outbox.task.cancel()
        return received
    assert asyncio.run(scenario()) == list(range(50))


def test_events_from_another_thread_keep_their_order():
    async def scenario():
        queue = asyncio.Queue(maxsize=1)
        outbox = Outbox(queue, asyncio.get_running_loop())
        thread = threading.Thread(target=lambda: [outbox.put_threadsafe(number) for number in range(20)])
        thread.start()
        received = [await asyncio.wait_for(queue.get(), 5) for _index in range(20)]
        thread.join()
        outbox.task.cancel()
        return received
    assert asyncio.run(scenario()) == list(range(20))
