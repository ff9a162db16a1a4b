# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A libvirt daemon that dies under a vm or volume task: the task says so, instead of libvirt's bare words.

The chaos campaign (tests/chaos/) saw vm tasks fail with only ``internal error: client socket is closed`` or
``Cannot write data: Broken pipe`` when virtqemud was killed under them. The errors below are built as libvirt-python
raises them (``libvirtError.err``: code, domain, message, ...), on a fake connection.
"""

# pylint: disable=missing-function-docstring,too-few-public-methods

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
from ansible_collections.converge.virt.plugins.module_utils._base.owner import owner_gone
from ansible_collections.converge.virt.plugins.module_utils._libvirt import connection as lconn
from ansible_collections.converge.virt.plugins.module_utils._libvirt import storage
from ansible_collections.converge.virt.plugins.module_utils._libvirt import vm_backend as lvm
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import libvirt
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks, views
from ansible_collections.converge.virt.plugins.module_utils._phase.vm_plan import Step

pytestmark = pytest.mark.skipif(not lconn.HAS_LIBVIRT, reason='needs libvirt-python')

URI = 'qemu+ssh://admin:hunter2@kvm1.example/system'
CLOSED = (getattr(libvirt, 'VIR_ERR_INTERNAL_ERROR', 1), 'internal error: client socket is closed')
PIPE = (getattr(libvirt, 'VIR_ERR_SYSTEM_ERROR', 38), 'Cannot write data: Broken pipe')
RESET = (getattr(libvirt, 'VIR_ERR_SYSTEM_ERROR', 38), 'Cannot recv data: Connection reset by peer')


def lv_error(code, message):
    exc = libvirt.libvirtError(message)
    exc.err = (code, getattr(libvirt, 'VIR_FROM_RPC', 7), message, 2, None, None, None, -1, -1)
    return exc


def fake_connection():
    conn = lconn.Connection.__new__(lconn.Connection)
    conn.uri = URI
    conn.display_uri = lconn.redact_uri(URI)
    conn._secrets = lconn.connection_secrets(URI)  # pylint: disable=protected-access
    return conn


@pytest.mark.parametrize('error', [CLOSED, PIPE, RESET])
def test_a_lost_daemon_is_recognised(error):
    assert lconn.daemon_gone(lv_error(*error))


@pytest.mark.parametrize('error', [
    (getattr(libvirt, 'VIR_ERR_INTERNAL_ERROR', 1), 'internal error: unknown cpu model'),
    (getattr(libvirt, 'VIR_ERR_OPERATION_INVALID', 55), 'Requested operation is not valid: domain is not running'),
    (getattr(libvirt, 'VIR_ERR_OPERATION_INVALID', 55), 'broken pipe'),        # the words, but not a connection error code
])
def test_other_errors_are_not_taken_for_a_lost_daemon(error):
    assert not lconn.daemon_gone(lv_error(*error))
    text = str(fake_connection().error(lv_error(*error), 'start of VM %r failed' % 'web'))
    assert 'went away' not in text and error[1] in text


def test_the_connection_error_names_the_daemon_the_uri_and_the_step_never_the_password():
    exc = fake_connection().error(lv_error(*CLOSED), 'cannot read VM %r' % 'web', during='the observation of VM web')
    text = str(exc)
    assert text.startswith("cannot read VM 'web': the libvirt daemon of qemu+ssh://admin:")
    assert 'went away during the observation of VM web (it died or was restarted; libvirt said: internal error: client socket is closed)' in text
    assert 'hunter2' not in text and exc.details['daemon_gone'] is True


class DeadDomain:
    """A virDomain whose daemon went away: every call raises ``error``."""

    def __init__(self, error):
        self.error = error

    def state(self):
        raise lv_error(*self.error)


class DeadConn:
    def __init__(self, error):
        self.error = error

    def lookupByName(self, name):  # pylint: disable=invalid-name
        raise lv_error(*self.error)


def _dead_owner():
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    child.wait()
    return '%s:%d' % (socket.gethostname(), child.pid)


@pytest.mark.parametrize('error', [CLOSED, PIPE])
def test_a_vm_step_whose_daemon_died_says_what_happened_the_state_and_that_a_rerun_recovers(error, monkeypatch):
    monkeypatch.delenv('CONVERGE_VIRT_AUDIT_JOURNAL', raising=False)
    connection = fake_connection()
    connection.conn = DeadConn(error)
    vm = lvm.LibvirtVm(connection, 'web')
    vm.owner = _dead_owner()                     # the module process of this run: gone once the run ended
    store = tasks.MemoryTaskStore(tasks.TaskRecord(vm_state='ACTIVE'))
    monkeypatch.setattr(vm, 'store', lambda obs: store)
    obs = {'dom': DeadDomain(error), 'status': 'Running', 'effective_vm_state': 'ACTIVE', 'vm_state': 'ACTIVE'}
    step = Step(action='stop', task_state='POWERING_OFF', vm_state_before='ACTIVE', vm_state_after='STOPPED')
    options = lvm.driver.VmOptions(wait=True, wait_timeout=30, shutdown_timeout=10)
    with pytest.raises(BackendError) as info:
        vm.run_step(step, {}, obs, options, 'task-1-stop')
    text = str(info.value)
    assert text.startswith("stop of VM 'web' failed: the libvirt daemon of qemu+ssh://admin:")
    assert "went away during the stop of VM 'web' (it died or was restarted; libvirt said: %s)" % error[1] in text
    assert "VM 'web' was Running (vm_state ACTIVE) when last read, before the stop" in text
    assert 'run the task again once the daemon is back' in text and 'hunter2' not in text
    assert info.value.details['vm_state_last_read'] == 'ACTIVE' and info.value.details['daemon_gone'] is True
    # what the message promises: the record the run could not remove (the daemon was gone) is stale at once for the
    # next run on this host, which clears it and re-plans from what libvirt shows
    left = store.load()[0]
    assert left.task_state is not None and left.owner == vm.owner
    cleared = views.clear_stale(store, 1, time.time(), owner_gone, name='web')
    assert cleared is not None and store.load()[0].task_state is None


def test_a_wait_inside_a_step_that_meets_the_dead_daemon_gets_the_same_explanation(monkeypatch):
    monkeypatch.delenv('CONVERGE_VIRT_AUDIT_JOURNAL', raising=False)
    connection = fake_connection()
    connection.conn = DeadConn(RESET)
    vm = lvm.LibvirtVm(connection, 'web')
    store = tasks.MemoryTaskStore(tasks.TaskRecord(vm_state='STOPPED'))
    monkeypatch.setattr(vm, 'store', lambda obs: store)

    def boot(dom, options):     # the start went out; the wait for "running" then reads the VM on the dead connection
        del dom, options
        raise connection.error(lv_error(*RESET), 'cannot read VM %r' % 'web')
    monkeypatch.setattr(vm, '_boot', boot)
    obs = {'dom': DeadDomain(RESET), 'status': 'Stopped', 'effective_vm_state': 'STOPPED'}
    step = Step(action='start', task_state='POWERING_ON', vm_state_before='STOPPED', vm_state_after='ACTIVE')
    with pytest.raises(BackendError) as info:
        vm.run_step(step, {}, obs, lvm.driver.VmOptions(wait=True, wait_timeout=30), 'task-2-start')
    text = str(info.value)
    assert text.startswith("cannot read VM 'web': the libvirt daemon of qemu+ssh://admin:") and 'Connection reset by peer' in text
    assert "VM 'web' was Stopped (vm_state STOPPED) when last read, before the start" in text


class Observer:
    def __init__(self, info):
        self.info = info

    def volume(self, key):
        del key
        return self.info

    def vol(self, key):
        del key
        return DeadVolume()


class DeadVolume:
    def resize(self, size, flags):
        raise lv_error(*PIPE)

    def delete(self, flags):
        raise lv_error(*CLOSED)


@pytest.mark.parametrize('kind, error', [(storage.phase.GROW, PIPE), (storage.phase.DELETE, CLOSED)])
def test_a_volume_operation_whose_daemon_died_says_so_with_the_volume_as_last_read(kind, error):
    connection = fake_connection()
    op = storage.phase.Operation(kind=kind, volume='default/data', detail=(('from', 1 << 30), ('to', 2 << 30)) if kind == storage.phase.GROW else ())
    with pytest.raises(BackendError) as info:
        storage.execute_volume_operation(connection, Observer({'capacity': 1 << 30}), op, {}, [])
    text = str(info.value)
    assert text.startswith('%s of default/data failed: the libvirt daemon of qemu+ssh://admin:' % kind)
    doing = kind.split('_')[0]
    assert 'went away during the %s of volume default/data' % doing in text and error[1] in text
    assert 'volume default/data was 1073741824 bytes when last read, before the %s' % doing in text and 'run the task again once the daemon is back' in text
    assert 'hunter2' not in text
