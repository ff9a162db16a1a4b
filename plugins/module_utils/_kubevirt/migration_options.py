# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a KubeVirt migration module hands the run: its options (checked, naming the field) and the VM entries of a
fleet migration (``namespace/name`` or ``name``).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import DNS_LABEL as _DNS_LABEL, check_node_name, is_subdomain
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks


class KubevirtMigrationOptions(NamedTuple):
    """How to migrate on KubeVirt."""

    target_node: Optional[str] = None
    source_node: Optional[str] = None
    wait_timeout: int = 600
    pending_timeout: Optional[int] = None
    poll_interval: float = 0.1


def validate_options(opts):
    """Raise :class:`InvalidDeclaration` naming the field of a bad option."""
    tasks.check_timeout('wait_timeout', opts.wait_timeout)
    if opts.pending_timeout is not None and opts.pending_timeout <= 0:
        raise InvalidDeclaration('pending_timeout', 'must be a positive number of seconds, got %r' % opts.pending_timeout)
    tasks.check_timeout('pending_timeout', opts.pending_timeout)
    for field in ('target_node', 'source_node'):
        if getattr(opts, field) is not None:
            check_node_name(getattr(opts, field), field)
    if opts.target_node and opts.source_node and opts.target_node == opts.source_node:
        raise InvalidDeclaration('target_node', 'is the same node as source_node (%s)' % opts.source_node)
    return opts


def split_name(entry, namespace, field='names'):
    """``namespace/name`` or ``name`` -> (namespace, name); both must be valid Kubernetes names."""
    ns, _sep, name = entry.rpartition('/') if isinstance(entry, str) else ('', '', None)
    ns = ns or namespace
    if not (is_subdomain(name) and _DNS_LABEL.match(ns or '') and len(ns) <= 63
            and entry.count('/') <= 1 and not entry.startswith('/')):
        raise InvalidDeclaration(field, 'an entry is "name" or "namespace/name" (Kubernetes names: lower case a-z, 0-9, - and .), got %r' % (entry,))
    return ns, name
