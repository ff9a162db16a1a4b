# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which volume module option belongs to which backend, and the KubeVirt choices: written once.

The argument spec (``_common/volume_run.py``), the backend registry (``_common/registry.py``) and the KubeVirt
declaration parser (``_kubevirt/volume_backend.py``) all read these tables. No import beyond the standard library:
the registry loads it for every module run.
"""

from __future__ import annotations

ACCESS_MODES = ('ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod')
VOLUME_MODES = ('Filesystem', 'Block')

# options of the volume module (and of each volumes item) that only the libvirt backend understands
LIBVIRT_ONLY = ('pool', 'pool_path', 'format', 'preallocation', 'import_format', 'backing_volume', 'wipe', 'uri', 'username', 'password')

# the KubeVirt backend's own volume options, as an argument spec fragment (the parser checks the choices again)
KUBEVIRT_VOLUME_OPTIONS = dict(
    data_volume=dict(type='bool'),
    clone_from_datasource=dict(type='str'),
    storage_class=dict(type='str'),
    access_modes=dict(type='list', elements='str', choices=list(ACCESS_MODES)),
    volume_mode=dict(type='str', choices=list(VOLUME_MODES)),
)
# the options a volumes item may carry that only the KubeVirt backend understands
KUBEVIRT_ITEM_ONLY = tuple(KUBEVIRT_VOLUME_OPTIONS)
