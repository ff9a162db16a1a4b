"""Departure records (_libvirt/departures.py) on libvirt's test driver, which keeps no secrets: no records, no error.

A vm task must not fail on a host whose libvirt has no secret driver (the test driver, some remote drivers): there
is no departure to honour there. The message of a refusal names the target, the task and whether the move finished.
"""

import libvirt
import pytest

from ansible_collections.converge.virt.plugins.module_utils._libvirt import departures


@pytest.fixture
def conn():
    handle = libvirt.open('test:///default')
    yield handle
    handle.close()


def test_a_host_without_secrets_keeps_no_records_and_fails_nothing(conn):
    with pytest.raises(libvirt.libvirtError):
        conn.secretLookupByUsage(libvirt.VIR_SECRET_USAGE_TYPE_VOLUME, 'x')   # the driver really has no secrets
    assert departures.departure(conn, 'vm-1') is None
    assert departures.departures(conn) == {}
    assert departures.mark(conn, 'vm-1', departures.LEAVING, 'qemu+tcp://hv2/system', 'task-1') is False
    assert departures.clear(conn, 'vm-1') is False


def test_refusal_names_target_task_and_phase():
    left = departures.refusal('web-1', {'target': 'qemu+tcp://hv2/system', 'task_id': 't1', 'phase': 'left', 'since': 0})
    assert "VM 'web-1' left this host" in left and 'migrated to qemu+tcp://hv2/system (task t1, 1970-01-01 00:00:00 UTC)' in left
    assert 'if_moved: skip' in left and 'state: absent' in left
    leaving = departures.refusal('web-1', {'target': 'qemu+tcp://hv2/system', 'task_id': 't2', 'phase': 'leaving'})
    assert 'did not finish (task t2, started an unknown time); it may be running there' in leaving


def test_only_a_running_guest_cancels_a_departure():
    assert departures.runs_here(libvirt.VIR_DOMAIN_RUNNING) and departures.runs_here(libvirt.VIR_DOMAIN_BLOCKED)
    for state in (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_CRASHED, libvirt.VIR_DOMAIN_PMSUSPENDED):
        assert not departures.runs_here(state), state
