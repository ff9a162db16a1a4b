# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared migration follow loop on a fake backend with a fake clock: no libvirt, no Kubernetes."""

import pytest

from ansible_collections.converge.virt.plugins.module_utils._common import migrate


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeBackend(migrate.FollowHooks):
    """A migration that is Pending until ``running_at``, Running until ``done_at`` (seconds of the fake clock), then over.

    An abort makes it end ``abort_takes`` seconds later (None: never).
    """

    def __init__(self, clock, running_at=None, done_at=None, abort_takes=0.0, abort_fails=False, postcopy=False, can_renew=True):
        self.clock = clock
        self.t0 = clock.now
        self.running_at = running_at
        self.done_at = done_at
        self.abort_takes = abort_takes
        self.abort_fails = abort_fails
        self.postcopy = postcopy
        self.can_renew = can_renew
        self.aborts = []
        self.renewals = []
        self.runnings = 0
        self.completion_calls = 0
        self.looks = 0

    def elapsed(self):
        return self.clock.now - self.t0

    def look(self):
        self.looks += 1
        if self.aborts and self.abort_takes is not None and self.elapsed() >= self.aborts[0] + self.abort_takes:
            return migrate.Look('Failed', over=True)
        if self.done_at is not None and self.elapsed() >= self.done_at:
            return migrate.Look('Succeeded', over=True)
        if self.running_at is not None and self.elapsed() >= self.running_at:
            return migrate.Look('Running')
        return migrate.Look('Pending')

    def abort(self):
        self.aborts.append(self.elapsed())
        if self.abort_fails:
            raise RuntimeError('the API said no')

    def on_completion_timeout(self):
        self.completion_calls += 1
        return self.postcopy

    def on_running(self):
        self.runnings += 1

    def renew(self, seconds):
        self.renewals.append((self.elapsed(), seconds))
        return self.can_renew

    def pause(self, seconds):
        self.clock.now += seconds


def run(backend, clock, **limits):
    limits.setdefault('poll_interval', 1.0)
    lease_until = limits.pop('lease_until', None)
    return migrate.follow(backend, migrate.Timeouts(**limits), clock=clock, lease_until=lease_until, wall=clock)


def test_completion_before_the_deadline_ends_without_abort():
    clock = Clock()
    backend = FakeBackend(clock, running_at=2, done_at=10)
    outcome = run(backend, clock, wait_timeout=60)
    assert outcome.settled and outcome.stopped_by is None and outcome.notes == []
    assert backend.aborts == [] and backend.runnings == 1 and backend.elapsed() == 10


def test_deadline_aborts_once_then_waits_for_the_end():
    clock = Clock()
    backend = FakeBackend(clock, running_at=1, abort_takes=5)
    outcome = run(backend, clock, wait_timeout=30)
    assert backend.aborts == [31.0], 'one abort, at the first look after wait_timeout'
    assert outcome.settled and outcome.stopped_by == 'wait_timeout (30 s) passed'
    assert outcome.notes == ['wait_timeout reached: the migration was aborted']
    assert backend.elapsed() == 36.0, 'the loop waits for the backend to report the end of the aborted migration'


def test_an_abort_that_never_ends_stops_after_the_grace_period():
    clock = Clock()
    backend = FakeBackend(clock, running_at=1, abort_takes=None)
    outcome = run(backend, clock, wait_timeout=10, abort_grace=20)
    assert not outcome.settled and backend.aborts == [11.0]
    assert outcome.notes[-1] == 'the migration did not end within 20 s of the abort'
    assert 31.0 < backend.elapsed() <= 33.0


def test_the_wait_timeout_has_a_floor_of_one_second():
    clock = Clock()
    backend = FakeBackend(clock, abort_takes=0)
    outcome = run(backend, clock, wait_timeout=0, poll_interval=0.25)
    assert backend.aborts == [1.25] and outcome.stopped_by == 'wait_timeout (0 s) passed'


def test_pending_timeout_aborts_a_migration_that_never_runs():
    clock = Clock()
    backend = FakeBackend(clock, running_at=None, abort_takes=0)
    outcome = run(backend, clock, wait_timeout=600, pending_timeout=20)
    assert backend.aborts == [21.0] and outcome.stopped_by == 'pending_timeout (20 s) passed'
    assert outcome.notes == ['pending_timeout reached: the migration was aborted']


def test_pending_timeout_does_not_apply_once_running():
    clock = Clock()
    backend = FakeBackend(clock, running_at=5, done_at=50)
    outcome = run(backend, clock, wait_timeout=600, pending_timeout=20)
    assert backend.aborts == [] and outcome.settled and outcome.stopped_by is None


def test_completion_timeout_counts_from_running_and_aborts():
    clock = Clock()
    backend = FakeBackend(clock, running_at=10, abort_takes=0)
    outcome = run(backend, clock, wait_timeout=600, completion_timeout=15)
    assert backend.completion_calls == 1 and backend.aborts == [26.0]
    assert outcome.stopped_by == 'completion_timeout (15 s) passed'
    assert outcome.notes == ['completion_timeout reached: the migration was aborted']


def test_completion_timeout_post_copy_goes_on_until_the_end():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, done_at=40, postcopy=True)
    outcome = run(backend, clock, wait_timeout=600, completion_timeout=15)
    assert backend.completion_calls == 1, 'the completion action runs once'
    assert backend.aborts == [] and outcome.settled and outcome.stopped_by is None
    assert outcome.notes == ['completion_timeout reached: switched to post-copy']


