# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/states.md: the neutral phase tables of ``_phase`` and the backends' tables that translate into them.

Rendered by :func:`render_states_markdown` (``make docs``, ``tools/gen_docs.py``); a unit test fails when the committed
file differs from a fresh render. Here, above ``_phase``, because the page also shows the backends' words (libvirt's
domain states, KubeVirt's snapshot phases), which ``_phase`` does not know.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common import migrate as follow
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import snapshot_status
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_state
from ansible_collections.converge.virt.plugins.module_utils._phase import actions, deviations, diagrams, reconcile, snapshots, status, vm_plan

HEADER = '<!-- Generated from plugins/module_utils/_phase and the backends\' tables by `make docs`; do not edit by hand. -->'


def snapshot_section():
    """The snapshot phases, the VM's task while one runs, and KubeVirt's phases mapped onto ours."""
    out = ['## Snapshot phases', '']
    out += diagrams.mermaid_block(diagrams.snapshot_diagram())
    out += diagrams.markdown_table(('action', 'task_state on the VM', 'accepted vm_state'),
                                   [(a, snapshots.TASK_STATE_OF_ACTION[a], ', '.join(actions.ACTIONS[a].vm_states)) for a in snapshots.SNAPSHOT_ACTIONS])
    rows = [(kv or '(none)', ours) for kv, ours in sorted(snapshot_status.KUBEVIRT_SNAPSHOT_PHASES.items())]
    rows.append(('Succeeded, readyToUse false', snapshots.CREATING))
    rows.append(('InProgress past failureDeadline', snapshots.FAILED))
    rows.append(('deletionTimestamp set', snapshots.DELETING))
    out += diagrams.markdown_table(('KubeVirt VirtualMachineSnapshot phase', 'phase'), rows)
    return out


def render_states_markdown():
    """The whole of docs/states.md, as a string."""
    out = [HEADER, '', '# The state model', '',
           'Every module, role and inventory plugin reports the same words, computed by the same tables.',
           'See `plugins/module_utils/_phase/` for the code (the backends\' own words: `_libvirt/domain_state.py`, '
           '`_kubevirt/snapshot_status.py`); this page is generated from it.', '',
           '## vm_state and the actions that move it', '']
    out += diagrams.mermaid_block(diagrams.vm_state_diagram())
    out += ['## The action table', '']
    rows = []
    for name in sorted(actions.ACTIONS):
        row = actions.ACTIONS[name]
        accepted = 'any' if row.vm_states == actions.ANY else ', '.join(row.vm_states)
        task = 'any' if row.task_states == actions.ANY else ', '.join(str(t) for t in row.task_states)
        rows.append((name, accepted, task, row.task_state, row.vm_state_after, row.source))
    out += diagrams.markdown_table(('action', 'accepted vm_state', 'accepted task_state', 'task_state while running', 'vm_state after', 'source'), rows)
    out += ['## Declared states and the chains that reach them', '']
    chain_rows = [(d, vm, ', '.join(c) or '(nothing)') for (d, vm), c in sorted(vm_plan.POWER_CHAINS.items())]
    chain_rows += [(d, vm, 'refused: ' + why) for (d, vm), why in sorted(vm_plan.REFUSED.items())]
    out += diagrams.markdown_table(('declared', 'vm_state', 'actions'), chain_rows)
    out += ['## power_state from libvirt', '']
    out += diagrams.markdown_table(('libvirt state', 'power_state'), sorted(domain_state.POWER_STATE_OF_DOMAIN_STATE.items()))
    out += ['## Instance phase', '']
    out += diagrams.mermaid_block(diagrams.vmi_phase_diagram())
    phase_rows = []
    for (state, reason), tried, phase, why in domain_state.DOMAIN_PHASE_TABLE:
        phase_rows.append((state, reason or 'any', {True: 'yes', False: 'no', None: 'either'}[tried], phase or 'unchanged', why or ''))
    out += diagrams.markdown_table(('domain state', 'reason', 'graceful stop tried (ACPI and grace period > 0)', 'phase', 'phase_reason'), phase_rows)
    out += ['## Printable status (first match wins)', '']
    status_rows = [(index + 1, word, (rule.__doc__ or '').strip().partition('. ')[2]) for index, (word, rule) in enumerate(status.STATUS_RULES)]
    status_rows.append((len(status_rows) + 1, status.UNKNOWN, 'otherwise'))
    out += diagrams.markdown_table(('#', 'status', 'when'), status_rows)
    out += ['## Power-state reconciliation', '']
    sync_rows = [(vm, 'any' if power == '*' else ', '.join(power), action, 'yes' if reread else '', alt or '')
                 for vm, power, action, reread, alt in reconcile.POWER_SYNC_TABLE]
    out += diagrams.markdown_table(('vm_state', 'power_state', 'action', 're-read first', 'policy alternative'), sync_rows)
    out += ['## Stale task recovery', '']
    out += diagrams.markdown_table(('task_state', 'recovery'), sorted(reconcile.STALE_TASK_TABLE.items()))
    out += ['## Migration phases', '']
    out += diagrams.mermaid_block(diagrams.migration_diagram())
    out += snapshot_section()
    out += ['## Following a migration', '',
            'One loop follows every migration to its end, the same on both backends (`plugins/module_utils/_common/migrate.py`); '
            'a backend only provides the hooks below. A migration that fails before it started (target unreachable, reason '
            '"%s", or draining) changes nothing: `changed` is false, and the attempt is written to the VM\'s migration history '
            '(a log that migration_info lists, not state of the VM).' % follow.TARGET_UNREACHABLE, '']
    out += diagrams.markdown_table(('limit', 'counted from', 'when it passes'), follow.FOLLOW_RULES)
    out += diagrams.markdown_table(('hook', 'backends'), follow.BACKEND_HOOKS)
    out += ['## Where ours differs from upstream, and why', '',
            'Every other rule agrees with the upstream code and its test suites '
            '(`tests/unit/plugins/module_utils/_phase/test_upstream_*.py` cite each upstream test). The KubeVirt words are '
            'also checked against KubeVirt\'s own virt-controller: [states-virt-controller.md](states-virt-controller.md).', '']
    out += diagrams.markdown_table(('area', 'upstream', 'converge.virt', 'why'), [(d.area, d.upstream, d.ours, d.reason) for d in deviations.DEVIATIONS])
    return '\n'.join(out).rstrip('\n') + '\n'
