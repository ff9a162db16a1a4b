# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: libvirt
short_description: VMs of one or more libvirt hosts, with the collection's state words
version_added: 0.1.0
requirements:
  - libvirt-python
description:
  - Adds every VM (domain) of the given libvirt hosts to the inventory, with host variables that carry
    exactly the words the M(converge.virt.vm) module returns - C(vm_state), C(power_state), C(task_state),
    C(status), C(phase) and C(state_reason) - computed by the same shared phase logic.
  - Groups VMs by vm_state (C(vm_state_active)), power_state (C(power_state_running)), status
    (C(status_running)) and host (C(libvirt_host_<name>)), plus C(compose), C(groups) and C(keyed_groups).
  - Reads each host with bulk calls (one C(getAllDomainStats) and a few C(listAllDomains)), so ten
    thousand VMs take seconds, not minutes.
  - A host that cannot be reached costs one warning; with an inventory cache, its VMs are still reported
    from the cache, with status C(Unknown). The other hosts are unaffected.
  - Every value read from libvirt, and every host name, is marked unsafe, so a VM whose name or title holds a
    Jinja expression never has it evaluated, on any supported ansible-core - not in C(inventory_hostname), not in
    O(compose) or O(keyed_groups), not as the address of a connection to a VM without C(ansible_host). Such a VM
    is listed under its name as it is.
  - With O(cache), a file cache directory (O(cache_connection)) must belong to the user running ansible and be
    writable by no one else (nor may a directory above it be, without the sticky bit); another is refused, since
    whoever writes the cache chooses the hosts and C(ansible_host) values. Use a private directory such as
    C(~/.cache/converge.virt/libvirt-inventory), not a shared one like C(/tmp).
  - The inventory file name must end in C(.converge_libvirt.yml) or C(.converge_libvirt.yaml) (for AWX
    inventory sources), or be C(converge_libvirt.yml).
