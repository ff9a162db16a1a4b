# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Kubernetes API connection for the KubeVirt backend.

Built from the module options ``kubeconfig``, ``context``, ``host``,
``api_key``, ``ca_cert`` and ``validate_certs`` with the usual
``K8S_AUTH_*`` environment fallbacks. The ``kubernetes`` package is imported
lazily (:func:`import_kubernetes`), so a module can fail with a clear
``missing_required_lib`` message. Requests go through the client's REST layer
with plain dicts (no model classes, no discovery round trips), and every
failure becomes one of the collection's :class:`ConvergeError` classes with
the token redacted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import traceback

try:
    from urllib.parse import quote, urlencode
except ImportError:  # pragma: no cover
    from urllib import quote, urlencode  # type: ignore

from ansible_collections.converge.virt.plugins.module_utils._common import session
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.provider import CONNECTION_ARGS
from ansible_collections.converge.virt.plugins.module_utils._kubevirt import kubeconfig as kubeconfig_fast
from ansible_collections.converge.virt.plugins.module_utils._common.closing import ClosingConnection
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError, ConvergeError, InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_text
from ansible_collections.converge.virt.plugins.module_utils._kubevirt.api_errors import (  # callers name them client.NotFound, ...
    ApiStatusError, ApiUnavailable, Conflict, Forbidden, NotFound, rbac_refusal, retry_unavailable, subresource_api_missing, webhook_unreachable)

KUBERNETES_IMPORT_ERROR = None

# Kubernetes object names (apimachinery validation): a DNS label (namespaces) and a DNS subdomain (most names, nodes)
DNS_LABEL = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z')
DNS_SUBDOMAIN = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z')


def is_subdomain(value):
    """True when ``value`` is a DNS subdomain name of at most 253 characters (most object names, node names)."""
    return isinstance(value, str) and len(value) <= 253 and DNS_SUBDOMAIN.match(value) is not None


def check_node_name(value, field='node'):
    """``value`` if it is a valid Kubernetes node name (a DNS subdomain of at most 253 characters), else
    :class:`InvalidDeclaration` naming ``field``. A node name is a path segment of the API: '..' would name another URL."""
    if not is_subdomain(value):
        raise InvalidDeclaration(field, 'must be a Kubernetes node name (lower case a-z, 0-9, - and ., at most 253 characters), got %r' % (value,))
    return value


def segment(value):
    """``value`` quoted as one segment of an API path. '.' and '..' are refused: the URL would name another object
    (callers check names first; this is the last guard)."""
    if value in ('.', '..'):
        raise BackendError('refusing %r as a name in an API path' % (value,))
    return quote(value, safe='')


CONNECTION_OPTIONS = ('kubeconfig', 'context', 'host', 'api_key', 'ca_cert', 'validate_certs')
ENV_FALLBACKS = {
    'kubeconfig': 'K8S_AUTH_KUBECONFIG',
    'context': 'K8S_AUTH_CONTEXT',
    'host': 'K8S_AUTH_HOST',
    'api_key': 'K8S_AUTH_API_KEY',
    'ca_cert': 'K8S_AUTH_SSL_CA_CERT',
    'validate_certs': 'K8S_AUTH_VERIFY_SSL',
}

KUBEVIRT_API = '/apis/kubevirt.io/v1'
SUBRESOURCE_API = '/apis/subresources.kubevirt.io/v1'
CDI_API = '/apis/cdi.kubevirt.io/v1beta1'
CORE_API = '/api/v1'


def import_kubernetes():
    """Return the ``kubernetes`` package, or None (with :data:`KUBERNETES_IMPORT_ERROR` set)."""
    global KUBERNETES_IMPORT_ERROR  # pylint: disable=global-statement
    try:
        import kubernetes  # pylint: disable=import-outside-toplevel
        from kubernetes import client, config  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        KUBERNETES_IMPORT_ERROR = traceback.format_exc()
        return None
    return kubernetes


def kubernetes_available():
    """True when the ``kubernetes`` package can be imported, without importing it (the fast path of
    :mod:`.kubeconfig` never needs it); when it cannot, :data:`KUBERNETES_IMPORT_ERROR` says why."""
    try:
        spec = importlib.util.find_spec('kubernetes')
    except (ImportError, ValueError):
        spec = None
    return spec is not None or import_kubernetes() is not None


# the words ansible takes for a boolean (ansible.module_utils.parsing.convert_bool)
TRUE_WORDS = ('1', 'true', 'yes', 'on', 'y', 't')
FALSE_WORDS = ('0', 'false', 'no', 'off', 'n', 'f')


