# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The volume module's options only libvirt understands, and the KubeVirt choices: written once.

The libvirt provider (``_libvirt/provider.py``: its volume options, refused by the other backends), the KubeVirt
provider (the choices of its own volume options, ``_kubevirt/provider.py`` VOLUME_ARGS) and the KubeVirt declaration
parser (``_kubevirt/volume_backend.py``: its refusals) read these tables. No import beyond the standard library:
every module run loads it with the providers.
"""

from __future__ import annotations

ACCESS_MODES = ('ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod')
VOLUME_MODES = ('Filesystem', 'Block')

# options of the volume module (and of each volumes item) that only the libvirt backend understands
LIBVIRT_ONLY = ('pool', 'pool_path', 'format', 'preallocation', 'import_format', 'backing_volume', 'wipe', 'uri', 'username', 'password')