options:
  plugin:
    choices: [converge.virt.libvirt]
  uris:
    description:
      - libvirt connection URIs, one per host. A password in a URI is accepted and never shown.
      - When not given, the one URI of O(uri).
    type: list
    elements: str
  uri:
    description:
      - The libvirt connection URI when O(uris) is not given; falls back to the E(LIBVIRT_DEFAULT_URI) environment variable
        (as every libvirt module of the collection does, and as the collection's AWX credential type injects it), then
        V(qemu:///system).
      - So an AWX inventory source whose file names no URI reads the host of the credential attached to it.
    type: str
    env:
      - name: LIBVIRT_DEFAULT_URI
  keyfile:
    description:
      - SSH private key file for C(qemu+ssh) URIs that name none, added to them as C(?keyfile=) (as C(playbooks/reconcile.yml)
        does with the credential's key). A path, not a secret; the key itself is never read by the plugin.
    type: path
    env:
      - name: CONVERGE_VIRT_LIBVIRT_KEYFILE
  password:
    description: Password for libvirt's SASL authentication, for every URI.
    type: str
  username:
    description: User name for libvirt's SASL authentication, for every URI.
    type: str
  with_title:
    description: Add each VM's title as C(title) (one extra call per VM).
    type: bool
    default: false
  address_from_leases:
    description:
      - Set C(ansible_host) of running VMs from the DHCP leases of the host's libvirt networks (matched by MAC).
    type: bool
    default: true
  address_from_agent:
    description:
      - Ask the QEMU guest agent of running VMs for their addresses (matched by MAC) while its channel is connected; its
        address wins over a lease, as in the M(converge.virt.vm) module's RV(ignore:vm.address).
    type: bool
    default: false
  ssh_proxy_jump:
    description:
      - For the VMs of a host reached over SSH (a C(qemu+ssh), C(+libssh2) or C(+libssh) URI), set C(ansible_ssh_common_args) to
        C(-o ProxyJump=ssh://[user@]host[:port]) - the user, host and port of that URI (never its password or query) - so that
        Ansible reaches guests on the host's NAT or isolated networks through the hypervisor, as C(ssh -J) does.
      - The hypervisor's SSH server must allow local TCP forwarding (C(AllowTcpForwarding) V(yes) or V(local)); the jump
        connection uses your ssh client configuration (keys, known hosts), as the C(qemu+ssh) transport does.
      - Other ssh options for the guests go in C(ansible_ssh_extra_args) (or compose your own C(ansible_ssh_common_args)
        with O(compose), which wins over this one).
      - VMs of hosts reached otherwise get nothing.
    type: bool
    default: false
  group_prefix:
    description: Prefix of the generated group names.
    type: str
    default: ''
  host_vars:
    description:
      - The host variables set for every VM. The default is the state words and the VM's vcpus, memory,
        uuid, host and URI.
      - Every host variable adds ansible-core work for every VM (about 0.2 seconds per ten thousand VMs and
        variable), so the others are asked for by name - C(task_id), C(autostart), C(pending_restart),
        C(persistent), C(managed_save) and C(libvirt_name) (the VM's name, which is also its inventory name).
      - C(ansible_host), C(readiness), C(title) (with O(with_title)) and C(stale) are set whenever they are known.
      - C(readiness) (running VMs only) is the word of the M(converge.virt.vm) module's RV(ignore:vm.readiness) -
        V(running), V(agent) (the guest agent's channel is connected) or V(address) (an address is known; it is
        C(ansible_host)) - by the same rules (one domain XML read per running VM); V(port) is never reported (the
        inventory tries no port). A guest with an agent channel whose agent does not answer stays V(running) even
        with a lease.
    type: list
    elements: str
    default: [vm_state, power_state, task_state, status, phase, state_reason, vcpus, memory_kib, uuid, host, libvirt_uri]
    choices: [vm_state, power_state, task_state, status, phase, state_reason, vcpus, memory_kib, uuid, host, libvirt_uri,
              task_id, autostart, pending_restart, persistent, managed_save, libvirt_name]
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - converge.virt.inventory
'''

EXAMPLES = r'''
# one host, named by the environment (AWX: the converge.virt libvirt host credential of the inventory source
# injects LIBVIRT_DEFAULT_URI, and CONVERGE_VIRT_LIBVIRT_KEYFILE for a qemu+ssh URI)
# is a source file of one line, lab.converge_libvirt.yml:
#   plugin: converge.virt.libvirt

# hypervisors.converge_libvirt.yml
plugin: converge.virt.libvirt
uris:
  - qemu+ssh://root@hv1.example.com/system
  - qemu+ssh://root@hv2.example.com/system
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/converge.virt/libvirt-inventory   # private: never a shared directory such as /tmp
keyed_groups:
  - key: libvirt_host
    prefix: hv
compose:
  needs_attention: status not in ['Running', 'Stopped']
# the default host variables plus two more
host_vars: [vm_state, power_state, task_state, status, phase, state_reason, vcpus, memory_kib, uuid, host, libvirt_uri,
            pending_restart, autostart]

# guests on the hypervisors' NAT networks, reached through each hypervisor (ssh -J) - a second source file,
# natted.converge_libvirt.yml:
#   plugin: converge.virt.libvirt
#   uris:
#     - qemu+ssh://root@hv1.example.com/system
#   ssh_proxy_jump: true        # ansible_ssh_common_args: -o ProxyJump=ssh://root@hv1.example.com
'''

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ansible.errors import AnsibleError
from ansible.utils.display import Display

from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import HAS_LIBVIRT, Connection, resolve_uri
from ansible_collections.converge.virt.plugins.module_utils._libvirt.fleet import guest_readiness, list_vms
from ansible_collections.converge.virt.plugins.module_utils._phase.readiness import readiness_word
from ansible_collections.converge.virt.plugins.plugin_utils._state_inventory import StateInventory, stale_copy, unsafe

display = Display()


def with_keyfile(uri, keyfile):
    """``uri`` with ``?keyfile=`` (or ``&keyfile=``) for an SSH transport that names no key file, else ``uri`` as it is."""
    parts = urlsplit(uri)
    if not parts.scheme.endswith('+ssh') and not parts.scheme.endswith('+libssh2') and not parts.scheme.endswith('+libssh'):
        return uri
    if any(key == 'keyfile' for key, _value in parse_qsl(parts.query, keep_blank_values=True)):
        return uri
    return urlunsplit(parts._replace(query='&'.join(part for part in (parts.query, urlencode({'keyfile': keyfile})) if part)))


def proxy_jump(uri):
    """``-o ProxyJump=ssh://[user@]host[:port]`` for a libvirt URI with an SSH transport (no password, no query), else None."""
    parts = urlsplit(uri)
    if not parts.scheme.endswith(('+ssh', '+libssh2', '+libssh')) or not parts.hostname:
        return None
    host = '[%s]' % parts.hostname if ':' in parts.hostname else parts.hostname
    netloc = ('%s@' % parts.username if parts.username else '') + host + (':%d' % parts.port if parts.port else '')
    return '-o ProxyJump=ssh://' + netloc


class InventoryModule(StateInventory):
    """The converge.virt.libvirt inventory plugin."""

    NAME = 'converge.virt.libvirt'
    FILE_SUFFIX = 'converge_libvirt'
    # the host variables one can ask for (option host_vars), in the modules' own words
    HOST_VARS = dict([(key, key) for key in ('vm_state', 'power_state', 'task_state', 'status', 'phase', 'state_reason', 'vcpus', 'memory_kib',
                                             'uuid', 'host', 'libvirt_uri', 'task_id', 'autostart', 'pending_restart', 'persistent',
                                             'managed_save')] + [('libvirt_name', 'name')])
    ALWAYS_VARS = ('ansible_host', 'ansible_ssh_common_args', 'readiness', 'title', 'stale')
    GROUP_WORDS = (('vm_state', 'vm_state'), ('power_state', 'power_state'), ('status', 'status'), ('libvirt_host', 'host'))

    def check_requirements(self):
        if not HAS_LIBVIRT:
            raise AnsibleError('the converge.virt.libvirt inventory needs the Python package libvirt-python')

    def group_prefix(self):
        return self.get_option('group_prefix') or ''

    def uris(self):
        """(URI as given, URI to open) of each host: O(uris), else O(uri) / $LIBVIRT_DEFAULT_URI / qemu:///system; O(keyfile) is
        added to the SSH ones naming none. The one given names the host in C(libvirt_uri) and the cache: AWX writes the key
        file to a new path for every sync."""
        uris = self.get_option('uris') or [resolve_uri(self.get_option('uri'))]
        keyfile = self.get_option('keyfile')
        return [(uri, with_keyfile(uri, keyfile) if keyfile else uri) for uri in uris]

    def read_sources(self, cached):
        data = {}
        for uri, opened in self.uris():
            shown = unsafe(redact_uri(uri))     # from the inventory file or the environment: trusted there, not in a host variable
            try:
                connection = Connection(opened, self.get_option('username'), self.get_option('password'))
            except ConvergeError as exc:
                display.warning('converge.virt.libvirt: cannot reach %s (%s); its VMs are %s' % (
                    shown, exc.message, 'reported from the cache with status Unknown' if shown in cached else 'left out'))
                if shown in cached:
                    data[shown] = stale_copy(cached[shown])
                continue
            with connection:
                try:
                    vms = list_vms(connection, with_title=self.get_option('with_title'))
                    seen = guest_readiness(connection, [vm['name'] for vm in vms if vm['power_state'] == 'RUNNING'],
                                           leases=self.get_option('address_from_leases'), agent=self.get_option('address_from_agent'))
                    for vm in vms:
                        if vm['name'] in seen:
                            vm['readiness'] = readiness_word(seen[vm['name']])
                            if seen[vm['name']].address:
                                vm['ansible_host'] = seen[vm['name']].address
                except ConvergeError as exc:
                    display.warning('converge.virt.libvirt: reading %s failed (%s)' % (shown, exc.message))
                    continue
                except Exception as exc:  # pylint: disable=broad-except
                    # libvirt's own errors (the daemon went away mid-read): one warning, the other hosts go on
                    display.warning('converge.virt.libvirt: reading %s failed (%s)' % (shown, connection.redact(str(exc))))
                    continue
            jump = proxy_jump(uri) if self.get_option('ssh_proxy_jump') else None
            for vm in vms:
                vm['libvirt_uri'] = shown
                if jump:
                    vm['ansible_ssh_common_args'] = jump
            data[shown] = vms
        return data
