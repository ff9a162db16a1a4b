"""Storage and snapshots through a real CSI stack on the real node (issue 37 item 4): converge.virt.volume provisions a
claim through external-provisioner and the upstream csi-driver-host-path; converge.virt.snapshot takes a
VirtualMachineSnapshot of a stopped VM with a data disk on that claim (KubeVirt's snapshot controller makes a
VolumeSnapshot, external-snapshotter's snapshot-controller and csi-snapshotter have the driver cut it) and restores it
(KubeVirt's restore controller makes a new claim from the VolumeSnapshot, the driver fills it from the snapshot): the
data is back, by its checksum.

Opt-in: CONVERGE_VIRT_REAL_NODE=1 and CONVERGE_VIRT_CSI=1 (``make test-real-node-csi``; the CSI stack is built by
``make kube-csi``, not by make test: docs/kubelab.md, "Storage and snapshots"). Run inside
``python -m tools.virtlab netns -- ...``, one real-node lab at a time (flock /tmp/converge-real-node.lock).

Where the data is written and read: on the volume, from this machine (the driver keeps volume ``H`` in
DIR/node/csi-hostpath/H; the disk is the ``disk.img`` KubeVirt's launcher created on it when the VM first ran). The
project's test guest has no block driver (its initramfs loads only evdev and button), so the guest cannot read the
disk itself; that the guest's QEMU opened the disk is checked on its command line.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import hashlib
import os

import pytest

from tests.integration.ansible_run import run_module
from tests.integration.kubevirt_real_node_gate import require_real_node
from tests.integration.kubevirt_real_node_fixtures import (NS, get, lab_up, ok, qemu_pids, vm_args, vm_of, vmi_of,
                                                           wait_for)
from tools.kubelab import build, csi

require_real_node()
if os.environ.get('CONVERGE_VIRT_CSI') != '1':
    pytest.skip('the CSI stack tests are opt-in: `make test-real-node-csi` (CONVERGE_VIRT_CSI=1)', allow_module_level=True)
try:
    csi.locate()
except build.KubelabError as exc:
    pytest.fail(f'CONVERGE_VIRT_CSI=1 but the CSI stack is not built ({exc}); run `make kube-csi`', pytrace=False)

VM = 'snap1'
CLAIM = 'data1'
SIZE = '64Mi'
DISK = 'data'
SNAPSHOT = 'before-change'
SNAPSHOT_API = '/apis/snapshot.kubevirt.io/v1beta1/namespaces/%s/' % NS
VOLUME_SNAPSHOT_API = '/apis/snapshot.storage.k8s.io/v1/'
DATA_BYTES = 1024 * 1024


@pytest.fixture(scope='module')
def nodelab(tmp_path_factory):
    """The real node with KubeVirt's Snapshot gate and the CSI stack (tools/kubelab/csi.py)."""
    with lab_up(tmp_path_factory, 'kubelab-node-csi', controllers='real', nodes='real', feature_gates=('Snapshot',)) as info:
        info['csi'] = csi.start(info['dir'])
        yield info


def claim_of(nodelab, name):
    return get(nodelab, '/api/v1/namespaces/%s/persistentvolumeclaims/%s' % (NS, name))


def bound_volume(nodelab, name):
    """(claim, its PersistentVolume) once the claim is Bound."""
    claim = wait_for('claim %s Bound' % name, lambda: (claim_of(nodelab, name) or {}).get('status', {}).get('phase') == 'Bound'
                     and claim_of(nodelab, name), timeout=180)
    return claim, get(nodelab, '/api/v1/persistentvolumes/' + claim['spec']['volumeName'])


def disk_image(nodelab, pv):
    return os.path.join(csi.volume_path(nodelab['dir'], pv['spec']['csi']['volumeHandle']), 'disk.img')


