"""cloud-init NoCloud from the collection's Secret reaches a real guest on the real node (issue 34 3c, issue 36 item 6).

Run by ``make test-real-node`` (CONVERGE_VIRT_REAL_NODE=1; skipped in make test), inside ``python -m tools.virtlab netns``.
One lab for the module: ``up --controllers real --nodes real`` (KubeVirt's virt-api, virt-controller and virt-handler;
kubelet + containerd), see tests/integration/kubevirt_real_node_fixtures.py.

The guest is the golden image (tools/virtlab/cloudimage.py: a bootable Debian 12 cloud disk with Debian's own
cloud-init 22.4, GRUB, systemd) as a KubeVirt containerDisk (tools/kubelab/images.py, kind ``cloud-disk``: the qcow2
at /disk/, built from the cached golden image, imported here into the node's containerd; nothing is pulled). It boots
from its own disk under TCG in the launcher's QEMU. ``converge.virt.vm`` declares it with ``cloud_init``: the user data
goes into the Secret ``<vm>-cloudinit`` and the template's ``cloudInitNoCloud`` volume; KubeVirt's virt-launcher writes
the NoCloud ISO (``cidata``, with its own meta-data: local-hostname = the VM's name) and attaches it as a virtio disk;
Debian's cloud-init in the guest reads it.

The VM has the pod network (``interfaces: [{}]``: KubeVirt's masquerade binding; virt-handler needs ``nft`` on the
node, Debian's nftables), so the guest gets its address from virt-launcher's DHCP server through the network
configuration cloud-init renders, and the module waits (``wait_for: address``) for the real guest agent
(qemu-guest-agent in the image: KubeVirt's ``AgentConnected``) and the instance's address.

What the guest prints on its serial console (the launcher's ``guest-console-log`` container, through the kubelet's log
file) is the evidence: the seed declares a host name that is NOT the VM's name (KubeVirt's meta-data alone would give
the VM's name), a ``write_files`` file with a per-run token, and a ``runcmd`` that prints ``hostname``, the file's
content and the guest's first address to ``/dev/ttyS0``; cloud-init's own final message names the datasource
(``DataSourceNoCloud``). The host name read there must equal the declared one, the token the declared content and the
address the masquerade guest address; the guest agent, asked through virt-api's ``guestosinfo``, must report the same
host name. A seed that did not reach the guest, or reached it half-applied, fails the test (tried: an expectation of
another host name fails it).

While the collection runs, the differential sampler of test_kubevirt_real_controller.py compares every settled status
word and phase with virt-controller's printableStatus and the VMI's phase. Boots: one (a Debian TCG boot, minutes).
"""

# pylint: disable=missing-function-docstring,redefined-outer-name

import re
import secrets
import subprocess
import time

import pytest

from tests.integration.ansible_run import run_module
from tests.integration.kubevirt_real_node_fixtures import (  # pylint: disable=unused-import
    API, NS, Console, get, info_checks, nodelab, ok, printable, vmi_of, wait_for)
from tests.integration.kubevirt_real_node_gate import require_real_node
from tests.integration.test_kubevirt_real_controller import Sampler, judge
from tools.kubelab import images, node

require_real_node()

VM = 'cloud1'
# what the seed declares: a host name other than the VM's (KubeVirt's own meta-data says local-hostname: cloud1)
DECLARED_HOSTNAME = 'seeded-by-converge'
# what the guest must report (its console and its guest agent): the declared one
EXPECTED_HOSTNAME = DECLARED_HOSTNAME
# the guest's address behind KubeVirt's masquerade binding (virt-launcher's DHCP server; vmNetworkCIDR 10.0.2.0/24)
MASQUERADE_GUEST_ADDRESS = '10.0.2.2'
SUBRESOURCES = '/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachineinstances/' % NS
SEED_FILE = '/etc/converge-seed.txt'
# a Debian TCG boot of the golden image to cloud-init's final stage on 2 loaded cores (about 3 minutes when idle)
BOOT_TIMEOUT = 1200
# below 1Gi: from 1Gi on, KubeVirt v1.8.0 enables memory hot-plug and writes <maxMemory slots='0'>, which Debian 12's
# libvirt 9.0.0 refuses ("both maximum memory size and memory slot count must be specified"); the golden image boots in 640 MiB
MEMORY = '768Mi'
MARKER = re.compile(r'converge-seed: hostname=(\S+) file=(\S*) addr=(\S*)')


