# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt's numeric domain (state, reason) as the words of the phase layer, and the power_state they mean.

``dom.state()`` answers numbers (virDomainState and its reason enums); the phase layer
(``_phase/states.py``) works on words. Pure: no libvirt import (the numbers are repeated
as data so that the tables can be tested without the binding installed).
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

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
    return s.power_state_from_domain(*libvirt_state_words(state, reason))