def sha256(path):
    with open(path, 'rb') as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def overwrite(path, data):
    """``data`` at the start of the disk image (its size kept)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)


def claim_names(vm):
    return [v['persistentVolumeClaim']['claimName'] for v in vm['spec']['template']['spec']['volumes'] if 'persistentVolumeClaim' in v]


def test_a_claim_is_provisioned_by_the_external_provisioner_and_the_driver(nodelab):
    result = ok(run_module('volume', dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=CLAIM,  # pylint: disable=use-dict-literal
                                          capacity=SIZE, storage_class=csi.STORAGE_CLASS, access_modes=['ReadWriteOnce'],
                                          wait_timeout=180)))
    assert result['changed'], result
    claim, pv = bound_volume(nodelab, CLAIM)
    # a PV made by external-provisioner (not a static one): its annotation, the CSI source naming the driver, the volume
    # the driver created
    assert (pv['metadata'].get('annotations') or {}).get('pv.kubernetes.io/provisioned-by') == csi.DRIVER, pv['metadata']
    assert pv['spec']['csi']['driver'] == csi.DRIVER and pv['spec']['claimRef']['name'] == CLAIM, pv['spec']
    assert claim['spec']['storageClassName'] == csi.STORAGE_CLASS
    assert os.path.isdir(csi.volume_path(nodelab['dir'], pv['spec']['csi']['volumeHandle'])), pv['spec']['csi']


def test_snapshot_of_a_stopped_vm_and_restore_bring_the_data_back(nodelab):  # pylint: disable=too-many-locals,too-many-statements
    _claim, pv = bound_volume(nodelab, CLAIM)
    disks = [{'name': DISK, 'claim': CLAIM}]
    # the VM runs once: the kubelet publishes the CSI volume into the launcher pod, KubeVirt's launcher creates disk.img
    # on it and QEMU opens it
    ok(run_module('vm', vm_args(nodelab, 'running', name=VM, disks=disks)))
    image = disk_image(nodelab, pv)
    wait_for('disk.img on the provisioned volume', lambda: os.path.exists(image), timeout=120)
    qemu = qemu_pids(VM)
    assert qemu, 'no QEMU of %s' % VM
    with open('/proc/%d/cmdline' % qemu[0], 'rb') as handle:
        assert b'vmi-disks/' + DISK.encode() + b'/disk.img' in handle.read().replace(b'\0', b' ')
    ok(run_module('vm', vm_args(nodelab, 'stopped', name=VM, disks=disks)))
    wait_for('the VMI gone', lambda: vmi_of(nodelab, VM) is None, timeout=180)

    before = os.urandom(DATA_BYTES)
    overwrite(image, before)
    checksum = sha256(image)

    taken = ok(run_module('snapshot', dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, vm=VM,  # pylint: disable=use-dict-literal
                                           name=SNAPSHOT, wait_timeout=300)))
    snap = get(nodelab, SNAPSHOT_API + 'virtualmachinesnapshots/' + SNAPSHOT)
    status = snap['status']
    # our words equal KubeVirt's
    assert taken['snapshot']['kubevirt_phase'] == status['phase'] == 'Succeeded', (taken['snapshot'], status)
    assert taken['snapshot']['ready_to_use'] is status['readyToUse'] is True, (taken['snapshot'], status)
    assert taken['snapshot']['indications'] == (status.get('indications') or []), (taken['snapshot'], status)
    assert taken['snapshot']['content'] == status['virtualMachineSnapshotContentName']
    # behind it a VolumeSnapshot of the claim, cut by the driver (a snapshot handle, ready)
    content = get(nodelab, SNAPSHOT_API + 'virtualmachinesnapshotcontents/' + status['virtualMachineSnapshotContentName'])
    backups = content['spec']['volumeBackups']
    assert [b['persistentVolumeClaim']['metadata']['name'] for b in backups] == [CLAIM], backups
    volume_snapshot = get(nodelab, VOLUME_SNAPSHOT_API + 'namespaces/%s/volumesnapshots/%s' % (NS, backups[0]['volumeSnapshotName']))
    assert volume_snapshot['status']['readyToUse'] is True, volume_snapshot['status']
    vsc = get(nodelab, VOLUME_SNAPSHOT_API + 'volumesnapshotcontents/' + volume_snapshot['status']['boundVolumeSnapshotContentName'])
    assert vsc['spec']['driver'] == csi.DRIVER and vsc['status']['snapshotHandle'], vsc
    assert os.path.exists(os.path.join(csi.state_dir(nodelab['dir']), vsc['status']['snapshotHandle'] + '.snap')), vsc['status']

    after = os.urandom(DATA_BYTES)
    overwrite(image, after)
    assert sha256(image) != checksum

    restored = ok(run_module('snapshot', dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, vm=VM,  # pylint: disable=use-dict-literal
                                              name=SNAPSHOT, state='restored', wait_timeout=300)))
    assert restored['changed'] and restored['snapshot']['phase'] == 'Restored', restored
    restore_name = [o['restore'] for o in restored['operations'] if o['op'] == 'restore_snapshot'][0]
    restore = get(nodelab, SNAPSHOT_API + 'virtualmachinerestores/' + restore_name)
    assert restore['status']['complete'] is True, restore['status']
    # the VM's data disk is now a new claim made from the VolumeSnapshot by the provisioner and the driver
    names = claim_names(vm_of(nodelab, VM))
    assert len(names) == 1 and names[0] != CLAIM, names
    new_claim, new_pv = bound_volume(nodelab, names[0])
    assert new_claim['spec']['dataSource']['kind'] == 'VolumeSnapshot', new_claim['spec']
    assert (new_pv['metadata'].get('annotations') or {}).get('pv.kubernetes.io/provisioned-by') == csi.DRIVER, new_pv['metadata']
    restored_image = disk_image(nodelab, new_pv)
    assert sha256(restored_image) == checksum, 'the restored disk does not hold the data of the snapshot'
    with open(restored_image, 'rb') as handle:
        assert handle.read(DATA_BYTES) == before

    # and the VM runs on the restored claim
    ok(run_module('vm', vm_args(nodelab, 'running', name=VM)))
    pod = wait_for('the launcher pod', lambda: [p for p in (get(nodelab, '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%3Dvirt-launcher' % NS)
                                                            or {}).get('items', []) if p['metadata'].get('labels', {}).get('vm.kubevirt.io/name') == VM])
    assert {'claimName': names[0]} in [v.get('persistentVolumeClaim') for v in pod[0]['spec']['volumes']], pod[0]['spec']['volumes']
    ok(run_module('vm', vm_args(nodelab, 'stopped', name=VM)))
