# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep secrets out of results, diffs, errors and logs.

A libvirt URI may carry a password (``qemu+tcp://user:secret@host/system``) or
secret-bearing query parameters; a Kubernetes error may echo a bearer token.
Everything a module shows passes through :func:`redact_uri` or :func:`redact_text`.
A KubeVirt spec may carry cloud-init user data or an import URL with a password:
:func:`redact_spec` / :func:`redact_change` mask them in what a module shows, and
:func:`declared_secrets` finds every such value in the module's parameters, so that
AnsibleModule masks them everywhere, its first log line included (``_common.module``).
"""

from __future__ import annotations

import json
import re

MASK = '********'
SECRET_QUERY_KEYS = ('password', 'passwd', 'pass', 'token', 'secret', 'auth', 'key', 'pkipath', 'keyfile')
_BEARER = re.compile(r'(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+')
_USERINFO = re.compile(r'(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]*)@', re.IGNORECASE)
# a URL inside free text (a declaration, domain XML, cloud-init data): up to white space, a quote or an angle bracket
_URL = re.compile(r'[a-z][a-z0-9+.-]*://[^\s"\'<>]+', re.IGNORECASE)
# the password of a <graphics> element of domain XML
_XML_PASSWD = re.compile(r'\bpasswd\s*=\s*(?P<q>["\'])(?P<pw>.*?)(?P=q)')
# keys of a KubeVirt / CDI spec whose whole value is secret: cloud-init user and network data (a password, an SSH key,
# a token in a script) and the extra HTTP headers of a DataVolume import (an Authorization header)
SECRET_SPEC_KEYS = frozenset(('userData', 'userDataBase64', 'networkData', 'networkDataBase64', 'extraHeaders'))


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


def _url_secrets(text):
    """The secret parts of every URL inside ``text`` (a whole URI, or an XML, cloud-init or message text that holds some)."""
    if '://' not in text:
        return []
    found = []
    for match in _URL.finditer(text):
        found.extend(uri_secrets(match.group(0)))
    return found


def _secret_key(key):
    return isinstance(key, str) and key in SECRET_SPEC_KEYS


def declared_secrets(value):
    """Every secret string inside a declaration (module parameters, a KubeVirt spec; nested dicts and lists).

    The whole values of :data:`SECRET_SPEC_KEYS` (cloud-init user and network data, CDI HTTP headers), the
    password and secret query values of every URL in any string (libvirt URIs, DataVolume import URLs, URLs
    inside user data or domain XML), and VNC/SPICE ``passwd`` attributes of domain XML. The modules register
    them as no_log values before AnsibleModule logs or returns anything (``_common.module.ConvergeModule``).
    """
    found = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if _secret_key(key):
                    found.update(s for s in (sub if isinstance(sub, list) else [sub]) if isinstance(s, str) and s)
                else:
                    stack.append(sub)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, str):
            found.update(_url_secrets(item))
            if 'passwd' in item:
                found.update(m.group('pw') for m in _XML_PASSWD.finditer(item) if m.group('pw'))
    return found


def secret_forms(secrets):
    """Each secret as given and as it reads inside a Python repr or a JSON string (escaped new lines, quotes, backslashes).

    AnsibleModule writes a dict option into its log line as ``str(dict)``: a multi-line user data there is escaped, and
    only its escaped form is found and masked.
    """
    forms = set()
    for secret in secrets:
        if secret:
            forms.update((secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]))
    return set(form for form in forms if form)


def _masked(value):
    """MASK for a secret value that holds something; an empty one is shown as it is (nothing to hide)."""
    return MASK if value not in (None, '', []) else value


def redact_spec(value):
    """A copy of ``value`` (nested dicts and lists) that is safe to show: every value of :data:`SECRET_SPEC_KEYS` masked,
    every URL in a string with its password and secret query values masked."""
    if isinstance(value, dict):
        return dict((key, _masked(sub) if _secret_key(key) else redact_spec(sub)) for key, sub in value.items())
    if isinstance(value, list):
        return [redact_spec(item) for item in value]
    if isinstance(value, str) and '://' in value:
        return _URL.sub(lambda m: redact_uri(m.group(0)), value)
    return value


def redact_change(change):
    """One ``{path, before, after}`` change of a declared spec, safe to show: masked whole when its path runs through a
    secret key (``...cloudInitNoCloud.userData``), else with :func:`redact_spec` applied to both sides."""
    names = [part.split('[', 1)[0] for part in str(change.get('path', '')).split('.')]
    secret = any(_secret_key(name) for name in names)
    shown = dict(change)
    for side in ('before', 'after'):
        if side in shown:
            shown[side] = _masked(shown[side]) if secret else redact_spec(shown[side])
    return shown
