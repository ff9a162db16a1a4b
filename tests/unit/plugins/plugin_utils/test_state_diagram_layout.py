# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The SVG drawings of the state diagrams (plugin_utils/_state_diagram_svg.py): drawn from the phase layer's edge lists."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import diagrams
from ansible_collections.converge.virt.plugins.plugin_utils import _state_diagram_svg as svg

SVG = '{http://www.w3.org/2000/svg}'


def _boxes(root):
    """(x, y, width, height) of every state box and the state names written in them."""
    states = root.find(SVG + "g[@class='states']")
    rects = [tuple(float(r.get(k)) for k in ('x', 'y', 'width', 'height')) for r in states.findall(SVG + 'rect')]
    return rects, [t.text for t in states.findall(SVG + 'text')]


@pytest.mark.parametrize('name', sorted(diagrams.DIAGRAMS))
def test_every_state_and_transition_of_the_table_is_drawn(name):
    edges = diagrams.DIAGRAMS[name][1]()
    root = ET.fromstring(svg.render_svg_text(name))
    assert root.tag == SVG + 'svg' and root.find(SVG + 'title').text == diagrams.DIAGRAMS[name][0]
    rects, names = _boxes(root)
    states = sorted(set(n for edge in edges for n in edge[:2] if n != diagrams.PSEUDO))
    assert sorted(names) == states and len(rects) == len(states)
    # the boxes do not overlap, and lie inside the viewBox
    left, top, width, height = (float(v) for v in root.get('viewBox').split())
    for index, one in enumerate(rects):
        assert left <= one[0] and one[0] + one[2] <= left + width and top <= one[1] and one[1] + one[3] <= top + height
        for other in rects[index + 1:]:
            assert not svg._overlap(one, other), (name, one, other)  # pylint: disable=protected-access
    # one curve per (source, target) pair, titled with its labels; every label is written
    paths = root.find(SVG + "g[@class='transitions']").findall(SVG + 'path')
    pairs = set((s, t) for s, t, dummy in edges)
    assert len(paths) == len(pairs)
    titles = ' | '.join(p.find(SVG + 'title').text for p in paths)
    words = ' '.join(ts.text for ts in root.iter(SVG + 'tspan'))
    for source, target, label in edges:
        assert '%s to %s' % (source.replace(diagrams.PSEUDO, '(start)'), target.replace(diagrams.PSEUDO, '(end)')) in titles
        if label:
            assert label in titles and label.split()[0] in words
    # start and end pseudo-states are dots
    assert len(root.findall(".//" + SVG + "circle[@class='start']")) == (1 if any(s == diagrams.PSEUDO for s, t, d in edges) else 0)
    assert len(root.findall(".//" + SVG + "circle[@class='end']")) == (1 if any(t == diagrams.PSEUDO for s, t, d in edges) else 0)


def test_diagram_ids_differ_so_several_fit_in_one_page():
    ids = [ET.fromstring(svg.render_svg_text(name)).get('id') for name in diagrams.DIAGRAMS]
    assert len(set(ids)) == len(ids)


def test_unknown_diagram_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match='diagram: unknown diagram .nope., expected one of migration, snapshot, vm_state, vmi_phase'):
        svg.render_svg('nope')
