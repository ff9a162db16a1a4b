# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness of a KubeVirt VM from its instance's status: phase Running, the AgentConnected condition, the interfaces' addresses.

KubeVirt gives every VM the guest agent's channel, so ``agent`` is a phase of every VM here. ``port`` is not offered:
the host that runs the module is seldom inside the pod network, and a port open there would say nothing of what a
play can reach.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._common.readiness import pick_address
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_API
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import Readiness


def _mac(value):
    return (value or '').strip().lower().replace('-', ':')


def readiness_of(vmi):
    """A ``Readiness`` from a VirtualMachineInstance (or None: not running)."""
    status = (vmi or {}).get('status') or {}
    running = status.get('phase') == 'Running'
    agent = any(cond.get('type') == 'AgentConnected' and str(cond.get('status')) == 'True' for cond in status.get('conditions') or [])
    # matched by MAC, as on libvirt: with MACs declared in the instance's spec, only their interfaces count (the guest
    # agent also reports interfaces of the guest's own, a container bridge inside it for one)
    declared = set(_mac(i.get('macAddress')) for i in ((((vmi or {}).get('spec') or {}).get('domain') or {}).get('devices') or {})
                   .get('interfaces') or [] if i.get('macAddress'))
    candidates = []
    for iface in status.get('interfaces') or []:
        if declared and _mac(iface.get('mac')) not in declared:
            continue
        candidates.append(iface.get('ipAddress'))
        candidates.extend(iface.get('ipAddresses') or [])
    address = pick_address([value for value in candidates if value]) if running else None
    return Readiness(running=running, has_agent=True, agent=agent, address=address, port_open=None)


def probe(client, namespace, name):
    """The probe of ``_common.readiness.wait_ready`` for VM ``name``."""
    return lambda: readiness_of(client.get(KUBEVIRT_API, namespace, 'virtualmachineinstances', name))
