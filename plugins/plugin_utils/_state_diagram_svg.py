# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state diagrams of the phase model as SVG images (the ``state_diagram_svg`` filter, for playbooks/report.yml).

Drawn on the controller in pure Python with xml.etree from the edge lists of ``_phase/diagrams.py`` (the same lists
as the Mermaid source of docs/states.md): a layered layout (the back edges of a depth-first walk are turned round,
every state goes on the layer of its longest path from a start, each layer ordered by the mean position of its
predecessors), states as rounded boxes, the start and end as dots, transitions as curves with their labels. Layout
is drawing, not phase logic: it lives here, beside the plugin that uses it, not in the phase layer.
"""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET

from ansible_collections.converge.virt.plugins.module_utils._phase.diagrams import DIAGRAMS, PSEUDO

SVG_NS = 'http://www.w3.org/2000/svg'
_START, _END = '(start)', '(end)'
_BOX_H, _DOT_R, _LAYER_GAP, _NODE_GAP, _LABEL_WRAP = 30.0, 8.0, 110.0, 160.0, 30
_CHAR_W, _LABEL_CHAR_W, _LABEL_LINE_H = 7.4, 6.1, 13.0


def _graph_nodes(edges):
    """The nodes in order of first appearance and the merged edges {(source, target): [labels]}."""
    nodes, merged = [], {}
    for source, target, label in edges:
        source = _START if source == PSEUDO else source
        target = _END if target == PSEUDO else target
        for node in (source, target):
            if node not in nodes:
                nodes.append(node)
        labels = merged.setdefault((source, target), [])
        if label is not None:
            labels.append(label)
    return nodes, merged


def _layers(nodes, pairs):
    """Layer of every node: back edges of a depth-first walk turned round, then the longest path from a start."""
    successors = dict((node, []) for node in nodes)
    incoming = dict((node, 0) for node in nodes)
    for source, target in pairs:
        if source != target:
            successors[source].append(target)
            incoming[target] += 1
    roots = [n for n in nodes if n == _START] + [n for n in nodes if n != _START and not incoming[n]] + list(nodes)
    seen, on_path, forward = set(), set(), []

    def walk(node):
        seen.add(node)
        on_path.add(node)
        for nxt in successors[node]:
            if nxt in on_path:
                continue
            forward.append((node, nxt))
            if nxt not in seen:
                walk(nxt)
        on_path.discard(node)

    for root in roots:
        if root not in seen:
            walk(root)
    layer = dict((node, 0) for node in nodes)
    for unused_round in range(len(nodes)):
        moved = False
        for source, target in forward:
            if layer[target] < layer[source] + 1:
                layer[target] = layer[source] + 1
                moved = True
        if not moved:
            break
    return layer, forward


def _node_size(node):
    if node in (_START, _END):
        return 2 * _DOT_R, 2 * _DOT_R
    return max(70.0, _CHAR_W * len(node) + 24), _BOX_H


def layout(edges):
    """Positions of the nodes and the merged edges of a diagram: ({node: (x, y, width, height)}, {(s, t): labels})."""
    nodes, merged = _graph_nodes(edges)
    layer, forward = _layers(nodes, list(merged))
    rows = {}
    for node in nodes:
        rows.setdefault(layer[node], []).append(node)
    # a graph with more transitions per state (vm_state) is spread wider, for its labels
    density = max(1.0, min(1.6, len(merged) / (1.5 * len(nodes))))
    node_gap = _NODE_GAP * density
    position = {}
    for index in sorted(rows):
        if index:
            def centre(node, index=index):
                xs = [position[s] for s, t in forward if t == node and s in position and layer[s] < index]
                return sum(xs) / len(xs) if xs else float('inf')
            rows[index].sort(key=lambda node: (centre(node), nodes.index(node)))
        x = 0.0
        for node in rows[index]:
            width = _node_size(node)[0]
            position[node] = x + width / 2
            x += width + node_gap
    tallest = max([len(_label_lines(labels)) for labels in merged.values()] + [1])
    layer_gap = _LAYER_GAP * density + _LABEL_LINE_H * max(0, tallest - 2)
    widest = max(sum(_node_size(n)[0] for n in row) + node_gap * (len(row) - 1) for row in rows.values())
    boxes = {}
    for index, row in rows.items():
        span = sum(_node_size(n)[0] for n in row) + node_gap * (len(row) - 1)
        for node in row:
            width, height = _node_size(node)
            boxes[node] = (position[node] + (widest - span) / 2, index * layer_gap, width, height)
    return boxes, merged


def _clip(box, towards):
    """Where the line from the centre of ``box`` towards the point ``towards`` leaves the box (or the dot)."""
    cx, cy, width, height = box
    dx, dy = towards[0] - cx, towards[1] - cy
    length = (dx * dx + dy * dy) ** 0.5 or 1.0
    if width == height == 2 * _DOT_R:
        scale = _DOT_R / length
    else:
        scale = min(width / 2 / abs(dx) if dx else float('inf'), height / 2 / abs(dy) if dy else float('inf'))
    return cx + dx * scale, cy + dy * scale


def _fmt(value):
    return '%.1f' % value


def _control(sx, sy, tx, ty, bow, normal):
    """The control point of a quadratic curve whose middle lies ``bow`` away from the straight line."""
    return (sx + tx) / 2 + 2 * bow * normal[0], (sy + ty) / 2 + 2 * bow * normal[1]


def _bezier(sx, sy, control, tx, ty, t):
    return ((1 - t) ** 2 * sx + 2 * t * (1 - t) * control[0] + t * t * tx, (1 - t) ** 2 * sy + 2 * t * (1 - t) * control[1] + t * t * ty)


def _near(point, box, margin=8.0):
    cx, cy, width, height = box
    return abs(point[0] - cx) < width / 2 + margin and abs(point[1] - cy) < height / 2 + margin


def _edge_geometry(boxes, merged, source, target):
    """The path data of an edge and where its label goes (x, y, anchor)."""
    sx, sy, sw, dummy = boxes[source]
    if source == target:
        right = sx + sw / 2
        data = 'M%s,%s C%s,%s %s,%s %s,%s' % (_fmt(right), _fmt(sy - 8), _fmt(right + 46), _fmt(sy - 34), _fmt(right + 46), _fmt(sy + 34),
                                              _fmt(right), _fmt(sy + 8))
        return data, [(right + 40, sy, 'start')]
    tx, ty = boxes[target][:2]
    dx, dy = tx - sx, ty - sy
    length = (dx * dx + dy * dy) ** 0.5 or 1.0
    bow = 0.0
    if (target, source) in merged:
        bow = 22.0
    if abs(dy) < 1:
        bow = 0.22 * length + 24
    elif abs(dy) > _LAYER_GAP * 1.5:
        bow = max(bow, 0.16 * length)
    normal = (-dy / length, dx / length)
    if abs(dy) > _LAYER_GAP * 1.5 and abs(dx) > 1 and (normal[0] > 0) != (dx > 0):
        normal = (-normal[0], -normal[1])
    # the least bow (from the one above, then wider on either side) whose curve passes by every other state
    others = [box for node, box in boxes.items() if node not in (source, target)]
    candidates = [bow] + [value for step in (30.0, 60.0, 90.0, 130.0, 180.0) for value in (bow + step, -(bow + step))]
    for candidate in candidates:
        control = _control(sx, sy, tx, ty, candidate, normal)
        if not any(_near(_bezier(sx, sy, control, tx, ty, t / 10.0), box) for t in range(2, 9) for box in others):
            break
    else:
        control = _control(sx, sy, tx, ty, bow, normal)
    start, end = _clip(boxes[source], control), _clip(boxes[target], control)
    data = 'M%s,%s Q%s,%s %s,%s' % (_fmt(start[0]), _fmt(start[1]), _fmt(control[0]), _fmt(control[1]), _fmt(end[0]), _fmt(end[1]))
    points = []
    for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78, 0.15, 0.85):
        x, y = _bezier(start[0], start[1], control, end[0], end[1], t)
        points.append((x, y, 'middle'))
    return data, points


def _overlap(one, other):
    return one[0] < other[0] + other[2] and other[0] < one[0] + one[2] and one[1] < other[1] + other[3] and other[1] < one[1] + one[3]


def _label_lines(labels):
    lines = []
    for label in labels:
        lines.extend(textwrap.wrap(label, _LABEL_WRAP) or [''])
    return lines


def render_svg(name):
    """The diagram ``name`` (a key of DIAGRAMS) as an SVG element tree (xml.etree.ElementTree.Element)."""
    if name not in DIAGRAMS:
        raise ValueError('diagram: unknown diagram %r, expected one of %s' % (name, ', '.join(sorted(DIAGRAMS))))
    title, graph = DIAGRAMS[name]
    boxes, merged = layout(graph())
    prefix = 'cv-%s' % name.replace('_', '-')
    svg = ET.Element('svg', {'xmlns': SVG_NS, 'role': 'img', 'class': 'state-diagram', 'id': prefix, 'aria-labelledby': prefix + '-title'})
    ET.SubElement(svg, 'title', {'id': prefix + '-title'}).text = title
    defs = ET.SubElement(svg, 'defs')
    marker = ET.SubElement(defs, 'marker', {'id': prefix + '-arrow', 'viewBox': '0 0 10 10', 'refX': '10', 'refY': '5',
                                            'markerWidth': '7', 'markerHeight': '7', 'orient': 'auto-start-reverse'})
    ET.SubElement(marker, 'path', {'d': 'M0,0 L10,5 L0,10 z', 'fill': '#444'})
    bounds = [[], []]

    def extend(x, y):
        bounds[0].append(x)
        bounds[1].append(y)

    edge_group = ET.SubElement(svg, 'g', {'class': 'transitions', 'fill': 'none', 'stroke': '#444', 'stroke-width': '1.3'})
    label_group = ET.Element('g', {'class': 'labels', 'font-family': 'sans-serif', 'font-size': '11', 'fill': '#333'})
    occupied = [(cx - w / 2, cy - h / 2, w, h) for cx, cy, w, h in boxes.values()]
    for (source, target), labels in merged.items():
        data, places = _edge_geometry(boxes, merged, source, target)
        path = ET.SubElement(edge_group, 'path', {'d': data, 'marker-end': 'url(#%s-arrow)' % prefix})
        ET.SubElement(path, 'title').text = '%s to %s%s' % (source, target, (': ' + '; '.join(labels)) if labels else '')
        for number in data.replace('M', ' ').replace('C', ' ').replace('Q', ' ').split():
            x, y = number.split(',')
            extend(float(x), float(y))
        lines = _label_lines(labels)
        if not lines:
            continue
        width = max(len(line) for line in lines) * _LABEL_CHAR_W + 8
        height = len(lines) * _LABEL_LINE_H + 4
        # the first place along the curve where the label covers no state and no other label
        for lx, ly, anchor in places:
            left = lx - width / 2 if anchor == 'middle' else lx
            top = ly - height / 2
            if not any(_overlap((left, top, width, height), taken) for taken in occupied):
                break
        else:
            lx, ly, anchor = places[0]
            left = lx - width / 2 if anchor == 'middle' else lx
            top = ly - height / 2
        occupied.append((left, top, width, height))
        ET.SubElement(label_group, 'rect', {'x': _fmt(left), 'y': _fmt(top), 'width': _fmt(width), 'height': _fmt(height),
                                            'fill': '#ffffff', 'fill-opacity': '0.85', 'rx': '3'})
        text = ET.SubElement(label_group, 'text', {'text-anchor': anchor})
        for index, line in enumerate(lines):
            ET.SubElement(text, 'tspan', {'x': _fmt(lx if anchor == 'middle' else lx + 4), 'y': _fmt(top + 2 + _LABEL_LINE_H * (index + 0.8))}).text = line
        extend(left, top)
        extend(left + width, top + height)
    svg.append(label_group)
    node_group = ET.SubElement(svg, 'g', {'class': 'states', 'font-family': 'sans-serif', 'font-size': '12'})
    for node, (cx, cy, width, height) in boxes.items():
        extend(cx - width / 2, cy - height / 2)
        extend(cx + width / 2, cy + height / 2)
        if node == _START:
            ET.SubElement(node_group, 'circle', {'cx': _fmt(cx), 'cy': _fmt(cy), 'r': _fmt(_DOT_R), 'fill': '#222', 'class': 'start'})
            continue
        if node == _END:
            ET.SubElement(node_group, 'circle', {'cx': _fmt(cx), 'cy': _fmt(cy), 'r': _fmt(_DOT_R), 'fill': '#fff', 'stroke': '#222',
                                                 'stroke-width': '1.5', 'class': 'end'})
            ET.SubElement(node_group, 'circle', {'cx': _fmt(cx), 'cy': _fmt(cy), 'r': _fmt(_DOT_R - 3.5), 'fill': '#222'})
            continue
        ET.SubElement(node_group, 'rect', {'x': _fmt(cx - width / 2), 'y': _fmt(cy - height / 2), 'width': _fmt(width), 'height': _fmt(height),
                                           'rx': '8', 'fill': '#e3eefb', 'stroke': '#2b5d96', 'stroke-width': '1.3', 'class': 'state'})
        ET.SubElement(node_group, 'text', {'x': _fmt(cx), 'y': _fmt(cy + 4), 'text-anchor': 'middle', 'fill': '#13324f'}).text = node
    left, top = min(bounds[0]) - 12, min(bounds[1]) - 12
    width, height = max(bounds[0]) - left + 12, max(bounds[1]) - top + 12
    svg.set('viewBox', '%s %s %s %s' % (_fmt(left), _fmt(top), _fmt(width), _fmt(height)))
    svg.set('width', _fmt(width))
    svg.set('height', _fmt(height))
    return svg


def render_svg_text(name):
    """The diagram ``name`` as SVG markup (serialised by xml.etree), to inline in HTML or write as a .svg file."""
    return ET.tostring(render_svg(name), encoding='unicode')
