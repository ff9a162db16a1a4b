# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one failure summary of a fleet ("N of M VMs failed: a, b"), for every module that acts on many VMs or volumes.

Kept apart from _common.driver (which re-exports it) so that a module that only needs the summary (snapshot,
migration) does not carry the vm driver and its planners in its AnsiballZ payload.
"""

from __future__ import annotations


def fleet_failure(results, noun='VMs', label=None):
    """The one failure summary of a fleet ("N of M VMs failed: a, b"), or None when none failed.

    ``label(result)`` names a failed item (default: its ``name``).
    """
    label = label or (lambda result: result['name'])
    failed = [label(r) for r in results if r.get('failed')]
    if not failed:
        return None
    return '%d of %d %s failed: %s' % (len(failed), len(results), noun, ', '.join(failed))
