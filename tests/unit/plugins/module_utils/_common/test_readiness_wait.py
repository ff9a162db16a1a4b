# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness wait shared by the backends: the address taken, the port tried, the timeout's message."""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import socket

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import readiness
from ansible_collections.converge.virt.plugins.module_utils._base.errors import WaitTimeout
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import Readiness


def test_pick_address_prefers_ipv4_and_never_takes_loopback_link_local_or_names():
    assert readiness.pick_address(['fe80::1', '127.0.0.1', '2001:db8::5', 'host.example', '192.0.2.7']) == '192.0.2.7'
    assert readiness.pick_address(['fe80::1', '2001:db8::5']) == '2001:db8::5'
    assert readiness.pick_address(['127.0.0.1', '169.254.1.1', '::1']) is None


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_wait_ready_polls_until_the_wanted_phase():
    clock = Clock()
    states = iter([Readiness(False, True, False, None, None), Readiness(True, True, False, None, None),
                   Readiness(True, True, True, None, None), Readiness(True, True, True, '192.0.2.9', None)])
    got = readiness.wait_ready(lambda: next(states), 'address', 60, clock=clock, sleep=clock.sleep)
    assert readiness.public(got) == {'readiness': 'address', 'address': '192.0.2.9'}


def test_port_open_tells_a_listening_port_from_a_closed_one():
    with socket.socket() as listener:
        listener.bind(('127.0.0.1', 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert readiness.port_open('127.0.0.1', port)
    assert not readiness.port_open('127.0.0.1', port)


def test_the_port_is_tried_only_when_waited_for_and_a_timeout_says_what_is_missing(monkeypatch):
    tried = []
    monkeypatch.setattr(readiness, 'port_open', lambda address, port: tried.append((address, port)) or False)  # no packet leaves

    def probe():
        return Readiness(True, False, False, '192.0.2.9', None)

    clock = Clock()
    assert readiness.public(readiness.wait_ready(probe, 'address', 5, clock=clock, sleep=clock.sleep))['readiness'] == 'address'
    assert tried == []
    with pytest.raises(WaitTimeout) as caught:
        readiness.wait_ready(probe, 'port', 5, port=2222, name='web', clock=clock, sleep=clock.sleep)
    assert tried and set(tried) == {('192.0.2.9', 2222)}
    assert caught.value.message.startswith('web: readiness port not reached within 5s: port 2222 of 192.0.2.9 does not accept connections')
    assert '(readiness reached: address)' in caught.value.message
    assert caught.value.details['last_observed'] == {'readiness': 'address', 'address': '192.0.2.9'}
