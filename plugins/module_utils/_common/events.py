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


class JsonLines:
    """A queue for ``main(queue, args)`` that writes each event as a JSON line (flushed at once)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def put_nowait(self, item):
        """Write ``item``."""
        self.stream.write(json.dumps(item, sort_keys=True) + '\n')
        self.stream.flush()


def print_events(main, args):
    """Run an event source's ``main`` with ``args`` until it ends (or is killed), printing its events."""
    asyncio.run(main(JsonLines(), args))
