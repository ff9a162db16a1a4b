# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument specs shared by the vm modules (and their documentation fragments)."""

from __future__ import annotations

WAIT_ARGS = dict(
    wait=dict(type='bool', default=True),
    wait_timeout=dict(type='int', default=300),
)

DISK_OPTIONS = dict(
    dev=dict(type='str'), target=dict(type='str'), source=dict(type='raw'), pool=dict(type='str'), volume=dict(type='str'),
    path=dict(type='str'), bus=dict(type='str'), format=dict(type='str'), device=dict(type='str'), readonly=dict(type='bool'),
    serial=dict(type='str'),
)

INTERFACE_OPTIONS = dict(network=dict(type='str'), bridge=dict(type='str'), model=dict(type='str'), mac=dict(type='str'))

# cloud-init NoCloud seed (both backends); user_data holds secrets (password hashes, tokens): only its digest is ever shown
CLOUD_INIT_OPTIONS = dict(
    user_data=dict(type='raw', no_log=True),
    meta_data=dict(type='dict'),
    network_config=dict(type='dict'),
    ssh_authorized_keys=dict(type='list', elements='str', no_log=False),
    pool=dict(type='str'),
)

BOOT_OPTIONS = dict(kernel=dict(type='str'), initrd=dict(type='str'), cmdline=dict(type='str'))

DEFINITION_ARGS = dict(
    xml=dict(type='str'),
    uuid=dict(type='str'),
    title=dict(type='str'),
    description=dict(type='str'),
    vcpus=dict(type='int'),
    memory=dict(type='raw'),
    machine=dict(type='str'),
    arch=dict(type='str'),
    domain_type=dict(type='str', choices=['kvm', 'qemu']),
    firmware=dict(type='str', choices=['bios', 'efi']),
    boot=dict(type='dict', options=BOOT_OPTIONS),
    disks=dict(type='list', elements='dict', options=DISK_OPTIONS),
    interfaces=dict(type='list', elements='dict', options=INTERFACE_OPTIONS),
    serial=dict(type='str'),
    graphics=dict(type='str', choices=['none', 'vnc', 'spice']),
    on_poweroff=dict(type='str'),
    on_reboot=dict(type='str'),
    on_crash=dict(type='str'),
    autostart=dict(type='bool'),
    cloud_init=dict(type='dict', options=CLOUD_INIT_OPTIONS),
    guest_agent=dict(type='bool'),
)

STATE_CHOICES = ['present', 'running', 'stopped', 'paused', 'suspended', 'restarted', 'absent']

BEHAVIOUR_ARGS = dict(
    restart_on_change=dict(type='bool', default=False),
    force_stop=dict(type='bool', default=True),
    shutdown_timeout=dict(type='int', default=60),
    lock_timeout=dict(type='int', default=0),
    if_moved=dict(type='str', choices=['fail', 'skip'], default='fail'),
)


def spec_of(params):
    """The definition part of a declaration (drops Nones inside disks/interfaces/boot)."""
    spec = {'name': params.get('name')}
    for key in DEFINITION_ARGS:
        value = params.get(key)
        if value is None or key == 'cloud_init':  # the backends turn cloud_init into a seed of their own
            continue
        if key in ('disks', 'interfaces'):
            value = [dict((k, v) for k, v in item.items() if v is not None) for item in value]
        elif key == 'boot':
            value = dict((k, v) for k, v in value.items() if v is not None)
        spec[key] = value
    return spec


# top-level definition options of the vm module that only the libvirt backend takes (the KubeVirt backend refuses them)
LIBVIRT_DEFINITION_KEYS = ('xml', 'uuid', 'title', 'description', 'machine', 'arch', 'domain_type', 'firmware', 'boot', 'serial', 'graphics',
                           'on_poweroff', 'on_reboot', 'on_crash', 'autostart', 'guest_agent')
