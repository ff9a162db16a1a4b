# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt's domain (state, reason) onto the neutral words of the phase layer: power_state and the instance phase.

``dom.state()`` answers numbers (virDomainState and its reason enums): :func:`libvirt_state_words` turns them into
words, and the tables here turn the words into the neutral records of ``_phase/states.py`` (``PowerObservation``, the
phase words), which know no domain word. Pure: no libvirt import (the numbers are repeated as data so that the tables
can be tested without the binding installed).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

# ---------------------------------------------------- domain states, as words, onto the neutral phase words
# A domain's state and reason as words: libvirt's virDomainState names (running, shutoff, ...) and their
# reasons (booted, destroyed, ...). The tables below turn them into the neutral records of _phase/states.py
# (PowerObservation, the phase words); _phase itself knows no domain word.

# Nova power_state.py: BLOCKED is RUNNING, SHUTDOWN (shutting down) and SHUTOFF
# are SHUTDOWN, PMSUSPENDED is SUSPENDED, FAILED/unknown is NOSTATE.
POWER_STATE_OF_DOMAIN_STATE = {
    'nostate': s.NOSTATE,
    'running': s.RUNNING,
    'blocked': s.RUNNING,
    'paused': s.PAUSED,
    'shutdown': s.SHUTDOWN,
    'shutoff': s.SHUTDOWN,
    'crashed': s.CRASHED,
    'pmsuspended': s.SUSPENDED,
}


def domain_state_words(state, reason=None):
    """A domain's (state, reason) as words: ``reason`` None or empty is 'unknown'."""
    return str(state), str(reason or 'unknown')


def power_state_from_domain(state, reason=None):
    """power_state from a domain's (state word, reason word), keeping the reason.

    Returns a :class:`.._phase.states.PowerObservation` (power_state, state word, reason word);
    a state word the Nova table does not name is NOSTATE.
    """
    state_word, reason_word = domain_state_words(state, reason)
    return s.PowerObservation(POWER_STATE_OF_DOMAIN_STATE.get(state_word, s.NOSTATE), state_word, reason_word)


# (state word, reason word or None for "any other"), graceful stop tried (True / False / None for
# "either"), phase (None: unchanged, keep the previous phase), why (shown as phase_reason). Order matters:
# the first matching row wins. KubeVirt virt-handler calculateVmPhaseForStatusReason (pkg/virt-handler/vm.go).
DOMAIN_PHASE_TABLE = (
    (('shutoff', 'crashed'), None, s.FAILED, 'the guest crashed'),
    # libvirt's CRASHED state (reason panicked or unknown) is a crash whatever the reason; KubeVirt fails only
    # the reasons it names (Crashed, Panicked) and keeps the phase for crashed/unknown (deviation, see docs).
    (('crashed', None), None, s.FAILED, 'the guest crashed'),
    (('shutoff', 'destroyed'), True, s.FAILED,
     'forced off (destroyed) after a graceful shutdown (ACPI) did not finish within the grace period'),
    (('shutoff', 'destroyed'), False, s.SUCCEEDED, 'powered off at once: no graceful shutdown was asked for (no ACPI or no grace period)'),
    (('shutoff', 'shutdown'), None, s.SUCCEEDED, 'the guest shut down'),
    (('shutoff', 'saved'), None, s.SUCCEEDED, 'the guest state was saved to disk'),
    (('shutoff', 'from_snapshot'), None, s.SUCCEEDED, 'stopped by reverting to a snapshot'),
    (('shutoff', 'migrated'), None, None, 'the domain migrated away: the phase is the one it had'),
    (('paused', 'postcopy_failed'), None, s.FAILED, 'a post-copy migration failed: the guest cannot be recovered'),
    (('running', None), None, s.PHASE_RUNNING, None),
    (('blocked', None), None, s.PHASE_RUNNING, None),
    (('paused', None), None, s.PHASE_RUNNING, None),
    (('pmsuspended', None), None, s.PHASE_RUNNING, None),
)

# The reason shown while the graceful-stop attempt is not known (a destroyed ACPI domain whose record does not say
# how it was stopped): KubeVirt's default (a grace period is set) reads it as Failed.
DESTROYED_GRACE_UNKNOWN = ('forced off (destroyed) while ACPI was available: read as a graceful shutdown that did not finish in '
                           'time (KubeVirt\'s rule when the grace period is not known)')


