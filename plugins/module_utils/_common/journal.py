# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit journal, for every backend: one JSON line when an acting task begins and one when it ends.

``$CONVERGE_VIRT_AUDIT_JOURNAL`` names the file (nothing is written when it is unset). Each record carries
``event`` (``begin`` / ``end``), ``kind`` (``vm``: the task holds the VM, so the intervals of one VM never overlap
while the task protocol holds; ``volume``: a volume created, grown or deleted; ``host``: a host's drain mark set or cleared), the object (``vm``,
``volume`` or ``host``), ``task_id``, ``action``, the declared ``target`` where there is one, and on ``end`` the ``outcome``
(``done`` / ``failed``), with the pid and both clocks. Only scalar fields of a fixed form are written, and a field
whose name says it holds a secret is refused: a record never carries a password, token or key material.

One write() with O_APPEND per line: lines of concurrent runs do not mix. The file is created 0600 and opened
with O_NOFOLLOW: a symbolic link or anything but a regular file is refused (BackendError naming the variable).
"""

from __future__ import annotations

import json
import os
import time

from ansible_collections.converge.virt.plugins.module_utils._common import files
from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError

AUDIT_JOURNAL_ENV = 'CONVERGE_VIRT_AUDIT_JOURNAL'
EVENTS = ('begin', 'end')
KINDS = ('vm', 'volume', 'host')
# words that mark a field as secret: such a field is never written, whatever its value
SECRET_WORDS = ('password', 'passwd', 'secret', 'token', 'credential', 'private')


def _check_extra(extra):
    out = {}
    for key, value in extra.items():
        lowered = key.lower()
        if any(word in lowered for word in SECRET_WORDS):
            raise BackendError('audit journal: field %r looks like a secret and is never journaled' % key)
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise BackendError('audit journal: field %r must be a string, number or boolean, not %s' % (key, type(value).__name__))
        out[key] = value
    return out


def append(event, obj, task_id, action, kind='vm', **extra):
    """Append one record to the journal named by ``$CONVERGE_VIRT_AUDIT_JOURNAL`` (nothing when it is unset).

    ``obj``: the VM name (``kind='vm'``) or volume key (``kind='volume'``). ``extra``: scalar fields such as
    ``target`` (the declared state or size), ``outcome``, ``volume`` or ``host``.
    """
    path = os.environ.get(AUDIT_JOURNAL_ENV)
    if not path:
        return
    if event not in EVENTS:
        raise BackendError('audit journal: event must be one of %s, not %r' % (', '.join(EVENTS), event))
    if kind not in KINDS:
        raise BackendError('audit journal: kind must be one of %s, not %r' % (', '.join(KINDS), kind))
    entry = _check_extra(extra)
    entry.update({'event': event, 'kind': kind, kind: obj, 'task_id': task_id, 'action': action, 'pid': os.getpid(), 'time': time.time(),
                  'monotonic': time.monotonic()})
    try:
        # created owner-only; never through a symbolic link (a module running as root would append to its target)
        fd = files.open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except files.UnsafeFile as exc:
        raise BackendError('%s: the audit journal %s %s; nothing was appended' % (AUDIT_JOURNAL_ENV, path, exc)) from None
    except OSError as exc:
        raise BackendError('%s: cannot append to the audit journal %s: %s' % (AUDIT_JOURNAL_ENV, path, exc.strerror)) from None
    try:
        os.write(fd, (json.dumps(entry, sort_keys=True) + '\n').encode('utf-8'))
    finally:
        os.close(fd)


class Interval:
    """``with Interval(obj, task_id, action, ...)``: a ``begin`` record on entry, an ``end`` record on exit.

    The outcome is ``done`` when the block returns and ``failed`` when it raises (the exception goes on); a
    process killed inside the block leaves a ``begin`` without an ``end``, which a reader treats as open until
    the task's lease ends.
    """

    def __init__(self, obj, task_id, action, kind='vm', **extra):
        self.obj, self.task_id, self.action, self.kind, self.extra = obj, task_id, action, kind, extra

    def __enter__(self):
        append('begin', self.obj, self.task_id, self.action, kind=self.kind, **self.extra)
        return self

    def __exit__(self, exc_type, exc, _tb):
        append('end', self.obj, self.task_id, self.action, kind=self.kind, outcome='failed' if exc_type else 'done', **self.extra)
        return False
