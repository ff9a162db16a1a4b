# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one loop that follows a migration to its end, for every backend.

A backend (libvirt, KubeVirt) only provides :class:`FollowHooks`: observe once
(the phase word after that observation, and whether the backend sees the
migration over), ask for an abort, the completion-timeout action, renew the
task's lease, and wait until the next look. This loop owns the rest, the same
for every backend (docs/states.md, "Following a migration"):

* ``wait_timeout`` is counted from the start of the follow. When it passes, the
  loop asks the backend to abort once, then keeps looking for at most
  :data:`ABORT_GRACE_SECONDS` for the backend to report the end (the guest stays
  on the source), and reports. It never aborts twice.
* ``completion_timeout`` is counted from the first look at phase Running. The
  backend's action runs once: it may switch to post-copy (the migration goes
  on, bounded by ``wait_timeout``) or decline, and then the loop aborts as above.
* ``pending_timeout`` is counted from the start while the phase is not Running.
  When it passes the loop aborts as above.
* An abort that fails (the backend raised) is a note; the loop still waits the
  grace period, since the migration may end on its own.
* The task's lease: the loop renews it (through the backend) whenever less than
  what the follow may still take, plus :data:`LEASE_MARGIN_SECONDS`, is left.

Pure Python: no libvirt, no Kubernetes, and the clock is a parameter.
"""

from __future__ import annotations

import abc
import json
import os
import select
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, InvalidDeclaration, unexpected
from ansible_collections.converge.virt.plugins.module_utils._phase import migration

RUNNING = 'Running'
ABORT_GRACE_SECONDS = 60.0
LEASE_MARGIN_SECONDS = 120.0
TARGET_UNREACHABLE = 'the target could not be reached'
STARTED_REPLY_TIMEOUT = 120.0
CANCEL_WAIT_FLOOR_SECONDS = 30.0


# (limit, counted from, what happens when it passes): rendered in docs/states.md, "Following a migration"
FOLLOW_RULES = (
    ('wait_timeout', 'the start of the follow (a floor of 1 s)',
     'abort once, wait at most %d s for the backend to report the end (the guest stays on the source), fail' % ABORT_GRACE_SECONDS),
    ('completion_timeout (libvirt)', 'the first look at phase Running',
     'the completion action, once: switch to post-copy (still bounded by wait_timeout), or abort as above'),
    ('pending_timeout', 'the start of the follow, while the phase is not Running',
     'abort as above (no backend passes one today: KubeVirt\'s controller enforces the migration\'s own, given as its annotation)'),
    ('an abort that fails', '-', 'a note; still wait at most %d s for the end, never a second abort' % ABORT_GRACE_SECONDS),
    ('why wait after the abort', '-',
     'an abort is a request: the job may still finish on the target. Waiting (bounded) for the backend to report the end '
     'lets the result say where the guest runs; stopping at the abort could report a guest on the source '
     'that then ran on the target'),
    ('state cancelled', 'the abort request',
     'look until the migration is over, for at most wait_timeout (a floor of %d s); then report what the VM is' % CANCEL_WAIT_FLOOR_SECONDS),
    ('the task lease', 'the start of the follow',
     'renewed whenever less than the rest of the follow plus %d s is left (libvirt cannot write during the job: '
     'its lease covers the whole follow from the start)' % (LEASE_MARGIN_SECONDS / 2)),
)
BACKEND_HOOKS = (
    ('look', 'libvirt: one jobStats() of the source (over when the migrate call returned, or the job is gone when attached); '
             'KubeVirt: read the migration object and the instance (over when both the phase and KubeVirt are final)'),
    ('abort', 'libvirt: abortJob on the source; KubeVirt: delete the migration object'),
    ('renew', 'libvirt: none; KubeVirt: the task annotation\'s lease'),
)


def lease_seconds(wait_timeout: float, completion_timeout: Optional[float] = None) -> float:
    """The lease of a migration task: the whole wait, the completion timeout and a margin (within tasks.MAX_LEASE_SECONDS)."""
    return float(wait_timeout) + float(completion_timeout or 0) + LEASE_MARGIN_SECONDS


def task_lease_seconds(opts: Any) -> float:
    """The lease a migration task is taken with, from a backend's options (``wait_timeout``, ``completion_timeout`` when it has one)."""
    return lease_seconds(opts.wait_timeout, getattr(opts, 'completion_timeout', None))


