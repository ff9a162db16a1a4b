"""SSH and an Ansible play inside a KubeVirt guest, and a hot-plug through KubeVirt's attachment pod, on the real node
(issue 37 items 5 and 3).

Run by ``make test-real-node`` (CONVERGE_VIRT_REAL_NODE=1; skipped in make test), inside ``python -m tools.virtlab netns``.
One lab for the module: ``up --controllers real --nodes real`` with KubeVirt's ``HotplugVolumes`` feature gate (virt-api
refuses ``addvolume`` without it), plus Kubernetes' own PersistentVolume binder (tools/kubelab/storage.py: a second
kube-controller-manager running only ``persistentvolume-binder-controller``; the lab's own runs without it). One Debian
TCG boot of the golden image (the containerDisk of test_kubevirt_real_node_cloud.py) for the three tests, in order.

**SSH (item 5).** ``converge.virt.vm`` boots the golden image with the pod network (``interfaces: [{}]``, KubeVirt's
masquerade binding) and a cloud-init seed: a host name that is not the VM's, a user ``converge`` with sudo and a per-run
SSH key, a ``write_files`` file (content with a per-run token, mode 0640), a ``runcmd`` writing a file; ``wait_for:
address`` (the real guest agent and the instance's address). The collection's ``converge.virt.kubevirt`` inventory gives
the host ``default-ssh1`` with ``ansible_host`` = the VMI's address: the virt-launcher pod's IP on the node's pod bridge.
The single node runs in the lab's network namespace (tools/kubelab/node.py: the CNI bridge ``kl<id>`` with the node's IP
as gateway is an interface of this namespace), so that address is routed here directly, and KubeVirt's masquerade
forwards every port of the pod's address to the guest (no ``ports`` listed): no port-forward, no Service. ansible-playbook
then logs in over SSH as the user cloud-init made and reads, inside the guest: the host name, the write_files file
(content, mode, owner), the user and its key, runcmd's output, the guest's address (10.0.2.2 behind masquerade) and
``cloud-init status --long`` (done) with no errors in result.json. A second run of the module is ``changed: false``.

**Hot-plug (item 3).** A hostPath PersistentVolume on a directory of the lab holding ``disk.img`` (a sparse raw disk
whose first bytes are a per-run token), a StorageClass without provisioner; ``converge.virt.volume`` creates the claim
(Kubernetes' binder binds it) and attaches it to the running VM (``addvolume``: the disk and the volume in the VM's
template and the running instance). KubeVirt does the rest: virt-controller makes the attachment pod ``hp-volume-*``
(the launcher image running ``container-disk``, the claim mounted) on the node, the kubelet mounts the hostPath volume
into it, virt-handler finds ``disk.img`` through the pod's mounts and bind-mounts it into the launcher, virt-launcher
attaches it to the domain (SCSI). Checked: the attachment pod Running on the node, owned by the launcher pod, holding the
claim; the guest (over SSH) lists a new SCSI disk of the image's size with the declared serial, and reads the token from
it; ``volume_info``'s ``hotplug_phase`` equals KubeVirt's ``volumeStatus`` phase at every settled observation (the
VMI unchanged while volume_info ran), sampled throughout the attach and the detach; the module's own phases are KubeVirt's
words in KubeVirt's order. A detach without ``force`` is refused (the disk stays); with ``force`` (``removevolume``) the
disk is gone from the guest and the attachment pod is deleted. Then absent removes the claim (the volume Released).

Finding (KubeVirt v1.8.0): virt-launcher lower-cases the whole disk XML of a hot-plugged disk before attaching it
(pkg/virt-launcher/virtwrap/manager.go, ``AttachDeviceFlags(strings.ToLower(...))``), so a declared serial ``HP1Serial``
reaches the guest as ``hp1serial`` (/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_hp1serial); a disk of the VM's boot keeps
its case. The test declares a mixed-case serial and expects the lower-case one in the guest.
"""

# pylint: disable=missing-function-docstring,redefined-outer-name,too-many-locals,too-many-statements

import base64
import ipaddress
import json
import os
import secrets
import subprocess
import threading
import time

import pytest

