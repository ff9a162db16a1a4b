# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who runs a task ("host:pid"), and whether that run is known dead.

Every backend records the owner of the task it holds; a task whose owner ran
on this very host and whose process is gone (killed, or a zombie) is stale at
once, without waiting for its lease to run out.

"This very host" means the same host name *and* the same pid namespace: a pid
means nothing outside its namespace. Jobs in containers (an AWX execution
environment run with the host's network has the host's name) each get a pid
namespace of their own, so outside the kernel's initial pid namespace the host
part carries the namespace ("vm/pidns-4026532890:36"); a task of another
container, or of the host, is then never "known dead" from here and ends by
its lease.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Optional


# the inode of the kernel's initial pid namespace (PROC_PID_INIT_INO): a process there names its host alone
INITIAL_PID_NAMESPACE = 0xEFFFFFFC


def pid_namespace() -> int:
    """The inode of this process's pid namespace (the initial one's when /proc does not tell)."""
    try:
        return os.stat('/proc/self/ns/pid').st_ino
    except OSError:
        return INITIAL_PID_NAMESPACE


def _host() -> str:
    """This host's name, with the pid namespace when it is not the initial one (a container's)."""
    namespace = pid_namespace()
    name = socket.gethostname()
    return name if namespace == INITIAL_PID_NAMESPACE else '%s/pidns-%d' % (name, namespace)


def owner_id() -> str:
    """Who holds a task: host (and pid namespace, see the module's docstring) and process, for the record and for messages."""
    return '%s:%d' % (_host(), os.getpid())


def owner_gone(owner: Optional[str]) -> bool:
    """True when ``owner`` ("host:pid") ran on this host, in this pid namespace, and its process is gone (killed): its
    task is stale at once.

    A task's lease tells a live run from a dead one when nothing better is
    known; a run killed on this very host is known dead without waiting for
    its lease to run out.
    """
    if not owner or ':' not in owner:
        return False
    host, _sep, pid = owner.rpartition(':')
    if host != _host() or not pid.isdigit() or int(pid) == os.getpid():
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
