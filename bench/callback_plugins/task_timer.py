# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark helper: the wall time of each task, from the moment the strategy starts it to its result.

Written as JSON lines to the file named by BENCH_TASK_TIMES (one line per host result): the cost of
the task itself (worker start, AnsiballZ build and transfer, interpreter start, the module, the
result), without ansible's own start-up (loading plugins, inventory, the playbook).
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: task_timer
type: aggregate
short_description: record each task's wall time for the benchmarks
description: Writes one JSON line per host result to the file named by BENCH_TASK_TIMES.
'''


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'task_timer'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._started = {}

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._started[task._uuid] = time.monotonic()  # pylint: disable=protected-access

    def _record(self, result, status):
        took = time.monotonic() - self._started.get(result._task._uuid, time.monotonic())  # pylint: disable=protected-access
        path = os.environ.get('BENCH_TASK_TIMES')
        if path:
            with open(path, 'a', encoding='utf-8') as stream:
                stream.write(json.dumps({'task': result._task.get_name(), 'status': status, 'seconds': took}) + '\n')  # pylint: disable=protected-access

    def v2_runner_on_ok(self, result):
        self._record(result, 'ok')

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, 'failed')