from tests.integration.ansible_run import BIN, ROOT, ansible_env, run_module
from tests.integration.kubevirt_real_node_fixtures import API, NS, get, lab_up, ok, read_handler_log, vmi_of, wait_for
from tests.integration.kubevirt_real_node_gate import require_real_node
# the golden image's containerDisk fixture, imported into the node of this module's nodelab
from tests.integration.test_kubevirt_real_node_cloud import cloud_disk  # pylint: disable=unused-import
from tools.kubelab import node, storage

require_real_node()

VM = 'ssh1'
HOST = '%s-%s' % (NS, VM)               # the inventory's host name (host_format '{namespace}-{name}')
DECLARED_HOSTNAME = 'seeded-over-ssh'   # not the VM's name: KubeVirt's own meta-data says local-hostname: ssh1
USER = 'converge'
SEED_FILE = '/etc/converge/kubevirt.txt'
RUNCMD_OUT = '/var/tmp/converge-runcmd.out'
MASQUERADE_GUEST_ADDRESS = '10.0.2.2'
MEMORY = '768Mi'                        # below 1Gi: see test_kubevirt_real_node_cloud.py (memory hot-plug on libvirt 9.0.0)
BOOT_TIMEOUT = 1200                     # a Debian TCG boot on 2 loaded cores: 2-5 minutes
CLAIM = 'hp1'
PV = 'pv-hp1'
DISK = 'hpdisk'
SERIAL = 'HP1Serial'                    # mixed case on purpose (see the finding above)
DISK_BYTES = 64 * 1024 * 1024
SIZE = '64Mi'
HOTPLUG_ORDER = ['Pending', 'Bound', 'AttachedToNode', 'MountedToPod', 'Ready']
UNPLUG_ORDER = ['Ready', 'Detaching', 'UnMountedFromPod', 'Detached']   # 'Detached': the module's word for "gone from the instance"


@pytest.fixture(scope='module')
def nodelab(tmp_path_factory):
    """The real node with KubeVirt's HotplugVolumes gate and Kubernetes' PersistentVolume binder."""
    with lab_up(tmp_path_factory, 'kubelab-node-ssh', controllers='real', nodes='real', feature_gates=('HotplugVolumes',)) as info:
        info['binder_pid'] = storage.start_pv_binder(info['dir'])
        yield info


@pytest.fixture(scope='module')
def ssh_key(tmp_path_factory):
    directory = tmp_path_factory.mktemp('ssh-key')
    key = str(directory / 'id_ed25519')
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-C', 'converge-kubevirt-ssh', '-f', key], check=True)
    with open(key + '.pub', encoding='utf-8') as handle:
        return {'private': key, 'public': handle.read().strip()}


def guest_args(nodelab, cloud_disk, ssh_key, token, state='running', **args):
    user_data = {
        'hostname': DECLARED_HOSTNAME,
        'users': [{'name': USER, 'shell': '/bin/bash', 'sudo': 'ALL=(ALL) NOPASSWD:ALL', 'lock_passwd': True,
                   'ssh_authorized_keys': [ssh_key['public']]}],
        'write_files': [{'path': SEED_FILE, 'content': token + '\n', 'permissions': '0640', 'owner': 'root:root'}],
        'runcmd': [['sh', '-c', 'echo "runcmd ran on $(hostname)" > %s' % RUNCMD_OUT]],
    }
    template = {'template': {'spec': {'nodeSelector': {'kubernetes.io/hostname': node.NODE_NAME}, 'terminationGracePeriodSeconds': 120}}}
    base = dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=VM, state=state,  # pylint: disable=use-dict-literal
                vcpus=1, memory=MEMORY, disks=[{'name': 'root', 'image': cloud_disk['name']}], spec=template,
                interfaces=[{}], cloud_init={'user_data': user_data}, wait_timeout=300)
    base.update(args)
    return base


@pytest.fixture(scope='module')
def guest(nodelab, cloud_disk, ssh_key):
    """The golden guest booted by converge.virt.vm with the seed (one boot for the module); removed at the end if a
    test left it."""
    token = 'token-' + secrets.token_hex(8)
    started = time.monotonic()
    result = run_module('vm', guest_args(nodelab, cloud_disk, ssh_key, token, wait_for='address', wait_timeout=BOOT_TIMEOUT))
    info = {'result': result, 'token': token, 'boot_seconds': round(time.monotonic() - started, 1)}
    try:
        yield info
    finally:
        if get(nodelab, API + 'virtualmachines/' + VM) is not None:
            run_module('vm', guest_args(nodelab, cloud_disk, ssh_key, token, state='absent'))