@pytest.fixture(scope='module')
def cloud_disk(nodelab):
    """The golden image's containerDisk: built when missing (cached, keyed by the qcow2's sha256), imported into the
    node's containerd (start_node imports only the images every node needs). Yields its name and the seconds taken."""
    started = time.monotonic()
    built = images.build_images(kinds=('cloud-disk',))['cloud-disk']
    build_seconds = round(time.monotonic() - started, 1)
    started = time.monotonic()
    proc = subprocess.run(images.import_argv(nodelab['node'], built['archive']), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {'name': built['name'], 'build_seconds': build_seconds, 'cached': built['cached'],
            'import_seconds': round(time.monotonic() - started, 1)}


def cloud_vm_args(nodelab, cloud_disk, state, token, **args):
    template = {'template': {'spec': {'nodeSelector': {'kubernetes.io/hostname': node.NODE_NAME}, 'terminationGracePeriodSeconds': 120}}}
    user_data = {
        'hostname': DECLARED_HOSTNAME,
        'write_files': [{'path': SEED_FILE, 'content': token + '\n', 'permissions': '0644'}],
        'runcmd': [['sh', '-c', 'printf "converge-seed: hostname=%%s file=%%s addr=%%s\\n" "$(hostname)" "$(cat %s)" "$(hostname -I | cut -d" " -f1)"'
                    ' > /dev/ttyS0' % SEED_FILE]],
    }
    base = dict(backend='kubevirt', kubeconfig=nodelab['kubeconfig'], namespace=NS, name=VM, state=state,  # pylint: disable=use-dict-literal
                vcpus=1, memory=MEMORY, disks=[{'name': 'root', 'image': cloud_disk['name']}], spec=template,
                interfaces=[{}], cloud_init={'user_data': user_data}, wait_timeout=300)
    base.update(args)
    return base


def seed_report(console_text):
    """(host name, file content, first address) the guest's runcmd printed on the console, or None."""
    found = MARKER.search(console_text)
    return found.groups() if found else None


def test_the_golden_image_boots_on_the_real_node_and_cloud_init_applies_the_seed(nodelab, cloud_disk, tmp_path):  # pylint: disable=too-many-locals
    client = nodelab['client']
    token = 'token-' + secrets.token_hex(8)
    module_checks = []
    started = time.monotonic()
    with Sampler(client, interval=0.2) as sampler, Console(nodelab, VM) as console:
        # the module waits for the real guest agent (qemu-guest-agent in the image) and the instance's address
        result = ok(run_module('vm', cloud_vm_args(nodelab, cloud_disk, 'running', token, wait_for='address', wait_timeout=BOOT_TIMEOUT)))
        agent_at = time.monotonic()
        module_checks.append(('vm running: status', result['vm']['status'], printable(nodelab, VM)))
        assert result['changed'] and result['cloud_init']['changed'], result
        vmi = vmi_of(nodelab, VM)
        assert vmi['status']['phase'] == 'Running' and vmi['status']['nodeName'] == node.NODE_NAME, vmi['status']
        conditions = {c['type']: c['status'] for c in vmi['status']['conditions']}
        assert conditions.get('AgentConnected') == 'True', vmi['status']['conditions']
        # the pod network is attached (masquerade): the instance's address is the launcher pod's, on the node's bridge,
        # and the guest agent reported the guest's own interface for it
        iface = vmi['status']['interfaces'][0]
        assert 'guest-agent' in iface.get('infoSource', ''), iface
        assert result['vm']['readiness'] == 'address' and result['vm']['address'] == iface['ipAddress'], (result['vm'], iface)
        # the seed reached KubeVirt as the collection wrote it: a cloudInitNoCloud volume naming the VM's Secret
        volumes = {v['name']: v for v in vmi['spec']['volumes']}
        assert volumes['cloudinitdisk']['cloudInitNoCloud'] == {'secretRef': {'name': VM + '-cloudinit'}}, volumes
        assert volumes['root']['containerDisk']['image'] == cloud_disk['name'], volumes
        secret = get(nodelab, '/api/v1/namespaces/%s/secrets/%s-cloudinit' % (NS, VM))
        assert secret is not None and 'userdata' in secret['data'], secret and sorted(secret['data'])

        report = wait_for('the seed report of the guest\'s runcmd on its serial console', lambda: seed_report(console.read()),
                          timeout=BOOT_TIMEOUT, interval=1)
        report_at = time.monotonic()
        hostname, content, address = report
        text = console.read()
        assert hostname == EXPECTED_HOSTNAME, (hostname, text[-3000:])
        assert content == token, (content, text[-3000:])
        # cloud-init rendered the NIC's network configuration (DHCP) and virt-launcher's DHCP server answered
        assert address == MASQUERADE_GUEST_ADDRESS, (address, text[-3000:])
        # the guest agent says the same host name, asked through virt-api -> virt-handler -> the launcher -> the agent
        code, osinfo = client.request('GET', SUBRESOURCES + VM + '/guestosinfo')
        assert code == 200 and osinfo['hostname'] == EXPECTED_HOSTNAME and osinfo['os']['id'] == 'debian', (code, osinfo)
        # cloud-init's own last word: it read the NoCloud datasource (not the None fallback) and finished
        final = wait_for('cloud-init\'s final message on the console', lambda: re.search(
            r'Cloud-init v\. (\S+) finished at .*Datasource (DataSourceNoCloud[^.]*)\.\s+Up ([0-9.]+) seconds', console.read()), timeout=120)
        assert final.group(1).startswith('22.4'), final.group(0)
        module_checks.extend(info_checks(nodelab, 'booted', VM))

        # a second run changes nothing: the Secret and the template are as declared
        again = ok(run_module('vm', cloud_vm_args(nodelab, cloud_disk, 'running', token)))
        assert not again['changed'] and not again['cloud_init']['changed'], again
        module_checks.append(('vm again: status', again['vm']['status'], printable(nodelab, VM)))

        ok(run_module('vm', cloud_vm_args(nodelab, cloud_disk, 'absent', token)))
        wait_for('the VM gone', lambda: get(nodelab, API + 'virtualmachines/' + VM) is None, timeout=300)
    elapsed = time.monotonic() - started
    boots = console.read()
    # the console as captured (the kubelet removed the pod's logs with the pod), kept for reading after the run
    (tmp_path / 'console.log').write_text(boots, encoding='utf-8')
    stages = re.findall(r"Cloud-init v\. \S+ running '([^']+)' at .*?Up ([0-9.]+) seconds", boots)
    print('\nreal node, golden image: containerDisk %s (%s, build/cache check %.1f s, import %.1f s); lab up %.1f s; '
          'vm running with the agent and the address %.1f s, the seed report %.1f s after the call; cloud-init: %s (guest uptime %s s); '
          'scenario %.1f s; wait-online timed out: %s' % (
              cloud_disk['name'], 'cached' if cloud_disk['cached'] else 'built', cloud_disk['build_seconds'],
              cloud_disk['import_seconds'], nodelab['up_seconds'], agent_at - started, report_at - started, final.group(2),
              final.group(3), elapsed, 'Wait for Network to be Configured' in boots))
    print('cloud-init stages started at guest uptime (s): %s; console: %s' % (
        ', '.join('%s %s' % stage for stage in stages), tmp_path / 'console.log'))
    assert boots.count('converge-seed: hostname=') == 1, 'one boot, one report'
    judge('real node: golden image with cloud-init', nodelab, sampler, module_checks, elapsed, {'Running'})
