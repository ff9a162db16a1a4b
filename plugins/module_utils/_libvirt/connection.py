# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Opening libvirt connections and translating libvirt's errors.

The binding is imported lazily so that the documentation, the sanity import
test and check of arguments work without it; a module that needs it fails with
a clear message naming the missing Python package. Credentials come from the
URI or from ``username`` / ``password``; neither is ever shown: every message
that leaves here goes through :func:`redact_text`.
"""

from __future__ import annotations

import os
import traceback

from ansible_collections.converge.virt.plugins.module_utils._common import session
from ansible_collections.converge.virt.plugins.module_utils._common.closing import ClosingConnection
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_text, redact_uri, uri_secrets

try:
    import libvirt  # pylint: disable=import-error
    HAS_LIBVIRT = True
    LIBVIRT_IMPORT_ERROR = None
except ImportError:
    libvirt = None
    HAS_LIBVIRT = False
    LIBVIRT_IMPORT_ERROR = traceback.format_exc()

DEFAULT_URI = 'qemu:///system'


def resolve_uri(uri=None):
    """The libvirt URI a module uses: ``uri``, else $LIBVIRT_DEFAULT_URI, else :data:`DEFAULT_URI` (the one place this default is decided)."""
    return uri or os.environ.get('LIBVIRT_DEFAULT_URI') or DEFAULT_URI


def require_libvirt():
    """Raise a clear error when libvirt-python is missing."""
    if not HAS_LIBVIRT:
        raise BackendError('the libvirt backend needs the Python package libvirt-python (pip install libvirt-python)')


def _silence(_ctx, _err):
    # libvirt prints every error to stderr by default; the errors are raised
    # as exceptions and reported by the module instead.
    return None


class Connection(ClosingConnection):
    """A libvirt connection with the secrets needed to redact its errors."""

    def __init__(self, uri, username=None, password=None):
        require_libvirt()
        self.uri = uri or DEFAULT_URI
        self.display_uri = redact_uri(self.uri)
        self._secrets = connection_secrets(self.uri, password)
        libvirt.registerErrorHandler(_silence, None)
        try:
            if username or password:
                auth = [[libvirt.VIR_CRED_AUTHNAME, libvirt.VIR_CRED_PASSPHRASE], self._auth_callback(username, password), None]
                self.conn = libvirt.openAuth(self.uri, auth, 0)
            else:
                self.conn = libvirt.open(self.uri)
        except libvirt.libvirtError as exc:
            raise self.error(exc, 'cannot connect to %s' % self.display_uri)

    @staticmethod
    def _auth_callback(username, password):
        def callback(credentials, _data):
            for cred in credentials:
                if cred[0] == libvirt.VIR_CRED_AUTHNAME:
                    cred[4] = username
                elif cred[0] == libvirt.VIR_CRED_PASSPHRASE:
                    cred[4] = password
            return 0
        return callback

    def redact(self, text):
        """``text`` without this connection's secrets."""
        return redact_text(text, self._secrets)

    def error(self, exc, what, during=None):
        """A :class:`BackendError` for libvirt exception ``exc`` while doing ``what``.

        When ``exc`` says the daemon went away under the call (:func:`daemon_gone`), the message says so, naming the
        URI and ``during`` (the step; default: the call), instead of libvirt's bare words ("client socket is closed").
        """
        code = exc.get_error_code() if hasattr(exc, 'get_error_code') else None
        if daemon_gone(exc):
            return BackendError(self.redact('%s: the libvirt daemon of %s went away during %s (it died or was restarted; libvirt said: %s)'
                                            % (what, self.display_uri, during or 'the call', exc)),
                                libvirt_error_code=code, uri=self.display_uri, daemon_gone=True)
        return BackendError(self.redact('%s: %s' % (what, exc)), libvirt_error_code=code, uri=self.display_uri)

    def closable(self):
        """The libvirt connection (closed by :meth:`close`, errors ignored: the daemon may be gone)."""
        return self.conn


def connection_secrets(uri, password=None):
    """What to mask in a connection's messages: the password and the URI's secret parts (password, keys in the query)."""
    return tuple(x for x in (password,) + tuple(uri_secrets(uri)) if x)


# libvirt's words when the daemon at the other end of a connection went away under a call (killed, crashed, restarted):
# the remote driver's VIR_ERR_INTERNAL_ERROR "client socket is closed" (a call on a connection already closed) and its
# VIR_ERR_SYSTEM_ERROR "Cannot write data: Broken pipe", "Cannot recv data: Connection reset by peer", "End of file
# while reading data" (the socket closed during the call)
DAEMON_GONE_WORDS = ('client socket is closed', 'broken pipe', 'connection reset by peer', 'end of file while reading data',
                     'cannot recv data', 'cannot write data', 'connection closed', 'connection is closed')


def daemon_gone(exc):
    """True when libvirt error ``exc`` says the daemon of the connection went away during the call (see DAEMON_GONE_WORDS)."""
    if not HAS_LIBVIRT or not isinstance(exc, libvirt.libvirtError):
        return False
    codes = tuple(getattr(libvirt, name) for name in ('VIR_ERR_INTERNAL_ERROR', 'VIR_ERR_SYSTEM_ERROR', 'VIR_ERR_RPC', 'VIR_ERR_NO_CONNECT')
                  if hasattr(libvirt, name))
    if exc.get_error_code() not in codes:
        return False
    text = (exc.get_error_message() or str(exc) or '').lower()
    return any(word in text for word in DAEMON_GONE_WORDS)


def is_no_domain(exc):
    """True when ``exc`` says the domain does not exist."""
    return HAS_LIBVIRT and isinstance(exc, libvirt.libvirtError) and exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN


class ModuleSession(session.ModuleSession):
    """The libvirt side of a module run (see _common.session): libvirt-python importable, passwords redacted.

    ::

        with ModuleSession(module) as session, session.connect() as connection:
            ...
    """

    def __init__(self, module):
        super().__init__(module, HAS_LIBVIRT, 'libvirt-python', LIBVIRT_IMPORT_ERROR)
        self.connection = None

    def connect(self, uri=None):
        """The :class:`Connection` for ``uri`` (default: the module's uri, $LIBVIRT_DEFAULT_URI, qemu:///system)."""
        params = self.module.params
        uri = resolve_uri(uri or params.get('uri'))
        self.connection = Connection(uri, params.get('username'), params.get('password'))
        return self.connection

    def redact_text(self, text):
        """text without the connection's password (also the one inside the URI)."""
        if self.connection is not None:
            return self.connection.redact(text)
        return redact_text(text, connection_secrets(self.module.params.get('uri'), self.module.params.get('password')))
