"""Running the collection's Event-Driven Ansible sources as ansible-rulebook would, for tests.

A source runs in its own process (its file's ``__main__`` prints every event as a JSON line, see
plugins/module_utils/_common/events.py); :class:`EventSource` collects the events in order and waits for the ones
a test expects.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = os.path.join(ROOT, 'extensions', 'eda', 'plugins', 'event_source')


class EventSource:
    """The process of source ``name`` (``libvirt_events`` ...) started with ``argv``, and the events it printed."""

    def __init__(self, name, argv, env=None):
        self.proc = subprocess.Popen([sys.executable, os.path.join(SOURCES, name + '.py')] + list(argv),  # pylint: disable=consider-using-with
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, **(env or {})), text=True)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line)['converge_virt'])

    def next(self, predicate, timeout=30.0):
        """The first event (after those already taken) that matches; the ones before it are kept in ``seen``."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                stderr = self.proc.stderr.read()[-2000:] if self.proc.poll() is not None else '(running)'
                seen = [e for e in self.seen if e['type'] != 'heartbeat'][-20:]
                raise AssertionError('no matching event within %.0f s; seen: %r; stderr: %s' % (timeout, seen, stderr))
            try:
                event = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(event)
            if predicate(event):
                return event

    def quiet_for(self, seconds):
        """The events that arrive within ``seconds``."""
        got = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                got.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                pass
        self.seen.extend(got)
        return got

    def stop(self):
        """Kill the source."""
        self.proc.kill()
        self.proc.wait()
