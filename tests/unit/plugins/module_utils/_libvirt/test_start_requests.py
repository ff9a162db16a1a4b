# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a single-VM start and a single-VM no-op ask of libvirt, counted (issue 39).

The vm module's main() runs in this process on libvirt's test:///default driver with every call on the connection, its
domains and secrets counted and every take of the task mutex (the fixtures of test_fleet_noop_requests.py, on one
domain of its fleet). A start takes the mutex twice (take and finish its task) and makes no whole observation to learn
one field of the record: a mutex taken to clear a field that is not there, or an observation to read the pending
restart, comes back as calls over :data:`START_CALLS` and fails here. A start still clears the fields an earlier stop
and update left (the stop's grace period, the pending restart). A no-op reads, writes nothing and stays within
:data:`NOOP_CALLS`, and its module process never loads the code of what it does not do (:data:`NOT_FOR_A_NO_OP`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

libvirt = pytest.importorskip('libvirt')

# pylint: disable=wrong-import-position

from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore
# the vm module's result for args on test:///default; the counted calls; a fleet of stopped domains (one is used here)
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._libvirt.test_conformance_test_driver import run
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._libvirt.test_fleet_noop_requests import (  # pylint: disable=unused-import
    READS, counted_calls, fleet_of_domains, remote_calls)

# calls of one start of a stopped VM that reach the daemon, the task mutex apart (each mutex is two more on a real host:
# define and undefine a secret), measured on 2026-11-29: 33 and two mutexes (before the cut of issue 39: 40 and three)
START_CALLS = 33
# calls of one no-op of a running VM: the departure record, the lookup, state, persistence, managed save, autostart, the
# inactive XML, the job, closing
NOOP_CALLS = 9
SINGLE_READS = READS | frozenset((
    'virConnect.lookupByName', 'virConnect.secretLookupByUsage', 'virDomain.state', 'virDomain.isPersistent',
    'virDomain.hasManagedSaveImage', 'virDomain.autostart',
))

# what a no-op without cloud_init never imports: the seed's code (cloud-init files, the NoCloud image) and the XML
# builders of create and update
NOT_FOR_A_NO_OP = tuple('ansible_collections.converge.virt.plugins.module_utils.' + name for name in (
    '_libvirt.cloud_init', '_common.nocloud', '_common.cloud_config', '_libvirt.domain_build', '_libvirt.domain_merge'))
# the vm module's main() in a new process, as AnsiballZ runs it: its result on stdout, the collection's loaded modules on stderr
NO_OP_PROCESS = """
import json, sys
from ansible.module_utils import basic
basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': {'uri': 'test:///default', 'name': 'test', 'state': 'running'}}).encode()
basic._ANSIBLE_PROFILE = 'legacy'
from ansible_collections.converge.virt.plugins.modules import vm
try:
    vm.main()
finally:
    sys.stderr.write(json.dumps(sorted(name for name in sys.modules if name.startswith('ansible_collections.converge.'))))
"""


def record(conn, name):
    """The converge metadata of domain ``name`` as stored."""
    return taskstore.read_metadata(conn.lookupByName(name))


def test_a_start_takes_the_mutex_only_for_its_task_and_reads_the_record_once(monkeypatch, fleet, calls):
    name = fleet[0]
    result = run(monkeypatch, name=name, state='running')
    assert result.get('failed') is None and [s['action'] for s in result['steps']] == ['start'], result
    assert result['vm']['power_state'] == 'RUNNING' and result['vm']['pending_restart'] is False, result
    assert calls['task mutex'] == 2, calls
    assert remote_calls(calls) - calls['task mutex'] <= START_CALLS, calls
    calls.clear()
    again = run(monkeypatch, name=name, state='running')
    assert again.get('failed') is None and again['changed'] is False and again['steps'] == [], again
    assert set(calls) <= SINGLE_READS, 'a no-op called %s' % sorted(set(calls) - SINGLE_READS)
    assert calls['task mutex'] == 0 and remote_calls(calls) <= NOOP_CALLS, calls


def test_a_start_clears_the_grace_period_and_the_pending_restart_an_earlier_run_left(monkeypatch, fleet, calls):
    name = fleet[0]
    conn = libvirt.open('test:///default')
    try:
        store = taskstore.LibvirtTaskStore(conn, conn.lookupByName(name), 'test-setup')
        store.set_stop_grace_period(0)
        store.set_pending_restart(True)
        assert record(conn, name)['stop_grace_period'] == '0.0' and record(conn, name)['pending_restart'] is True
        calls.clear()
        result = run(monkeypatch, name=name, state='running')
        assert result.get('failed') is None and [s['action'] for s in result['steps']] == ['start'], result
        assert result['vm']['pending_restart'] is False, result
        after = record(conn, name)
        assert after['stop_grace_period'] is None and after['pending_restart'] is False, after
        # take and finish the task, and one for each field cleared
        assert calls['task mutex'] == 4, calls
    finally:
        conn.close()


def test_a_no_op_process_loads_no_seed_code_and_no_xml_builder():
    """The driver's running ``test`` domain declared running: a no-op, in a process of its own."""
    proc = subprocess.run([sys.executable, '-c', NO_OP_PROCESS], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                          capture_output=True, text=True, timeout=120, check=False)
    result, loaded = json.loads(proc.stdout), json.loads(proc.stderr)
    assert result.get('failed') is None and result['changed'] is False and result['vm']['power_state'] == 'RUNNING', result
    assert 'ansible_collections.converge.virt.plugins.module_utils._libvirt.vm_backend' in loaded, loaded
    assert not set(NOT_FOR_A_NO_OP) & set(loaded), sorted(set(NOT_FOR_A_NO_OP) & set(loaded))
