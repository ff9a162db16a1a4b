# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cloud-init NoCloud seeds: the files a guest reads at first boot, and the ISO9660 image that carries them.

A NoCloud seed is a filesystem labelled ``cidata`` holding ``user-data``, ``meta-data`` and optionally
``network-config`` (cloud-init's NoCloud datasource). :func:`seed_files` turns the module's ``cloud_init``
option into those files - structured data is serialised as JSON (which is YAML), never templated - and
:func:`seed_iso` writes them into an ISO9660 image in pure Python (pycdlib: no genisoimage or xorriso on the
host). :func:`seed_digest` names a seed by its content, so that a run can tell whether the seed a VM carries
is the declared one without reading it back, and results can name it without showing it: user data often
holds secrets (password hashes, tokens), and only the digest ever appears in results. User data cloud-init would not
accept as cloud-config (its schema, a ``#cloud-config`` text that is not a mapping) is refused before any change
(:mod:`cloud_config`).
"""

from __future__ import annotations

import hashlib
import io
import json

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.cloud_config import check_user_data


def _pycdlib(what):
    """The pycdlib module, imported when a seed is built or read (every vm task imports this file; few need it)."""
    try:
        import pycdlib  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise InvalidDeclaration('cloud_init', '%s a NoCloud seed needs the Python library pycdlib on the host that runs the module '
                                 '(pip install pycdlib)' % what) from None
    return pycdlib


# cloud-init's NoCloud datasource looks for a filesystem with this label
VOLUME_LABEL = 'cidata'
# (ISO9660 level-1 name, Rock Ridge / Joliet name): guests read the long names
FILES = (('USERDATA.;1', 'user-data'), ('METADATA.;1', 'meta-data'), ('NETWORKC.;1', 'network-config'))
CLOUD_CONFIG_HEADER = '#cloud-config\n'
# what user data given as text may start with (cloud-init's user-data formats)
TEXT_USER_DATA_STARTS = ('#cloud-config', '#!', '#include', '#cloud-boothook', '#part-handler', 'Content-Type: multipart/')


def _dump(data):
    # JSON is YAML (cloud-init reads these files with a YAML loader), and needs no YAML library on the managed host
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + '\n'


def _user_data(cloud_init, field):
    user_data = cloud_init.get('user_data')
    keys = cloud_init.get('ssh_authorized_keys') or []
    if not isinstance(keys, list) or not all(isinstance(key, str) and key.strip() for key in keys):
        raise InvalidDeclaration(field + '.ssh_authorized_keys', 'must be a list of public keys (non-empty strings)')
    if isinstance(user_data, str):
        if keys:
            raise InvalidDeclaration(field + '.ssh_authorized_keys', 'cannot be merged into user_data given as text; '
                                     'give user_data as a dict (cloud-config) or put the keys into it')
        if not user_data.lstrip().startswith(TEXT_USER_DATA_STARTS):
            raise InvalidDeclaration(field + '.user_data', 'text user data must start with one of %s (cloud-init would ignore it)'
                                     % ', '.join(TEXT_USER_DATA_STARTS))
        check_user_data(user_data, field + '.user_data')
        return user_data if user_data.endswith('\n') else user_data + '\n'
    if user_data is not None and not isinstance(user_data, dict):
        raise InvalidDeclaration(field + '.user_data', 'must be a dict (cloud-config) or text, got %s' % type(user_data).__name__)
    config = dict(user_data or {})
    if keys:
        existing = config.get('ssh_authorized_keys') or []
        if not isinstance(existing, list):
            raise InvalidDeclaration(field + '.user_data.ssh_authorized_keys', 'must be a list')
        config['ssh_authorized_keys'] = existing + [key for key in keys if key not in existing]
    # what cloud-init will read (keys merged): refused here, before anything changes, if its schema rejects it
    check_user_data(config, field + '.user_data')
    return CLOUD_CONFIG_HEADER + _dump(config)


def seed_files(cloud_init, hostname, field='cloud_init'):
    """The seed's files as ``{name: bytes}`` from a ``cloud_init`` option (dict); raises :class:`InvalidDeclaration`.

    ``cloud_init`` keys: ``user_data`` (a dict written as ``#cloud-config`` YAML, or text starting with a
    cloud-init user-data marker), ``meta_data`` (a dict; ``local-hostname`` defaults to ``hostname``,
    ``instance-id`` to one derived from the seed's content, so that a changed seed is a new instance to
    cloud-init and its per-instance modules run again), ``network_config`` (a dict, network config v1 or v2)
    and ``ssh_authorized_keys`` (a list, merged into dict user data).
    """
    if not isinstance(cloud_init, dict):
        raise InvalidDeclaration(field, 'must be a dict, got %s' % type(cloud_init).__name__)
    unknown = sorted(set(cloud_init) - {'user_data', 'meta_data', 'network_config', 'ssh_authorized_keys'})
    if unknown:
        raise InvalidDeclaration(field + '.' + unknown[0], 'is not a cloud_init option (user_data, meta_data, network_config, ssh_authorized_keys)')
    files = {'user-data': _user_data(cloud_init, field).encode('utf-8')}
    network_config = cloud_init.get('network_config')
    if network_config is not None:
        if not isinstance(network_config, dict) or network_config.get('version') not in (1, 2):
            raise InvalidDeclaration(field + '.network_config', 'must be a dict with version 1 or 2 (cloud-init network config)')
        files['network-config'] = _dump(network_config).encode('utf-8')
    meta_data = cloud_init.get('meta_data')
    if meta_data is not None and not isinstance(meta_data, dict):
        raise InvalidDeclaration(field + '.meta_data', 'must be a dict, got %s' % type(meta_data).__name__)
    meta = dict(meta_data or {})
    meta.setdefault('local-hostname', hostname)
    if 'instance-id' not in meta:
        content = hashlib.sha256()
        for name in sorted(files):
            content.update(name.encode('ascii') + b'\0' + files[name] + b'\0')
        content.update(_dump(meta).encode('utf-8'))
        meta['instance-id'] = 'iid-' + content.hexdigest()[:16]
    files['meta-data'] = _dump(meta).encode('utf-8')
    return files


def seed_digest(files):
    """A name for a seed's content (sha256 of every file, in order): equal digests, equal seeds."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode('ascii') + b'\0' + str(len(files[name])).encode('ascii') + b'\0' + files[name])
    return digest.hexdigest()


def seed_iso(files):
    """The ISO9660 image (bytes, with Joliet and Rock Ridge names) labelled ``cidata`` that carries ``files``."""
    iso = _pycdlib('building').PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge='1.09', vol_ident=VOLUME_LABEL)
    try:
        for iso_name, name in FILES:
            if name in files:
                data = files[name]
                iso.add_fp(io.BytesIO(data), len(data), '/' + iso_name, rr_name=name, joliet_path='/' + name)
        out = io.BytesIO()
        iso.write_fp(out)
        return out.getvalue()
    finally:
        iso.close()


def read_seed_iso(data):
    """The files of a seed image as ``{name: bytes}`` (by their Rock Ridge names): what a guest would read."""
    pycdlib = _pycdlib('reading')
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(data))
    try:
        out = {}
        for _iso_name, name in FILES:
            buf = io.BytesIO()
            try:
                iso.get_file_from_iso_fp(buf, rr_path='/' + name)
            except pycdlib.pycdlibexception.PyCdlibInvalidInput:
                continue
            out[name] = buf.getvalue()
        return out, iso.pvd.volume_identifier.decode('ascii').strip()
    finally:
        iso.close()