def test_post_copy_is_still_bounded_by_the_wait_timeout():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, postcopy=True, abort_takes=0)
    outcome = run(backend, clock, wait_timeout=30, completion_timeout=5)
    assert backend.aborts == [31.0] and outcome.stopped_by == 'wait_timeout (30 s) passed'


def test_an_abort_that_fails_is_a_note_and_the_loop_still_waits():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, abort_takes=None, abort_fails=True)
    outcome = run(backend, clock, wait_timeout=10, abort_grace=5)
    assert len(backend.aborts) == 1, 'never aborted twice'
    assert outcome.notes[0] == 'wait_timeout reached: the abort failed (the API said no); waited for the migration to end'
    assert not outcome.settled and outcome.stopped_by == 'wait_timeout (10 s) passed'


def test_an_abort_that_fails_but_the_migration_ends_is_settled():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, abort_takes=3, abort_fails=True)
    outcome = run(backend, clock, wait_timeout=10)
    assert outcome.settled and backend.elapsed() == 14.0


def test_lease_is_renewed_when_it_would_run_out_before_the_follow_ends():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, done_at=100)
    # a lease that ends in 30 s (the run that took it wrote a short one): renewed to cover the rest of the follow
    outcome = run(backend, clock, wait_timeout=600, lease_until=clock.now + 30)
    assert outcome.settled and outcome.renewals == 1 and len(backend.renewals) == 1
    at, seconds = backend.renewals[0]
    assert at == 0.0 and seconds == 600 + migrate.ABORT_GRACE_SECONDS + migrate.LEASE_MARGIN_SECONDS


def test_a_lease_covering_the_follow_is_not_renewed():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, done_at=100)
    outcome = run(backend, clock, wait_timeout=600, lease_until=clock.now + migrate.lease_seconds(600))
    assert outcome.renewals == 0 and backend.renewals == []


def test_a_backend_that_cannot_renew_is_asked_once():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, done_at=100, can_renew=False)
    outcome = run(backend, clock, wait_timeout=600, lease_until=clock.now + 10)
    assert outcome.renewals == 0 and len(backend.renewals) == 1


def test_no_lease_is_never_renewed():
    clock = Clock()
    backend = FakeBackend(clock, running_at=0, done_at=100)
    run(backend, clock, wait_timeout=600)
    assert backend.renewals == []


def test_no_answer_looks_again_and_the_deadline_still_applies():
    clock = Clock()

    class Silent(FakeBackend):
        def look(self):
            if not self.aborts:
                return None
            return migrate.Look('Failed', over=True)

    backend = Silent(clock)
    outcome = run(backend, clock, wait_timeout=5)
    assert backend.aborts == [6.0] and outcome.settled


def test_lease_seconds_covers_wait_and_completion_with_a_margin():
    assert migrate.lease_seconds(600) == 720.0
    assert migrate.lease_seconds(600, 300) == 1020.0


@pytest.mark.parametrize('hook', ['look', 'abort'])
def test_the_required_hooks_are_required(hook):
    with pytest.raises(NotImplementedError):
        getattr(migrate.FollowHooks(), hook)()


def test_a_failed_migration_ends_the_follow_without_an_abort():
    clock = Clock()

    class FailsWhileRunning(FakeBackend):
        def look(self):
            self.looks += 1
            if self.elapsed() >= 4:
                return migrate.Look('Failed', over=True)
            return migrate.Look('Running' if self.elapsed() >= 1 else 'Pending')

    backend = FailsWhileRunning(clock)
    outcome = run(backend, clock, wait_timeout=60, completion_timeout=30, pending_timeout=30)
    assert outcome.settled and outcome.stopped_by is None and outcome.notes == []
    assert backend.aborts == [] and backend.completion_calls == 0 and backend.elapsed() == 4.0


def test_both_backends_take_the_task_with_one_lease_formula():
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_backend as kmb
    from ansible_collections.converge.virt.plugins.module_utils._kubevirt import migration_options as kmo
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_backend as lmb
    from ansible_collections.converge.virt.plugins.module_utils._libvirt import migration_options
    assert lmb.task_lease_seconds is migrate.task_lease_seconds and kmb.task_lease_seconds is migrate.task_lease_seconds
    assert migrate.task_lease_seconds(migration_options.MigrationOptions(wait_timeout=100, completion_timeout=50)) == 100 + 50 + migrate.LEASE_MARGIN_SECONDS
    assert migrate.task_lease_seconds(kmo.KubevirtMigrationOptions(wait_timeout=100)) == 100 + migrate.LEASE_MARGIN_SECONDS


def test_state_cancelled_waits_for_the_end_at_most_wait_timeout_with_a_floor():
    clock = Clock()

    def sleep(seconds):
        clock.now += seconds

    calls = []
    assert migrate.wait_cancelled(lambda: calls.append(clock.now) or len(calls) == 3, 600, 2.0, clock=clock, sleep=sleep)
    assert len(calls) == 3 and clock.now == 1004.0, 'stops at the first look that sees the end'
    start = clock.now
    assert not migrate.wait_cancelled(lambda: False, 5, 1.0, clock=clock, sleep=sleep)
    assert clock.now - start == migrate.CANCEL_WAIT_FLOOR_SECONDS, 'a wait_timeout under the floor waits the floor'
    start = clock.now
    assert not migrate.wait_cancelled(lambda: False, 45, 1.0, clock=clock, sleep=sleep)
    assert clock.now - start == 45
