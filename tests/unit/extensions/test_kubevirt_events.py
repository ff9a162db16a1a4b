# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubevirt_events event source's pure parts: arguments, and the words it sends (those of vm_info)."""

from __future__ import annotations

import importlib.util
import os


import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import observe as kobserve

PATH = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'extensions', 'eda', 'plugins', 'event_source', 'kubevirt_events.py')
SPEC = importlib.util.spec_from_file_location('kubevirt_events_under_test', PATH)
events = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(events)


def test_defaults():
    assert events.check_args({'namespace': 'ns'}) == {
        'namespace': 'ns', 'heartbeat': 30.0, 'watch_timeout': 300.0, 'initial_sync': True, 'queue_limit': 4096}


@pytest.mark.parametrize('args,field', [
    ({}, 'namespace'), ({'namespace': ''}, 'namespace'), ({'namespace': 'n', 'heartbeat': 'x'}, 'heartbeat'),
    ({'namespace': 'n', 'watch_timeout': 0}, 'watch_timeout'), ({'namespace': 'n', 'heartbeat': -1}, 'heartbeat'),
    ({'namespace': 'n', 'initial_sync': 'no'}, 'initial_sync'), ({'namespace': 'n', 'token': 's3cret'}, 'token'),
])
def test_bad_arguments_name_the_field_and_never_a_value(args, field):
    with pytest.raises(ValueError) as raised:
        events.check_args(args)
    assert str(raised.value).startswith('kubevirt_events: %s:' % field) and 's3cret' not in str(raised.value)


VM = {'metadata': {'name': 'a', 'namespace': 'ns', 'annotations': {'converge.virt/vm-state': 'ACTIVE', 'converge.virt/task-state': 'STOPPING'}},
      'spec': {'runStrategy': 'Halted'}, 'status': {'printableStatus': 'Stopping'}}
VMI = {'metadata': {'name': 'a', 'namespace': 'ns'}, 'status': {'phase': 'Running', 'nodeName': 'n1'}}


def test_the_words_are_vm_infos():
    words = events.vm_words('a', 'ns', VM, VMI)
    view = kobserve.public_view(kobserve.build('a', 'ns', VM, VMI, [], []))
    assert words == dict({key: view[key] for key in events.WORDS if key in view}, withheld=[])
    assert (words['vm_state'], words['task_state'], words['phase']) == ('ACTIVE', 'STOPPING', 'Running')


def test_a_gone_vm_says_so():
    words = events.vm_words('a', 'ns', None, None)
    assert (words['exists'], words['vm_state']) == (False, 'DELETED')


def test_a_relist_reports_a_vm_deleted_while_no_watch_ran():
    import asyncio  # pylint: disable=import-outside-toplevel
    from ansible_collections.converge.virt.plugins.module_utils._common.events import Outbox  # pylint: disable=import-outside-toplevel

    async def scenario():
        queue = asyncio.Queue()
        source = events.KubevirtEvents(queue, {'namespace': 'ns'})
        source.loop = asyncio.get_running_loop()
        source.outbox = Outbox(queue, source.loop)
        source.objects['virtualmachines'] = {'a': VM, 'b': dict(VM, metadata=dict(VM['metadata'], name='b'))}
        source._sync()  # pylint: disable=protected-access
        await asyncio.sleep(0.05)
        source.objects['virtualmachines'] = {'b': dict(VM, metadata=dict(VM['metadata'], name='b'))}   # 'a' deleted while disconnected
        source._sync()  # pylint: disable=protected-access
        await asyncio.sleep(0.05)
        source.outbox.task.cancel()
        return [queue.get_nowait()['converge_virt'] for _unused in range(queue.qsize())]
    sent = asyncio.run(scenario())
    second = sent[3:]
    assert [(e['type'], e.get('vm', {}).get('name')) for e in second] == [('change', 'a'), ('sync', 'b'), ('sync_done', None)]
    assert second[0]['action'] == 'DELETED' and second[0]['vm']['exists'] is False and second[0]['vm']['vm_state'] == 'DELETED'
