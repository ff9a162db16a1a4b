# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every deviation from upstream has a unique key and is pinned by an upstream test (docs/states.md lists them:
tests/unit/test_states_doc.py)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import deviations


def test_every_deviation_is_pinned_by_a_test():
    keys = [d.key for d in deviations.DEVIATIONS]
    assert len(keys) == len(set(keys)) and len(keys) >= 10
    here = os.path.dirname(__file__)
    tests = ''.join(open(os.path.join(here, name), encoding='utf-8').read() for name in sorted(os.listdir(here))
                    if name.startswith('test_upstream_') and name.endswith('.py'))
    for row in deviations.DEVIATIONS:
        assert "by_key('%s')" % row.key in tests, 'deviation %s is pinned by no upstream test' % row.key
        assert deviations.by_key(''.join(list(row.key))) is row
    with pytest.raises(KeyError):
        deviations.by_key('no-such-deviation')
