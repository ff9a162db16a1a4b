# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cloud-init on KubeVirt: a ``cloudInitNoCloud`` volume whose user (and network) data live in a Secret.

The Secret ``<vm>-cloudinit`` holds ``userdata`` (and ``networkdata``); the VM's template references it
(``secretRef``, ``networkDataSecretRef``), so the VirtualMachine object never carries the data itself, and the
Secret is owned by the VM (``ownerReferences``), so Kubernetes' garbage collector removes it with the VM.
The seed's digest is an annotation of the VM template (``converge.virt/cloud-init-digest``): a changed seed
changes the template, so KubeVirt's generation tells that the running instance is older than its VM
(``pending_restart``), and ``restart_on_change`` applies it - as for every other restart-needing change.
Only the digest ever appears in results.
"""

from __future__ import annotations

import base64

from ansible_collections.converge.virt.plugins.module_utils._common import nocloud
from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration

# where kubevirt_declaration carries the Seed in the declared manifest (taken out before anything is sent)
DECLARED_KEY = '_converge_cloud_init'
DISK_NAME = 'cloudinitdisk'
DIGEST_ANNOTATION = 'converge.virt/cloud-init-digest'
SECRET_SUFFIX = '-cloudinit'
CORE_API = '/api/v1'
# Secret keys KubeVirt reads (secretRef: userdata or userData; networkDataSecretRef: networkdata or networkData)
SECRET_KEYS = (('user-data', 'userdata'), ('network-config', 'networkdata'))


def secret_name(name):
    """The Secret of VM ``name``."""
    return name + SECRET_SUFFIX


class Seed:
    """The declared seed of one KubeVirt VM: the Secret's data and its digest."""

    def __init__(self, name, cloud_init, field='cloud_init'):
        if not isinstance(cloud_init, dict):
            raise InvalidDeclaration(field, 'must be a dict, got %s' % type(cloud_init).__name__)
        if cloud_init.get('pool') is not None:
            raise InvalidDeclaration(field + '.pool', 'is a libvirt option (the seed volume\'s pool); on kubevirt the seed is a Secret')
        if cloud_init.get('meta_data') is not None:
            raise InvalidDeclaration(field + '.meta_data', 'KubeVirt writes the NoCloud meta-data itself (instance-id, local-hostname '
                                     'from the VM name); it is not declared on backend kubevirt')
        declared = dict((k, v) for k, v in cloud_init.items() if k not in ('pool', 'meta_data') and v is not None)
        files = nocloud.seed_files(declared, name, field)
        self.field = field
        self.name = name
        self.secret = secret_name(name)
        self.files = dict((k, files[k]) for k, _key in SECRET_KEYS if k in files)
        self.digest = nocloud.seed_digest(self.files)

    def secret_data(self):
        """The Secret's ``data`` (base64, as the API stores it)."""
        return dict((key, base64.b64encode(self.files[name]).decode('ascii')) for name, key in SECRET_KEYS if name in self.files)


def with_seed(declared, seed):
    """The declared VirtualMachine with the cloudInitNoCloud disk and volume and the digest annotation."""
    template = declared['spec'].setdefault('template', {})
    tspec = template.setdefault('spec', {})
    disks = tspec.setdefault('domain', {}).setdefault('devices', {}).setdefault('disks', [])
    volumes = tspec.setdefault('volumes', [])
    for index, item in enumerate(disks):
        if isinstance(item, dict) and item.get('name') == DISK_NAME:
            raise InvalidDeclaration('disks[%d].name' % index, '%s is the cloud_init seed\'s disk; use another name' % DISK_NAME)
    if any(isinstance(item, dict) and item.get('name') == DISK_NAME for item in volumes):
        raise InvalidDeclaration('spec', 'declares a volume %s, the name of the cloud_init seed\'s volume' % DISK_NAME)
    disks.append({'name': DISK_NAME, 'disk': {'bus': 'virtio'}})
    source = {'secretRef': {'name': seed.secret}}
    if 'network-config' in seed.files:
        source['networkDataSecretRef'] = {'name': seed.secret}
    volumes.append({'name': DISK_NAME, 'cloudInitNoCloud': source})
    template.setdefault('metadata', {}).setdefault('annotations', {})[DIGEST_ANNOTATION] = seed.digest
    declared[DECLARED_KEY] = seed
    return declared


def split(declared):
    """``(manifest without the seed, seed or None)``."""
    if not isinstance(declared, dict) or DECLARED_KEY not in declared:
        return declared, None
    return dict((k, v) for k, v in declared.items() if k != DECLARED_KEY), declared[DECLARED_KEY]


def observed_secret(client, namespace, seed):
    """The Secret, or None."""
    return client.get(CORE_API, namespace, 'secrets', seed.secret, what='read the cloud-init Secret %s/%s' % (namespace, seed.secret))


def secret_differs(secret, seed):
    """True when the Secret does not hold exactly the declared data (a missing Secret differs)."""
    return secret is None or dict((secret.get('data') or {})) != seed.secret_data()


def _owner(vm_obj):
    meta = (vm_obj or {}).get('metadata') or {}
    if not meta.get('uid'):
        return None
    return {'apiVersion': 'kubevirt.io/v1', 'kind': 'VirtualMachine', 'name': meta['name'], 'uid': meta['uid']}


def write_secret(client, namespace, seed, secret, vm_obj):
    """Create or update the Secret with the declared data (owned by ``vm_obj`` when it exists)."""
    owner = _owner(vm_obj)
    data = seed.secret_data()
    meta = {'name': seed.secret, 'namespace': namespace, 'labels': {'app.kubernetes.io/managed-by': 'converge.virt'},
            'annotations': {DIGEST_ANNOTATION: seed.digest}}
    if owner:
        meta['ownerReferences'] = [owner]
    if secret is None:
        client.create(CORE_API, namespace, 'secrets', {'apiVersion': 'v1', 'kind': 'Secret', 'type': 'Opaque', 'metadata': meta, 'data': data})
        return
    patch_data = dict(data)
    for key in (secret.get('data') or {}):
        if key not in data:
            patch_data[key] = None
    patch = {'metadata': {'annotations': meta['annotations']}, 'data': patch_data}
    if owner and not _owns(secret, owner):
        patch['metadata']['ownerReferences'] = list((secret.get('metadata') or {}).get('ownerReferences') or []) + [owner]
    client.merge_patch(CORE_API, namespace, 'secrets', seed.secret, patch)


def _owns(secret, owner):
    return any(ref.get('uid') == owner['uid'] for ref in (secret.get('metadata') or {}).get('ownerReferences') or [])


def ensure_owner(client, namespace, seed, vm_obj):
    """Make the VM the Secret's owner (after a create, when the VM's uid is known); True when it was changed."""
    owner = _owner(vm_obj)
    secret = observed_secret(client, namespace, seed)
    if owner is None or secret is None or _owns(secret, owner):
        return False
    refs = [ref for ref in (secret.get('metadata') or {}).get('ownerReferences') or [] if ref.get('kind') != 'VirtualMachine']
    client.merge_patch(CORE_API, namespace, 'secrets', seed.secret, {'metadata': {'ownerReferences': refs + [owner]}})
    return True
