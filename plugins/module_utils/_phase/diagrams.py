# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The phase graphs as edge lists, derived from the phase tables.

Data only: the Mermaid diagrams of ``docs/states.md`` are drawn from these by ``tools/states_doc.py`` (``make docs``;
a unit test fails when the committed file differs from a fresh render, so the documentation can never drift from the
tables the code runs), and the SVG images of the HTML report by ``plugins/plugin_utils/_state_diagram_svg.py``
(the ``state_diagram_svg`` filter).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._phase import actions, migration, snapshots, states


# A diagram is data: a list of edges (source, target, label or None), '[*]' as a source being the start and as a
# target the end (as in Mermaid). The Mermaid source (docs/states.md) and the SVG images (the HTML report) are both
# drawn from these lists.
PSEUDO = '[*]'
Edge = Tuple[str, str, Optional[str]]


def _edge_order(edge: Edge) -> str:
    """The order of a graph's edges: that of their Mermaid lines (``source --> target: label``)."""
    source, target, label = edge
    return '    %s --> %s' % (source, target) + ('' if label is None else ': %s' % label)


def vm_state_graph() -> List[Edge]:
    """vm_state transitions of the action table (actions that change vm_state), as edges."""
    edges = set()
    for name in sorted(actions.ACTIONS):
        row = actions.ACTIONS[name]
        sources = states.VM_STATES if row.vm_states == actions.ANY else row.vm_states
        for source in sources:
            after = actions.vm_state_after(name, source)
            if after == source and name not in ('reboot_soft',):
                continue
            if name in ('soft_delete', 'delete') and source not in (states.ACTIVE, states.STOPPED, states.ERROR):
                continue
            edges.add((source, after, '%s (%s)' % (name, row.task_state)))
    return sorted(edges, key=_edge_order)


def migration_graph() -> List[Edge]:
    """The migration phase graph, as edges."""
    edges: List[Edge] = [(PSEUDO, 'Unset', None)]
    for phase in migration.PHASES:
        for nxt in migration.TRANSITIONS[phase]:
            edges.append((phase or 'Unset', nxt, None))
    return edges + [('Succeeded', PSEUDO, None), ('Failed', PSEUDO, None)]


def vmi_phase_graph() -> List[Edge]:
    """Instance phases (controller side, then the domain table), as edges."""
    return [
        (PSEUDO, 'Pending', None),
        ('Pending', 'Scheduling', 'launcher exists'),
        ('Pending', 'Failed', 'deleted before start'),
        ('Scheduling', 'Scheduled', 'launcher ready, nothing failed to sync'),
        ('Scheduling', 'Failed', 'launcher failed'),
        ('Scheduled', 'Running', 'domain running / paused / blocked / pmsuspended'),
        ('Running', 'Succeeded', 'shutdown, saved, snapshot, destroyed with no graceful stop asked'),
        ('Running', 'Failed', 'crashed, panicked, destroyed after the grace period of a graceful stop, post-copy failed'),
    ]


def snapshot_graph() -> List[Edge]:
    """The snapshot phase graph (create, restore, delete), as edges."""
    edges: List[Edge] = [(PSEUDO, 'Pending', None)]
    for source, event, target in snapshots.TRANSITIONS:
        edges.append((source, PSEUDO if target == snapshots.ABSENT else target, event))
    return edges


# The diagrams by name: (title, the function that returns its edges).
DIAGRAMS = {
    'vm_state': ('vm_state and the actions that move it', vm_state_graph),
    'vmi_phase': ('Instance phase', vmi_phase_graph),
    'migration': ('Migration phases', migration_graph),
    'snapshot': ('Snapshot phases', snapshot_graph),
}
