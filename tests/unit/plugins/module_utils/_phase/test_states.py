# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""power_state and phase tables.

Sources: Nova nova/compute/power_state.py (seed 002: "BLOCKED ... RUNNING; SHUTOFF
... SHUTDOWN"); KubeVirt pkg/virt-handler/vm.go getVMIPhaseFromDomain (seed 000,
second table; its ACPI row is inverted, the upstream code is followed).
"""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

# (libvirt state, reason) -> (power_state, state word, reason word); one case per state.
POWER_CASES = [
    ((0, 0), ('NOSTATE', 'nostate', 'unknown')),
    ((1, 1), ('RUNNING', 'running', 'booted')),
    ((2, 0), ('RUNNING', 'blocked', 'unknown')),
    ((3, 5), ('PAUSED', 'paused', 'ioerror')),
    ((3, 2), ('PAUSED', 'paused', 'migration')),
    ((4, 1), ('SHUTDOWN', 'shutdown', 'user')),
    ((5, 2), ('SHUTDOWN', 'shutoff', 'destroyed')),
    ((5, 4), ('SHUTDOWN', 'shutoff', 'migrated')),
    ((6, 1), ('CRASHED', 'crashed', 'panicked')),
    ((7, 0), ('SUSPENDED', 'pmsuspended', 'unknown')),
    (('running', 'booted'), ('RUNNING', 'running', 'booted')),
    ((99, 99), ('NOSTATE', 'nostate', 'unknown')),
]


@pytest.mark.parametrize('pair,expected', POWER_CASES)
def test_power_state_from_libvirt(pair, expected):
    assert tuple(s.power_state_from_libvirt(*pair)) == expected


def test_every_libvirt_state_has_a_power_state_case():
    covered = {expected[1] for _pair, expected in POWER_CASES}
    assert covered >= set(s.LIBVIRT_STATES.values())


# (state, reason, acpi, previous) -> phase: one case per row of DOMAIN_PHASE_TABLE.
PHASE_CASES = [
    ((5, 3, True, 'Running'), 'Failed'),           # shutoff crashed
    ((6, 1, True, 'Running'), 'Failed'),           # crashed panicked
    ((6, 0, False, 'Running'), 'Failed'),          # crashed, unknown reason
    ((5, 2, True, 'Running'), 'Failed'),           # destroyed, ACPI on: grace period ran out
    ((5, 2, False, 'Running'), 'Succeeded'),       # destroyed, no ACPI
    ((5, 1, True, 'Running'), 'Succeeded'),        # shutdown
    ((5, 5, True, 'Running'), 'Succeeded'),        # saved
    ((5, 7, True, 'Running'), 'Succeeded'),        # from snapshot
    ((5, 4, True, 'Running'), 'Running'),          # migrated: previous kept
    ((5, 4, True, 'Succeeded'), 'Succeeded'),
    ((3, 13, True, 'Running'), 'Failed'),          # paused, post-copy failed
    ((1, 1, True, ''), 'Running'),
    ((2, 0, True, ''), 'Running'),
    ((3, 1, True, ''), 'Running'),                 # paused by the user
    ((7, 0, True, ''), 'Running'),
    ((5, 0, True, 'Scheduled'), 'Scheduled'),      # shutoff, unknown reason: unchanged
    ((5, 6, True, 'Running'), 'Running'),          # shutoff failed: not in the table, unchanged
]


@pytest.mark.parametrize('args,expected', PHASE_CASES)
def test_phase_from_domain(args, expected):
    state, reason, acpi, previous = args
    assert s.phase_from_domain(state, reason, acpi=acpi, previous=previous) == expected


def test_phase_table_rows_each_have_a_case():
    # every row of the table must be the first match for at least one case
    hit = set()
    for (state, reason, acpi, _previous), _expected in PHASE_CASES:
        sw, rw = s.libvirt_state_words(state, reason)
        for index, ((row_state, row_reason), row_acpi, _phase) in enumerate(s.DOMAIN_PHASE_TABLE):
            if row_state == sw and row_reason in (None, rw) and row_acpi in (None, acpi):
                hit.add(index)
                break
    assert hit == set(range(len(s.DOMAIN_PHASE_TABLE)))


@pytest.mark.parametrize('kwargs,expected', [
    ({'host_reachable': False}, 'Unknown'),
    ({'host_reachable': True, 'launcher_present': False}, 'Failed'),
    ({'host_reachable': True, 'final': True, 'previous': 'Succeeded'}, 'Succeeded'),
    ({'host_reachable': True}, 'Scheduled'),
])
def test_phase_without_domain(kwargs, expected):
    assert s.phase_without_domain(**kwargs) == expected


@pytest.mark.parametrize('args,kwargs,expected', [
    (('',), {}, 'Pending'),
    (('Pending',), {'launcher_exists': True}, 'Scheduling'),
    (('',), {'deletion_requested': True}, 'Failed'),
    (('Scheduling',), {'launcher_ready': True}, 'Scheduled'),
    (('Scheduling',), {'launcher_ready': True, 'image_pull_error': True}, 'Scheduling'),
    (('Scheduling',), {'launcher_ready': True, 'sync_failed': True}, 'Scheduling'),
    (('Scheduling',), {'launcher_failed': True}, 'Failed'),
    (('Succeeded',), {'launcher_failed': True}, 'Succeeded'),
])
def test_phase_before_domain(args, kwargs, expected):
    assert s.phase_before_domain(*args, **kwargs) == expected


@pytest.mark.parametrize('power,managed,expected', [
    ('RUNNING', False, 'ACTIVE'), ('PAUSED', False, 'PAUSED'), ('SHUTDOWN', False, 'STOPPED'),
    ('SHUTDOWN', True, 'SUSPENDED'), ('CRASHED', False, 'ERROR'), ('SUSPENDED', False, 'ACTIVE'), ('NOSTATE', False, 'ERROR'),
])
def test_infer_vm_state(power, managed, expected):
    assert s.infer_vm_state(power, managed) == expected
