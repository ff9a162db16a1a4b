# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the libvirt and KubeVirt inventory plugins share.

File name check, the inventory cache (a second run served from the cache; a
source that cannot be read is reported from the cache with status Unknown),
and populating hosts with the modules' state words, marked unsafe, grouped by
them, plus constructed's compose / groups / keyed_groups. A plugin says which
variables and groups it has and how it reads its sources.

Host names are marked unsafe too: a VM named ``x-{{ lookup('pipe', 'id') }}`` is
never evaluated, on any supported ansible-core. Before 2.19 ansible templates the
host name when a play uses ``inventory_hostname``, when compose / keyed_groups use
it, and when it connects to a host with no ``ansible_host``; an unsafe host name
stays unevaluated on each of those paths (tests/integration/test_inventory_*.py,
on every version of the matrix).
"""

from __future__ import annotations

import os
import stat

from ansible.errors import AnsibleError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.unsafe_proxy import wrap_var

# ansible-core 2.19+ marks trust with tags: a value of exactly one of these types carries no tag, so it is
# untrusted (never templated) as it is, and wrap_var would only copy it. Earlier versions need wrap_var on every
# value. Strings that came from the inventory file (tagged, trusted) and containers still go through wrap_var.
TRUST_BY_TAGS = hasattr(BaseInventoryPlugin, 'trusted_by_default')
_UNTAGGED_TYPES = frozenset((str, int, float, bool, type(None)))


def unsafe(value):
    """``value`` marked unsafe: never evaluated as a template, whatever it holds."""
    if TRUST_BY_TAGS and type(value) in _UNTAGGED_TYPES:  # pylint: disable=unidiomatic-typecheck
        return value
    return wrap_var(value)


def _memo_unsafe():
    """:func:`unsafe` that wraps each distinct plain string once (before ansible-core 2.19, where marking a string
    unsafe makes a new object): the state words, host and URI repeat on every VM."""
    wrapped = {}

    def mark(value):
        if type(value) is str:  # pylint: disable=unidiomatic-typecheck
            found = wrapped.get(value)
            if found is None:
                found = wrapped[value] = wrap_var(value)
            return found
        return unsafe(value)
    return mark


def check_private_directory(path, plugin, option='cache_connection'):
    """Raise AnsibleError unless no other local user can change what ``path`` (an inventory cache directory) holds.

    Whoever can write the cache chooses the host names and ``ansible_host`` values the inventory reports. So the
    directory must be owned by the user running ansible and writable by no one else; every directory above it must
    be owned by that user or root and, when others may write it, have the sticky bit (as /tmp has: no one else can
    rename or replace what is in it); a symbolic link on the way must belong to that user or root.
    """
    uid = os.geteuid()
    given = os.path.abspath(path)

    def refuse(reason):
        raise AnsibleError('%s: %s: refusing the inventory cache directory %s: %s; whoever can change it chooses the hosts and '
                           'ansible_host values this inventory reports. Use a directory of your own, such as ~/.cache/converge.virt/.'
                           % (plugin, option, given, reason))

    parts = given.split(os.sep)
    for end in range(2, len(parts) + 1):
        prefix = os.sep.join(parts[:end]) or os.sep
        try:
            info = os.lstat(prefix)
        except OSError as exc:
            refuse('cannot read %s (%s)' % (prefix, exc.strerror))
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in (uid, 0):
            refuse('%s is a symbolic link of uid %d' % (prefix, info.st_uid))
    real = os.path.realpath(given)
    try:
        info = os.stat(real)
    except OSError as exc:
        refuse('cannot read %s (%s)' % (real, exc.strerror))
    if not stat.S_ISDIR(info.st_mode):
        refuse('%s is not a directory' % real)
    if info.st_uid != uid:
        refuse('it belongs to uid %d, not to you (uid %d)' % (info.st_uid, uid))
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        refuse('it is writable by %s (mode %04o)' % ('others' if info.st_mode & stat.S_IWOTH else 'its group', stat.S_IMODE(info.st_mode)))
    parent = os.path.dirname(real)
    while True:
        info = os.stat(parent)
        if info.st_uid not in (uid, 0):
            refuse('the directory %s above it belongs to uid %d' % (parent, info.st_uid))
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            refuse('the directory %s above it is writable by others and has no sticky bit (mode %04o)' % (parent, stat.S_IMODE(info.st_mode)))
        if parent == os.path.dirname(parent):
            return
        parent = os.path.dirname(parent)


def stale_copy(vms):
    """Cached VMs of a source that could not be read: the words say Unknown, and no readiness is claimed."""
    return [dict(((key, value) for key, value in vm.items() if key != 'readiness'), status='Unknown', power_state='NOSTATE', phase='Unknown',
                 stale=True) for vm in vms]


class StateInventory(BaseInventoryPlugin, Constructable, Cacheable):
    """Base of the converge.virt inventory plugins."""

    FILE_SUFFIX = ''          # 'converge_libvirt' accepts *.converge_libvirt.yml and converge_libvirt.yml
    HOST_VARS = {}            # host variable -> key of a VM dict, for every variable the user can ask for (option host_vars)
    ALWAYS_VARS = ()          # keys of a VM dict set as host variables whenever a VM has them (ansible_host, title, stale)
    GROUP_WORDS = ()          # (group name word, key of the VM dict)
    # values from the outside world are never trusted as templates (ansible-core 2.19+; the default, said out loud)
    trusted_by_default = False

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
            # a file cache (jsonfile, yaml, pickle): its directory is refused before anything is read from it
            cache_dir = getattr(getattr(self._cache, '_plugin', None), '_cache_dir', None)
            if cache_dir:
                check_private_directory(cache_dir, self.NAME)
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

    def host_var_keys(self):
        """(host variable, key of the VM dict) pairs asked for with the option host_vars."""
        names = self.get_option('host_vars')
        unknown = [name for name in names if name not in self.HOST_VARS]
        if unknown:
            raise AnsibleError('%s: host_vars: unknown variable(s) %s; known: %s' % (
                self.NAME, ', '.join(sorted(str(n) for n in unknown)), ', '.join(sorted(self.HOST_VARS))))
        pairs = [(str(name), self.HOST_VARS[name]) for name in dict.fromkeys(names)]
        return pairs + [(key, key) for key in self.ALWAYS_VARS]

    def _populate(self, data):
        strict = self.get_option('strict')
        compose, groups, keyed = self.get_option('compose'), self.get_option('groups'), self.get_option('keyed_groups')
        constructed = bool(compose or groups or keyed)
        prefix = self.group_prefix()
        pairs = self.host_var_keys()
        inventory = self.inventory
        add_host, set_variable, add_child = inventory.add_host, inventory.set_variable, inventory.add_child
        made = {}
        mark = unsafe if TRUST_BY_TAGS else _memo_unsafe()
        for source in sorted(data):
            for vm in data[source]:
                name = add_host(mark(self.host_name(source, vm)))   # a host name is never evaluated either
                for var, key in pairs:
                    if key in vm:
                        set_variable(name, var, mark(vm[key]))
                for word, key in self.GROUP_WORDS:
                    value = vm.get(key)
                    if not value:
                        continue
                    group = made.get((word, value))
                    if group is None:
                        group = made[(word, value)] = inventory.add_group(self._sanitize_group_name('%s%s_%s' % (prefix, word, str(value).lower())))
                    add_child(group, name)
                if constructed:
                    hostvars = inventory.get_host(name).get_vars()
                    self._set_composite_vars(compose, hostvars, name, strict=strict)
                    self._add_host_to_composed_groups(groups, hostvars, name, strict=strict)
                    self._add_host_to_keyed_groups(keyed, hostvars, name, strict=strict)
