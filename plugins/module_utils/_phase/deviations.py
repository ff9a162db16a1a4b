# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the phase tables deliberately differ from their upstream sources, and why.

Every other rule of ``_phase`` agrees with the upstream code and its own test suites (the table tests of
``tests/unit/plugins/module_utils/_phase/test_upstream_*.py`` cite each upstream test). The rows here are the
exceptions: each names the upstream rule (with the test or code that pins it), what converge.virt does instead,
and the reason. ``docs/states.md`` lists them (generated, ``make docs``); a test names each row it pins.
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.converge.virt.plugins.module_utils._phase import status

Deviation = namedtuple('Deviation', ['key', 'area', 'upstream', 'ours', 'reason'])

DEVIATIONS = (
    Deviation(
        'crashed-unknown-reason', 'instance phase',
        'KubeVirt virt-handler calculateVmPhaseForStatusReason fails a crashed domain only for the reasons Crashed and '
        'Panicked; libvirt CRASHED with reason unknown keeps the previous phase.',
        'libvirt CRASHED with any reason is Failed.',
        'a CRASHED libvirt domain (on_crash=preserve) is a crash whatever reason libvirt gives; the libvirt view has no '
        'previous phase to keep, so keeping it would report a crashed guest as starting.'),
    Deviation(
        'destroyed-grace-unknown', 'instance phase',
        'KubeVirt isACPIEnabled reads the grace period from the VMI spec: a destroyed ACPI domain is Failed when the '
        'grace period is above zero, Succeeded when it is 0 (an immediate power-off).',
        'the same rule when the grace period is known (the libvirt record field stop_grace_period, or the view\'s '
        'grace_period argument); when it is not, KubeVirt\'s default (a grace period is set) applies and phase_reason '
        'says the phase is read, not known.',
        'a libvirt domain does not record how it was stopped; only the run that stopped it knows.'),
    Deviation(
        'host-unreachable', 'instance phase',
        'virt-handler has no rule for a node that cannot be asked (virt-controller fails such instances later).',
        'Unknown when the host cannot be asked at all.',
        'an unreachable libvirt host says nothing about its guests: Unknown is the honest word (KubeVirt\'s VMI phase '
        'Unknown means exactly that).'),
    Deviation(
        'datavolume-not-found', 'printable status',
        'KubeVirt removed the ErrorDataVolumeNotFound status (commit ef62cbfd13, "Support DV garbage collection", v0.56).',
        'kept at its old place (after ErrorPvcNotFound).',
        'KubeVirt before v0.56 (seed 000 describes v0.51) still sets Synchronized=False, FailedDataVolumeNotFound; '
        'newer ones never do, so the rule matches nothing there.'),
    Deviation(
        'rerun-set-to-start', 'printable status',
        'KubeVirt v1.8.0 isSetToStart counts a RerunOnFailure VM without an instance as set to start whatever its '
        'requests, so a stopped one whose claim is unbound reads WaitingForVolumeBinding (kubevirt/kubevirt issue '
        '#18424); fixed after v1.8.0 by PR #18787 (merged 2026-08-11: set to start only on a Start request or right '
        'after a switch to RerunOnFailure).',
        'the fixed rule: Stopped (a stopped RerunOnFailure VM never reads WaitingForVolumeBinding or Provisioning).',
        'virt-controller does not start such a VM (syncRunStrategy waits for a Start request in every version); the '
        'lab\'s v1.8.0 shows the old word, and tests/integration/test_kubevirt_real_controller.py counts that one '
        'settled disagreement by name.'),
    Deviation(
        'abort-handed-off-not-started', 'migration',
        'KubeVirt updateStatus: after the hand-off (PreparingTarget on) an abort only sets AbortRequested; the migration '
        'fails when the source reports it.',
        'the same while a transfer runs; handed off but with no transfer running, the abort fails the migration at once.',
        'there is nothing left to stop: libvirt has no job to cancel yet (virDomainAbortJob answers "no job"), so no '
        'answer from the source would ever come.'),
    Deviation(
        'draining-target', 'migration',
        'KubeVirt has no drain rule in the migration controller (seed 001, question 4: taint the node).',
        'a target host marked draining fails the migration before it runs (Failed: the target host is being drained).',
        'a host that is being evacuated must not receive guests again; once the transfer runs it is too late to refuse.'),
    Deviation(
        'reboot-substeps', 'task_state',
        'Nova task_states: REBOOTING, REBOOT_PENDING, REBOOT_STARTED (soft) and REBOOTING_HARD, REBOOT_PENDING_HARD, '
        'REBOOT_STARTED_HARD; ALLOW_REBOOT lists REBOOT_PENDING and REBOOT_STARTED.',
        'REBOOTING (soft) and REBOOTING_HARD (hard); the pending/started sub-steps are part of them.',
        'Nova\'s sub-steps mark the hand-over from the API to the compute host; one run of converge.virt does the whole '
        'task, so there is no hand-over to mark.'),
    Deviation(
        'task-words', 'task_state',
        'Nova: POWERING_ON (start), POWERING_OFF (stop), SOFT_DELETING (soft delete).',
        'STARTING, STOPPING and DELETING.',
        'a verb + "ing" for every task (seed 004); soft delete and delete both read Terminating.'),
    Deviation(
        'preempting-tasks', 'task lock',
        'Nova lets a hard reboot start while a soft reboot, resume, pause, unpause or suspend is in flight (ALLOW_REBOOT) '
        'and a soft delete start whatever the task_state.',
        'the action table accepts the same task_states, but the task lock (tasks.take_task) lets only delete preempt a '
        'task in flight: the others wait for it (or for its lease to run out).',
        'a task record lives with the VM and is taken by compare-and-swap; preempting it without a delete would let two '
        'runs act on one guest.'),
    Deviation(
        'power-sync-stop-recorded', 'power-state reconciliation',
        'Nova _sync_instance_power_state calls the stop API for an ACTIVE instance whose guest is off '
        '(test_sync_instance_power_state_to_stop).',
        'records STOPPED after reading the guest again (a fix declares stopped, which changes nothing on a guest that is off).',
        'the guest is already off; the stop call would only record it.'),
    Deviation(
        'stale-tasks', 'stale task recovery',
        'Nova _init_instance finishes an interrupted delete, sets ERROR for an interrupted build, and cleans or retries '
        'an interrupted power action by its task_state.',
        'an interrupted delete is only cleared (a record alone never deletes a VM); an interrupted build whose guest is '
        'plainly there and off is STOPPED; other tasks are cleared and the vm_state read off the hypervisor, and the '
        'user\'s declaration decides what happens next.',
        'the record lives with the VM and anybody who may write the VM may write it; the declaration, not the record, '
        'says what the VM should be.'),
    Deviation(
        'uncertain-attachments', 'volumes',
        'kubelet tears down a mount left uncertain by a timed-out operation once the pod is gone '
        '(reconciler_test.go Test_UncertainDeviceGlobalMounts, Test_UncertainVolumeMountState: one unmount).',
        'an attachment or volume that cannot be confirmed is left alone and reported as uncertain.',
        'unmounting is idempotent on a node; detaching a disk from a guest is not, and an unconfirmed attachment may '
        'belong to somebody else (phase model, section 8, rule 5).'),
)


