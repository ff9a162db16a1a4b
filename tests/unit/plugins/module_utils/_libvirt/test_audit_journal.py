"""The audit journal ($CONVERGE_VIRT_AUDIT_JOURNAL): appended to, created owner-only, never written through a link."""

import json
import os

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore


def test_lines_are_appended_to_a_file_created_owner_only(tmp_path, monkeypatch):
    journal = tmp_path / 'journal.jsonl'
    monkeypatch.setenv(taskstore.AUDIT_JOURNAL_ENV, str(journal))
    old = os.umask(0)
    try:
        taskstore.audit('begin', 'vm-1', 't1', 'start')
    finally:
        os.umask(old)
    taskstore.audit('end', 'vm-1', 't1', 'start', outcome='done')
    assert os.stat(str(journal)).st_mode & 0o777 == 0o600
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [(e['event'], e['vm'], e.get('outcome')) for e in lines] == [('begin', 'vm-1', None), ('end', 'vm-1', 'done')]


def test_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    target = tmp_path / 'authorized_keys'
    target.write_text('ssh-ed25519 AAAA owner\n')
    link = tmp_path / 'journal.jsonl'
    link.symlink_to(target)
    monkeypatch.setenv(taskstore.AUDIT_JOURNAL_ENV, str(link))
    with pytest.raises(BackendError) as refused:
        taskstore.audit('begin', 'vm-1', 't1', 'start')
    assert taskstore.AUDIT_JOURNAL_ENV in refused.value.message and 'symbolic link' in refused.value.message
    assert target.read_text() == 'ssh-ed25519 AAAA owner\n'
    # a dangling link is not followed to create its target either
    link.unlink()
    link.symlink_to(tmp_path / 'created-elsewhere')
    with pytest.raises(BackendError):
        taskstore.audit('begin', 'vm-1', 't1', 'start')
    assert not (tmp_path / 'created-elsewhere').exists()


def test_a_directory_is_refused_with_the_variable_named(tmp_path, monkeypatch):
    monkeypatch.setenv(taskstore.AUDIT_JOURNAL_ENV, str(tmp_path))
    with pytest.raises(BackendError) as refused:
        taskstore.audit('begin', 'vm-1', 't1', 'start')
    assert taskstore.AUDIT_JOURNAL_ENV in refused.value.message and 'not a regular file' in refused.value.message


def test_nothing_is_written_when_unset(tmp_path, monkeypatch):
    monkeypatch.delenv(taskstore.AUDIT_JOURNAL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    taskstore.audit('begin', 'vm-1', 't1', 'start')
    assert not os.listdir(str(tmp_path))
