# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The common kubeconfigs read without importing the ``kubernetes`` library.

Importing ``kubernetes`` costs a module process about 0.3 s of CPU (its package imports every API model class);
a no-op task does a handful of requests and spends more time importing the library than talking to the API server.
:func:`load` reads the kubeconfigs that need nothing but a file read (one file, a cluster with ``server``,
``certificate-authority``/``-data`` and ``insecure-skip-tls-verify``; a user with ``token``, ``client-certificate``/
``-key`` (or ``-data``) or ``username``/``password``) the way ``kubernetes.config.load_kube_config`` reads them, and
:class:`Transport` sends requests with urllib3 (the library's own HTTP layer). Anything else - several files in
``KUBECONFIG``, ``exec`` or ``auth-provider`` credentials, ``tokenFile``, ``tls-server-name``, ``proxy-url``, a
missing file, context, cluster or user, in-cluster configuration - makes :func:`load` return None and the caller
uses the library, which also words every configuration error.

Key and certificate data (``*-data``) are written to a private temporary directory only while the TLS context loads
them, then removed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field
from typing import Optional

# what the fast path understands; any other key of the selected entries sends the configuration to the library
CLUSTER_KEYS = frozenset(('server', 'certificate-authority', 'certificate-authority-data', 'insecure-skip-tls-verify', 'extensions'))
USER_KEYS = frozenset(('token', 'client-certificate', 'client-certificate-data', 'client-key', 'client-key-data', 'username', 'password',
                       'extensions'))


@dataclass(eq=False)
class FastConfig:
    """What a request needs: ``host``, ``verify_ssl``, ``ssl_ca_cert`` (a path) or ``ca_data`` (PEM text), client
    certificate and key (``cert_file``/``key_file`` paths or ``cert_data``/``key_data`` bytes), and the
    ``authorization`` header value (bearer token or basic), like kubernetes' Configuration. The credentials (key,
    token, header) are left out of its repr; ``eq=False``: a configuration is one object, compared by identity."""

    host: str
    verify_ssl: bool = True
    ssl_ca_cert: Optional[str] = None
    ca_data: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    cert_data: Optional[bytes] = None
    key_data: Optional[bytes] = field(default=None, repr=False)
    authorization: Optional[str] = field(default=None, repr=False)
    token: Optional[str] = field(default=None, repr=False)


def _named(entries, name):
    """The entry of a kubeconfig list (``clusters``, ``users``, ``contexts``) called ``name``, or None."""
    if not isinstance(entries, list):
        return None
    found = [e for e in entries if isinstance(e, dict) and e.get('name') == name]
    return found[0] if len(found) == 1 else None


def _read_config(path):
    """The kubeconfig at ``path`` as a dict, or None (unreadable, not a mapping: the library says why)."""
    try:
        with open(path, 'rb') as handle:
            text = handle.read().decode('utf-8')
    except (OSError, UnicodeDecodeError):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        try:
            import yaml  # pylint: disable=import-outside-toplevel
        except ImportError:
            return None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
    return data if isinstance(data, dict) else None


def _b64(value):
    try:
        return base64.standard_b64decode(value)
    except (TypeError, ValueError):
        return None


def _path(base, value):
    return value if os.path.isabs(value) else os.path.join(base, value)


def load(kubeconfig=None, context=None, environ=None):
    """A :class:`FastConfig` for ``kubeconfig`` (a path; else ``$KUBECONFIG``, else ``~/.kube/config``) and
    ``context`` (else the file's ``current-context``), or None when the library must read it (see the module doc)."""
    environ = os.environ if environ is None else environ
    if kubeconfig:
        path = os.path.expanduser(kubeconfig)
    else:
        chosen = environ.get('KUBECONFIG') or '~/.kube/config'
        if os.pathsep in chosen:
            return None
        path = os.path.expanduser(chosen)
    if not os.path.isfile(path):
        return None
    data = _read_config(path)
    if data is None:
        return None
    name = context or data.get('current-context')
    ctx = _named(data.get('contexts'), name) if name else None
    ctx = ctx.get('context') if ctx else None
    if not isinstance(ctx, dict) or not ctx.get('cluster'):
        return None
    cluster = _named(data.get('clusters'), ctx['cluster'])
    cluster = cluster.get('cluster') if cluster else None
    user = {}
    if ctx.get('user'):
        found = _named(data.get('users'), ctx['user'])
        user = found.get('user') if found else None
        user = {} if user is None and found is not None else user
    if not isinstance(cluster, dict) or not isinstance(user, dict) or set(cluster) - CLUSTER_KEYS or set(user) - USER_KEYS:
        return None
    server = cluster.get('server')
    if not isinstance(server, str) or not server:
        return None
    base = os.path.dirname(os.path.abspath(path))
    cfg = FastConfig(server.rstrip('/'))
    if cfg.host.startswith('https'):
        if cluster.get('certificate-authority-data'):
            ca = _b64(cluster['certificate-authority-data'])
            if ca is None:
                return None
            cfg.ca_data = ca.decode('ascii', 'replace')
        elif cluster.get('certificate-authority'):
            cfg.ssl_ca_cert = _path(base, cluster['certificate-authority'])
        for file_field, data_field, attr in (('client-certificate', 'client-certificate-data', 'cert'), ('client-key', 'client-key-data', 'key')):
            if user.get(data_field):
                raw = _b64(user[data_field])
                if raw is None:
                    return None
                setattr(cfg, attr + '_data', raw)
            elif user.get(file_field):
                setattr(cfg, attr + '_file', _path(base, user[file_field]))
    if 'insecure-skip-tls-verify' in cluster:
        if not isinstance(cluster['insecure-skip-tls-verify'], bool):
            return None
        cfg.verify_ssl = not cluster['insecure-skip-tls-verify']
    if user.get('token'):
        cfg.token = str(user['token'])
        cfg.authorization = 'Bearer ' + cfg.token
    elif user.get('username') and user.get('password'):
        pair = ('%s:%s' % (user['username'], user['password'])).encode('latin-1', 'replace')
        cfg.authorization = 'Basic ' + base64.b64encode(pair).decode('ascii')
    return cfg


def for_options(kubeconfig=None, context=None, host=None):
    """The fast configuration for a module's connection options: the kubeconfig (:func:`load`) unless only ``host``
    is given (then, as the library does, no kubeconfig is read); None: the library must read it."""
    if kubeconfig or not host:
        return load(kubeconfig, context)
    return FastConfig(host.rstrip('/'))


def _ssl_context(cfg):
    """The TLS context of ``cfg``: the CA (file, data, or the certifi bundle the library would use), the client
    certificate and key (data written to a private directory only while they load)."""
    context = ssl.create_default_context()
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif cfg.ca_data:
        context.load_verify_locations(cadata=cfg.ca_data)
    elif cfg.ssl_ca_cert:
        context.load_verify_locations(cafile=cfg.ssl_ca_cert)
    else:
        try:
            import certifi  # pylint: disable=import-outside-toplevel
            context.load_verify_locations(cafile=certifi.where())
        except ImportError:
            pass
    if cfg.cert_file or cfg.cert_data:
        private = tempfile.mkdtemp(prefix='converge-kube-')
        try:
            cert, key = cfg.cert_file, cfg.key_file
            for attr, name in (('cert_data', 'cert'), ('key_data', 'key')):
                if getattr(cfg, attr):
                    target = os.path.join(private, name)
                    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, 'wb') as handle:
                        handle.write(getattr(cfg, attr))
                    if name == 'cert':
                        cert = target
                    else:
                        key = target
            context.load_cert_chain(cert, key)
        finally:
            shutil.rmtree(private, ignore_errors=True)
    return context


class Transport:
    """Requests of one :class:`FastConfig` through a urllib3 pool, answering like kubernetes' REST client with
    ``_preload_content`` false: the urllib3 response, whatever its status."""

    def __init__(self, cfg):
        import urllib3  # pylint: disable=import-outside-toplevel
        self.urllib3 = urllib3
        if cfg.host.startswith('https'):
            context = _ssl_context(cfg)
            self.pool = urllib3.PoolManager(ssl_context=context, cert_reqs='CERT_REQUIRED' if cfg.verify_ssl else 'CERT_NONE')
        else:
            self.pool = urllib3.PoolManager()

    def request(self, method, url, headers, body=None, timeout=None, stream=False):
        """The urllib3 response of one request (``timeout``: seconds, or (connect, read))."""
        if isinstance(timeout, tuple):
            timeout = self.urllib3.Timeout(connect=timeout[0], read=timeout[1])
        elif timeout is not None:
            timeout = self.urllib3.Timeout(total=timeout)
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        return self.pool.request(method, url, body=body, headers=headers, timeout=timeout, preload_content=not stream)

    def close(self):
        """Release the pool's connections."""
        self.pool.clear()