def _bool(value, field):
    """``value`` as a boolean; anything but a boolean word is an error naming ``field`` (never a silent false)."""
    if isinstance(value, bool) or value is None:
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise InvalidDeclaration(field, '%r is not a boolean (true/false, yes/no, on/off, 1/0); refusing to guess whether to verify the API '
                             "server's certificate" % (value,))


def connection_params(params, environ=None):
    """The connection options with the K8S_AUTH_* fallbacks applied (explicit options win).

    A K8S_AUTH_VERIFY_SSL that is set but is not a boolean word is refused (:class:`InvalidDeclaration` naming the
    variable) even when ``validate_certs`` is given: a typo must never turn certificate checks off.
    """
    environ = os.environ if environ is None else environ
    result = {}
    for key in CONNECTION_OPTIONS:
        value = params.get(key)
        if value is None and environ.get(ENV_FALLBACKS[key]) not in (None, ''):
            value = environ[ENV_FALLBACKS[key]]
        result[key] = value
    verify_env = environ.get(ENV_FALLBACKS['validate_certs'])
    if verify_env not in (None, ''):
        _bool(verify_env, ENV_FALLBACKS['validate_certs'])
    result['validate_certs'] = _bool(result['validate_certs'], 'validate_certs')
    return result


class _NeverRaised(Exception):
    """Stands for the library's ApiException on the fast path, where requests answer every status."""


def _has_credential(cfg):
    """True when requests of ``cfg`` carry a credential in a header (a bearer token, a refreshed token, a user's password)."""
    return bool(any((cfg.api_key or {}).values()) or getattr(cfg, 'refresh_api_key_hook', None) or
                (getattr(cfg, 'username', None) and getattr(cfg, 'password', None)))


def _timed_out(exc):
    """True when a request failed by running out of time (not repeated: the caller's deadline decides)."""
    while exc is not None:
        if isinstance(exc, TimeoutError) or 'timed out' in str(exc).lower() or type(exc).__name__.endswith('TimeoutError'):
            return True
        exc = getattr(exc, 'reason', None) if getattr(exc, 'reason', None) is not exc else None
    return False


