# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33: events never become code, carry only the collection's words, and wait in a bounded, coalescing outbox.

What the sources emit lands whole in the extra vars of every run_playbook (ansible_eda.event), which ansible-core
templates: no string of an event may look like a template to ansible-core (checked against ansible-core's own test
of "possibly a template" on the version that runs the tests).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import urllib.parse

from hypothesis import example, given, settings, strategies as st
import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import events as common

HERE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'extensions', 'eda', 'plugins', 'event_source')


def _load(name):
    spec = importlib.util.spec_from_file_location(name + '_under_test_safety', os.path.join(HERE, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kubevirt_events = _load('kubevirt_events')

ATTACKS = (
    "x-{{ lookup('pipe', 'touch CANARY') }}",
    "{% for x in range(1) %}{{ lookup('pipe','id') }}{% endfor %}",
    "{# comment #}",
    "#jinja2:variable_start_string:'<<',variable_end_string:'>>'\n<< lookup('pipe','id') >>",
    "a}}b",
    "only{",
)


def ansible_sees_a_template(text):
    """ansible-core's own check (the installed version): could ``text`` be a template?"""
    try:  # ansible-core 2.19
        from ansible._internal._templating._jinja_bits import is_possibly_template  # pylint: disable=import-outside-toplevel
        return is_possibly_template(text)
    except ImportError:  # 2.16 - 2.18
        from ansible.errors import AnsibleError  # pylint: disable=import-outside-toplevel
        from ansible.template import Templar  # pylint: disable=import-outside-toplevel
        from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
        try:
            return Templar(loader=DataLoader()).is_possibly_template(text)
        except AnsibleError:
            # a '#jinja2:' header it cannot parse: 2.16-2.18 read the string as a template (and fail on it)
            return True


def strings(value):
    """Every string (keys included) in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


@pytest.mark.parametrize('name', ATTACKS)
def test_a_name_with_template_syntax_goes_out_null_encoded_and_flagged(name):
    event = common.safe_event({'converge_virt': {'type': 'lifecycle', 'vm': {'name': name, 'uuid': 'u', 'withheld': []}}})
    vm = event['converge_virt']['vm']
    assert vm['name'] is None and vm['withheld'] == ['name']
    assert urllib.parse.unquote(vm['name_percent_encoded']) == name   # the exact name, for a person or a careful rule
    assert not any(ansible_sees_a_template(text) or common.carries_template(text) for text in strings(event)), event


def test_a_plain_event_is_unchanged():
    event = {'converge_virt': {'type': 'sync', 'host': 'hv1', 'count': 3, 'ok': True, 'vm': {'name': 'web-1', 'uuid': None, 'withheld': []}}}
    assert common.safe_event(event) == event


def test_keys_lists_and_other_types_are_checked_too():
    out = common.safe_event({'{{ k }}': 1, 'items': ['ok', '{{ x }}', {'deep': '{% y %}'}], 'obj': object.__new__(_Braces)})
    assert out == {'%7B%7B%20k%20%7D%7D': 1, 'items': ['ok', None, {'deep': None, 'deep_percent_encoded': '%7B%25%20y%20%25%7D', 'withheld': ['deep']}],
                   'obj': None}


class _Braces:
    def __str__(self):
        return '{{ 7 * 7 }}'


@settings(max_examples=400, deadline=None)
@example('#jinja2:trim_blocks:False\n{{ 1 }}')
@example('#jinja2:')
@example('{%')
@given(st.text(alphabet=st.sampled_from('{}%#<>jinja2: xX\n-_\'"()'), max_size=24) | st.text(max_size=24))
def test_nothing_ansible_would_template_ever_goes_out(text):
    # our test covers ansible-core's: whatever ansible-core may template, we withhold ...
    if ansible_sees_a_template(text):
        assert common.carries_template(text)
    # ... and what goes out is never a template for it
    event = common.safe_event({'vm': {'name': text, 'state_reason': text}, 'list': [text], text: 1})
    assert not any(ansible_sees_a_template(item) for item in strings(event)), event


def test_a_uuid_is_checked_against_its_pattern():
    assert common.trusted_uuid('3F2504E0-4F89-11D3-9A0C-0305E82C3301') == '3f2504e0-4f89-11d3-9a0c-0305e82c3301'
    for bad in ("3f2504e0-4f89-11d3-9a0c-0305e82c3301{{x}}", '', None, 42, '3f2504e0-4f89-11d3-9a0c-0305e82c330', 'x' * 36):
        assert common.trusted_uuid(bad) is None


# ------------------------------------------------------------------------ item 2: the collection's words only
def test_a_recorded_word_that_is_not_the_collections_becomes_unknown_and_raw_is_withheld():
    words = common.own_words({'name': 'a', 'vm_state': "{{ lookup('pipe','id') }}", 'task_state': 'HACKING', 'power_state': 'RUNNING',
                              'status': 'Pwned', 'phase': 'Running'})
    assert (words['vm_state'], words['task_state'], words['power_state'], words['status'], words['phase']) == (
        'UNKNOWN', 'UNKNOWN', 'RUNNING', 'Unknown', 'Running')
    assert words['untrusted_raw'] == {'vm_state': "{{ lookup('pipe','id') }}", 'task_state': 'HACKING', 'status': 'Pwned'}
    out = common.safe_event(words)
    assert out['untrusted_raw']['vm_state'] is None and out['untrusted_raw']['withheld'] == ['vm_state']
    assert out['untrusted_raw']['task_state'] == 'HACKING'
    # every vocabulary word and None pass unchanged
    for field, (vocabulary, _unknown) in common.VOCABULARIES.items():
        for word in tuple(vocabulary) + (None,):
            assert common.own_words({field: word}) == {field: word}


def test_kubevirt_annotations_with_template_syntax_never_become_event_words():
    vm = {'metadata': {'name': 'a', 'namespace': 'ns', 'uid': '3f2504e0-4f89-11d3-9a0c-0305e82c3301',
                       'annotations': {'converge.virt/vm-state': "{{ lookup('pipe', 'touch CANARY') }}",
                                       'converge.virt/task-state': "{% set x = 1 %}STOPPING"}},
          'spec': {'runStrategy': 'Halted'}, 'status': {'printableStatus': 'Stopped'}}
    words = kubevirt_events.vm_words('a', 'ns', vm, None)
    assert words['vm_state'] == 'UNKNOWN' and words['task_state'] == 'UNKNOWN', words
    assert words['uid'] == '3f2504e0-4f89-11d3-9a0c-0305e82c3301'
    event = common.safe_event({'converge_virt': {'type': 'change', 'vm': words, 'task_in_progress': bool(words['task_state'])}})
    assert event['converge_virt']['task_in_progress'] is True    # an unknown task: rules that skip busy VMs skip it
    assert not any(ansible_sees_a_template(text) for text in strings(event)), event
    raw = event['converge_virt']['vm']['untrusted_raw']
    assert sorted(raw['withheld']) == ['task_state', 'vm_state']
    assert urllib.parse.unquote(raw['vm_state_percent_encoded']) == "{{ lookup('pipe', 'touch CANARY') }}"


def test_a_kubevirt_uid_that_is_not_a_uuid_is_not_sent():
    vm = {'metadata': {'name': 'a', 'namespace': 'ns', 'uid': '{{ 7*7 }}'}, 'spec': {'runStrategy': 'Halted'}, 'status': {}}
    assert kubevirt_events.vm_words('a', 'ns', vm, None)['uid'] is None


# ------------------------------------------------------------------------ the Outbox: bounded, coalescing
def test_the_outbox_keeps_the_latest_item_per_key_and_a_bound():
    overflows = []

    async def scenario():
        queue = asyncio.Queue(maxsize=1)
        outbox = common.Outbox(queue, asyncio.get_running_loop(), limit=3, overflow=overflows.append, reserved=[('sync',)])
        outbox.task.cancel()   # nothing is handed over: everything waits
        await asyncio.sleep(0)
        for number in range(100):
            assert outbox.put({'n': number}, ('vm', number % 2))
        assert outbox.put({'n': 'c'}, ('vm', 'c'))
        assert not outbox.put({'n': 'd'}, ('vm', 'd'))            # a fourth key: dropped, overflow said
        assert outbox.put([{'n': 's'}], ('sync',))              # the reserved key is never refused
        assert outbox.put({'n': 'c2'}, ('vm', 'c'))              # an existing key is replaced even when full
        return list(outbox.waiting.items()), outbox.high_water, outbox.replaced
    waiting, high_water, replaced = asyncio.run(scenario())
    assert waiting == [(('vm', 0), {'n': 98}), (('vm', 1), {'n': 99}), (('sync',), [{'n': 's'}]), (('vm', 'c'), {'n': 'c2'})]
    assert (high_water, replaced, overflows) == (4, 99, [1])


def test_the_outbox_sanitizes_what_it_hands_over_and_runs_factories_at_their_turn():
    async def scenario():
        queue = asyncio.Queue(maxsize=1)
        outbox = common.Outbox(queue, asyncio.get_running_loop())
        state = {'power': 'RUNNING'}

        async def factory():
            return {'vm': {'name': '{{ x }}', 'power_state': state['power']}}
        outbox.put(factory, ('lifecycle', 'a'))
        state['power'] = 'SHUTDOWN'     # changed before the item's turn: the read sees it
        got = await asyncio.wait_for(queue.get(), 5)
        outbox.task.cancel()
        return got
    assert asyncio.run(scenario()) == {'vm': {'name': None, 'name_percent_encoded': '%7B%7B%20x%20%7D%7D', 'power_state': 'SHUTDOWN',
                                              'withheld': ['name']}}
