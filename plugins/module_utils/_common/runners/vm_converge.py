# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The loader of the runners of the vm module: imports only the selected backend's, names both for AnsiballZ (registry.run)."""

from __future__ import annotations


def load(backend):
    """The ``vm_converge`` module of ``backend``, imported now."""
    # pylint: disable=import-outside-toplevel
    if backend == 'kubevirt':
        from ansible_collections.converge.virt.plugins.module_utils._kubevirt import vm_converge
    else:
        from ansible_collections.converge.virt.plugins.module_utils._libvirt import vm_converge
    return vm_converge