def write_inventory(nodelab, directory):
    """A converge.virt.kubevirt inventory source for the lab (the file name the plugin requires)."""
    path = os.path.join(directory, 'guests.converge_kubevirt.yml')
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump({'plugin': 'converge.virt.kubevirt', 'kubeconfig': nodelab['kubeconfig'], 'namespaces': [NS]}, handle)  # JSON is YAML
    return path


def inventory_list(inventory):
    proc = subprocess.run([os.path.join(BIN, 'ansible-inventory'), '-i', inventory, '--list', '--export'],
                          env=ansible_env({'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.kubevirt'}), capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def plain(value):
    """An inventory value without its unsafe marker."""
    return value['__ansible_unsafe'] if isinstance(value, dict) and set(value) == {'__ansible_unsafe'} else value


def guest_play(inventory, ssh_key, tasks, directory, name):
    """Run ``tasks`` in a play on HOST over SSH as USER (the inventory's ansible_host); {task name: HOST's result}."""
    play = [{'name': name, 'hosts': HOST, 'gather_facts': False, 'vars': {
        'ansible_user': USER, 'ansible_python_interpreter': '/usr/bin/python3', 'ansible_ssh_private_key_file': ssh_key['private'],
        # the guest makes its host keys at first boot (cloud-init): nothing to pin beforehand
        'ansible_ssh_extra_args': '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null',
        # a TCG guest on loaded cores can take longer than ssh's default 10 s for a key exchange
        'ansible_ssh_timeout': 60, 'ansible_ssh_retries': 3}, 'tasks': tasks}]
    path = os.path.join(directory, name.replace(' ', '-') + '.yml')
    with open(path, 'w', encoding='utf-8') as handle:
        json.dump(play, handle)
    proc = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', inventory, path],
                          env=ansible_env({'ANSIBLE_INVENTORY_ENABLED': 'converge.virt.kubevirt'}), capture_output=True, text=True,
                          check=False, timeout=1200, cwd=ROOT)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError('ansible-playbook printed no JSON (rc %d):\n%s\n%s' % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    results = {t['task']['name']: t['hosts'].get(HOST) for p in out['plays'] for t in p['tasks']}
    failures = [(task, r.get('msg')) for task, r in results.items() if r and (r.get('failed') or r.get('unreachable'))]
    assert proc.returncode == 0 and not failures and results, (failures, proc.stderr[-2000:])
    return results


def command(name, argv, become=False, **extra):
    task = {'name': name, 'ansible.builtin.command': {'argv': argv}, 'changed_when': False}
    if become:
        task['become'] = True
    task.update(extra)
    return task


def slurp(name, path, become=False):
    task = {'name': name, 'ansible.builtin.slurp': {'src': path}}
    if become:
        task['become'] = True
    return task


def decoded(result):
    return base64.b64decode(result['content']).decode()


def test_ssh_into_the_golden_guest_and_a_play_reads_what_cloud_init_did(nodelab, cloud_disk, ssh_key, guest, tmp_path):
    result = ok(guest['result'])
    assert result['changed'] and result['cloud_init']['changed'], result
    vmi = vmi_of(nodelab, VM)
    assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == node.NODE_NAME, vmi['status']
    iface = vmi['status']['interfaces'][0]
    address = iface['ipAddress']
    assert result['vm']['readiness'] == 'address' and result['vm']['address'] == address, (result['vm'], iface)
    # the launcher pod's address on the node's pod bridge: an interface of this very network namespace
    assert ipaddress.ip_address(address) in ipaddress.ip_network(nodelab['node']['network']), (address, nodelab['node'])

    # the collection's inventory: the host, with ansible_host = the instance's address
    inventory = write_inventory(nodelab, str(tmp_path))
    listed = inventory_list(inventory)
    hostvars = {k: plain(v) for k, v in listed['_meta']['hostvars'][HOST].items()}
    assert hostvars['ansible_host'] == address and hostvars['readiness'] == 'address' and hostvars['status'] == 'Running', hostvars

    started = time.monotonic()
    tasks = [
        {'name': 'Wait until the guest accepts the SSH login cloud-init made', 'ansible.builtin.wait_for_connection': {'timeout': 600, 'sleep': 5}},
        command('Host name', ['hostname']),
        {'name': 'The write_files file', 'ansible.builtin.stat': {'path': SEED_FILE}, 'become': True},
        slurp("The write_files file's content", SEED_FILE, become=True),
        command('The user cloud-init made', ['getent', 'passwd', USER]),
        slurp('Its authorized keys', '/home/%s/.ssh/authorized_keys' % USER),
        slurp('The output of runcmd', RUNCMD_OUT),
        command('IPv4 addresses', ['ip', '-4', '-o', 'addr', 'show', 'scope', 'global']),
        command('The status cloud-init reports', ['cloud-init', 'status', '--long'], failed_when=False),
        slurp('The result cloud-init wrote', '/run/cloud-init/result.json'),
        command('Who runs the play', ['id', '-un']),
    ]
    found = guest_play(inventory, ssh_key, tasks, str(tmp_path), 'read what cloud-init did')
    play_seconds = time.monotonic() - started
    assert found['Host name']['stdout'] == DECLARED_HOSTNAME, found['Host name']
    stat = found['The write_files file']['stat']
    assert stat['exists'] and (stat['mode'], stat['pw_name'], stat['gr_name']) == ('0640', 'root', 'root'), stat
    assert decoded(found["The write_files file's content"]) == guest['token'] + '\n'
    entry = found['The user cloud-init made']['stdout'].split(':')
    assert entry[0] == USER and entry[5] == '/home/%s' % USER and entry[6] == '/bin/bash', entry
    assert ssh_key['public'] in decoded(found['Its authorized keys']).splitlines()
    assert found['Who runs the play']['stdout'] == USER
    assert decoded(found['The output of runcmd']) == 'runcmd ran on %s\n' % DECLARED_HOSTNAME
    inet = [line.split()[3] for line in found['IPv4 addresses']['stdout_lines']]
    assert inet == [MASQUERADE_GUEST_ADDRESS + '/24'], inet     # behind KubeVirt's masquerade: the pod's address is not the guest's
    status = found['The status cloud-init reports']
    assert status['rc'] == 0 and 'status: done' in status['stdout_lines'], status
    assert any(line.startswith('DataSourceNoCloud') for line in status['stdout_lines']), status['stdout_lines']
    cloud_result = json.loads(decoded(found['The result cloud-init wrote']))['v1']
    assert cloud_result['errors'] == [] and 'DataSourceNoCloud' in cloud_result['datasource'], cloud_result

    # a second run changes nothing: the Secret and the template are as declared
    again = ok(run_module('vm', guest_args(nodelab, cloud_disk, ssh_key, guest['token'])))
    assert not again['changed'] and not again['cloud_init']['changed'], again
    print('\nreal node, SSH into the golden guest: lab up %.1f s, containerDisk import %.1f s; vm running with the agent and the '
          'address %.1f s; address %s (pod bridge %s); the play over SSH %.1f s (%d tasks); cloud-init: %s' % (
              nodelab['up_seconds'], cloud_disk['import_seconds'], guest['boot_seconds'], address, nodelab['node']['bridge'],
              play_seconds, len(found), status['stdout_lines'][0]))


class HotplugWatch:
    """While the volume module runs: KubeVirt's volumeStatus phase of DISK and the attachment pods, read every 0.3 s; and
    volume_info's hotplug_phase beside KubeVirt's, judged only when the VMI did not change while volume_info ran."""

    def __init__(self, nodelab):
        self.nodelab = nodelab
        self.kubevirt_phases = []       # KubeVirt's words in the order seen (changes only)
        self.pods = {}                  # attachment pod name -> [phases seen]
        self.settled = []               # (ours, KubeVirt's) at each settled volume_info observation
        self.unsettled = 0
        self.errors = []
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._guard(self._sample), daemon=True),
                        threading.Thread(target=self._guard(self._judge), daemon=True)]

    def _guard(self, loop):
        def run():
            try:
                loop()
            except Exception as exc:  # pylint: disable=broad-except
                self.errors.append(repr(exc))
        return run

    def vmi(self):
        vmi = vmi_of(self.nodelab, VM) or {}
        entry = next((s for s in (vmi.get('status') or {}).get('volumeStatus') or [] if s.get('name') == DISK), None)
        return (vmi.get('metadata') or {}).get('resourceVersion'), (entry or {}).get('phase')

    def _sample(self):
        while not self.stop_event.is_set():
            _rv, phase = self.vmi()
            if phase and (not self.kubevirt_phases or self.kubevirt_phases[-1] != phase):
                self.kubevirt_phases.append(phase)
            for pod in attachment_pods(self.nodelab):
                seen = self.pods.setdefault(pod['metadata']['name'], [])
                word = 'Terminating' if pod['metadata'].get('deletionTimestamp') else pod['status'].get('phase')
                if not seen or seen[-1] != word:
                    seen.append(word)
            self.stop_event.wait(0.3)

    def _judge(self):
        while not self.stop_event.is_set():
            before, theirs = self.vmi()
            info = run_module('volume_info', dict(backend='kubevirt', kubeconfig=self.nodelab['kubeconfig'], namespace=NS,  # pylint: disable=use-dict-literal
                                                  name=[CLAIM]))
            after, _phase = self.vmi()
            if info.get('failed') or info['_rc'] != 0:
                self.errors.append(info.get('msg'))
                continue
            volume = info['volumes'][0]
            ours = next((a['hotplug_phase'] for a in volume.get('attachments') or [] if a['vm'] == VM and a['dev'] == DISK), None)
            if before == after:
                self.settled.append((ours, theirs))
            else:
                self.unsettled += 1

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        for thread in self.threads:
            thread.join(120)


