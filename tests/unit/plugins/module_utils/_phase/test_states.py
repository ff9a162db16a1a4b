# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""power_state and phase tables.

Sources: Nova nova/compute/power_state.py (seed 002: "BLOCKED ... RUNNING; SHUTOFF ... SHUTDOWN"); libvirt's
virDomainState and its reason enums (include/libvirt/libvirt-domain.h, checked against the Python binding); KubeVirt
pkg/virt-handler/vm.go calculateVmPhaseForStatusReason (seed 000, second table; its ACPI row is inverted, the upstream
code is followed). KubeVirt's own test cases are in test_upstream_kubevirt.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_state as ds
from ansible_collections.converge.virt.plugins.module_utils._phase import states as s

# reasons newer than the libvirt binding the tests may run with (libvirt-domain.h)
NEWER_LIBVIRT = {'VIR_DOMAIN_PAUSED_API_ERROR': 14}


def fresh(word):
    """The same text in a new string object (words read from the outside world are never the module's constants)."""
    return ''.join(list(word))


def test_state_words():
    assert s.POWER_STATES == ('NOSTATE', 'RUNNING', 'PAUSED', 'SHUTDOWN', 'CRASHED', 'SUSPENDED')
    assert s.VM_STATES == ('ACTIVE', 'BUILDING', 'INITIALIZED', 'STOPPED', 'PAUSED', 'SUSPENDED', 'RESCUED', 'RESIZED', 'SOFT_DELETED',
                           'DELETED', 'ERROR')
    assert s.TASK_STATES == ('SPAWNING', 'STARTING', 'STOPPING', 'REBOOTING', 'REBOOTING_HARD', 'PAUSING', 'UNPAUSING', 'SUSPENDING',
                             'RESUMING', 'MIGRATING', 'RESIZING', 'UPDATING', 'DELETING', 'RESTORING', 'REBUILDING')
    assert s.PHASES == ('', 'Pending', 'Scheduling', 'Scheduled', 'Running', 'Succeeded', 'Failed', 'Unknown', 'WaitingForSync')
    assert s.FINAL_PHASES == ('Succeeded', 'Failed')


def test_libvirt_numbers_are_libvirts():
    libvirt = pytest.importorskip('libvirt')
    assert ds.LIBVIRT_STATES == dict((getattr(libvirt, 'VIR_DOMAIN_' + w.upper()), w) for w in ds.LIBVIRT_STATES.values())
    assert set(ds.LIBVIRT_REASONS) == set(ds.LIBVIRT_STATES.values())
    assert sorted(ds.LIBVIRT_STATES) == list(range(8))
    for state, reasons in ds.LIBVIRT_REASONS.items():
        # libvirt numbers each state's reasons from 0 without a gap: none is lost or doubled
        assert sorted(reasons) == list(range(len(reasons))), state
        assert reasons[0] == 'unknown' and len(set(reasons.values())) == len(reasons)
        for number, reason in reasons.items():
            name = 'VIR_DOMAIN_%s_%s' % (state.upper(), reason.upper())
            assert getattr(libvirt, name, NEWER_LIBVIRT.get(name)) == number, name


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
    (('paused', None), ('PAUSED', 'paused', 'unknown')),
    (('paused', ''), ('PAUSED', 'paused', 'unknown')),
    (('bogus', 'x'), ('NOSTATE', 'bogus', 'x')),
    ((99, 99), ('NOSTATE', 'nostate', 'unknown')),
    ((1, 99), ('RUNNING', 'running', 'unknown')),
    ((-1, 0), ('NOSTATE', 'nostate', 'unknown')),
]


@pytest.mark.parametrize('pair,expected', POWER_CASES)
def test_power_state_from_libvirt(pair, expected):
    assert tuple(ds.power_state_from_libvirt(*pair)) == expected


def test_every_libvirt_state_has_a_power_state_case():
    covered = {expected[1] for _pair, expected in POWER_CASES}
    assert covered >= set(ds.LIBVIRT_STATES.values())
    assert ds.POWER_STATE_OF_DOMAIN_STATE == {'nostate': 'NOSTATE', 'running': 'RUNNING', 'blocked': 'RUNNING', 'paused': 'PAUSED',
                                              'shutdown': 'SHUTDOWN', 'shutoff': 'SHUTDOWN', 'crashed': 'CRASHED', 'pmsuspended': 'SUSPENDED'}


def test_reason_default_and_words():
    assert ds.power_state_from_libvirt(5) == ('SHUTDOWN', 'shutoff', 'unknown')
    assert ds.libvirt_state_words(5, 2) == ('shutoff', 'destroyed')
    assert ds.libvirt_state_words(fresh('shutoff'), fresh('destroyed')) == ('shutoff', 'destroyed')
    assert ds.libvirt_state_words('shutoff', 3) == ('shutoff', 'crashed')
    assert ds.libvirt_state_words(True, 0) == ('running', 'unknown')     # a bool is an int to Python, and to libvirt


