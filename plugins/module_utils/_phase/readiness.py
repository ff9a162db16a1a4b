# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness after Running: how far a running guest has come towards a connection Ansible can use.

The phases, in order: ``running`` (the hypervisor runs the guest) -> ``agent`` (the guest agent answers: libvirt's
channel state ``connected``, KubeVirt's ``AgentConnected`` condition) -> ``address`` (the guest has an address
another machine can reach, from the agent, a DHCP lease or the instance's status, matched by MAC) -> ``port`` (a
TCP port of that address accepts connections, 22 unless declared). ``agent`` is passed over for a guest that has no
agent channel: its address can only come from a DHCP lease. The word is the furthest phase reached without a gap.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Optional

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration

RUNNING, AGENT, ADDRESS, PORT = 'running', 'agent', 'address', 'port'
READINESS = (RUNNING, AGENT, ADDRESS, PORT)

# what a probe saw: running (bool), has_agent (the guest has an agent channel), agent (it answers), address (str or
# None), port_open (bool or None when not probed)
Readiness = namedtuple('Readiness', 'running has_agent agent address port_open')


def readiness_word(seen: Readiness) -> Optional[str]:
    """The furthest readiness phase ``seen`` (a :class:`Readiness`) has reached without a gap, or None when not running."""
    if not seen.running:
        return None
    word = RUNNING
    if seen.has_agent:
        if not seen.agent:
            return word
        word = AGENT
    if not seen.address:
        return word
    word = ADDRESS
    return PORT if seen.port_open else word


def reached(word: Optional[str], wanted: str) -> bool:
    """True when readiness ``word`` is at or past ``wanted`` (``agent`` counts as passed by a later phase)."""
    if word is None:
        return False
    return READINESS.index(word) >= READINESS.index(wanted)


def check_wait_for(wanted: Optional[str], has_agent: bool, field: str = 'wait_for') -> None:
    """Refuse a readiness no run could report: ``agent`` for a guest declared without its agent channel."""
    if wanted not in READINESS:
        raise InvalidDeclaration(field, 'must be one of %s' % ', '.join(READINESS))
    if wanted == AGENT and has_agent is False:
        raise InvalidDeclaration(field, 'agent needs the guest agent channel: set guest_agent: true')


def missing(seen: Readiness, wanted: str, port: Optional[int]) -> Optional[str]:
    """What a guest that ``seen`` shows still lacks for ``wanted`` (for a timeout message), or None when it has it."""
    word = readiness_word(seen)
    if reached(word, wanted):
        return None
    if word is None:
        return 'the guest is not running'
    if seen.has_agent and not seen.agent:
        return 'the guest agent does not answer'
    if not seen.address:
        return 'no address of the guest is known (agent, DHCP lease)'
    return 'port %s of %s does not accept connections' % (port, seen.address)