def attachment_pods(nodelab):
    code, body = nodelab['client'].request('GET', '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%3Dhotplug-disk' % NS)
    assert code == 200, body
    return body['items']


def in_order(words, order):
    positions = [order.index(w) for w in words]
    return positions == sorted(positions) and len(set(positions)) == len(positions)


def volume_args(nodelab, **args):
    base = dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=CLAIM, capacity=SIZE,  # pylint: disable=use-dict-literal
                storage_class=storage.STORAGE_CLASS, access_modes=['ReadWriteOnce'], wait_timeout=300)
    base.update(args)
    return base


def guest_disks(inventory, ssh_key, directory, name, count, token_device=None):
    """The guest's whole disks over SSH (lsblk), asked again until ``count`` of them carry the hot-plugged disk's serial
    as the guest sees it (its udev may lag the VMI's status by a moment; 30 tries 2 s apart); with ``token_device``, also
    the first line of that device."""
    serial_count = "(disks.stdout | from_json).blockdevices | selectattr('serial', 'equalto', '%s') | list | length == %d" % (SERIAL.lower(), count)
    tasks = [command('Block devices', ['lsblk', '-J', '-b', '-d', '-o', 'NAME,SERIAL,SIZE,TYPE'], register='disks',
                     until=serial_count, retries=30, delay=2)]
    if token_device:
        tasks.append(command('The first bytes of the hot-plugged disk', ['head', '-n', '1', token_device], become=True))
    found = guest_play(inventory, ssh_key, tasks, directory, name)
    return json.loads(found['Block devices']['stdout'])['blockdevices'], found