def _rerun_set_to_start_upstream(inp: status.StatusInput) -> 'status.StatusInput | None':
    """KubeVirt v1.8.0's isSetToStart for a RerunOnFailure VM without an instance: set to start whatever its requests."""
    if inp.run_strategy == 'RerunOnFailure' and inp.instance is None and not inp.start_requested:
        return inp._replace(start_requested=True)
    return None


# The printable-status deviations whose disagreement with KubeVirt is settled (KubeVirt keeps its word, it never catches
# up with ours): the deviation's key -> the upstream rule, as the StatusInput KubeVirt's rule sees for the same facts
# (None when the rule does not differ for them).
SETTLED_STATUS_RULES = (('rerun-set-to-start', _rerun_set_to_start_upstream),)


def settled_disagreement(ours: 'str | None', theirs: 'str | None', inp: status.StatusInput) -> 'str | None':
    """The key of the printable-status deviation that explains KubeVirt's word ``theirs`` beside our ``ours`` for the
    :class:`status.StatusInput` ``inp``, or None.

    Only when ours is what our rules give for ``inp`` and KubeVirt's upstream rule gives exactly ``theirs`` for the same
    facts: any other disagreement may be KubeVirt not having caught up yet.
    """
    if ours == theirs or theirs is None or status.printable_status(inp) != ours:
        return None
    for key, upstream in SETTLED_STATUS_RULES:
        seen_upstream = upstream(inp)
        if seen_upstream is not None and status.printable_status(seen_upstream) == theirs:
            return key
    return None


def by_key(key: str) -> Deviation:
    """The :class:`Deviation` called ``key`` (KeyError when there is none)."""
    for row in DEVIATIONS:
        if row.key == key:
            return row
    raise KeyError(key)
