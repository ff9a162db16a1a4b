# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The backend option of every module (plugins/module_utils/_common/registry.py) and the attributes of the read-only modules."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment."""

    DOCUMENTATION = r'''
options:
  backend:
    description:
      - Where the resources live. V(libvirt) (a libvirt/KVM host, reached with the libvirt connection options) or
        V(kubevirt) (objects of O(namespace) in a KubeVirt cluster, reached with the KubeVirt connection options).
    type: str
    choices: [libvirt, kubevirt]
    default: libvirt
'''

    # attributes of a module that only reads
    INFO = r'''
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Reads only.
'''
