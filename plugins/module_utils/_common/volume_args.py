# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument specs of the volume modules."""

from __future__ import annotations

ATTACHMENT_OPTIONS = dict(
    vm=dict(type='str', required=True),
    dev=dict(type='str', required=True),
    bus=dict(type='str', choices=['virtio', 'scsi', 'sata', 'ide', 'usb']),
    readonly=dict(type='bool', default=False),
    serial=dict(type='str'),
)

VOLUME_OPTIONS = dict(
    pool=dict(type='str'),
    pool_path=dict(type='str'),
    state=dict(type='str', choices=['present', 'absent']),
    capacity=dict(type='raw'),
    format=dict(type='str', choices=['raw', 'qcow2']),
    preallocation=dict(type='str', choices=['off', 'metadata', 'full']),
    clone_from=dict(type='str'),
    import_from=dict(type='str'),
    import_format=dict(type='str', choices=['raw', 'qcow2']),
    backing_volume=dict(type='str'),
    wipe=dict(type='bool'),
    attachments=dict(type='list', elements='dict', options=ATTACHMENT_OPTIONS),
)

# keys of one volume declaration (the single form and each item of ``volumes``)
VOLUME_KEYS = ('name',) + tuple(VOLUME_OPTIONS)


def declared(params):
    """The declaration keys of ``params`` that are set (attachments kept even when an empty list)."""
    return dict((k, params.get(k)) for k in VOLUME_KEYS if params.get(k) is not None)
