# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/states.md must be the render of the current tables."""

from __future__ import annotations

import os

from ansible_collections.converge.virt.plugins.module_utils._phase import diagrams

DOC = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..', 'docs', 'states.md')


def test_docs_states_md_is_fresh():
    with open(DOC, encoding='utf-8') as handle:
        committed = handle.read()
    assert committed == diagrams.render_states_markdown(), 'docs/states.md is stale: run `make docs`'


def test_render_contains_every_table():
    text = diagrams.render_states_markdown()
    for needle in ('stateDiagram-v2', 'live_migrate', 'CrashLoopBackOff', 'PreparingTarget', 'finish delete', 'postcopy_failed'):
        assert needle in text
