# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep secrets out of results, diffs, errors and logs.

A libvirt URI may carry a password (``qemu+tcp://user:secret@host/system``) or
secret-bearing query parameters; a Kubernetes error may echo a bearer token.
Everything a module shows passes through :func:`redact_uri` or :func:`redact_text`.
"""

from __future__ import annotations

import re

MASK = '********'
SECRET_QUERY_KEYS = ('password', 'passwd', 'pass', 'token', 'secret', 'auth', 'key', 'pkipath', 'keyfile')
_BEARER = re.compile(r'(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+')
_USERINFO = re.compile(r'(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]*)@', re.IGNORECASE)


def redact_uri(uri):
    """The URI with any password and secret-looking query values masked; otherwise unchanged."""
    if not uri or '://' not in uri:
        return uri
    scheme, rest = uri.split('://', 1)
    authority, sep, tail = rest.partition('/')
    if '@' in authority:
        userinfo, host = authority.rsplit('@', 1)
        if ':' in userinfo:
            authority = userinfo.split(':', 1)[0] + ':' + MASK + '@' + host
    path, qsep, query = tail.partition('?')
    if query:
        pairs = []
        for pair in query.split('&'):
            key, eq, value = pair.partition('=')
            pairs.append(key + eq + (MASK if eq and key.lower() in SECRET_QUERY_KEYS else value))
        query = '&'.join(pairs)
    return scheme + '://' + authority + sep + path + qsep + query


def redact_text(text, secrets=()):
    """``text`` with every known secret value, URI password and bearer token masked."""
    if text is None:
        return text
    text = str(text)
    for secret in secrets:
        if secret:
            text = text.replace(str(secret), MASK)
    text = _USERINFO.sub(lambda m: '%s%s:%s@' % (m.group('scheme'), m.group('user'), MASK), text)
    return _BEARER.sub(lambda m: m.group(1) + MASK, text)


def redact_fields(result, redact):
    """``result`` (a dict) with ``redact`` applied to every string value; other values unchanged."""
    return dict((key, redact(value) if isinstance(value, str) else value) for key, value in result.items())


def uri_secrets(uri):
    """The secret parts of a URI (userinfo password, secret-looking query values), to hide everywhere.

    Modules add them to ``AnsibleModule.no_log_values`` so that not even the
    echoed ``invocation.module_args`` shows them.
    """
    if not uri or '://' not in uri:
        return []
    secrets = []
    authority, _sep, tail = uri.split('://', 1)[1].partition('/')
    if '@' in authority:
        userinfo = authority.rsplit('@', 1)[0]
        if ':' in userinfo and userinfo.split(':', 1)[1]:
            secrets.append(userinfo.split(':', 1)[1])
    query = tail.partition('?')[2]
    for pair in query.split('&') if query else ():
        key, eq, value = pair.partition('=')
        if eq and value and key.lower() in SECRET_QUERY_KEYS:
            secrets.append(value)
    return secrets


def hide_uri_secrets(module, *uris):
    """Register the secrets of ``uris`` with an AnsibleModule's no_log values."""
    for uri in uris:
        for secret in uri_secrets(uri):
            module.no_log_values.add(secret)
