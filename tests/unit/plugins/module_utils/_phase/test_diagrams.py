# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The phase graphs (edge lists) that docs/states.md and the report's SVG images are drawn from: exactly the tables."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import actions, diagrams, migration, snapshots, states

PSEUDO = diagrams.PSEUDO


def test_the_diagrams_are_the_four_graphs_with_their_titles():
    assert sorted(diagrams.DIAGRAMS) == ['migration', 'snapshot', 'vm_state', 'vmi_phase']
    assert diagrams.DIAGRAMS['vm_state'] == ('vm_state and the actions that move it', diagrams.vm_state_graph)
    assert [title for title, _graph in diagrams.DIAGRAMS.values()] == [
        'vm_state and the actions that move it', 'Instance phase', 'Migration phases', 'Snapshot phases']


def test_vm_state_graph_is_the_action_table():
    edges = diagrams.vm_state_graph()
    assert edges == sorted(set(edges), key=diagrams._edge_order), 'sorted, no repeats'  # pylint: disable=protected-access
    for source, target, label in edges:
        name, task = label.split(' (')
        row = actions.ACTIONS[name]
        assert task == '%s)' % row.task_state
        assert row.vm_states == actions.ANY or source in row.vm_states
        assert actions.vm_state_after(name, source) == target
    labelled = set((s, t, label.split(' (')[0]) for s, t, label in edges)
    assert (states.ACTIVE, states.STOPPED, 'stop') in labelled
    assert (states.ACTIVE, states.ACTIVE, 'reboot_soft') in labelled, 'the one self-loop kept'
    assert not any(s == t and n != 'reboot_soft' for s, t, n in labelled), 'actions that leave vm_state as it was are left out'
    assert not any(n in ('soft_delete', 'delete') and s not in (states.ACTIVE, states.STOPPED, states.ERROR) for s, t, n in labelled)


def test_migration_graph_is_the_transition_table():
    edges = diagrams.migration_graph()
    assert edges[0] == (PSEUDO, 'Unset', None) and edges[-2:] == [('Succeeded', PSEUDO, None), ('Failed', PSEUDO, None)]
    expected = [(p or 'Unset', n, None) for p in migration.PHASES for n in migration.TRANSITIONS[p]]
    assert edges[1:-2] == expected and expected


def test_snapshot_graph_is_the_transition_table_with_absent_as_the_end():
    edges = diagrams.snapshot_graph()
    assert edges[0] == (PSEUDO, 'Pending', None)
    assert edges[1:] == [(s, PSEUDO if t == snapshots.ABSENT else t, e) for s, e, t in snapshots.TRANSITIONS]
    assert ('Deleting', PSEUDO, edges[-1][2]) in edges


def test_vmi_phase_graph_starts_at_pending_and_reaches_every_end():
    edges = diagrams.vmi_phase_graph()
    assert edges[0] == (PSEUDO, 'Pending', None)
    assert {t for s, t, label in edges} >= {'Scheduling', 'Scheduled', 'Running', 'Succeeded', 'Failed'}
    assert all(label for s, t, label in edges[1:])
