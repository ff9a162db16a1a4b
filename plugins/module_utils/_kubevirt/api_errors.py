# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the Kubernetes API server's refusals mean, for the KubeVirt backend.

The error classes a request of :class:`.client.KubeClient` raises (by HTTP status), the sentences that say what an RBAC
refusal, an unreachable admission webhook or a missing subresources API mean for the user, and the retry of a
subresource call that virt-api could not answer (503). :mod:`.client` imports them, so ``client.NotFound`` and the
other names stay where callers found them.
"""

from __future__ import annotations

import re
import time

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError

# a 503 of a subresource call is retried with these pauses (doubling, capped) until the task's wait deadline: after virt-api
# restarts, kube-apiserver's aggregator keeps the APIService v1.subresources.kubevirt.io unavailable until its availability
# controller probes virt-api again (seconds), and answers 503 without passing the request on
SUBRESOURCE_RETRY_FIRST = 0.5
SUBRESOURCE_RETRY_CAP = 5.0


class ApiStatusError(BackendError):
    """The API server answered with an error Status (code, reason, message)."""

    def __init__(self, message, code=None, reason=None, **details):
        super().__init__(message, status_code=code, status_reason=reason, **details)
        self.code = code
        self.reason = reason


class NotFound(ApiStatusError):
    """404."""


class Conflict(ApiStatusError):
    """409: a stale resourceVersion, or a refusal of virt-api."""


class Forbidden(ApiStatusError):
    """403: RBAC (or an admission policy) refused the request."""


class ApiUnavailable(ApiStatusError):
    """The API a request needs is not served: KubeVirt's virt-api (subresources.kubevirt.io) is absent or down."""


RBAC_DOC = 'docs/examples/kubevirt-rbac.yaml'
# kube-apiserver's RBAC refusal (k8s.io/apiserver/pkg/endpoints/handlers/responsewriters.forbiddenMessage)
RBAC_REFUSAL = re.compile(r'User "(?P<user>[^"]*)" cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
                          r'(?: in the namespace "(?P<namespace>[^"]+)"| at the cluster scope)?')


def rbac_refusal(message):
    """The RBAC refusal in a 403 message as one clear sentence naming the identity, the verb, the resource (with its API
    group) and the namespace, and where the collection's minimal rules are; None when ``message`` is not RBAC's (an
    admission policy's 403 is shown as the server wrote it)."""
    match = RBAC_REFUSAL.search(message or '')
    if match is None:
        return None
    where = 'in namespace %s' % match.group('namespace') if match.group('namespace') else 'at the cluster scope'
    group = 'API group %s' % match.group('group') if match.group('group') else 'core API group'
    return ('forbidden: %s cannot %s %s (%s) %s: the identity lacks this RBAC rule (the collection needs exactly the rules of '
            'the Role/ClusterRole in %s)' % (match.group('user'), match.group('verb'), match.group('resource'), group, where, RBAC_DOC))


WEBHOOK_FAILURE = re.compile(r'failed calling webhook "(?P<hook>[^"]+)"')


def webhook_unreachable(message):
    """What to tell the user when the API server could not call an admission webhook (failurePolicy Fail refuses the
    write): KubeVirt's webhooks (names ending in kubevirt.io) are served by virt-api; None for any other message."""
    match = WEBHOOK_FAILURE.search(message or '')
    if not match:
        return None
    hook = match.group('hook')
    if hook.endswith('kubevirt.io'):
        return ("the API server could not call KubeVirt's admission webhook %s, which virt-api serves: every write of a "
                "KubeVirt object is refused until virt-api answers again (is virt-api running?); nothing was changed" % hook)
    return 'the API server could not call the admission webhook %s (its failurePolicy refuses the write); nothing was changed' % hook


def subresource_api_missing(status, decoded):
    """True when an answer to a subresources.kubevirt.io request says the API itself is not there: a 404 that is not a
    Kubernetes Status (no APIService registered: '404 page not found'), or a 503 (APIService registered, virt-api down)."""
    if status == 503:
        return True
    return status == 404 and not (isinstance(decoded, dict) and decoded.get('kind') == 'Status')


def retry_unavailable(call, deadline=None, done=None):
    """``call()`` (one subresources.kubevirt.io request), a 503 repeated with a doubling pause until ``deadline``.

    A 503 says virt-api could not be reached: down, or just restarted and not yet seen Available by kube-apiserver's
    aggregator, which answers 503 without passing the request on. Before each retry ``done()`` (when given) is asked
    whether the action took effect all the same (a 503 of a request virt-api had carried out): then nothing is sent
    again and None is returned. At the deadline the last :class:`ApiUnavailable` is raised, saying how long it was
    retried. A 404 with no API (no APIService registered) is not retried: it does not pass.
    """
    started, pause, attempts = time.monotonic(), SUBRESOURCE_RETRY_FIRST, 0
    while True:
        attempts += 1
        try:
            return call()
        except ApiUnavailable as exc:
            if deadline is None or exc.code != 503:
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                if attempts == 1:
                    raise
                raise ApiUnavailable('%s (answered 503 to all %d attempts over %.0f s, until the task\'s wait_timeout)'
                                     % (exc, attempts, time.monotonic() - started), code=exc.code, reason=exc.reason,
                                     api_message=exc.details.get('api_message'), attempts=attempts)
            time.sleep(min(pause, left))
            pause = min(pause * 2, SUBRESOURCE_RETRY_CAP)
        if done is not None and done():
            return None
