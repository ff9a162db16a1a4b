# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/states.md must be the render of the current tables."""

from __future__ import annotations

import os

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import states_doc

DOC = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..', 'docs', 'states.md')


def test_docs_states_md_is_fresh():
    with open(DOC, encoding='utf-8') as handle:
        committed = handle.read()
    assert committed == states_doc.render_states_markdown(), 'docs/states.md is stale: run `make docs`'


def test_render_contains_every_table():
    text = states_doc.render_states_markdown()
    for needle in ('stateDiagram-v2', 'live_migrate', 'CrashLoopBackOff', 'PreparingTarget', 'finish delete', 'postcopy_failed'):
        assert needle in text


def test_every_deviation_is_listed_in_the_docs_and_pinned_by_a_test():
    from ansible_collections.converge.virt.plugins.module_utils._phase import deviations
    text = states_doc.render_states_markdown()
    assert '## Where ours differs from upstream, and why' in text
    keys = [d.key for d in deviations.DEVIATIONS]
    assert len(keys) == len(set(keys)) and len(keys) >= 10
    here = os.path.dirname(__file__)
    tests = ''.join(open(os.path.join(here, name), encoding='utf-8').read() for name in sorted(os.listdir(here))
                    if name.startswith('test_upstream_') and name.endswith('.py'))
    for row in deviations.DEVIATIONS:
        assert '| %s | %s | %s | %s |' % (row.area, row.upstream, row.ours, row.reason) in text
        assert "by_key('%s')" % row.key in tests, 'deviation %s is pinned by no upstream test' % row.key
        assert deviations.by_key(''.join(list(row.key))) is row
    with pytest.raises(KeyError):
        deviations.by_key('no-such-deviation')
