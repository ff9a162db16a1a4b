# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only stdout callback: print every task result as one JSON document.

ansible-core no longer ships a JSON stdout callback (it lives in ansible.posix);
the integration tests only need the raw results, in the shape
``{"plays": [{"tasks": [{"task": {...}, "hosts": {host: result}}]}], "stats": {...}}``.
"""

from __future__ import annotations

import json

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: results_json
type: stdout
short_description: every task result as one JSON document (tests only)
description: Prints the results of all tasks of a run as one JSON document at the end.
'''


class CallbackModule(CallbackBase):
    """Collect results, print them at the end."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'results_json'

    def __init__(self):
        super().__init__()
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({'play': {'name': play.get_name()}, 'tasks': []})

    def _ensure_play(self):
        if not self.plays:
            self.plays.append({'play': {'name': 'adhoc'}, 'tasks': []})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._ensure_play()
        self.plays[-1]['tasks'].append({'task': {'name': task.get_name()}, 'hosts': {}})

    def _record(self, result, **extra):
        self._ensure_play()
        if not self.plays[-1]['tasks']:
            self.plays[-1]['tasks'].append({'task': {'name': result.task_name}, 'hosts': {}})
        data = dict(result._result)  # pylint: disable=protected-access
        data.update(extra)
        self.plays[-1]['tasks'][-1]['hosts'][result._host.get_name()] = data  # pylint: disable=protected-access

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result):
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats):
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        self._display.display(json.dumps({'plays': self.plays, 'stats': summary}, default=str))