def _domain_row(state, reason, acpi, grace_period):
    state_word, reason_word = domain_state_words(state, reason)
    tried = s.graceful_stop_tried(acpi, grace_period)
    for row in DOMAIN_PHASE_TABLE:
        (row_state, row_reason), row_tried = row[0], row[1]
        if row_state == state_word and row_reason in (None, reason_word) and row_tried in (None, tried):
            return row
    return None


def phase_from_domain(state, reason=None, acpi=True, previous=s.PHASE_UNSET, grace_period=None):
    """VMI phase from a domain's (state, reason), grace-period aware (KubeVirt calculateVmPhaseForStatusReason).

    A domain destroyed after a graceful shutdown was tried (ACPI and a grace period above zero) means the grace
    period ran out: Failed. With no graceful attempt (no ACPI, or ``grace_period`` 0: an immediate power-off)
    destroy is the normal way to stop: Succeeded. A migrated-away domain keeps ``previous``; so do states and
    reasons the table does not name, as virt-handler does.
    """
    row = _domain_row(state, reason, acpi, grace_period)
    if row is None or row[2] is None:
        return previous
    return row[2]


def domain_phase_reason(state, reason=None, acpi=True, grace_period=None):
    """Why :func:`phase_from_domain` gives its phase, in words (None for a live domain or an unnamed state).

    For a destroyed ACPI domain whose grace period is not known the reason says that the phase is read, not known.
    """
    row = _domain_row(state, reason, acpi, grace_period)
    if row is None:
        return None
    if row[2] == s.FAILED and row[0] == ('shutoff', 'destroyed') and grace_period is None:
        return DESTROYED_GRACE_UNKNOWN
    return row[3]


# virDomainState
LIBVIRT_STATES = {
    0: 'nostate', 1: 'running', 2: 'blocked', 3: 'paused', 4: 'shutdown', 5: 'shutoff', 6: 'crashed', 7: 'pmsuspended',
}
# Reasons per state (virDomainRunningReason, virDomainPausedReason, ...).
LIBVIRT_REASONS = {
    'nostate': {0: 'unknown'},
    'running': {
        0: 'unknown', 1: 'booted', 2: 'migrated', 3: 'restored', 4: 'from_snapshot', 5: 'unpaused',
        6: 'migration_canceled', 7: 'save_canceled', 8: 'wakeup', 9: 'crashed', 10: 'postcopy', 11: 'postcopy_failed',
    },
    'blocked': {0: 'unknown'},
    'paused': {
        0: 'unknown', 1: 'user', 2: 'migration', 3: 'save', 4: 'dump', 5: 'ioerror', 6: 'watchdog', 7: 'from_snapshot',
        8: 'shutting_down', 9: 'snapshot', 10: 'crashed', 11: 'starting_up', 12: 'postcopy', 13: 'postcopy_failed',
        14: 'api_error',
    },
    'shutdown': {0: 'unknown', 1: 'user'},
    'shutoff': {
        0: 'unknown', 1: 'shutdown', 2: 'destroyed', 3: 'crashed', 4: 'migrated', 5: 'saved', 6: 'failed',
        7: 'from_snapshot', 8: 'daemon',
    },
    'crashed': {0: 'unknown', 1: 'panicked'},
    'pmsuspended': {0: 'unknown'},
}


def libvirt_state_words(state, reason):
    """Turn libvirt's numeric (state, reason) into words, e.g. (5, 2) -> ('shutoff', 'destroyed').

    Unknown numbers become 'nostate' / 'unknown' rather than raising: a newer
    libvirt may add reasons, and observation must never fail on them.
    """
    state_word = LIBVIRT_STATES.get(state, 'nostate') if isinstance(state, int) else str(state)
    reasons = LIBVIRT_REASONS.get(state_word, {})
    reason_word = reasons.get(reason, 'unknown') if isinstance(reason, int) else str(reason or 'unknown')
    return state_word, reason_word


def power_state_from_libvirt(state, reason=0):
    """power_state from a libvirt (state, reason) pair, keeping the reason.

    ``state`` and ``reason`` may be libvirt's integers or the words of
    :data:`LIBVIRT_STATES` / :data:`LIBVIRT_REASONS`. Returns a
    :class:`.._phase.states.PowerObservation` (power_state, state word, reason word).
    """
    return power_state_from_domain(*libvirt_state_words(state, reason))
