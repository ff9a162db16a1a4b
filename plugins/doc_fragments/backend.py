# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module of the collection shares: the backend option (plugins/module_utils/_common/registry.py), the
connection options of both backends, the author, and the attributes.

converge.virt.backend.act (modules that change things) and converge.virt.backend.read (the read-only modules) are the
one fragment a module names; they compose the libvirt_connection and kubevirt_connection fragments' texts. A module
keeps its own words where they differ: its backend description, its check_mode/diff_mode descriptions (and
support: none for diff_mode where it has none) override the fragment's, key by key (ansible-core merges a module's
option and attribute entries over the fragment's).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.doc_fragments import kubevirt_connection, libvirt_connection

_BACKEND = r'''
  backend:
    description:
      - Where the resources live. V(libvirt) (a libvirt/KVM host, reached with the libvirt connection options) or
        V(kubevirt) (objects of O(namespace) in a KubeVirt cluster, reached with the KubeVirt connection options).
    type: str
    choices: [libvirt, kubevirt]
    default: libvirt
'''

# attributes of a module that only reads
_READ_ATTRIBUTES = r'''
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Reads only.
'''

# attributes of a module that changes things: each module states in its own words what check mode reports and what the
# diff shows (or that it has none)
_ACT_ATTRIBUTES = r'''
attributes:
  check_mode:
    support: full
    description: Reports what a real run would do and changes nothing.
  diff_mode:
    support: full
    description: Shows what changes, before and after.
'''

_COMMON = ('author:\n  - converge.virt developers (@converge-virt)\noptions:\n' + _BACKEND + libvirt_connection.OPTIONS
           + kubevirt_connection.OPTIONS + 'requirements:\n' + libvirt_connection.REQUIREMENTS
           + kubevirt_connection.REQUIREMENTS)


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment."""

    # the backend option alone
    DOCUMENTATION = 'options:\n' + _BACKEND

    # the attributes of a module that only reads, alone
    INFO = _READ_ATTRIBUTES

    # everything a module that changes things shares
    ACT = _COMMON + _ACT_ATTRIBUTES

    # everything a module that only reads shares
    READ = _COMMON + _READ_ATTRIBUTES