def test_the_phase_layer_reads_words_only():
    # numbers are the backend's to translate (the libvirt backend: _libvirt/domain_state.py); here they are no state word
    assert ds.power_state_from_domain('shutoff', None) == ('SHUTDOWN', 'shutoff', 'unknown')
    assert ds.power_state_from_domain(fresh('crashed'), fresh('panicked')) == ('CRASHED', 'crashed', 'panicked')
    assert ds.power_state_from_domain(5, 2) == ('NOSTATE', '5', '2')
    assert ds.phase_from_domain(5, 2, previous='Running') == 'Running'
    assert ds.domain_phase_reason(5, 2) is None


# (state, reason, acpi, grace period, previous) -> phase: every row of DOMAIN_PHASE_TABLE, and the rows around it
PHASE_CASES = [
    ((5, 3, True, None, 'Running'), 'Failed'),         # shutoff crashed
    ((5, 3, False, 0, 'Running'), 'Failed'),
    ((6, 1, True, None, 'Running'), 'Failed'),         # crashed panicked
    ((6, 0, False, None, 'Running'), 'Failed'),        # crashed, unknown reason (deviation: KubeVirt keeps the phase)
    ((5, 2, True, None, 'Running'), 'Failed'),         # destroyed, ACPI, grace period not known: KubeVirt's default one
    ((5, 2, True, 1, 'Running'), 'Failed'),            # destroyed, ACPI, grace period: the graceful stop ran out of time
    ((5, 2, True, 0, 'Running'), 'Succeeded'),         # destroyed, ACPI, no grace period: an immediate power-off
    ((5, 2, False, None, 'Running'), 'Succeeded'),     # destroyed, no ACPI
    ((5, 2, False, 30, 'Running'), 'Succeeded'),
    ((5, 1, True, None, 'Running'), 'Succeeded'),      # shutdown
    ((5, 5, True, None, 'Running'), 'Succeeded'),      # saved
    ((5, 7, True, None, 'Running'), 'Succeeded'),      # from snapshot
    ((5, 4, True, None, 'Running'), 'Running'),        # migrated: previous kept
    ((5, 4, True, None, 'Succeeded'), 'Succeeded'),
    ((3, 13, True, None, 'Running'), 'Failed'),        # paused, post-copy failed
    ((1, 1, True, None, ''), 'Running'),
    ((2, 0, True, None, ''), 'Running'),
    ((3, 1, True, None, ''), 'Running'),               # paused by the user
    ((3, 12, True, None, ''), 'Running'),              # paused, post-copy running
    ((7, 0, True, None, ''), 'Running'),
    ((5, 0, True, None, 'Scheduled'), 'Scheduled'),    # shutoff, unknown reason: unchanged
    ((5, 6, True, None, 'Running'), 'Running'),        # shutoff failed: not in the table, unchanged
    ((4, 1, True, None, 'Running'), 'Running'),        # shutting down: unchanged
    ((0, 0, True, None, 'Pending'), 'Pending'),        # nostate: unchanged
]


@pytest.mark.parametrize('args,expected', PHASE_CASES)
def test_phase_from_domain(args, expected):
    state, reason, acpi, grace, previous = args
    assert ds.phase_from_domain(*ds.libvirt_state_words(state, reason), acpi=acpi, previous=previous, grace_period=grace) == expected


def test_phase_from_domain_defaults_and_outside_words():
    assert ds.phase_from_domain('shutoff', 'destroyed') == 'Failed'      # ACPI on and the grace period not known
    assert ds.phase_from_domain('shutoff') == ''                         # shutoff, unknown reason, no previous phase
    assert ds.phase_from_domain(fresh('shutoff'), fresh('destroyed'), acpi=1, grace_period=0.0) == 'Succeeded'
    assert ds.phase_from_domain(fresh('crashed'), fresh('whatever')) == 'Failed'


def test_phase_table_rows_each_have_a_case():
    # every row of the table must be the first match for at least one case
    hit = set()
    for (state, reason, acpi, grace, _previous), _expected in PHASE_CASES:
        sw, rw = ds.libvirt_state_words(state, reason)
        tried = s.graceful_stop_tried(acpi, grace)
        for index, ((row_state, row_reason), row_tried, _phase, _why) in enumerate(ds.DOMAIN_PHASE_TABLE):
            if row_state == sw and row_reason in (None, rw) and row_tried in (None, tried):
                hit.add(index)
                break
    assert hit == set(range(len(ds.DOMAIN_PHASE_TABLE)))