def test_hotplug_of_a_claim_through_kubevirts_attachment_pod_reaches_the_guest(nodelab, ssh_key, guest, tmp_path):
    client = nodelab['client']
    assert vmi_of(nodelab, VM)['status']['phase'] == 'Running'
    inventory = write_inventory(nodelab, str(tmp_path))
    # storage without CSI: a StorageClass without provisioner, a hostPath PersistentVolume on a directory holding disk.img
    token = ('hotplug-' + secrets.token_hex(12) + '\n').encode()
    image = storage.make_disk_image(str(tmp_path / PV), DISK_BYTES, token)
    code, answer = client.request('POST', '/apis/storage.k8s.io/v1/storageclasses', storage.storage_class())
    assert code == 201, answer
    code, answer = client.request('POST', '/api/v1/persistentvolumes', storage.host_path_volume(PV, os.path.dirname(image), SIZE))
    assert code == 201, answer
    before_disks, _found = guest_disks(inventory, ssh_key, str(tmp_path), 'disks before', 0)

    attach = [{'vm': VM, 'dev': DISK, 'serial': SERIAL}]
    started = time.monotonic()
    with HotplugWatch(nodelab) as watch:
        plugged = ok(run_module('volume', volume_args(nodelab, attachments=attach)))
        plug_seconds = time.monotonic() - started
        wait_for('a settled volume_info observation of the Ready disk', lambda: ('Ready', 'Ready') in watch.settled, timeout=120, interval=1)
    assert not watch.errors, watch.errors
    assert [(o['op'], o.get('vm')) for o in plugged['operations']] == [
        ('create_volume', None), ('attach_config', VM), ('attach_live', VM)], plugged['operations']
    phases = plugged['operations'][2]['phases']
    # the module's words are KubeVirt's, in KubeVirt's order, ending Ready; KubeVirt's own trail is in the same order
    assert phases[-1] == 'Ready' and in_order(phases, HOTPLUG_ORDER), phases
    assert watch.kubevirt_phases[-1] == 'Ready' and in_order(watch.kubevirt_phases, HOTPLUG_ORDER), watch.kubevirt_phases
    disagree = [pair for pair in watch.settled if pair[0] != pair[1]]
    assert not disagree, (disagree, watch.settled)
    attach_settled, attach_trail = list(watch.settled), list(watch.kubevirt_phases)

    # the claim bound by Kubernetes' binder to the hostPath volume
    pvc = get(nodelab, '/api/v1/namespaces/%s/persistentvolumeclaims/%s' % (NS, CLAIM))
    assert pvc['status']['phase'] == 'Bound' and pvc['spec']['volumeName'] == PV, pvc
    assert get(nodelab, '/api/v1/persistentvolumes/' + PV)['status']['phase'] == 'Bound'
    # KubeVirt's attachment pod: Running on the node, owned by the launcher pod, holding the claim
    vmi = vmi_of(nodelab, VM)
    status = next(s for s in vmi['status']['volumeStatus'] if s['name'] == DISK)
    assert status['phase'] == 'Ready' and status['persistentVolumeClaimInfo']['claimName'] == CLAIM, status
    pod_name = status['hotplugVolume']['attachPodName']
    pods = {p['metadata']['name']: p for p in attachment_pods(nodelab)}
    assert list(pods) == [pod_name] and pod_name.startswith('hp-volume-'), sorted(pods)
    pod = pods[pod_name]
    assert pod['status']['phase'] == 'Running' and pod['spec']['nodeName'] == node.NODE_NAME, pod['status']
    launcher = [p['metadata']['name'] for p in client.request('GET', '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%3Dvirt-launcher' % NS)[1]['items']]
    assert [o['name'] for o in pod['metadata']['ownerReferences']] == launcher, (pod['metadata']['ownerReferences'], launcher)
    assert {'claimName': CLAIM} in [v.get('persistentVolumeClaim') for v in pod['spec']['volumes']], pod['spec']['volumes']
    assert 'successfully mounted %s' % DISK in read_handler_log(nodelab)     # virt-handler's bind mount into the launcher
    disk = next(d for d in vmi['spec']['domain']['devices']['disks'] if d['name'] == DISK)
    assert disk == {'name': DISK, 'disk': {'bus': 'scsi'}, 'serial': SERIAL}, disk

    # inside the guest: one more disk, of the image's size, with the serial (lower-cased by virt-launcher), holding the token
    disks, found = guest_disks(inventory, ssh_key, str(tmp_path), 'disks plugged', 1,
                               token_device='/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_' + SERIAL.lower())
    new = [d for d in disks if d['name'] not in {b['name'] for b in before_disks}]
    assert [(d['serial'], int(d['size']), d['type']) for d in new] == [(SERIAL.lower(), DISK_BYTES, 'disk')], (new, disks, before_disks)
    assert found['The first bytes of the hot-plugged disk']['stdout'] == token.decode().strip(), found['The first bytes of the hot-plugged disk']
    assert status['target'] == new[0]['name'], (status, new)    # KubeVirt's target (sda) is the guest's name for it

    # the same declaration again: nothing to do
    again = ok(run_module('volume', volume_args(nodelab, attachments=attach)))
    assert not again['changed'] and again['operations'] == [], again

    # a detach from a running guest without force: refused, nothing changes
    refused = run_module('volume', volume_args(nodelab, attachments=[]))
    assert not refused['changed'] and refused['operations'] == [] and refused['refusals'], refused
    assert 'needs force' in refused['refusals'][0]['reason'], refused['refusals']
    assert next(s for s in vmi_of(nodelab, VM)['status']['volumeStatus'] if s['name'] == DISK)['phase'] == 'Ready'

    started = time.monotonic()
    with HotplugWatch(nodelab) as watch:
        unplugged = ok(run_module('volume', volume_args(nodelab, attachments=[], force=True)))
        unplug_seconds = time.monotonic() - started
        wait_for('a settled volume_info observation after the unplug', lambda: (None, None) in watch.settled, timeout=120, interval=1)
    assert not watch.errors, watch.errors
    assert [(o['op'], o.get('vm')) for o in unplugged['operations']] == [('detach_live', VM), ('detach_config', VM)], unplugged['operations']
    unphases = unplugged['operations'][0]['phases']
    assert unphases[-1] == 'Detached' and in_order(unphases, UNPLUG_ORDER), unphases
    disagree = [pair for pair in watch.settled if pair[0] != pair[1]]
    assert not disagree, (disagree, watch.settled)
    assert all(v['name'] != DISK for v in vmi_of(nodelab, VM)['spec']['volumes'])
    assert all(v['name'] != DISK for v in get(nodelab, API + 'virtualmachines/' + VM)['spec']['template']['spec']['volumes'])
    # the attachment pod deleted, the disk gone from the guest
    wait_for('the attachment pod deleted', lambda: not attachment_pods(nodelab), timeout=120)
    disks, _found = guest_disks(inventory, ssh_key, str(tmp_path), 'disks unplugged', 0)
    assert sorted(d['name'] for d in disks) == sorted(d['name'] for d in before_disks), (disks, before_disks)

    # absent: the claim deleted (nothing uses it now); the volume Released (Retain) and disk.img still there
    removed = ok(run_module('volume', volume_args(nodelab, state='absent')))
    assert removed['changed'] and get(nodelab, '/api/v1/namespaces/%s/persistentvolumeclaims/%s' % (NS, CLAIM)) is None, removed
    wait_for('the volume Released', lambda: get(nodelab, '/api/v1/persistentvolumes/' + PV)['status']['phase'] == 'Released', timeout=60)
    with open(image, 'rb') as handle:
        assert handle.read(len(token)) == token
    print('\nreal node, hot-plug through the attachment pod: attach %.1f s (module phases %s; KubeVirt %s; attachment pod %s); '
          'unplug %.1f s (module %s; KubeVirt %s); volume_info settled observations: attach %d (%s), detach %d (%s), all agreeing; '
          'unsettled (VMI changed during volume_info) %d' % (
              plug_seconds, phases, attach_trail, pod_name, unplug_seconds, unphases, watch.kubevirt_phases,
              len(attach_settled), ', '.join(sorted({str(t) for _o, t in attach_settled})), len(watch.settled),
              ', '.join(sorted({str(t) for _o, t in watch.settled})), watch.unsettled))


def test_absent_removes_the_guest_and_its_seed(nodelab, cloud_disk, ssh_key, guest):
    removed = ok(run_module('vm', guest_args(nodelab, cloud_disk, ssh_key, guest['token'], state='absent')))
    assert removed['changed'], removed
    wait_for('the VM and its instance gone', lambda: get(nodelab, API + 'virtualmachines/' + VM) is None and vmi_of(nodelab, VM) is None,
             timeout=300)
    # the seed's Secret is owned by the VM: Kubernetes' garbage collector removes it
    wait_for('the cloud-init Secret gone', lambda: get(nodelab, '/api/v1/namespaces/%s/secrets/%s-cloudinit' % (NS, VM)) is None, timeout=120)
    wait_for('the launcher pod gone', lambda: not nodelab['client'].request(
        'GET', '/api/v1/namespaces/%s/pods?labelSelector=kubevirt.io%%3Dvirt-launcher' % NS)[1]['items'], timeout=300)
