# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Both inventory plugins take their connection from the environment an AWX credential injects, and report readiness.

converge.virt.libvirt, through ``python -m ansible inventory`` as AWX runs it (libvirt's test driver stands for the
hosts): a source that names no URI reads LIBVIRT_DEFAULT_URI, a source's uris win; CONVERGE_VIRT_LIBVIRT_KEYFILE is
added to SSH URIs only and never names the host. converge.virt.kubevirt: the documented env entries are the
K8S_AUTH_* fallbacks of the modules' client, the plugin hands them to the client, the file's values win, a
K8S_AUTH_VERIFY_SSL that is no boolean word fails the source; readiness and ansible_host come from the instances by
the vm module's rules (a faked API client, the real observation code).
"""

# pylint: disable=redefined-outer-name

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.inventory.data import InventoryData

import ansible_collections.converge.virt as collection
from ansible_collections.converge.virt.plugins.inventory import kubevirt as kubevirt_inventory
from ansible_collections.converge.virt.plugins.inventory import libvirt as libvirt_inventory
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import client as kube_client
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import readiness as kubevirt_readiness
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import readiness_word

ENV = ('LIBVIRT_DEFAULT_URI', 'CONVERGE_VIRT_LIBVIRT_KEYFILE', 'K8S_AUTH_KUBECONFIG', 'K8S_AUTH_CONTEXT', 'K8S_AUTH_HOST', 'K8S_AUTH_API_KEY',
       'K8S_AUTH_SSL_CA_CERT', 'K8S_AUTH_VERIFY_SSL')
# where converge.virt is installed (.../ansible_collections/converge/virt): the collections path of the CLI run
COLLECTIONS_PATH = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(list(collection.__path__)[0]))))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def source(tmp_path, name, **config):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def options_of(module):
    """{option: env variable names} as the plugin documents them."""
    doc = yaml.safe_load(module.DOCUMENTATION)
    return dict((name, [entry['name'] for entry in spec.get('env') or []]) for name, spec in doc['options'].items())


def plugin_with(module, **options):
    """An instance of the plugin with these options (the rest None), as if read from a source file."""
    plugin = module.InventoryModule()
    plugin._options = dict((name, None) for name in options_of(module))  # pylint: disable=protected-access
    plugin._options.update(namespaces=['default'], label_selectors=[], host_format='{namespace}-{name}', uris=None,  # pylint: disable=protected-access
                           address_from_leases=True, address_from_agent=False, with_title=False, cache=False)
    plugin._options.update(options)  # pylint: disable=protected-access
    return plugin


# --- converge.virt.libvirt -------------------------------------------------------------------------------------------

ANSIBLE_INVENTORY = "import sys; from ansible.cli.inventory import main; sys.argv[0] = 'ansible-inventory'; main()"
TEST_DRIVER_XML = """<node><domain type='test'><name>from-file</name><memory>65536</memory><os><type>hvm</type></os></domain></node>"""


def test_a_libvirt_source_without_uris_reads_libvirt_default_uri_and_a_sources_uris_win(tmp_path):
    node = tmp_path / 'node.xml'
    node.write_text(TEST_DRIVER_XML)
    bare = source(tmp_path, 'env.converge_libvirt.yml', plugin='converge.virt.libvirt')
    named = source(tmp_path, 'file.converge_libvirt.yml', plugin='converge.virt.libvirt', uris=['test://%s' % node])
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS_PATH, ANSIBLE_INVENTORY_ENABLED='converge.virt.libvirt',
               LIBVIRT_DEFAULT_URI='test:///default')
    # the CLI's own main(): `python -m ansible inventory` finds no entry points where ansible-core's metadata is not
    # installed (ansible-test units), and `ansible-inventory` need not sit beside this Python
    proc = subprocess.run([sys.executable, '-c', ANSIBLE_INVENTORY, '-i', bare, '-i', named, '--list', '--export'], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout, object_hook=lambda obj: obj['__ansible_unsafe'] if list(obj) == ['__ansible_unsafe'] else obj)
    hostvars = listed['_meta']['hostvars']
    # the test driver's default node has one running domain, 'test'; the file's node one, 'from-file' (running too)
    assert sorted(hostvars) == ['from-file', 'test'], sorted(hostvars)
    assert (hostvars['test']['libvirt_uri'], hostvars['test']['vm_state']) == ('test:///default', 'ACTIVE'), hostvars['test']
    assert hostvars['from-file']['libvirt_uri'] == 'test://%s' % node
    # readiness: a running VM without agent channel nor lease is 'running' (the vm module's probe says so too), no ansible_host
    assert hostvars['test']['readiness'] == 'running' and 'ansible_host' not in hostvars['test'], hostvars['test']


def test_libvirt_documents_the_environment_it_reads():
    documented = options_of(libvirt_inventory)
    assert documented['uri'] == ['LIBVIRT_DEFAULT_URI'] and documented['keyfile'] == ['CONVERGE_VIRT_LIBVIRT_KEYFILE']


def test_libvirt_uri_order_and_the_keyfile_of_the_credential(monkeypatch):
    assert plugin_with(libvirt_inventory).uris() == [('qemu:///system', 'qemu:///system')]     # nothing set: the modules' default
    monkeypatch.setenv('LIBVIRT_DEFAULT_URI', 'qemu+ssh://root@hv0.example.com/system')
    # resolve_uri, as in the modules (the config system gives O(uri) from the same variable to ansible-inventory)
    assert plugin_with(libvirt_inventory).uris() == [('qemu+ssh://root@hv0.example.com/system',) * 2]
    plugin = plugin_with(libvirt_inventory, uri='qemu+ssh://root@hv1.example.com/system', keyfile='/runner/env/cred_ssh key')
    # the key file goes to the URI that is opened; the host is named by the URI as given (AWX writes a new path each sync)
    assert plugin.uris() == [('qemu+ssh://root@hv1.example.com/system', 'qemu+ssh://root@hv1.example.com/system?keyfile=%2Frunner%2Fenv%2Fcred_ssh+key')]
    plugin = plugin_with(libvirt_inventory, uris=['qemu+ssh://a/system?no_tty=1', 'qemu+ssh://b/system?keyfile=/mine', 'qemu+tcp://c/system',
                                                  'qemu+libssh2://d/system', 'qemu:///system'], uri='qemu+ssh://ignored/system', keyfile='/k')
    assert [opened for _given, opened in plugin.uris()] == [
        'qemu+ssh://a/system?no_tty=1&keyfile=%2Fk', 'qemu+ssh://b/system?keyfile=/mine', 'qemu+tcp://c/system', 'qemu+libssh2://d/system?keyfile=%2Fk',
        'qemu:///system']


# --- converge.virt.kubevirt ------------------------------------------------------------------------------------------

def vm(name, running):
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine',
            'metadata': {'name': name, 'namespace': 'prod', 'uid': 'uid-' + name, 'generation': 1, 'labels': {}},
            'spec': {'runStrategy': 'Always' if running else 'Halted',
                     'template': {'spec': {'domain': {'cpu': {'cores': 1}, 'memory': {'guest': '64Mi'}, 'devices': {}}}}},
            'status': {'printableStatus': 'Running' if running else 'Stopped', 'ready': running, 'observedGeneration': 1}}


def vmi(name, agent, interfaces, phase='Running'):
    conditions = [{'type': 'Ready', 'status': 'True'}] + ([{'type': 'AgentConnected', 'status': 'True'}] if agent else [])
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachineInstance', 'metadata': {'name': name, 'namespace': 'prod', 'uid': 'vmi-' + name},
            'status': {'phase': phase, 'nodeName': 'node-1', 'conditions': conditions, 'interfaces': interfaces}}


INSTANCES = {
    'ready': vmi('ready', True, [{'name': 'default', 'ipAddress': 'fd00::7', 'ipAddresses': ['fd00::7', '10.244.0.7']}]),
    # what the guest agent reports is the guest's word: a name, loopback, metadata address or shell text is never ansible_host
    'agent-only': vmi('agent-only', True, [{'name': 'default', 'ipAddress': '127.0.0.1'}, {'name': 'x', 'ipAddress': 'attacker.example'},
                                           {'name': 'y', 'ipAddress': 'x; rm -rf /', 'ipAddresses': ['169.254.169.254', 'fe80::1']}]),
    'booting': vmi('booting', False, [{'name': 'default', 'ipAddress': '10.244.0.9'}]),
    'scheduling': vmi('scheduling', False, [{'name': 'default', 'ipAddress': '10.244.0.10'}], phase='Scheduling'),
}


class FakeClient:
    """The part of KubeClient the inventory uses; records the connection parameters it was made with."""

    made = []

    def __init__(self, params):
        self.params = params
        self.warnings = []
        FakeClient.made.append(params)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def redact(text):
        return text

    @staticmethod
    def list(api, namespace, kind, label_selector=None):
        del api, label_selector
        assert namespace == 'prod'
        if kind == 'virtualmachines':
            return [vm(name, name != 'stopped') for name in list(INSTANCES) + ['stopped']]
        if kind == 'virtualmachineinstances':
            return list(INSTANCES.values())
        return []


@pytest.fixture
def fake_kube(monkeypatch):
    FakeClient.made = []

    def client_from_params(params):
        return FakeClient(kube_client.connection_params(params))    # the real fallbacks and checks

    monkeypatch.setattr(kubevirt_inventory, 'client_from_params', client_from_params)
    return FakeClient.made


def test_kubevirt_documents_the_modules_k8s_auth_fallbacks():
    documented = options_of(kubevirt_inventory)
    assert dict((name, documented[name]) for name in kube_client.CONNECTION_OPTIONS) == dict(
        (name, [variable]) for name, variable in kube_client.ENV_FALLBACKS.items())


def test_kubevirt_connection_from_the_bearer_token_credential_environment(monkeypatch, fake_kube):
    # what AWX's "OpenShift or Kubernetes API Bearer Token" credential injects; the source file names no server, no token
    monkeypatch.setenv('K8S_AUTH_HOST', 'https://api.example.com:6443')
    monkeypatch.setenv('K8S_AUTH_API_KEY', 'token-from-env')
    monkeypatch.setenv('K8S_AUTH_SSL_CA_CERT', '/runner/env/cred_ca')
    monkeypatch.setenv('K8S_AUTH_VERIFY_SSL', 'False')
    monkeypatch.setenv('K8S_AUTH_CONTEXT', 'ctx')
    monkeypatch.setenv('K8S_AUTH_KUBECONFIG', '/runner/kubeconfig')
    plugin_with(kubevirt_inventory, namespaces=['prod']).read_sources({})
    assert fake_kube == [{'host': 'https://api.example.com:6443', 'api_key': 'token-from-env', 'ca_cert': '/runner/env/cred_ca',
                          'validate_certs': False, 'context': 'ctx', 'kubeconfig': '/runner/kubeconfig'}]
    # the file's options win over the environment
    plugin_with(kubevirt_inventory, namespaces=['prod'], host='https://file.example.com', validate_certs=True).read_sources({})
    assert (fake_kube[-1]['host'], fake_kube[-1]['validate_certs'], fake_kube[-1]['api_key']) == ('https://file.example.com', True, 'token-from-env')


def test_kubevirt_refuses_a_verify_ssl_that_is_no_boolean_word(monkeypatch, fake_kube):
    monkeypatch.setenv('K8S_AUTH_VERIFY_SSL', 'ture')
    plugin = plugin_with(kubevirt_inventory, namespaces=['prod'], validate_certs=True)
    # a configuration error fails the source (not 'cannot reach', not the cache): no client is made
    with pytest.raises(AnsibleError, match="K8S_AUTH_VERIFY_SSL: 'ture' is not a boolean"):
        plugin.read_sources({'prod': [{'name': 'cached'}]})
    assert not fake_kube


def test_kubevirt_readiness_and_ansible_host_follow_the_vm_modules_rules(fake_kube):
    plugin = plugin_with(kubevirt_inventory, namespaces=['prod'], host='https://api.example.com',
                         host_vars=['vm_state', 'status'], compose=None, groups=None, keyed_groups=None, strict=False)
    data = plugin.read_sources({})
    assert fake_kube
    plugin.inventory = InventoryData()
    plugin._populate(data)  # pylint: disable=protected-access
    seen = dict((name, plugin.inventory.get_host('prod-' + name).get_vars()) for name in list(INSTANCES) + ['stopped'])
    assert dict((name, (found.get('readiness'), found.get('ansible_host'))) for name, found in seen.items()) == {
        'ready': ('address', '10.244.0.7'),      # IPv4 first, from ipAddresses too
        'agent-only': ('agent', None),           # loopback, a name, shell text, link-local and metadata addresses are never an address
        'booting': ('running', '10.244.0.9'),    # no agent yet: no phase is skipped, though the address is known (and used)
        'scheduling': (None, None),              # not Running: no readiness, no address
        'stopped': (None, None)}
    assert seen['ready']['status'] == 'Running' and seen['stopped']['status'] == 'Stopped', seen
    for name, instance in INSTANCES.items():
        module = kubevirt_readiness.readiness_of(instance)
        assert seen[name].get('readiness') == (readiness_word(module) if module.running else None), name
        assert seen[name].get('ansible_host') == module.address, name
