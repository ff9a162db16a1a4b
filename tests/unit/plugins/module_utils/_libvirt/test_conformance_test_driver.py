# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The conformance scenarios (issue 35 item 6) on the libvirt backend, against libvirt's test:///default driver.

The vm module's main() runs in this process (its registry, the shared runner, the libvirt provider and vm module) on
a domain each test defines from the driver's ``test`` domain under a new name and UUID. libvirt's test driver keeps no
secrets, so the task mutex (a private libvirt secret taken around each compare-and-swap of the record) is made a no-op
here; the records themselves are the domain's metadata, as on a real host. Scenarios: start, stop with grace, pause,
a task held by another run, a stale task. Not here: create (the built domain XML needs a hypervisor's domain type)
and delete (the test driver's undefine refuses the flag VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA, 0x10): the in-memory
scenarios (test_providers.py) and the integration tests cover both.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import time
import uuid
import xml.etree.ElementTree as ET

import pytest

libvirt = pytest.importorskip('libvirt')

# pylint: disable=wrong-import-position
from ansible.module_utils import basic

from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import TaskRecord
from ansible_collections.converge.virt.plugins.modules import vm as vm_module

URI = 'test:///default'
GONE_PID = 4194304 + 1  # above the kernel's largest pid_max: no process can have it


@pytest.fixture(name='dom')
def domain(monkeypatch):
    monkeypatch.setattr(taskstore.DomainMutex, '__enter__', lambda self: self)
    monkeypatch.setattr(taskstore.DomainMutex, '__exit__', lambda self, *exc: False)
    conn = libvirt.open(URI)
    root = ET.fromstring(conn.lookupByName('test').XMLDesc(0))
    name = 'conf-%s' % uuid.uuid4().hex[:8]
    root.find('name').text = name
    root.find('uuid').text = str(uuid.uuid4())
    dom = conn.defineXML(ET.tostring(root, encoding='unicode'))
    yield dom
    with contextlib.suppress(libvirt.libvirtError):
        if dom.isActive():
            dom.destroy()
    dom.undefine()
    assert name not in [other.name() for other in conn.listAllDomains()]
    conn.close()


def run_module_main(monkeypatch, module, args):
    """The result ``module.main()`` prints for the module arguments ``args`` (it ends in exit_json or fail_json)."""
    monkeypatch.setattr(basic, '_ANSIBLE_ARGS', json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode())
    monkeypatch.setattr(basic, '_ANSIBLE_PROFILE', 'legacy', raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    return json.loads(out.getvalue())


def run(monkeypatch, **args):
    """The vm module's result for ``args`` (on test:///default)."""
    return run_module_main(monkeypatch, vm_module, dict(args, uri=URI))


def steps(result):
    return [step['action'] for step in result.get('steps', [])]


def write_record(dom, record):
    store = taskstore.LibvirtTaskStore(dom.connect(), dom, 'test-setup')
    _current, version = store.load()
    assert store.compare_and_swap(version, record)


def test_start(monkeypatch, dom):
    result = run(monkeypatch, name=dom.name(), state='running')
    assert (result.get('failed'), result['changed'], steps(result)) == (None, True, ['start']), result
    assert dom.isActive() and result['vm']['vm_state'] == 'ACTIVE'
    again = run(monkeypatch, name=dom.name(), state='running')
    assert (again['changed'], steps(again)) == (False, [])


def test_stop_with_grace(monkeypatch, dom):
    dom.create()
    result = run(monkeypatch, name=dom.name(), state='stopped', shutdown_timeout=30, force_stop=False)
    assert (result.get('failed'), result['changed'], steps(result)) == (None, True, ['stop']), result
    assert not dom.isActive() and result['vm']['vm_state'] == 'STOPPED'


def test_pause(monkeypatch, dom):
    dom.create()
    result = run(monkeypatch, name=dom.name(), state='paused')
    assert (result.get('failed'), steps(result)) == (None, ['pause']), result
    assert dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED


def test_a_task_held_by_another_run(monkeypatch, dom):
    dom.create()
    write_record(dom, TaskRecord(vm_state='ACTIVE', task_state='STOPPING', task_id='theirs', action='stop', owner='elsewhere:1',
                                 lease_until=time.time() + 600))
    result = run(monkeypatch, name=dom.name(), state='stopped')
    assert result.get('failed') is True and "is busy: task theirs (task_state STOPPING)" in result['msg'], result
    assert dom.isActive(), 'a VM held by another run was acted on'


def test_a_stale_task(monkeypatch, dom):
    dom.create()
    write_record(dom, TaskRecord(vm_state='ACTIVE', task_state='STOPPING', task_id='old', action='stop',
                                 owner='%s:%d' % (socket.gethostname(), GONE_PID), lease_until=time.time() + 600))
    result = run(monkeypatch, name=dom.name(), state='running')
    assert result.get('failed') is None and result.get('recovered'), result
    assert dom.isActive()
