# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/states_doc.py (`make docs`): docs/states.md must be the render of the current tables."""

from __future__ import annotations

import importlib.util
import os

from ansible_collections.converge.virt.plugins.module_utils._phase import deviations, diagrams

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, 'docs', 'states.md')


def _states_doc():
    spec = importlib.util.spec_from_file_location('converge_virt_states_doc', os.path.join(ROOT, 'tools', 'states_doc.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_states_md_is_fresh():
    with open(DOC, encoding='utf-8') as handle:
        committed = handle.read()
    assert committed == _states_doc().render_states_markdown(), 'docs/states.md is stale: run `make docs`'


def test_render_contains_every_table():
    text = _states_doc().render_states_markdown()
    for needle in ('stateDiagram-v2', 'live_migrate', 'CrashLoopBackOff', 'PreparingTarget', 'finish delete', 'postcopy_failed'):
        assert needle in text


def test_every_deviation_is_listed_in_the_docs():
    text = _states_doc().render_states_markdown()
    assert '## Where ours differs from upstream, and why' in text
    for row in deviations.DEVIATIONS:
        assert '| %s | %s | %s | %s |' % (row.area, row.upstream, row.ours, row.reason) in text


def test_the_mermaid_source_is_drawn_from_the_same_edges():
    doc = _states_doc()
    text = doc.render_states_markdown()
    for name in sorted(diagrams.DIAGRAMS):
        edges = diagrams.DIAGRAMS[name][1]()
        lines = doc.mermaid_lines(edges)
        assert lines[0] == 'stateDiagram-v2' and len(lines) == len(edges) + 1
        for line, (source, target, label) in zip(lines[1:], edges):
            assert line.strip().startswith('%s --> %s' % (source, target)) and (label is None or line.endswith(': ' + label))
        assert '\n'.join(doc.mermaid_block(lines)) in text, 'the %s diagram is on the page' % name


def test_markdown_table_writes_every_cell_and_none_as_empty():
    assert _states_doc().markdown_table(('a', 'b'), [(1, None), ('x', 'y')]) == ['| a | b |', '|---|---|', '| 1 |  |', '| x | y |', '']