class Look(NamedTuple):
    """One observation, as the loop needs it."""

    phase: str                  # the phase word after this observation (the phase machine's)
    over: bool = False          # the backend sees the migration ended (final phase, call returned, job gone)


class Timeouts(NamedTuple):
    """The limits of one follow (seconds)."""

    wait_timeout: float
    completion_timeout: Optional[float] = None
    pending_timeout: Optional[float] = None
    poll_interval: float = 0.1
    abort_grace: float = ABORT_GRACE_SECONDS


class Outcome(NamedTuple):
    """How the follow ended."""

    settled: bool                   # the backend reported the end (False: still unfinished after the abort grace)
    stopped_by: Optional[str]       # the limit that made the loop abort, e.g. 'wait_timeout (600 s) passed'
    notes: List[str]                # what the loop did (aborts, post-copy switch, abort failures)
    renewals: int = 0


class MigrationRun:
    """What the migration of one VM keeps on every backend: who runs it, and the phase record the result reports.

    ``phase`` and ``reason`` come from the shared phase machine (``_phase.migration.next_phase``); ``phases`` is the walk
    through its phases, Failed at most once. A backend subclass adds what it observes and executes.
    """

    def __init__(self, name: str, opts: Any, owner: str, check_mode: bool = False,
                 on_started: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
        self.name = name
        self.opts = opts
        self.owner = owner
        self.check_mode = check_mode
        self.on_started = on_started
        self.forget_phases()
        self.notes: List[str] = []

    def converge(self) -> Dict[str, Any]:
        """Converge the VM onto its target; the result (each backend's run defines it)."""
        raise NotImplementedError

    def forget_phases(self) -> None:
        """Start the phase record afresh: no phase yet, no walk, no reason, no progress."""
        self.phase = migration.UNSET
        self.phases: List[str] = []
        self.reason: Optional[str] = None
        self.progress: Dict[str, Any] = {}

    def _advance(self, obs: migration.MigrationObservation) -> str:
        """Move to the phase the phase machine reads from ``obs``; return it."""
        phase, reason = migration.next_phase(obs)
        if phase == migration.FAILED:
            if self.phase != migration.FAILED:
                self.phases.append(phase)
        else:
            self.phases.extend(migration.walk(obs.phase, phase))
        self.phase = phase
        if reason:
            self.reason = reason
        return phase


class FollowHooks:
    """What a backend provides to :func:`follow` for its :class:`MigrationRun` ``run``. Only :meth:`look` and :meth:`abort`
    are required."""

    def __init__(self, run: Optional['MigrationRun'] = None) -> None:
        self.run = run

    def look(self) -> Optional[Look]:
        """Observe once; return a :class:`Look`, or None when no answer came (the loop looks again)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Ask the backend to abort the migration (the guest stays on the source). Raise on failure."""
        raise NotImplementedError

    def on_completion_timeout(self) -> bool:
        """The completion-timeout action: True when it was handled (switched to post-copy), False to abort."""
        return False

    def renew(self, seconds: float) -> Optional[bool]:
        """Extend the task's lease to now + ``seconds`` (False/None when the backend holds no lease to renew)."""
        del seconds
        return False

    def on_running(self) -> None:
        """Called once, at the first look at phase Running."""

    def pause(self, seconds: float) -> None:
        """Wait until the next look (a backend may wake early, e.g. when its migrate call returns)."""
        time.sleep(seconds)


def follow(hooks: FollowHooks, limits: Timeouts, clock: Callable[[], float] = time.monotonic,  # pylint: disable=too-many-branches
           lease_until: Optional[float] = None, wall: Callable[[], float] = time.time) -> Outcome:
    """Look until the migration ends; abort it once at a limit (see the module docstring). Return an :class:`Outcome`.

    ``lease_until``: the wall-clock end of the task's lease (None: this run holds no lease, never renewed).
    """
    try:
        lease_until = None if lease_until is None else float(lease_until)
    except (TypeError, ValueError):
        lease_until = None      # an unreadable lease: not ours to extend
    start = clock()
    deadline = start + max(float(limits.wait_timeout), 1.0)
    notes: List[str] = []
    running_since = None
    completion_acted = False
    aborted_at = None
    stopped_by = None
    renewals = 0
    while True:
        look = hooks.look()
        if look is not None and look.over:
            return Outcome(True, stopped_by, notes, renewals)
        now = clock()
        if look is not None and look.phase == RUNNING and running_since is None:
            running_since = now
            hooks.on_running()
        if aborted_at is not None:
            if now - aborted_at > limits.abort_grace:
                notes.append('the migration did not end within %d s of the abort' % limits.abort_grace)
                return Outcome(False, stopped_by, notes, renewals)
        else:
            why = None
            if limits.completion_timeout and running_since is not None and not completion_acted \
                    and now - running_since > limits.completion_timeout:
                completion_acted = True
                if hooks.on_completion_timeout():
                    notes.append('completion_timeout reached: switched to post-copy')
                else:
                    why = 'completion_timeout'
            elif limits.pending_timeout and running_since is None and now - start > limits.pending_timeout:
                why = 'pending_timeout'
            elif now > deadline:
                why = 'wait_timeout'
            if why is not None:
                stopped_by = '%s (%s s) passed' % (why, getattr(limits, why))
                aborted_at = now
                try:
                    hooks.abort()
                    notes.append('%s reached: the migration was aborted' % why)
                except Exception as exc:  # pylint: disable=broad-except
                    notes.append('%s reached: the abort failed (%s); waited for the migration to end' % (why, exc))
        if lease_until is not None:
            left = (aborted_at + limits.abort_grace if aborted_at is not None else deadline + limits.abort_grace) - now
            if lease_until - wall() < left + LEASE_MARGIN_SECONDS / 2:
                seconds = left + LEASE_MARGIN_SECONDS
                if hooks.renew(seconds):
                    renewals += 1
                    lease_until = wall() + seconds
                else:
                    lease_until = None      # the backend cannot renew it: never asked again
        hooks.pause(limits.poll_interval)


def wait_cancelled(over: Callable[[], bool], wait_timeout: float, interval: float, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> bool:
    """State cancelled, after the abort request: call ``over()`` until it returns True or the wait ends; return whether it did.

    The wait is ``wait_timeout``, at least :data:`CANCEL_WAIT_FLOOR_SECONDS` (an abort takes a moment even when the user
    gave a short wait_timeout).
    """
    deadline = clock() + max(CANCEL_WAIT_FLOOR_SECONDS, float(wait_timeout))
    while clock() < deadline:
        if over():
            return True
        sleep(interval)
    return False


def run_detached(make_migration: Callable[[Callable[[Dict[str, Any]], None]], Any]) -> Dict[str, Any]:
    """State started: fork a detached process that runs ``make_migration(report).converge()``; return its first report.

    The migration reports once its transfer runs (``report``), or its end; the detached process then follows it to the end
    with :func:`follow` and closes the task, after this run has returned.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the detached side
        os.close(read_fd)
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            sent: List[bool] = []

            def send(result: Dict[str, Any]) -> None:
                if not sent:
                    sent.append(True)
                    os.write(write_fd, json.dumps(result, default=str).encode())
                    os.close(write_fd)
            try:
                result = make_migration(send).converge()
            except ConvergeError as exc:
                result = dict(exc.to_result(), failed=True, changed=False)
            except Exception as exc:  # pylint: disable=broad-except
                result = dict(msg=unexpected(exc), failed=True, changed=False)
            send(result)
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    chunks: List[bytes] = []
    deadline = time.monotonic() + STARTED_REPLY_TIMEOUT
    while time.monotonic() < deadline:
        ready, _w, _x = select.select([read_fd], [], [], 1.0)
        if ready:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    if not chunks:
        raise ConvergeError('the detached migration process reported nothing within %ds' % STARTED_REPLY_TIMEOUT)
    return json.loads(b''.join(chunks).decode())


def migrate_each(keys: Sequence[Any], converge: Callable[[Any], Dict[str, Any]], failed: Callable[[Any, Dict[str, Any]], Dict[str, Any]],
                 parallel: int) -> List[Dict[str, Any]]:
    """The one fleet runner of migrations (``names``), for every backend: ``converge(key)`` for each of ``keys``, ``parallel`` at a time.

    One result per key, in order. A key whose run raises is ``failed(key, fields)``: its error's fields (``msg`` and the
    error's own), or ``unexpected error: ...`` for any other exception; the other keys still run.
    """
    from concurrent.futures import ThreadPoolExecutor  # pylint: disable=import-outside-toplevel  # fleets only

    def one(key: Any) -> Dict[str, Any]:
        try:
            return converge(key)
        except ConvergeError as exc:
            return failed(key, exc.to_result())
        except Exception as exc:  # pylint: disable=broad-except
            return failed(key, {'msg': unexpected(exc)})

    with ThreadPoolExecutor(max_workers=min(parallel, max(1, len(keys)))) as pool:
        return list(pool.map(one, keys))


class FleetMigration(abc.ABC):
    """What a backend provides to :func:`migrate_fleet`: the VMs of ``names``, their targets and one migration each.

    The loop (order, duplicates, a VM no target fits, a failure of one VM, ``parallel``) is :func:`migrate_fleet`'s,
    the same on every backend. ``opts`` (the migration options) and ``check_mode`` hold for every VM's migration.
    """

    def __init__(self, opts: Any, check_mode: bool) -> None:
        self.opts = opts
        self.check_mode = check_mode

    @abc.abstractmethod
    def keys(self, entries: Sequence[Any]) -> List[Any]:
        """The VM of each entry of ``names``, in order (refusals name the field, e.g. ``names[2]``)."""

    @abc.abstractmethod
    def label(self, key: Any) -> str:
        """How the VM of ``key`` reads in a message."""

    def targets(self, keys: Sequence[Any]) -> Optional[Dict[Any, Optional[str]]]:
        """The target of every key (None: no target fits that VM), or None when the backend places each migration itself."""
        del keys
        return None

    @abc.abstractmethod
    def migration(self, key: Any, target: Optional[str]) -> MigrationRun:
        """The migration of one VM (``target``: from :meth:`targets`, None when the backend places it)."""

    @abc.abstractmethod
    def failed(self, key: Any, target: Optional[str], fields: Dict[str, Any]) -> Dict[str, Any]:
        """The result of a VM whose migration raised: ``fields`` (the error's) and what names the VM, redacted."""


def migrate_fleet(fleet: FleetMigration, entries: Sequence[Any], parallel: int) -> List[Dict[str, Any]]:
    """Migrate the VM of every entry of ``names``, ``parallel`` at a time; one result per VM, in order.

    A VM named twice is refused before anything runs; a VM no target fits is a failed result that changes nothing;
    a VM whose migration raises is ``fleet.failed``; the other VMs still run (:func:`migrate_each`).
    """
    keys = fleet.keys(entries)
    labels = [fleet.label(key) for key in keys]
    duplicates = sorted(set(label for label in labels if labels.count(label) > 1))
    if duplicates:
        raise InvalidDeclaration('names', 'a VM is named more than once: %s' % ', '.join(duplicates))
    targets = fleet.targets(keys)

    def target_of(key: Any) -> Optional[str]:
        return None if targets is None else targets[key]

    def one(key: Any) -> Dict[str, Any]:
        if targets is not None and targets[key] is None:
            return {'name': fleet.label(key), 'changed': False, 'failed': True, 'phase': None, 'phases': [], 'reason': None,
                    'msg': 'no target host fits VM %r (all draining, unreachable or without enough free memory)' % fleet.label(key)}
        return fleet.migration(key, target_of(key)).converge()

    return migrate_each(keys, one, lambda key, fields: fleet.failed(key, target_of(key), fields), parallel)