class KubeClient(ClosingConnection):
    """One API server connection: JSON in, JSON out.

    ``warnings``: what the caller should show about the connection: the in-cluster service account was used because
    nothing else was configured, or a credential goes to an ``http://`` API server.
    """

    # the fast path's configuration and transport (kubeconfig.py), or the library's ApiClient: one of the two is set
    fast = None
    transport = None
    api_client = None

    def __init__(self, kubeconfig=None, context=None, host=None, api_key=None, ca_cert=None, validate_certs=None, timeout=30):
        self.secrets = [api_key] if api_key else []
        self.timeout = timeout
        # what the user should know about this connection (modules pass them to module.warn, the inventory to display)
        self.warnings = []
        if kubeconfig and not os.path.exists(os.path.expanduser(kubeconfig)):
            raise BackendError('kubeconfig: file %s does not exist' % kubeconfig)
        # the common kubeconfigs (and a bare host) without importing the kubernetes library (about 0.3 s of CPU a task)
        fast = kubeconfig_fast.for_options(kubeconfig, context, host)
        self.fast = fast
        if fast is not None:
            self._fast_overrides(fast, host, api_key, ca_cert, validate_certs)
            self.config = fast
            self.host = fast.host
            credential = bool(fast.authorization)
            self.transport = kubeconfig_fast.Transport(fast)
        else:
            cfg = self._library_config(kubeconfig, context, host, api_key, ca_cert, validate_certs)
            self.config = cfg
            self.host = cfg.host
            credential = _has_credential(cfg)
        if (self.host or '').lower().startswith('http://') and credential:
            self.warnings.append('the API server %s is reached over plain http://: the credential (bearer token or password) is sent '
                                 'unencrypted; use https://' % self.host)

    def _fast_overrides(self, fast, host, api_key, ca_cert, validate_certs):
        """The module's options over what the kubeconfig said (as :meth:`_library_config` applies them)."""
        if host:
            fast.host = host.rstrip('/')
        if api_key:
            fast.token = api_key
            fast.authorization = 'Bearer ' + api_key
        if ca_cert:
            fast.ssl_ca_cert = os.path.expanduser(ca_cert)
            fast.ca_data = None
        if validate_certs is not None:
            fast.verify_ssl = bool(validate_certs)
        if fast.token:
            self.secrets.append(fast.token)
        if fast.authorization:
            self.secrets.append(fast.authorization.split(' ', 1)[-1])

    def _library_config(self, kubeconfig, context, host, api_key, ca_cert, validate_certs):
        """kubernetes' Configuration for what the fast path leaves to the library (exec and auth-provider credentials,
        several kubeconfig files, in-cluster configuration, and every configuration error's wording)."""
        kubernetes = import_kubernetes()
        if kubernetes is None:
            raise BackendError('the kubernetes Python library is required for backend kubevirt', exception=KUBERNETES_IMPORT_ERROR)
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel
        self.exceptions = client.exceptions
        cfg = client.Configuration()
        try:
            if kubeconfig or not host:
                try:
                    config.load_kube_config(config_file=os.path.expanduser(kubeconfig) if kubeconfig else None, context=context,
                                            client_configuration=cfg)
                except config.ConfigException as exc:
                    if kubeconfig or context:
                        raise
                    missing = self.redact(str(exc))
                    config.load_incluster_config(client_configuration=cfg)
                    # the pod's own service account acts: say so, it may not be the cluster or identity the task meant
                    self.warnings.append('no kubeconfig was found (%s) and no API server was given (host, K8S_AUTH_HOST): using the in-cluster '
                                         'service account of this pod (%s); give kubeconfig or host and api_key to choose the cluster and '
                                         'identity' % (missing, cfg.host))
        except config.ConfigException as exc:
            raise BackendError('cannot load the Kubernetes configuration: %s' % self.redact(str(exc)))
        if host:
            cfg.host = host.rstrip('/')
        if api_key:
            cfg.api_key = {'authorization': 'Bearer ' + api_key}
            cfg.api_key_prefix = {}
        if ca_cert:
            cfg.ssl_ca_cert = os.path.expanduser(ca_cert)
        if validate_certs is not None:
            cfg.verify_ssl = bool(validate_certs)
        for value in (cfg.api_key or {}).values():
            if value:
                self.secrets.append(value.split(' ', 1)[-1])
        self.api_client = client.ApiClient(cfg)
        return cfg

    def closable(self):
        """The API client or the fast path's transport (:meth:`close` releases the connection pool, errors ignored)."""
        return self.transport if self.transport is not None else self.api_client

    # -------------------------------------------------------------- secrets
    def redact(self, text):
        """``text`` without the token (or any bearer token)."""
        return redact_text(text, self.secrets)

    def _headers(self, content_type=None, accept='application/json'):
        cfg = self.config
        if self.fast is not None:
            headers = {'Accept': accept, 'User-Agent': 'converge.virt'}
            if cfg.authorization:
                headers['authorization'] = cfg.authorization
            if content_type:
                headers['Content-Type'] = content_type
            return headers
        if getattr(cfg, 'refresh_api_key_hook', None):
            cfg.refresh_api_key_hook(cfg)
        headers = {'Accept': accept, 'User-Agent': 'converge.virt'}
        key = (cfg.api_key or {}).get('authorization') or (cfg.api_key or {}).get('BearerToken')
        if key:
            prefix = (cfg.api_key_prefix or {}).get('authorization') or (cfg.api_key_prefix or {}).get('BearerToken')
            headers['authorization'] = '%s %s' % (prefix, key) if prefix else key
        elif getattr(cfg, 'username', None) and getattr(cfg, 'password', None):
            headers['authorization'] = cfg.get_basic_auth_token()
        if content_type:
            headers['Content-Type'] = content_type
        return headers

    # ------------------------------------------------------------- requests
    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        """One request; returns the decoded JSON (or None). Errors become :class:`ApiStatusError`."""
        url = self.host + path
        accept = 'application/json'
        if path.startswith(SUBRESOURCE_API):
            # virt-api's subresource routes declare no representation: an exact `Accept: application/json` gets 406
            accept = '*/*'
        elif method in ('POST', 'PUT', 'PATCH'):
            # an unknown field (a typo in `spec`) is refused naming it, instead of dropped with a warning nobody sees
            query = dict(query or {}, fieldValidation='Strict')
        if query:
            url += '?' + urlencode([(k, v) for k, v in query.items() if v is not None])
        if body is not None and content_type is None:
            content_type = 'application/json'
        for attempt in (1, 2):
            try:
                if self.transport is not None:
                    response = self.transport.request(method, url, self._headers(content_type, accept), body=body, timeout=self.timeout)
                    status, data = response.status, response.data
                    break
                response = self.api_client.rest_client.request(method, url, headers=self._headers(content_type, accept), body=body,
                                                               _request_timeout=self.timeout)
                status = response.status
                data = response.data if getattr(response, 'data', None) is not None else response.read()
                break
            except self._api_exception() as exc:
                status, data = exc.status, exc.body
                break
            except ConvergeError:
                raise
            except Exception as exc:  # pylint: disable=broad-except
                if attempt == 1 and method == 'GET' and not _timed_out(exc):
                    # a read is safe to repeat: a kept-alive connection the server (or a proxy) dropped - an API server
                    # restart, a watch stream cut - fails the first request on it, and a new connection answers
                    continue
                # urllib3 / ssl errors: no status; the URL is safe, the token is redacted anyway
                raise BackendError(self.redact('%s: cannot reach the Kubernetes API at %s: %s' % (what or method, self.host, exc)))
        if isinstance(data, bytes):
            data = data.decode('utf-8', 'replace')
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = None
        if status is None or not 200 <= int(status) <= 299:
            raise self._error(status, decoded, data, what or '%s %s' % (method, path), path=path)
        return decoded

    def _error(self, status, decoded, raw, what, path=None):
        message = reason = None
        if isinstance(decoded, dict):
            message = decoded.get('message')
            reason = decoded.get('reason')
        code = '%s %s' % (status, reason) if reason else status
        detail = ': %s' % message if message else (': %s' % raw[:300].strip() if raw else '')
        if path is not None and path.startswith(SUBRESOURCE_API) and subresource_api_missing(status, decoded):
            text = self.redact("%s failed: KubeVirt's virt-api is not available: the API server %s subresources.kubevirt.io/v1 (%s%s); "
                               "start, stop, restart, pause, unpause and hot-plug go through it: is virt-api running? (and the APIService "
                               "v1.subresources.kubevirt.io Available?)" % (
                                   what, 'does not serve' if status == 404 else 'cannot reach virt-api for', code, detail))
            return ApiUnavailable(text, code=status, reason=reason, api_message=self.redact(message) if message else None)
        refusal = rbac_refusal(message) if status == 403 else webhook_unreachable(message) if status == 500 else None
        if refusal:
            detail = ': %s (%s)' % (refusal, message) if status == 500 else ': %s' % refusal
        text = self.redact('%s failed: %s%s' % (what, code, detail))
        cls = NotFound if status == 404 else Conflict if status == 409 else Forbidden if status == 403 else ApiStatusError
        return cls(text, code=status, reason=reason, api_message=self.redact(message) if message else None)

    # --------------------------------------------------------- conveniences
    @staticmethod
    def path(api, namespace, plural, name=None, sub=None):
        """``/apis/.../namespaces/NS/PLURAL[/NAME[/SUB]]``."""
        path = '%s/namespaces/%s/%s' % (api, segment(namespace), plural)
        if name:
            path += '/' + segment(name)
        if sub:
            path += '/' + sub
        return path

    def get(self, api, namespace, plural, name, what=None):
        """The object, or None when it does not exist."""
        try:
            return self.request('GET', self.path(api, namespace, plural, name), what=what or 'read %s %s/%s' % (plural, namespace, name))
        except NotFound:
            return None

    def list(self, api, namespace, plural, label_selector=None):
        """Every object of ``plural`` in ``namespace`` (follows pagination)."""
        items, token = [], None
        while True:
            query = {'labelSelector': label_selector, 'continue': token, 'limit': 500}
            data = self.request('GET', self.path(api, namespace, plural), query=query, what='list %s in %s' % (plural, namespace))
            items.extend((data or {}).get('items') or [])
            token = ((data or {}).get('metadata') or {}).get('continue')
            if not token:
                return items

    def create(self, api, namespace, plural, body, dry_run=False):
        """POST; returns the created object."""
        return self.request('POST', self.path(api, namespace, plural), body=body, query={'dryRun': 'All' if dry_run else None},
                            what='create %s %s/%s' % (plural, namespace, (body.get('metadata') or {}).get('name')))

    def merge_patch(self, api, namespace, plural, name, patch, dry_run=False):
        """JSON merge patch; returns the patched object."""
        return self.request('PATCH', self.path(api, namespace, plural, name), body=patch, content_type='application/merge-patch+json',
                            query={'dryRun': 'All' if dry_run else None}, what='patch %s %s/%s' % (plural, namespace, name))

    def delete(self, api, namespace, plural, name, propagation=None, dry_run=False):
        """DELETE; returns the Status (or the object being finalized); None when already gone."""
        body = {'kind': 'DeleteOptions', 'apiVersion': 'v1'}
        if propagation:
            body['propagationPolicy'] = propagation
        if dry_run:
            body['dryRun'] = ['All']
        try:
            return self.request('DELETE', self.path(api, namespace, plural, name), body=body, what='delete %s %s/%s' % (plural, namespace, name))
        except NotFound:
            return None

    def subresource(self, plural, namespace, name, action, body=None, deadline=None, done=None):  # pylint: disable=too-many-arguments
        """PUT a virt-api subresource (start, stop, restart, pause, unpause, ...); a 503 is retried until ``deadline``
        (a ``time.monotonic()`` value; None: no retry), see :func:`retry_unavailable`."""
        path = self.path(SUBRESOURCE_API, namespace, plural, name, action)
        what = '%s of %s %s/%s' % (action, plural.rstrip('s'), namespace, name)
        return retry_unavailable(lambda: self.request('PUT', path, body=body or {}, what=what), deadline, done)

    def _api_exception(self):
        """The library's ApiException class (the fast path has none: a class nothing raises)."""
        return self.exceptions.ApiException if self.api_client is not None else _NeverRaised

    def _library_stream(self, url, timeout):
        """(response, status, None) of a streaming GET through the library's REST client."""
        rest = self.api_client.rest_client
        try:
            # kubernetes < 35: a streaming response only when asked for; >= 35 always streams (no such argument)
            response = rest.request('GET', url, headers=self._headers(), _preload_content=False, _request_timeout=timeout)
        except TypeError:
            response = rest.request('GET', url, headers=self._headers(), _request_timeout=timeout)
        return response, response.status, None

    def list_with_version(self, api, namespace, plural):
        """(every object of ``plural`` in ``namespace``, the list's resourceVersion): where a watch starts."""
        data = self.request('GET', self.path(api, namespace, plural), what='list %s in %s' % (plural, namespace))
        return (data or {}).get('items') or [], ((data or {}).get('metadata') or {}).get('resourceVersion')

    def watch(self, api, namespace, plural, resource_version, timeout_seconds=300):
        """The events of a watch from ``resource_version`` (decoded dicts: type, object), until the server ends it.

        BOOKMARK events are asked for (they move the resourceVersion on a quiet watch); an ERROR event (410 Gone:
        the version is too old) is yielded like the others - the caller lists again.
        """
        query = {'watch': '1', 'resourceVersion': resource_version, 'allowWatchBookmarks': 'true', 'timeoutSeconds': str(int(timeout_seconds))}
        url = self.host + self.path(api, namespace, plural) + '?' + urlencode(query)
        what = 'watch %s in %s' % (plural, namespace)
        timeout = (self.timeout, timeout_seconds + self.timeout)
        try:
            if self.transport is not None:
                response, body = self.transport.request('GET', url, self._headers(), timeout=timeout, stream=True), None
                status = response.status
            else:
                response, status, body = self._library_stream(url, timeout)
        except self._api_exception() as exc:
            status, body = exc.status, exc.body
        except Exception as exc:  # pylint: disable=broad-except
            raise BackendError(self.redact('%s: cannot reach the Kubernetes API at %s: %s' % (what, self.host, exc)))
        # the urllib3 response (kubernetes >= 35 wraps it)
        response = getattr(response, 'response', response) if body is None else None
        if body is None and not 200 <= int(status) <= 299:
            body = response.data
            response.release_conn()
        if body is not None:
            body = body.decode('utf-8', 'replace') if isinstance(body, bytes) else body
            try:
                decoded = json.loads(body) if body else None
            except ValueError:
                decoded = None
            raise self._error(status, decoded, body, what)
        try:
            pending = b''
            for chunk in response.stream(None, decode_content=False):
                pending += chunk
                while b'\n' in pending:
                    line, pending = pending.split(b'\n', 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()


def client_from_params(params, environ=None):
    """A :class:`KubeClient` from module params (with env fallbacks)."""
    return KubeClient(**connection_params(params, environ))


# Argument specs of the KubeVirt connection (documented by the converge.virt.backend fragment), declared by the provider.
KUBEVIRT_CONNECTION_ARGS = CONNECTION_ARGS


class ModuleSession(session.ModuleSession):
    """The kubevirt side of a module run (see _common.session): kubernetes importable, the API key redacted.

    ::

        with ModuleSession(module) as session:
            client = session.connect()
            ...
    """

    def __init__(self, module):
        available = kubernetes_available()
        super().__init__(module, available, 'kubernetes', KUBERNETES_IMPORT_ERROR)
        self.client = None
        self.secrets = [module.params.get('api_key'), os.environ.get('K8S_AUTH_API_KEY')]

    def connect(self):
        """The client for the module's connection options (kept for redaction); its warnings become the module's."""
        self.client = client_from_params(self.module.params)
        for warning in self.client.warnings:
            self.module.warn(self.redact(warning))
        return self.client

    def redact_text(self, text):
        """text without the API key (parameter, environment, kubeconfig)."""
        return redact_text(self.client.redact(text) if self.client is not None else text, self.secrets)
