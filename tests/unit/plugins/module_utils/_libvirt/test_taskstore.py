# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt task store against forged records (issue 24, finding 5), with an in-memory libvirt connection and domain.

Whoever may write a domain's ``<metadata>`` may write any lease; whoever may define secrets on the daemon may
define one with the usage of a VM's task mutex. Neither may hold the VM (or its mutex) forever.
"""

# pylint: disable=missing-function-docstring,too-few-public-methods

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

libvirt = pytest.importorskip('libvirt')

# pylint: disable=wrong-import-position
from ansible_collections.converge.virt.plugins.module_utils._libvirt import metadata
from ansible_collections.converge.virt.plugins.module_utils._libvirt import taskstore
from ansible_collections.converge.virt.plugins.module_utils._libvirt.taskstore import DomainMutex, LibvirtTaskStore
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks

UUID = '11111111-2222-3333-4444-555555555555'


class FakeError(libvirt.libvirtError):
    def __init__(self, msg, code=libvirt.VIR_ERR_OPERATION_INVALID):
        libvirt.libvirtError.__init__(self, msg)
        self.code = code

    def get_error_code(self):
        return self.code


class FakeSecret:
    def __init__(self, conn, xml):
        self.conn = conn
        self.xml = xml
        self.usage = ET.fromstring(xml).findtext('usage/volume')

    def XMLDesc(self, _flags):  # pylint: disable=invalid-name
        return self.xml

    def undefine(self):
        self.conn.secrets.pop(self.usage, None)


class FakeConn:
    """Secrets keyed by volume usage: defining a second one with a usage taken fails, as in libvirtd."""

    def __init__(self):
        self.secrets = {}

    def secretDefineXML(self, xml, _flags):  # pylint: disable=invalid-name
        secret = FakeSecret(self, xml)
        if secret.usage in self.secrets:
            raise FakeError('secret for volume %s already defined' % secret.usage)
        self.secrets[secret.usage] = secret
        return secret

    def secretLookupByUsage(self, _usage_type, usage):  # pylint: disable=invalid-name
        if usage not in self.secrets:
            raise FakeError('no secret', libvirt.VIR_ERR_NO_SECRET)
        return self.secrets[usage]


class FakeDomain:
    def __init__(self, values=None):
        self.fragment = metadata.converge_metadata_element(values) if values else None

    def isPersistent(self):  # pylint: disable=invalid-name
        return True

    def isActive(self):  # pylint: disable=invalid-name
        return True

    def UUIDString(self):  # pylint: disable=invalid-name
        return UUID

    def name(self):
        return 'vm1'

    def metadata(self, _type, _uri, _flags):
        if self.fragment is None:
            raise FakeError('no metadata', libvirt.VIR_ERR_NO_DOMAIN_METADATA)
        return self.fragment

    def setMetadata(self, _type, fragment, _prefix, _uri, _flags):  # pylint: disable=invalid-name
        self.fragment = fragment


def forged_secret(conn, description):
    root = ET.Element('secret', {'ephemeral': 'no', 'private': 'yes'})
    if description is not None:
        ET.SubElement(root, 'description').text = description
    ET.SubElement(ET.SubElement(root, 'usage', {'type': 'volume'}), 'volume').text = 'converge-lock:' + UUID
    return conn.secretDefineXML(ET.tostring(root, encoding='unicode'), 0)


def _at(stamp):
    # parameters name times relative to now ('+3600'): xdist workers must collect the same test ids
    return repr(time.time() + float(stamp)) if stamp[:1] in '+-' and stamp[1:].isdigit() else stamp


@pytest.mark.parametrize('lease', ['nan', 'inf', '-nan', 'Infinity', '1e18', '1e400', '+864000'])
def test_a_forged_lease_in_the_metadata_is_stale_and_recovered(lease):
    lease = _at(lease)
    dom = FakeDomain({'vm_state': 'ACTIVE', 'task_state': 'STOPPING', 'task_id': 'forged', 'last_action': 'stop',
                      'lease_until': lease, 'owner': 'elsewhere:1', 'generation': '7'})
    store = LibvirtTaskStore(FakeConn(), dom, 'me:1')
    record, version = store.load()
    now = time.time()
    assert record.task_id == 'forged' and version == 7
    assert record.stale(now) and record.stale_reason(now)
    tasks.clear_stale_task(store, 'forged', 'ACTIVE', name='vm1')
    taken = tasks.take_task(store, 'stop', 'next', now, owner='me:1', name='vm1')
    assert store.load()[0].task_id == 'next' and not taken.stale(now)


def test_a_live_lease_in_the_metadata_holds():
    dom = FakeDomain({'vm_state': 'ACTIVE', 'task_state': 'STOPPING', 'task_id': 'live', 'last_action': 'stop',
                      'lease_until': repr(time.time() + 600), 'owner': 'elsewhere:1', 'generation': '3'})
    record, _version = LibvirtTaskStore(FakeConn(), dom, 'me:1').load()
    assert not record.stale(time.time())


def _mutex_description(stamp, holder='elsewhere:1'):
    return 'converge.virt task mutex %s held by %s' % (stamp, holder)


def _resolved(description):
    """The description with a relative time ('+3600') replaced by that time from now."""
    prefix = 'converge.virt task mutex '
    if description is None or not description.startswith(prefix):
        return description
    stamp, sep, rest = description[len(prefix):].partition(' ')
    return prefix + _at(stamp) + sep + rest


@pytest.mark.parametrize('description', [
    _mutex_description('nan'),
    _mutex_description('inf'),
    _mutex_description('1e18'),                         # "taken" in the far future: never older than 30 s
    _mutex_description('+3600'),
    _mutex_description('-3600'),                        # left by a run killed elsewhere
    _mutex_description('soon'),
    'some other description',
    '',
    None,
])
def test_a_forged_mutex_is_broken(description):
    conn = FakeConn()
    forged_secret(conn, _resolved(description))
    with DomainMutex(conn, UUID, 'me:1', timeout=1.0) as mutex:
        assert mutex.secret is not None and 'held by me:1' in mutex.secret.XMLDesc(0)
    assert conn.secrets == {}


def test_a_live_mutex_is_waited_for():
    conn = FakeConn()
    forged_secret(conn, _resolved(_mutex_description('+0', 'elsewhere:1')))
    start = time.monotonic()
    with pytest.raises(tasks.TaskConflict) as err:
        with DomainMutex(conn, UUID, 'me:1', timeout=0.3):
            pass
    assert 'stayed taken' in err.value.details['reason'] and time.monotonic() - start >= 0.3


@pytest.mark.parametrize('description, stale', [
    (_mutex_description(repr(1000.0)), False),
    (_mutex_description(repr(1000.0 - taskstore.STALE_MUTEX_SECONDS - 1)), True),
    (_mutex_description(repr(1000.0 + taskstore.STALE_MUTEX_SECONDS + 1)), True),
    (_mutex_description('nan'), True),
    (_mutex_description('-inf'), True),
    ('converge.virt task mutex 1000.0', True),          # no holder: not a form this collection writes
])
def test_mutex_stale_reason(description, stale):
    assert (taskstore.mutex_stale_reason(description, 1000.0) is not None) is stale


def test_the_store_writes_through_a_forged_mutex():
    """A forged mutex and a forged lease at once: the next run still recovers the VM and takes it."""
    conn = FakeConn()
    forged_secret(conn, _mutex_description('1e18'))
    dom = FakeDomain({'vm_state': 'ACTIVE', 'task_state': 'MIGRATING', 'task_id': 'forged', 'last_action': 'live_migrate',
                      'lease_until': 'inf', 'generation': '2'})
    store = LibvirtTaskStore(conn, dom, 'me:1')
    tasks.clear_stale_task(store, 'forged', 'ACTIVE', name='vm1')
    assert store.load()[0].idle() and conn.secrets == {}
