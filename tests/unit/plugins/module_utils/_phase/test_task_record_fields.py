# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stored form of a task record (``tasks.record_fields`` / ``record_from_fields``), written once for both backends:
the libvirt metadata fields and the KubeVirt annotations are these fields under their own keys."""

# pylint: disable=missing-function-docstring

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._kubevirt import taskstore as kubevirt_store
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.views import RECORD_ANNOTATIONS
from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata
from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore as libvirt_store
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord

BUSY = TaskRecord(vm_state='ACTIVE', task_state='POWERING_OFF', task_id='abc', action='stop', started_at=1700000000.25,
                  lease_until=1700000120.5, previous_vm_state='PAUSED', owner='vm/host:42')
IDLE = TaskRecord(vm_state='STOPPED')


def test_a_record_is_stored_as_text_and_read_back_the_same():
    fields = tasks.record_fields(BUSY)
    assert fields == {'vm_state': 'ACTIVE', 'task_state': 'POWERING_OFF', 'task_id': 'abc', 'last_action': 'stop',
                      'task_started_at': '1700000000.25', 'lease_until': '1700000120.5', 'previous_vm_state': 'PAUSED',
                      'owner': 'vm/host:42'}
    assert tasks.record_from_fields(fields) == BUSY


def test_an_idle_record_keeps_the_last_action_as_history_only():
    fields = tasks.record_fields(IDLE, last_action='create')
    assert fields['last_action'] == 'create' and fields['task_started_at'] is None and fields['lease_until'] is None
    assert tasks.record_from_fields(fields) == IDLE     # no task recorded: the action is not the record's


@pytest.mark.parametrize('text, number', [('12.5', 12.5), ('', None), (None, None), ('soon', None), (['x'], None)])
def test_a_stored_number_that_is_absent_or_no_number_is_none(text, number):
    assert tasks.stored_number(text) == number


def test_empty_text_is_absent_and_the_vm_state_default_applies_only_when_none_is_stored():
    assert tasks.record_from_fields({'vm_state': '', 'task_state': ''}, 'STOPPED') == IDLE
    assert tasks.record_from_fields({}).vm_state is None       # libvirt: its store decides (the observation)
    assert tasks.record_from_fields({'vm_state': 'PAUSED'}, 'STOPPED').vm_state == 'PAUSED'


def test_both_backends_store_the_same_fields_under_their_own_keys():
    annotations = kubevirt_store.annotations_from_record(BUSY)
    assert annotations == dict((RECORD_ANNOTATIONS[field], value) for field, value in tasks.record_fields(BUSY).items())
    assert kubevirt_store.record_from_annotations(annotations) == BUSY
    assert kubevirt_store.record_from_annotations({}, 'ACTIVE') == TaskRecord(vm_state='ACTIVE')
    assert kubevirt_store.record_from_annotations({}) == IDLE
    meta = libvirt_store.metadata_from_record(BUSY, 7, pending_restart=True, stop_grace_period='30.0')
    assert meta == dict(tasks.record_fields(BUSY), pending_restart=True, generation='7', stop_grace_period='30.0')
    # through the metadata XML and back, as libvirt stores it
    read = metadata.read_converge_metadata(metadata.converge_metadata_element(meta))
    assert libvirt_store.record_from_metadata(read) == BUSY
