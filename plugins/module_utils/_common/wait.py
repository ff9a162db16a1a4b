# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wait loop: poll with capped backoff until a predicate holds or the deadline passes.

On timeout it raises :class:`WaitTimeout` carrying the last observed value, so
a failed wait always says what the world looked like when it gave up.
"""

from __future__ import annotations

import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import WaitTimeout


def wait_for(observe, done, timeout, what, initial=0.05, factor=1.5, cap=1.0, clock=time.monotonic, sleep=time.sleep, describe=None):
    """Call ``observe()`` until ``done(value)``; return the value.

    ``timeout`` seconds at most (0 means: look once). Raises
    :class:`WaitTimeout` with ``last_observed`` (through ``describe`` if
    given) when the deadline passes.
    """
    deadline = clock() + max(0.0, float(timeout))
    delay = initial
    while True:
        value = observe()
        if done(value):
            return value
        remaining = deadline - clock()
        if remaining <= 0:
            last = describe(value) if describe else value
            raise WaitTimeout('timed out after %ss waiting for %s' % (timeout, what), last_observed=last)
        sleep(min(delay, remaining))
        delay = min(cap, delay * factor)
