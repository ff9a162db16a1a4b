# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placement of a fleet migration: a target host per VM, by free memory; draining and unreachable hosts are passed over.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import Connection
from ansible_collections.converge.virt.plugins.module_utils._libvirt.drain import drain_mark
from ansible_collections.converge.virt.plugins.module_utils._libvirt.migration_observe import lookup


def place(memory_kib_by_vm, candidates):
    """Choose a target per VM by free memory.

    ``candidates``: list of dicts (uri, free_memory bytes, draining). Draining
    hosts are never chosen. Each VM goes to the candidate with the most free
    memory left (after the VMs placed before it) that fits it; None when none fits.
    """
    free = dict((c['uri'], int(c['free_memory'])) for c in candidates if not c.get('draining'))
    order = [c['uri'] for c in candidates if c['uri'] in free]
    out = {}
    for name in sorted(memory_kib_by_vm, key=lambda n: (-memory_kib_by_vm[n], n)):
        need = int(memory_kib_by_vm[name]) * 1024
        fits = [uri for uri in order if free[uri] >= need]
        if not fits:
            out[name] = None
            continue
        best = max(fits, key=lambda uri: (free[uri], -order.index(uri)))
        free[best] -= need
        out[name] = best
    return out


def choose_targets(source_args, names, candidates, target_username=None, target_password=None):
    """The target URI of every VM of ``names`` (None: no candidate fits it).

    A VM already on a candidate goes there (the run converges it: nothing to move); a VM the source does not have goes to the
    first candidate (its migration then says so); the others are placed by free memory (:func:`place`). An unreachable
    candidate is passed over.
    """
    with Connection(*source_args) as source:
        memory = {}
        for name in names:
            dom = lookup(source.conn, name)
            memory[name] = int(dom.info()[1]) if dom is not None else None
    hosts = []
    for uri in candidates:
        try:
            with Connection(uri, target_username, target_password) as conn:
                hosts.append({'uri': uri, 'free_memory': conn.conn.getFreeMemory(), 'draining': drain_mark(conn.conn) is not None,
                              'vms': set(d.name() for d in conn.conn.listAllDomains(1))})
        except ConvergeError:
            continue
    placed = place(dict((n, m) for n, m in memory.items() if m is not None), hosts)
    targets = {}
    for name in names:
        found = [h['uri'] for h in hosts if name in h['vms']]
        if memory[name] is None or found:
            targets[name] = found[0] if found else candidates[0]
        else:
            targets[name] = placed.get(name)
    return targets
