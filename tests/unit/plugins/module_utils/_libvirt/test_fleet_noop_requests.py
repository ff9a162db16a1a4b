# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet's no-op re-run reads and never writes, with one bulk read per host and a fixed number of calls per VM (issue 39 item 3).

The vm module's main() runs in this process on libvirt's test:///default driver (as in test_conformance_test_driver.py):
a fleet of domains is converged once through the module (the records written, the guests started), then the same task
runs again with every call on the libvirt connection, its domains and secrets counted (the binding's classes wrapped),
and every take of the task mutex. The re-run must change nothing, call nothing outside :data:`READS`, take no mutex,
and stay within :data:`PER_HOST` + :data:`PER_VM` x VMs calls: a write added to the no-op path (a record refreshed, an
autostart set again, a mutex taken), a lookup per VM where the bulk read has the answer, or a second bulk read fails it.
"""

from __future__ import annotations

import collections
import contextlib
import uuid
import xml.etree.ElementTree as ET

import pytest

libvirt = pytest.importorskip('libvirt')

# pylint: disable=wrong-import-position

from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore
# the vm module's result for args on test:///default, as the conformance file runs it
from ansible_collections.converge.virt.tests.unit.plugins.module_utils._libvirt.test_conformance_test_driver import run

URI = 'test:///default'
VMS = 6
# what a no-op may ask libvirt: the bulk reads of the host, each VM's inactive XML and (running guests) its job,
# names and UUIDs (local to the binding's objects), closing the connection
READS = frozenset((
    'virConnect.listAllDomains', 'virConnect.getAllDomainStats', 'virConnect.listAllSecrets', 'virConnect.close',
    'virConnect.getHostname', 'virDomain.XMLDesc', 'virDomain.jobInfo', 'virDomain.name', 'virDomain.UUIDString',
    'virSecret.usageID',
))
# calls per host: three listAllDomains (autostart, managed save, persistent), getAllDomainStats, listAllSecrets, close
PER_HOST = 6
# calls per VM that reach the daemon: XMLDesc of the inactive definition and jobInfo of a running guest
PER_VM = 2
# calls that never leave the binding (a cached name of a virDomain, a UUID it already holds)
LOCAL = frozenset(('virDomain.name', 'virDomain.UUIDString', 'virSecret.usageID'))


@pytest.fixture(name='fleet')
def fleet_of_domains():
    """VMS stopped domains on test:///default, made from the driver's ``test`` domain; removed afterwards."""
    conn = libvirt.open(URI)
    template = conn.lookupByName('test').XMLDesc(0)
    domains = []
    for _index in range(VMS):
        root = ET.fromstring(template)
        root.find('name').text = 'noop-%s' % uuid.uuid4().hex[:8]
        root.find('uuid').text = str(uuid.uuid4())
        domains.append(conn.defineXML(ET.tostring(root, encoding='unicode')))
    yield [dom.name() for dom in domains]
    for dom in domains:
        with contextlib.suppress(libvirt.libvirtError):
            if dom.isActive():
                dom.destroy()
        with contextlib.suppress(libvirt.libvirtError):
            dom.undefine()
    conn.close()


def count_public_calls(monkeypatch, add):
    """Wrap every public method of virConnect, virDomain and virSecret so that each call first calls ``add('Class.method')``."""
    def counted(key, method):
        def call(*args, **kwargs):
            add(key)
            return method(*args, **kwargs)
        return call

    for cls in (libvirt.virConnect, libvirt.virDomain, libvirt.virSecret):
        for attr, method in list(vars(cls).items()):
            if not attr.startswith('_') and callable(method):
                monkeypatch.setattr(cls, attr, counted('%s.%s' % (cls.__name__, attr), method))


@pytest.fixture(name='calls')
def counted_calls(monkeypatch):
    """Every call of a public method of virConnect, virDomain and virSecret, and every task mutex taken: name -> count."""
    counts = collections.Counter()

    def add(key):
        counts[key] += 1
    count_public_calls(monkeypatch, add)

    def enter(mutex):
        counts['task mutex'] += 1
        return mutex
    # libvirt's test driver keeps no secrets: the mutex (a private secret) is counted, not taken (as in test_conformance_test_driver.py)
    monkeypatch.setattr(taskstore.DomainMutex, '__enter__', enter)
    monkeypatch.setattr(taskstore.DomainMutex, '__exit__', lambda self, *exc: False)
    return counts


def remote_calls(counts):
    """The calls that reach the daemon (everything but the binding's local getters)."""
    return sum(n for key, n in counts.items() if key not in LOCAL)


@pytest.mark.parametrize('state', ['running', 'stopped'])
def test_a_fleet_no_op_reads_in_bulk_and_writes_nothing(monkeypatch, fleet, calls, state):
    task = dict(state=state, vms=[{'name': name} for name in fleet])
    first = run(monkeypatch, **task)
    assert first.get('failed') is None and len(first['results']) == VMS, first
    if state == 'running':
        assert first['changed'] and all(r['vm']['power_state'] == 'RUNNING' for r in first['results']), first
        assert calls['task mutex'] > 0 and calls['virDomain.setMetadata'] > 0, 'the first converge wrote no record: %s' % calls
    calls.clear()
    again = run(monkeypatch, **task)
    assert again.get('failed') is None and again['changed'] is False, again
    assert all(r['steps'] == [] and not r['changed'] for r in again['results']), again
    assert set(calls) <= READS, 'a no-op re-run called %s' % sorted(set(calls) - READS)
    assert calls['task mutex'] == 0
    assert calls['virConnect.getAllDomainStats'] == 1 and calls['virConnect.listAllSecrets'] == 1, calls
    per_vm = PER_VM if state == 'running' else 1  # a stopped guest has no job to ask about
    assert calls['virDomain.XMLDesc'] == VMS, calls
    assert remote_calls(calls) <= PER_HOST + per_vm * VMS, calls


def test_a_write_on_the_no_op_path_is_caught(monkeypatch, fleet, calls):
    """The counting sees a write: the same no-op with a (harmless) autostart write added to every VM's observation fails the check."""
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import vm_backend  # pylint: disable=import-outside-toplevel
    task = dict(state='running', vms=[{'name': name} for name in fleet])
    run(monkeypatch, **task)
    observe = vm_backend.LibvirtVm.observe

    def observe_and_write(self, spec=None, snapshot=None):
        obs = observe(self, spec, snapshot)
        if obs.get('dom') is not None:
            obs['dom'].setAutostart(0)
        return obs
    monkeypatch.setattr(vm_backend.LibvirtVm, 'observe', observe_and_write)
    calls.clear()
    again = run(monkeypatch, **task)
    assert again['changed'] is False
    assert not set(calls) <= READS and calls['virDomain.setAutostart'] == VMS, calls
