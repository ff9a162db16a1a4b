# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of converge.virt.migration_info: the module as usual, or in the task's worker with converge_virt_direct_execution.

See plugins/plugin_utils/direct_execution.py and docs/direct-execution.md.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.plugin_utils.direct_execution import DirectExecutionAction


class ActionModule(DirectExecutionAction):
    """converge.virt.migration_info (direct execution opt-in)."""
