# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt_events event source's pure parts: arguments, libvirt's event words, Nova's delayed STOPPED."""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest

PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'extensions', 'eda', 'plugins', 'event_source', 'libvirt_events.py')
SPEC = importlib.util.spec_from_file_location('libvirt_events_under_test', PATH)
events = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(events)


def test_defaults_and_numbers(monkeypatch):
    monkeypatch.delenv('LIBVIRT_DEFAULT_URI', raising=False)
    assert events.check_args({}) == {'uri': 'qemu:///system', 'stopped_delay': 15.0, 'reconnect_max': 30.0, 'initial_sync': True,
                                     'queue_limit': 4096}
    assert events.check_args({'stopped_delay': '2', 'uri': 'qemu+tcp://h/system'})['stopped_delay'] == 2.0


def test_the_uri_falls_back_to_the_environment_as_in_the_modules(monkeypatch):
    # an EDA/AWX credential injects LIBVIRT_DEFAULT_URI; a uri given in the rulebook wins
    monkeypatch.setenv('LIBVIRT_DEFAULT_URI', 'qemu+tcp://hv1.example.com/system')
    assert events.check_args({})['uri'] == 'qemu+tcp://hv1.example.com/system'
    assert events.check_args({'uri': 'qemu+tcp://h/system'})['uri'] == 'qemu+tcp://h/system'


@pytest.mark.parametrize('args,field', [
    ({'urii': 'x'}, 'urii'), ({'uri': ''}, 'uri'), ({'stopped_delay': 'soon'}, 'stopped_delay'),
    ({'reconnect_max': -1}, 'reconnect_max'), ({'initial_sync': 'yes'}, 'initial_sync'), ({'queue_limit': 'many'}, 'queue_limit'),
    ({'queue_limit': 1}, 'queue_limit'),
])
def test_bad_arguments_name_the_field(args, field):
    with pytest.raises(ValueError) as raised:
        events.check_args(args)
    assert str(raised.value).startswith('libvirt_events: %s:' % field)


@pytest.mark.parametrize('code,detail,words', [
    (5, 1, ('STOPPED', 'destroyed')), (2, 0, ('STARTED', 'booted')), (3, 7, ('SUSPENDED', 'postcopy')),
    (8, 0, ('CRASHED', 'panicked')), (1, 0, ('UNDEFINED', 'removed')), (42, 0, ('UNKNOWN', 'unknown')), (5, 99, ('STOPPED', 'unknown')),
])
def test_libvirt_event_words(code, detail, words):
    assert events.event_words(code, detail) == words


def _run(script, delay):
    sent = []

    async def main():
        delayer = events.Delayer(delay, lambda _key, _name, factory: sent.append(factory()))
        await script(delayer)
    asyncio.run(main())
    return sent


def test_a_stopped_event_is_held_back_and_sent_after_the_delay():
    async def script(delayer):
        delayer.event('vm-a', 'STOPPED', lambda: 'a stopped')
        await asyncio.sleep(0.01)
        assert 'vm-a' in delayer.pending  # still held
        await asyncio.sleep(0.1)
    assert _run(script, 0.05) == ['a stopped']


def test_any_later_event_of_the_same_vm_drops_the_held_stopped():
    async def script(delayer):
        delayer.event('vm-a', 'STOPPED', lambda: 'a stopped')
        delayer.event('vm-b', 'STOPPED', lambda: 'b stopped')
        delayer.event('vm-a', 'STARTED', lambda: 'a started')
        await asyncio.sleep(0.1)
    assert _run(script, 0.05) == ['a started', 'b stopped']


def test_no_delay_sends_at_once_and_a_disconnect_drops_what_is_held():
    async def script(delayer):
        delayer.event('vm-a', 'STOPPED', lambda: 'a stopped')
        assert not delayer.pending
    assert _run(script, 0) == ['a stopped']

    async def dropped(delayer):
        delayer.event('vm-a', 'STOPPED', lambda: 'a stopped')
        delayer.cancel_all()
        await asyncio.sleep(0.1)
    assert not _run(dropped, 0.05)
