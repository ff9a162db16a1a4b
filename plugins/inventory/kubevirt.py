# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: kubevirt
short_description: KubeVirt VirtualMachines with the collection's state words
version_added: 0.1.0
requirements:
  - kubernetes
description:
  - Adds every KubeVirt VirtualMachine of the given namespaces (optionally only those matching label
    selectors) to the inventory, with host variables that carry exactly the words the
    M(converge.virt.vm) module returns with O(ignore:backend=kubevirt) - C(vm_state), C(power_state),
    C(task_state), C(status), C(phase) - plus KubeVirt's own C(printable_status).
  - Reads each namespace with one list call per kind (VMs, VMIs, and DataVolumes/PVCs when referenced).
  - Groups by vm_state, power_state, status, namespace and node; C(compose), C(groups), C(keyed_groups).
  - An API server that cannot be read costs one warning; with an inventory cache, its VMs are still
    reported from the cache with status C(Unknown).
  - Every value read from the cluster, and every host name, is marked unsafe; a label or a host name holding Jinja
    is never evaluated, on any supported ansible-core - not in C(inventory_hostname), not in O(compose) or
    O(keyed_groups), not as the address of a connection to a VM without C(ansible_host). O(host_format) is not a
    template either.
  - With O(cache), a file cache directory (O(cache_connection)) must belong to the user running ansible and be
    writable by no one else (nor may a directory above it be, without the sticky bit); another is refused, since
    whoever writes the cache chooses the hosts and C(ansible_host) values. Use a private directory such as
    C(~/.cache/converge.virt/kubevirt-inventory), not a shared one like C(/tmp).
  - The inventory file name must end in C(.converge_kubevirt.yml) or C(.converge_kubevirt.yaml) (AWX).
options:
  plugin:
    choices: [converge.virt.kubevirt]
  kubeconfig:
    description:
      - Path of a kubeconfig file. Falls back to E(K8S_AUTH_KUBECONFIG), then the kubernetes library's default (E(KUBECONFIG),
        then C(~/.kube/config)), then the in-cluster service account (with a warning naming it).
    type: path
    env:
      - name: K8S_AUTH_KUBECONFIG
  context:
    description: Context of the kubeconfig. Falls back to E(K8S_AUTH_CONTEXT), then the kubeconfig's current context.
    type: str
    env:
      - name: K8S_AUTH_CONTEXT
  host:
    description:
      - API server URL. Falls back to E(K8S_AUTH_HOST).
      - With O(api_key), O(ca_cert) and O(validate_certs) from the environment, AWX's OpenShift or Kubernetes API Bearer Token
        credential attached to an inventory source is all the source file needs (it names no server and no token).
    type: str
    env:
      - name: K8S_AUTH_HOST
  api_key:
    description: Bearer token. Falls back to E(K8S_AUTH_API_KEY). Never shown, and never kept in the inventory cache.
    type: str
    env:
      - name: K8S_AUTH_API_KEY
  ca_cert:
    description: CA bundle of the API server. Falls back to E(K8S_AUTH_SSL_CA_CERT).
    type: path
    env:
      - name: K8S_AUTH_SSL_CA_CERT
  validate_certs:
    description:
      - Verify the API server's certificate. Falls back to E(K8S_AUTH_VERIFY_SSL), then the kubeconfig's setting.
      - A E(K8S_AUTH_VERIFY_SSL) that is set but is not a boolean word is refused, naming the variable, even when this
        option is given (a typo must never turn certificate checks off).
    type: bool
    env:
      - name: K8S_AUTH_VERIFY_SSL
  namespaces:
    description: Namespaces to read.
    type: list
    elements: str
    default: [default]
  label_selectors:
    description: Only VMs matching at least one of these label selectors (all VMs when empty).
    type: list
    elements: str
    default: []
  host_format:
    description: Inventory host name of a VM; C({name}) and C({namespace}) are replaced.
    type: str
    default: '{namespace}-{name}'
  host_vars:
    description:
      - The host variables set for every VM. The default is the state words (C(message) is the reason of
        an error status), KubeVirt's C(printable_status), and the VM's vcpus, memory, node, namespace
        (as C(kubevirt_namespace)) and uid.
      - Every host variable adds ansible-core work for every VM (about 0.2 seconds per ten thousand VMs and
        variable), so the others are asked for by name - C(task_id), C(run_strategy), C(ready), C(pending_restart), C(start_failures), C(labels) (a
        dict; needed for O(keyed_groups) on labels) and C(kubevirt_name) (the VM's own name).
      - C(ansible_host), C(readiness) and C(stale) are set whenever they are known.
      - C(readiness) (VMs whose instance is Running only) is the word of the M(converge.virt.vm) module's RV(ignore:vm.readiness)
        with O(ignore:backend=kubevirt), from the instance's status by the same rules - V(running), V(agent) (its
        C(AgentConnected) condition is true) or V(address) (an IP address of another machine is among its interfaces'
        C(ipAddress)/C(ipAddresses), IPv4 first; it is C(ansible_host)).
    type: list
    elements: str
    default: [vm_state, power_state, task_state, status, phase, message, printable_status, vcpus, memory, node, kubevirt_namespace, uid]
    choices: [vm_state, power_state, task_state, status, phase, message, printable_status, vcpus, memory, node, kubevirt_namespace, uid,
              task_id, run_strategy, ready, pending_restart, start_failures, labels, kubevirt_name]
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - converge.virt.inventory
'''

EXAMPLES = r'''
# the cluster of the environment (AWX: an OpenShift or Kubernetes API Bearer Token credential on the inventory source
# injects K8S_AUTH_HOST, K8S_AUTH_API_KEY, K8S_AUTH_VERIFY_SSL and K8S_AUTH_SSL_CA_CERT)
# is a source file of two lines, vms.converge_kubevirt.yml:
#   plugin: converge.virt.kubevirt
#   namespaces: [prod]

