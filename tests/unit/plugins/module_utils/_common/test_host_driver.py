# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host module's one driver (_common/host_driver.converge_host) on an in-memory host: what changes, what check mode
predicts and writes, and the result's host and diff."""

from __future__ import (absolute_import, division, print_function)

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common.host_driver import HostBackend, converge_host


class MemoryHost(HostBackend):
    def __init__(self, mark=None):
        self.mark = mark
        self.writes = []

    def draining(self):
        return self.mark is not None

    def drain(self, reason, check_mode):
        if self.mark is not None:
            return False
        if not check_mode:
            self.mark = reason
            self.writes.append(('drain', reason))
        return True

    def undrain(self, check_mode):
        if self.mark is None:
            return False
        if not check_mode:
            self.mark = None
            self.writes.append(('undrain',))
        return True

    def summary(self):
        return {'name': 'hv1', 'draining': self.mark is not None, 'reason': self.mark}


@pytest.mark.parametrize('state, mark, changed, after', [
    ('drained', None, True, True),
    ('drained', 'kernel', False, True),
    ('active', 'kernel', True, False),
    ('active', None, False, False),
    ('present', 'kernel', False, True),
    ('present', None, False, False),
])
def test_the_drain_mark_converges_and_the_diff_says_before_and_after(state, mark, changed, after):
    host = MemoryHost(mark)
    got, result = converge_host(host, state, 'kernel', check_mode=False)
    assert got is changed
    assert result['diff'] == {'before': {'draining': mark is not None}, 'after': {'draining': after}}
    assert result['host']['draining'] is after and host.draining() is after
    assert len(host.writes) == (1 if changed else 0)


@pytest.mark.parametrize('state, mark', [('drained', None), ('active', 'kernel')])
def test_check_mode_predicts_the_change_and_writes_nothing(state, mark):
    host = MemoryHost(mark)
    changed, result = converge_host(host, state, 'kernel', check_mode=True)
    assert changed and host.writes == [] and host.mark == mark
    assert result['host']['draining'] is (state == 'drained'), 'the predicted host, not the one read'
    assert result['diff'] == {'before': {'draining': mark is not None}, 'after': {'draining': state == 'drained'}}