@pytest.mark.parametrize('acpi, grace, tried', [
    (True, None, True), (True, 30, True), (True, 0.5, True), (True, 0, False), (True, -1, False), (False, None, False),
    (False, 30, False), (1, None, True), (0, 30, False), (None, None, False),
])
def test_graceful_stop_tried_as_is_acpi_enabled(acpi, grace, tried):
    assert s.graceful_stop_tried(acpi, grace) is tried
    assert s.graceful_stop_tried(acpi) is bool(acpi)


@pytest.mark.parametrize('args, reason', [
    ((5, 2, True, 60), 'forced off (destroyed) after a graceful shutdown (ACPI) did not finish within the grace period'),
    ((5, 2, True, None), ds.DESTROYED_GRACE_UNKNOWN),
    ((5, 2, True, 0), 'powered off at once: no graceful shutdown was asked for (no ACPI or no grace period)'),
    ((5, 2, False, None), 'powered off at once: no graceful shutdown was asked for (no ACPI or no grace period)'),
    ((5, 3, True, None), 'the guest crashed'),
    ((6, 0, True, None), 'the guest crashed'),
    ((5, 1, True, None), 'the guest shut down'),
    ((5, 5, True, None), 'the guest state was saved to disk'),
    ((5, 7, True, None), 'stopped by reverting to a snapshot'),
    ((5, 4, True, None), 'the domain migrated away: the phase is the one it had'),
    ((3, 13, True, None), 'a post-copy migration failed: the guest cannot be recovered'),
    ((1, 1, True, None), None),
    ((5, 0, True, None), None),
    ((4, 1, True, None), None),
])
def test_domain_phase_reason(args, reason):
    state, why, acpi, grace = args
    assert ds.domain_phase_reason(*ds.libvirt_state_words(state, why), acpi=acpi, grace_period=grace) == reason


def test_domain_phase_reason_defaults():
    assert ds.domain_phase_reason('shutoff') is None
    assert ds.domain_phase_reason('shutoff', 'destroyed') == ds.DESTROYED_GRACE_UNKNOWN
    assert 'read as a graceful shutdown that did not finish in time' in ds.DESTROYED_GRACE_UNKNOWN


@pytest.mark.parametrize('kwargs,expected', [
    ({'host_reachable': False}, 'Unknown'),
    ({'host_reachable': False, 'previous': 'Running', 'launcher_present': False}, 'Unknown'),
    ({'host_reachable': True, 'launcher_present': False, 'previous': 'Running'}, 'Failed'),
    ({'host_reachable': True, 'launcher_present': False, 'previous': 'Scheduled'}, 'Failed'),
    ({'host_reachable': True, 'launcher_present': True, 'previous': 'Running'}, 'Running'),
    ({'host_reachable': True, 'launcher_present': True, 'previous': 'Scheduled'}, 'Scheduled'),
    ({'host_reachable': True, 'launcher_present': False, 'previous': 'Pending'}, 'Scheduled'),
    ({'host_reachable': True, 'final': True, 'previous': 'Succeeded'}, 'Succeeded'),
    ({'host_reachable': True, 'previous': 'Failed'}, 'Failed'),
    ({'host_reachable': True, 'final': True}, ''),
    ({'host_reachable': True}, 'Scheduled'),
    ({'host_reachable': True, 'previous': 'Unknown'}, 'Scheduled'),
])
def test_phase_without_domain(kwargs, expected):
    if 'previous' in kwargs:
        kwargs = dict(kwargs, previous=fresh(kwargs['previous']))
    assert s.phase_without_domain(**kwargs) == expected


@pytest.mark.parametrize('phase, final', [('Succeeded', True), ('Failed', True), ('Running', False), ('', False), ('Unknown', False)])
def test_is_final(phase, final):
    assert s.is_final(fresh(phase)) is final


@pytest.mark.parametrize('power,managed,expected', [
    ('RUNNING', False, 'ACTIVE'), ('PAUSED', False, 'PAUSED'), ('SHUTDOWN', False, 'STOPPED'),
    ('SHUTDOWN', True, 'SUSPENDED'), ('CRASHED', False, 'ERROR'), ('SUSPENDED', False, 'ACTIVE'), ('NOSTATE', False, 'ERROR'),
    ('RUNNING', True, 'ACTIVE'), ('CRASHED', True, 'ERROR'), ('BOGUS', False, 'ERROR'), ('SUSPENDED', True, 'ACTIVE'),
])
def test_infer_vm_state(power, managed, expected):
    assert s.infer_vm_state(fresh(power), managed) == expected
    if not managed:
        assert s.infer_vm_state(power) == expected


def test_phase_without_domain_defaults():
    assert s.phase_without_domain(True, previous='Running') == 'Running'      # the launcher is taken as present
    assert s.phase_without_domain(True) == 'Scheduled'


def test_phase_without_domain_final_flag():
    assert s.phase_without_domain(True, launcher_present=True, final=True, previous='Running') == 'Running'
