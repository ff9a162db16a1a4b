# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The libvirt snapshot backend without a daemon: refusals, snapshot XML, the lease kept while a call blocks."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.converge.virt.plugins.module_utils._libvirt import snapshots as sb
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks
from ansible_collections.converge.virt.plugins.module_utils._phase.tasks import MemoryTaskStore, TaskPreempted, TaskRecord


def domain(disks=(), loader=None, firmware=None):
    root = ET.Element('domain', {'type': 'kvm'})
    ET.SubElement(root, 'name').text = 'web-1'
    os_el = ET.SubElement(root, 'os', {'firmware': firmware} if firmware else {})
    ET.SubElement(os_el, 'type').text = 'hvm'
    if loader:
        ET.SubElement(os_el, 'loader', {'type': loader, 'readonly': 'yes'}).text = '/usr/share/OVMF/OVMF_CODE.fd'
    devices = ET.SubElement(root, 'devices')
    for dev, fmt, device, readonly in disks:
        disk = ET.SubElement(devices, 'disk', {'type': 'file', 'device': device})
        ET.SubElement(disk, 'driver', {'name': 'qemu', 'type': fmt})
        ET.SubElement(disk, 'source', {'file': '/var/lib/images/%s.img' % dev})
        ET.SubElement(disk, 'target', {'dev': dev, 'bus': 'virtio'})
        if readonly:
            ET.SubElement(disk, 'readonly')
    return ET.tostring(root, encoding='unicode')


class FakeDom:
    def __init__(self, xml, running=False, managed=False):
        self.xml, self.running, self.managed = xml, running, managed

    def isActive(self):
        return self.running

    def XMLDesc(self, _flags=0):
        return self.xml

    def hasManagedSaveImage(self, _flags=0):
        return self.managed


class FakeConnection:
    display_uri = 'qemu:///system'

    def __init__(self, dom):
        self.conn = self
        self.dom = dom

    def lookupByName(self, _name):
        return self.dom

    def getLibVersion(self):
        return 9000000


def refusal(xml, running=False, memory=False, managed=False):
    return sb.SnapshotObserver(FakeConnection(FakeDom(xml, running, managed)), 'web-1').refusal(memory)


QCOW = ('vda', 'qcow2', 'disk', False)


@pytest.mark.parametrize('xml,running,memory,managed,needle', [
    (domain([QCOW, ('vdb', 'raw', 'disk', False)]), False, False, False, 'disk vdb (/var/lib/images/vdb.img) is raw: internal snapshots need qcow2'),
    (domain([QCOW], loader='pflash'), False, False, False, 'pflash'),
    (domain([QCOW], firmware='efi'), False, False, False, 'pflash'),
    (domain([QCOW]), True, False, False,
     'must be an external snapshot: this module takes internal snapshots only (libvirt reverts external snapshots from 9.9 on; this daemon runs 9.0.0)'),
    (domain([QCOW]), False, True, False, 'memory: true needs a running or paused VM'),
    (domain([QCOW]), False, False, True, 'managed save image'),
    (domain([]), False, False, False, 'no writable disk'),
])
def test_refusals_name_the_reason(xml, running, memory, managed, needle):
    why = refusal(xml, running, memory, managed)
    assert why is not None and needle in why, why


@pytest.mark.parametrize('xml,running,memory', [
    (domain([QCOW]), False, False),
    (domain([QCOW]), True, True),
    (domain([]), True, True),                                            # memory only: a diskless running guest
    (domain([QCOW, ('hdc', 'raw', 'cdrom', True), ('vdc', 'raw', 'disk', True)]), False, False),  # read-only disks are not snapshotted
])
def test_what_libvirt_can_do_is_not_refused(xml, running, memory):
    assert refusal(xml, running, memory) is None


def test_snapshot_xml_holds_names_as_data():
    text = sb.snapshot_xml('a<b>&"c', 'line </description><x/>')
    root = ET.fromstring(text)
    assert root.findtext('name') == 'a<b>&"c' and root.findtext('description') == 'line </description><x/>'
    assert root.find('x') is None and ET.fromstring(sb.snapshot_xml('n', None)).find('description') is None


def test_snapshot_from_xml_and_public_form():
    xml = ('<domainsnapshot><name>s2</name><description>d</description><state>running</state><parent><name>s1</name></parent>'
           '<creationTime>1700000000</creationTime><memory snapshot="internal"/><domain/></domainsnapshot>')
    snap = sb.snapshot_from_xml(xml, children=('s3',))
    assert (snap.name, snap.parent, snap.created, snap.vm_state_at_snapshot, snap.memory, snap.children) == (
        's2', 's1', 1700000000.0, 'running', True, ('s3',))
    public = sb.public_snapshot(snap, 'web-1', current='s2')
    assert public['created'] == '2023-11-14T22:13:20Z' and public['current'] and public['consistency'] == 'crash-consistent'
    assert not sb.snapshot_from_xml('<domainsnapshot><name>x</name><state>shutoff</state><memory snapshot="no"/></domainsnapshot>').memory


def test_the_lease_is_renewed_while_a_call_blocks():
    store = MemoryTaskStore(TaskRecord(vm_state='ACTIVE'))
    tasks.take_task(store, 'snapshot', 'ours', now=time.time(), lease_seconds=5)
    first_lease = store.record.lease_until
    keeper = sb.LeaseKeeper(store, 'ours', 'web-1', every=0.01, lease_seconds=100).start()
    deadline = time.monotonic() + 10
    while keeper.renewals < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    keeper.stop()
    assert keeper.renewals >= 2 and store.record.lease_until > first_lease + 50 and store.record.task_id == 'ours'


def test_a_preempted_task_is_reported_when_the_keeper_stops():
    store = MemoryTaskStore(TaskRecord(vm_state='ACTIVE'))
    tasks.take_task(store, 'snapshot', 'ours', now=time.time())
    keeper = sb.LeaseKeeper(store, 'ours', 'web-1', every=0.01).start()
    tasks.take_task(store, 'delete', 'deleter', now=time.time())  # delete preempts any task
    deadline = time.monotonic() + 10
    while keeper.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(TaskPreempted):
        keeper.stop()
    assert store.record.task_id == 'deleter'


def test_one_task_holds_the_whole_plan():
    from ansible_collections.converge.virt.plugins.module_utils._phase import snapshots as sn  # pylint: disable=import-outside-toplevel
    create, restore, delete = (sn.SnapshotStep(op, 'x', ()) for op in (sn.CREATE, sn.RESTORE, sn.DELETE))
    assert sb.plan_action([create, restore]) == 'restore_snapshot'
    assert sb.plan_action([create, delete, delete]) == 'snapshot'
    assert sb.plan_action([delete]) == 'delete_snapshot'
