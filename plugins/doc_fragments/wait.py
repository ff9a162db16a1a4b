# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait options shared by modules that change the world."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment."""

    DOCUMENTATION = r'''
options:
  wait:
    description:
      - Wait until each action has taken effect (the guest runs, is paused, is shut off).
      - With V(false), the module returns once the hypervisor accepted the action.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds to wait for an action to take effect before failing with the last observed state.
      - At most V(86400) (one day; a task record's lease is bounded by the longest task).
    type: int
    default: 300
'''
