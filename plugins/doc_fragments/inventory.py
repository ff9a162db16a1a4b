# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection's two inventory plugins (converge.virt.libvirt and converge.virt.kubevirt) document alike."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment: each plugin adds its own name to O(plugin)'s choices."""

    DOCUMENTATION = r'''
options:
  plugin:
    description: The name of this plugin.
    type: str
    required: true
author:
  - converge.virt developers (@converge-virt)
'''
