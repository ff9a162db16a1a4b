# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the libvirt and KubeVirt inventory plugins share.

File name check, the inventory cache (a second run served from the cache; a
source that cannot be read is reported from the cache with status Unknown),
and populating hosts with the modules' state words, marked unsafe, grouped by
them, plus constructed's compose / groups / keyed_groups. A plugin says which
variables and groups it has and how it reads its sources.
"""

from __future__ import annotations

import os

from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.unsafe_proxy import wrap_var


def stale_copy(vms):
    """Cached VMs of a source that could not be read: the words say Unknown."""
    return [dict(vm, status='Unknown', power_state='NOSTATE', phase='Unknown', stale=True) for vm in vms]


class StateInventory(BaseInventoryPlugin, Constructable, Cacheable):
    """Base of the converge.virt inventory plugins."""

    FILE_SUFFIX = ''          # 'converge_libvirt' accepts *.converge_libvirt.yml and converge_libvirt.yml
    HOST_VARS = ()            # keys of a VM dict that become host variables
    GROUP_WORDS = ()          # (group name word, key of the VM dict)
    NAME_VAR = ''             # host variable that carries the VM's own name

    def verify_file(self, path):
        """Accept *.<FILE_SUFFIX>.yml / .yaml and <FILE_SUFFIX>.yml / .yaml."""
        if not super().verify_file(path):
            return False
        base = os.path.basename(path)
        suffix = self.FILE_SUFFIX
        return base.endswith(('.%s.yml' % suffix, '.%s.yaml' % suffix)) or base in ('%s.yml' % suffix, '%s.yaml' % suffix)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        self.check_requirements()
        cache_key = self.get_cache_key(path)
        cached = None
        if self.get_option('cache'):
            try:
                cached = self._cache[cache_key]
            except KeyError:
                cached = None
        if self.get_option('cache') and cache and cached is not None:
            data = cached
        else:
            data = self.read_sources(cached or {})
            if self.get_option('cache'):
                self._cache[cache_key] = data
        self._populate(data)

    def check_requirements(self):
        """Raise AnsibleError when a Python requirement is missing."""

    def read_sources(self, cached):
        """{source: [VM dicts]}; ``cached`` is the previous result (for unreachable sources)."""
        raise NotImplementedError

    def host_name(self, source, vm):
        """The inventory host name of ``vm`` read from ``source``."""
        del source
        return vm['name']

    def group_prefix(self):
        """Prefix of the generated group names."""
        return ''

    def _populate(self, data):
        strict = self.get_option('strict')
        compose, groups, keyed = self.get_option('compose'), self.get_option('groups'), self.get_option('keyed_groups')
        prefix = self.group_prefix()
        made = {}
        for source in sorted(data):
            for vm in data[source]:
                name = self.host_name(source, vm)
                self.inventory.add_host(name)
                for key in self.HOST_VARS:
                    if key in vm:
                        self.inventory.set_variable(name, key, wrap_var(vm[key]))
                self.inventory.set_variable(name, self.NAME_VAR, wrap_var(vm['name']))
                for word, key in self.GROUP_WORDS:
                    value = vm.get(key)
                    if not value:
                        continue
                    if (word, value) not in made:
                        made[(word, value)] = self.inventory.add_group(self._sanitize_group_name('%s%s_%s' % (prefix, word, str(value).lower())))
                    self.inventory.add_child(made[(word, value)], name)
                if compose or groups or keyed:
                    hostvars = self.inventory.get_host(name).get_vars()
                    self._set_composite_vars(compose, hostvars, name, strict=strict)
                    self._add_host_to_composed_groups(groups, hostvars, name, strict=strict)
                    self._add_host_to_keyed_groups(keyed, hostvars, name, strict=strict)
