# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/states.md: the neutral phase tables of ``_phase`` and the backends' tables that translate into them.

Rendered by :func:`render_states_markdown` (``make docs``, ``tools/gen_docs.py``); a unit test fails when the committed
file differs from a fresh render. A build tool, outside the collection's layers: the page shows the phase tables and
the backends' own words (libvirt's domain states, KubeVirt's snapshot phases), so it reads both; no plugin imports it.
The Mermaid diagrams are drawn from the edge lists of ``_phase/diagrams.py`` (the SVG images of the HTML report too,
by ``plugins/plugin_utils/_state_diagram_svg.py``).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import migrate as follow
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshot_status
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_state
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, deviations, diagrams, reconcile, snapshots, status, vm_plan


def mermaid_block(lines):
    """A fenced Mermaid block (a list of lines, then a blank line)."""
    return ['```mermaid'] + lines + ['```', '']


def mermaid_edge(edge):
    """One edge (source, target, label or None) as a Mermaid line."""
    source, target, label = edge
    return '    %s --> %s' % (source, target) + ('' if label is None else ': %s' % label)


def mermaid_lines(edges):
    """A state diagram's Mermaid source, one line per edge."""
    return ['stateDiagram-v2'] + [mermaid_edge(edge) for edge in edges]


def markdown_table(header, rows):
    """A Markdown table (a list of lines, then a blank line)."""
    out = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    for row in rows:
        out.append('| ' + ' | '.join('' if cell is None else str(cell) for cell in row) + ' |')
    out.append('')
    return out


HEADER = '<!-- Generated from plugins/module_utils/_phase and the backends\' tables by `make docs`; do not edit by hand. -->'


def snapshot_section():
    """The snapshot phases, the VM's task while one runs, and KubeVirt's phases mapped onto ours."""
    out = ['## Snapshot phases', '']
    out += mermaid_block(mermaid_lines(diagrams.snapshot_graph()))
    out += markdown_table(('action', 'task_state on the VM', 'accepted vm_state'),
                          [(a, snapshots.TASK_STATE_OF_ACTION[a], ', '.join(actions.ACTIONS[a].vm_states)) for a in snapshots.SNAPSHOT_ACTIONS])
    rows = [(kv or '(none)', ours) for kv, ours in sorted(snapshot_status.KUBEVIRT_SNAPSHOT_PHASES.items())]
    rows.append(('Succeeded, readyToUse false', snapshots.CREATING))
    rows.append(('InProgress past failureDeadline', snapshots.FAILED))
    rows.append(('deletionTimestamp set', snapshots.DELETING))
    out += markdown_table(('KubeVirt VirtualMachineSnapshot phase', 'phase'), rows)
    return out


def render_states_markdown():
    """The whole of docs/states.md, as a string."""
    out = [HEADER, '', '# The state model', '',
           'Every module, role and inventory plugin reports the same words, computed by the same tables.',
           'See `plugins/module_utils/_phase/` for the code (the backends\' own words: `_libvirt/domain_state.py`, '
           '`_kubevirt/snapshot_status.py`); this page is generated from it.', '',
           '## vm_state and the actions that move it', '']
    out += mermaid_block(mermaid_lines(diagrams.vm_state_graph()))
    out += ['## The action table', '']
    rows = []
    for name in sorted(actions.ACTIONS):
        row = actions.ACTIONS[name]
        accepted = 'any' if row.vm_states == actions.ANY else ', '.join(row.vm_states)
        task = 'any' if row.task_states == actions.ANY else ', '.join(str(t) for t in row.task_states)
        rows.append((name, accepted, task, row.task_state, row.vm_state_after, row.source))
    out += markdown_table(('action', 'accepted vm_state', 'accepted task_state', 'task_state while running', 'vm_state after', 'source'), rows)
    out += ['## Declared states and the chains that reach them', '']
    chain_rows = [(d, vm, ', '.join(c) or '(nothing)') for (d, vm), c in sorted(vm_plan.POWER_CHAINS.items())]
    chain_rows += [(d, vm, 'refused: ' + why) for (d, vm), why in sorted(vm_plan.REFUSED.items())]
    out += markdown_table(('declared', 'vm_state', 'actions'), chain_rows)
    out += ['## power_state from libvirt', '']
    out += markdown_table(('libvirt state', 'power_state'), sorted(domain_state.POWER_STATE_OF_DOMAIN_STATE.items()))
    out += ['## Instance phase', '']
    out += mermaid_block(mermaid_lines(diagrams.vmi_phase_graph()))
    phase_rows = []
    for (state, reason), tried, phase, why in domain_state.DOMAIN_PHASE_TABLE:
        phase_rows.append((state, reason or 'any', {True: 'yes', False: 'no', None: 'either'}[tried], phase or 'unchanged', why or ''))
    out += markdown_table(('domain state', 'reason', 'graceful stop tried (ACPI and grace period > 0)', 'phase', 'phase_reason'), phase_rows)
    out += ['## Printable status (first match wins)', '']
    status_rows = [(index + 1, word, (rule.__doc__ or '').strip().partition('. ')[2]) for index, (word, rule) in enumerate(status.STATUS_RULES)]
    status_rows.append((len(status_rows) + 1, status.UNKNOWN, 'otherwise'))
    out += markdown_table(('#', 'status', 'when'), status_rows)
    out += ['## Power-state reconciliation', '']
    sync_rows = [(vm, 'any' if power == '*' else ', '.join(power), action, 'yes' if reread else '', alt or '')
                 for vm, power, action, reread, alt in reconcile.POWER_SYNC_TABLE]
    out += markdown_table(('vm_state', 'power_state', 'action', 're-read first', 'policy alternative'), sync_rows)
    out += ['## Stale task recovery', '']
    out += markdown_table(('task_state', 'recovery'), sorted(reconcile.STALE_TASK_TABLE.items()))
    out += ['## Migration phases', '']
    out += mermaid_block(mermaid_lines(diagrams.migration_graph()))
    out += snapshot_section()
    out += ['## Following a migration', '',
            'One loop follows every migration to its end, the same on both backends (`plugins/module_utils/_common/migrate.py`); '
            'a backend only provides the hooks below. A migration that fails before it started (target unreachable, reason '
            '"%s", or draining) changes nothing: `changed` is false, and the attempt is written to the VM\'s migration history '
            '(a log that migration_info lists, not state of the VM).' % follow.TARGET_UNREACHABLE, '']
    out += markdown_table(('limit', 'counted from', 'when it passes'), follow.FOLLOW_RULES)
    out += markdown_table(('hook', 'backends'), follow.BACKEND_HOOKS)
    out += ['## Where ours differs from upstream, and why', '',
            'Every other rule agrees with the upstream code and its test suites '
            '(`tests/unit/plugins/module_utils/_phase/test_upstream_*.py` cite each upstream test). The KubeVirt words are '
            'also checked against KubeVirt\'s own virt-controller: [states-virt-controller.md](states-virt-controller.md).', '']
    out += markdown_table(('area', 'upstream', 'converge.virt', 'why'), [(d.area, d.upstream, d.ours, d.reason) for d in deviations.DEVIATIONS])
    return '\n'.join(out).rstrip('\n') + '\n'
