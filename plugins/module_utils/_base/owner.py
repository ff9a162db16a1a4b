# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who runs a task ("host:pid"), and whether that run is known dead.

Every backend records the owner of the task it holds; a task whose owner ran
on this very host and whose process is gone (killed, or a zombie) is stale at
once, without waiting for its lease to run out.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Optional


def owner_id() -> str:
    """Who holds a task: host and process, for the record and for messages."""
    return '%s:%d' % (socket.gethostname(), os.getpid())


def owner_gone(owner: Optional[str]) -> bool:
    """True when ``owner`` ("host:pid") ran on this host and its process is gone (killed): its task is stale at once.

    A task's lease tells a live run from a dead one when nothing better is
    known; a run killed on this very host is known dead without waiting for
    its lease to run out.
    """
    if not owner or ':' not in owner:
        return False
    host, _sep, pid = owner.rpartition(':')
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open('/proc/%s/stat' % pid, encoding='ascii') as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except (OSError, IndexError):
        return False


def expire_if_owner_gone(record: Any) -> Any:
    """``record`` with its lease ended (``lease_until`` 0) when it holds a task whose run is known dead, else ``record``.

    Both task stores apply it when they load a record, so every reader (converge,
    recovery, conflict messages) sees a killed run's task as stale at once.
    """
    if record.task_state and owner_gone(record.owner):
        return record._replace(lease_until=0.0)
    return record