# cluster.converge_kubevirt.yml
plugin: converge.virt.kubevirt
namespaces: [prod, staging]
label_selectors: ['app=web']
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/converge.virt/kubevirt-inventory   # private: never a shared directory such as /tmp
keyed_groups:
  - key: status
    prefix: status
  - key: labels.app | default('none')
    prefix: app
# the default host variables plus the labels (for the keyed group above)
host_vars: [vm_state, power_state, task_state, status, phase, message, printable_status, vcpus, memory, node, kubevirt_namespace, uid,
            labels]
'''

from ansible.errors import AnsibleError
from ansible.utils.display import Display

from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.client import KUBEVIRT_API, client_from_params
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.observe import NamespaceSnapshot, public_view
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.readiness import readiness_of
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import readiness_word
from ansible_collections.converge.virt.plugins.plugin_utils._state_inventory import StateInventory, stale_copy, unsafe

display = Display()


class InventoryModule(StateInventory):
    """The converge.virt.kubevirt inventory plugin."""

    NAME = 'converge.virt.kubevirt'
    FILE_SUFFIX = 'converge_kubevirt'
    # the host variables one can ask for (option host_vars); not 'namespace': Jinja's namespace() would be hidden by it
    HOST_VARS = dict([(key, key) for key in ('vm_state', 'power_state', 'task_state', 'status', 'phase', 'message', 'printable_status', 'vcpus',
                                             'memory', 'node', 'uid', 'task_id', 'run_strategy', 'ready', 'pending_restart', 'start_failures',
                                             'labels')] + [('kubevirt_namespace', 'namespace'), ('kubevirt_name', 'name')])
    ALWAYS_VARS = ('ansible_host', 'readiness', 'stale')
    GROUP_WORDS = (('vm_state', 'vm_state'), ('power_state', 'power_state'), ('status', 'status'), ('namespace', 'namespace'), ('node', 'node'))

    def host_name(self, source, vm):
        return self.get_option('host_format').replace('{namespace}', source).replace('{name}', vm['name'])

    def read_sources(self, cached):
        params = dict((key, self.get_option(key)) for key in ('kubeconfig', 'context', 'host', 'api_key', 'ca_cert', 'validate_certs'))
        data = {}
        try:
            client = client_from_params(params)
        except InvalidDeclaration as exc:
            # a wrong option or variable (K8S_AUTH_VERIFY_SSL: maybe) fails the source: no cache stands in for it
            raise AnsibleError('converge.virt.kubevirt: %s' % exc.message)
        except ConvergeError as exc:
            return self._unreachable(cached, exc.message)
        for warning in client.warnings:
            display.warning('converge.virt.kubevirt: %s' % client.redact(warning))
        with client:
            for namespace in self.get_option('namespaces'):
                namespace = unsafe(namespace)       # from the inventory file: trusted there, not in a host variable
                try:
                    snapshot = NamespaceSnapshot(client, namespace)
                    names = snapshot.names()
                    selectors = self.get_option('label_selectors')
                    if selectors:
                        wanted = set()
                        for selector in selectors:
                            wanted.update(vm['metadata']['name'] for vm in client.list(KUBEVIRT_API, namespace, 'virtualmachines', label_selector=selector))
                        names = [name for name in names if name in wanted]
                except ConvergeError as exc:
                    display.warning('converge.virt.kubevirt: cannot read namespace %s (%s)%s' % (
                        namespace, client.redact(exc.message), '; its VMs are reported from the cache with status Unknown' if namespace in cached else ''))
                    if namespace in cached:
                        data[namespace] = stale_copy(cached[namespace])
                    continue
                vms = []
                for name in names:
                    obs = snapshot.observe(name)
                    view = public_view(obs)
                    view['labels'] = ((obs.get('vm') or {}).get('metadata') or {}).get('labels') or {}
                    seen = readiness_of(obs.get('vmi'))     # the vm module's rules: the address only of a Running instance
                    if seen.running:
                        view['readiness'] = readiness_word(seen)
                    if seen.address:
                        view['ansible_host'] = seen.address
                    vms.append(view)
                data[namespace] = vms
        return data

    def _unreachable(self, cached, message):
        display.warning('converge.virt.kubevirt: cannot reach the API server (%s)%s' % (
            message, '; VMs are reported from the cache with status Unknown' if cached else ''))
        return dict((ns, stale_copy(vms)) for ns, vms in cached.items())
