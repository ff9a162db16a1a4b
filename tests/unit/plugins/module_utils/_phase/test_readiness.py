# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness after Running: the word, the order, what is missing, the refusals."""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._phase import readiness as r


def seen(running=True, has_agent=True, agent=True, address='192.0.2.10', port_open=None):
    return r.Readiness(running=running, has_agent=has_agent, agent=agent, address=address, port_open=port_open)


@pytest.mark.parametrize('state, word', [
    (seen(running=False), None),
    (seen(agent=False), 'running'),                        # an agent channel whose agent does not answer: no further
    (seen(agent=False, has_agent=False), 'address'),       # no channel: the lease's address is the next phase
    (seen(address=None), 'agent'),
    (seen(), 'address'),
    (seen(port_open=False), 'address'),
    (seen(port_open=True), 'port'),
    (seen(agent=False, address=None, has_agent=False), 'running'),
])
def test_the_word_is_the_furthest_phase_without_a_gap(state, word):
    assert r.readiness_word(state) == word


def test_a_later_phase_passes_an_earlier_one_and_nothing_passes_not_running():
    assert r.reached('port', 'agent') and r.reached('address', 'address') and not r.reached('agent', 'address')
    assert not r.reached(None, 'running')


@pytest.mark.parametrize('state, wanted, text', [
    (seen(running=False), 'running', 'the guest is not running'),
    (seen(agent=False), 'address', 'the guest agent does not answer'),
    (seen(address=None), 'address', 'no address of the guest is known'),
    (seen(port_open=False), 'port', 'port 22 of 192.0.2.10 does not accept connections'),
    (seen(port_open=True), 'port', None),
])
def test_missing_names_the_first_phase_not_reached(state, wanted, text):
    got = r.missing(state, wanted, 22)
    assert (got is None and text is None) or text in got


def test_agent_is_refused_for_a_guest_declared_without_the_channel():
    with pytest.raises(InvalidDeclaration, match='agent needs the guest agent channel'):
        r.check_wait_for('agent', False)
    with pytest.raises(InvalidDeclaration, match='agent needs the guest agent channel'):
        r.check_wait_for(''.join(['ag', 'ent']), False)     # as parsed from the task's JSON: equal, not the same object
    r.check_wait_for('agent', None)      # not declared: the domain may have it
    r.check_wait_for('port', False)
    r.check_wait_for('address', False)   # an address (DHCP lease) needs no agent
    r.check_wait_for('running', False)
    with pytest.raises(InvalidDeclaration, match='must be one of running, agent, address, port'):
        r.check_wait_for('ssh', True)
