# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which module of each backend serves the host, migration and migration_info modules: imported only when a task selects that backend (see __init__.py)."""

from __future__ import annotations

# pylint: disable=import-outside-toplevel


def _libvirt():
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_runs
    return migration_runs


def _kubevirt():
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_runs
    return migration_runs


# backend name -> the function that imports its module (a name missing here fails naming the backend: _common.registry.load)
LOADERS = {
    'libvirt': _libvirt,
    'kubevirt': _kubevirt,
}
