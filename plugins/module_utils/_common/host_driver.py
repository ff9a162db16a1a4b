# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host module's protocol and its one driver: a drain mark set or removed, the same on every backend.

A backend implements :class:`HostBackend` (libvirt: the host's drain secret, _libvirt/migration_runs.py; KubeVirt: the
node's cordon and taint, _kubevirt/migration_runs.py); :func:`converge_host` decides what changes, what check mode
predicts and the result's ``host`` and ``diff``.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, Optional, Tuple


class HostBackend(abc.ABC):
    """One host (libvirt) or node (KubeVirt). :meth:`draining` is read first; the other hooks may rely on it."""

    @abc.abstractmethod
    def draining(self) -> bool:
        """Whether the host carries the drain mark now."""

    @abc.abstractmethod
    def drain(self, reason: Optional[str], check_mode: bool) -> bool:
        """Set the drain mark with ``reason`` (``check_mode``: change nothing); whether anything changed (or would)."""

    @abc.abstractmethod
    def undrain(self, check_mode: bool) -> bool:
        """Remove the drain mark (``check_mode``: change nothing); whether anything changed (or would)."""

    @abc.abstractmethod
    def summary(self) -> Dict[str, Any]:
        """The host as the module returns it; ``draining`` among its keys."""


def converge_host(host: HostBackend, state: str, reason: Optional[str], check_mode: bool) -> Tuple[bool, Dict[str, Any]]:
    """Bring ``host`` to ``state`` (drained / active / present: only report); (changed, result with ``host`` and ``diff``)."""
    before = host.draining()
    changed = False
    if state == 'drained':
        changed = host.drain(reason, check_mode)
    elif state == 'active':
        changed = host.undrain(check_mode)
    view = host.summary()
    if check_mode and changed:
        view['draining'] = state == 'drained'   # predicted: nothing was written
    return changed, {'host': view, 'diff': {'before': {'draining': before}, 'after': {'draining': view['draining']}}}
