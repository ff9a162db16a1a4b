# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A libvirt migration whose run loses a daemon connection outside the transfer says which daemon went away.

The chaos campaign (seed 2611, declaration d0272-w1) saw ``migration of VM 'cm1': internal error: client socket is
closed`` with no explanation, while failures of the transfer itself said ``failed (the target died or vanished)``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as mb
from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_observe
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase import migration

CLOSED = 'internal error: client socket is closed'


class FakeConnection:
    """A :class:`Connection` stand-in: ``alive`` is what virConnectIsAlive answers."""

    def __init__(self, alive):
        self.conn = SimpleNamespace(isAlive=lambda: 1 if alive else 0)
        self.closed = False

    @staticmethod
    def redact(text):
        return text

    def close(self):
        self.closed = True


@pytest.mark.parametrize('error', [CLOSED, 'End of file while reading data: Input/output error', 'Cannot recv data: Connection reset by peer'])
def test_target_gone_names_the_target(error):
    assert migration_observe.lost_connection(error, True, False) == migration.TARGET_FAILED + ': its libvirtd closed the connection'


def test_source_gone_names_the_source():
    why = migration_observe.lost_connection(CLOSED, False, True)
    assert "the source's libvirtd died or restarted" in why and 'target' not in why


def test_target_not_connected_and_source_gone():
    assert "the source's libvirtd" in migration_observe.lost_connection(CLOSED, False, None)


def test_both_alive_says_a_connection_was_lost():
    assert migration_observe.lost_connection(CLOSED, True, True) == 'a libvirtd connection was lost (the source or the target died or restarted)'


@pytest.mark.parametrize('error', ["Requested operation is not valid: domain is not running", "internal error: unknown cpu model"])
def test_other_errors_are_not_explained(error):
    assert migration_observe.lost_connection(error, False, False) is None


def _run_raising(monkeypatch, error, source_alive, dest_alive):
    run = mb.Migration(('qemu+unix:///system?socket=/a', None, None), 'qemu+tcp://b.example/system', 'cm1', SimpleNamespace(target_password=None))

    def failing_converge():
        run.source = FakeConnection(source_alive)
        run.dest = None if dest_alive is None else FakeConnection(dest_alive)
        raise libvirt.libvirtError(error)

    monkeypatch.setattr(run, '_converge', failing_converge)
    with pytest.raises(BackendError) as raised:
        run.converge()
    return str(raised.value.message if hasattr(raised.value, 'message') else raised.value)


def test_converge_explains_a_closed_socket_of_the_target(monkeypatch):
    msg = _run_raising(monkeypatch, CLOSED, True, False)
    assert msg == ("migration of VM 'cm1' to qemu+tcp://b.example/system failed (the target died or vanished: its libvirtd closed "
                   "the connection): internal error: client socket is closed"), msg


def test_converge_explains_a_closed_socket_of_the_source(monkeypatch):
    msg = _run_raising(monkeypatch, CLOSED, False, True)
    assert "failed (the source's libvirtd died or restarted" in msg and msg.endswith(CLOSED), msg


def test_converge_keeps_other_errors_as_they_are(monkeypatch):
    msg = _run_raising(monkeypatch, 'internal error: unknown cpu model', True, True)
    assert msg == "migration of VM 'cm1': internal error: unknown cpu model", msg
