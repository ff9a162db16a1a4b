# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The printable status: one word a person reads.

Source: KubeVirt ``pkg/virt-controller/watch/vm.go`` ``setPrintableStatus`` and
its ``isVirtualMachineStatus*`` predicates (seed 000, first table). The rules
are evaluated in order and the first match wins; :data:`STATUS_RULES` is that
order, as data. The same function serves libvirt: a domain maps onto the
instance, a storage volume onto a claim, a pool refresh onto provisioning.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from ansible_collections.converge.virt.plugins.module_utils._phase import states

TERMINATING = 'Terminating'
STOPPING = 'Stopping'
MIGRATING = 'Migrating'
PAUSED = 'Paused'
RUNNING = 'Running'
ERROR_PVC_NOT_FOUND = 'ErrorPvcNotFound'
ERROR_DATA_VOLUME_NOT_FOUND = 'ErrorDataVolumeNotFound'
DATA_VOLUME_ERROR = 'DataVolumeError'
ERROR_UNSCHEDULABLE = 'ErrorUnschedulable'
PROVISIONING = 'Provisioning'
WAITING_FOR_VOLUME_BINDING = 'WaitingForVolumeBinding'
ERR_IMAGE_PULL = 'ErrImagePull'
IMAGE_PULL_BACK_OFF = 'ImagePullBackOff'
STARTING = 'Starting'
CRASH_LOOP_BACK_OFF = 'CrashLoopBackOff'
STOPPED = 'Stopped'
WAITING_FOR_RECEIVER = 'WaitingForReceiver'
UNKNOWN = 'Unknown'

# Synchronized=False reasons (KubeVirt pkg/controller: FailedPvcNotFoundReason, ...).
REASON_PVC_NOT_FOUND = 'FailedPvcNotFound'
REASON_DATA_VOLUME_NOT_FOUND = 'FailedDataVolumeNotFound'
REASON_ERR_IMAGE_PULL = 'ErrImagePull'
REASON_IMAGE_PULL_BACK_OFF = 'ImagePullBackOff'

RUN_STRATEGIES = ('Always', 'Halted', 'Manual', 'RerunOnFailure', 'Once', 'WaitAsReceiver')
CRASH_LOOP_RUN_STRATEGIES = ('Always', 'RerunOnFailure', 'Once')

# DataVolume phases that are not provisioning (KubeVirt storagetypes.HasDataVolumeProvisioning): done, or
# waiting for a populator; WaitForFirstConsumer is not provisioning either while its claim is unbound.
DV_DONE_PHASES = ('Succeeded', 'PendingPopulation')
DV_WAIT_FOR_FIRST_CONSUMER = 'WaitForFirstConsumer'
DV_FAILED = 'Failed'


class InstanceView(NamedTuple):
    """What the status rules need of the instance (VMI, or a libvirt domain)."""

    phase: str = states.PHASE_UNSET
    marked_for_deletion: bool = False
    paused: bool = False
    migrating: bool = False


class DataVolumeView(NamedTuple):
    """A referenced DataVolume (or, on libvirt, a volume being provisioned)."""

    phase: str = ''
    running_error: bool = False  # condition Running=False with an error reason
    bound: bool = False          # condition Bound=True: its claim is bound


class StatusInput(NamedTuple):
    """Everything the printable status is computed from. Every field has a safe default."""

    deletion_requested: bool = False
    instance: Optional[InstanceView] = None
    start_expected: bool = False      # an instance is about to be created (KubeVirt isVMIStartExpected: a create in flight)
    stop_expected: bool = False
    synchronized_false_reason: Optional[str] = None
    pod_unschedulable: bool = False
    datavolumes: Tuple[DataVolumeView, ...] = ()
    unbound_claims: bool = False
    start_failures: int = 0
    run_strategy: str = 'Manual'
    start_requested: bool = False     # a Start request is pending (KubeVirt stateChangeRequests), or a strategy just switched on
    stop_requested: bool = False      # a Stop request for the live instance is pending


def _instance_final(inp: StatusInput) -> bool:
    return inp.instance is not None and states.is_final(inp.instance.phase)


def _set_to_start(inp: StatusInput) -> bool:
    """KubeVirt isSetToStart: whether the run strategy wants the VM to run.

    RerunOnFailure without an instance: set to start on a Start request (or right after a switch to RerunOnFailure,
    which the backends fold into ``start_requested``), as syncRunStrategy starts it. KubeVirt up to v1.8.0 counts it
    set to start whatever the requests (deviation ``rerun-set-to-start``).
    """
    instance = inp.instance
    if inp.run_strategy == 'Always':
        return True
    if inp.run_strategy == 'Manual':
        return not inp.stop_requested if instance is not None else inp.start_requested
    if inp.run_strategy == 'RerunOnFailure':
        return instance.phase != states.SUCCEEDED if instance is not None else inp.start_requested
    if inp.run_strategy == 'Once':
        return instance is None
    return False     # Halted, WaitAsReceiver and unknown strategies


def is_terminating(inp: StatusInput) -> bool:
    """1. Deletion requested on the VM."""
    return inp.deletion_requested


def is_stopping(inp: StatusInput) -> bool:
    """2. Instance not final and (marked for deletion or a stop is expected)."""
    return inp.instance is not None and not _instance_final(inp) and (inp.instance.marked_for_deletion or inp.stop_expected)


def is_migrating(inp: StatusInput) -> bool:
    """3. A migration has started and not ended."""
    return inp.instance is not None and inp.instance.migrating


def is_paused(inp: StatusInput) -> bool:
    """4. Instance Running with a Paused condition."""
    return inp.instance is not None and inp.instance.phase == states.PHASE_RUNNING and inp.instance.paused


def is_running(inp: StatusInput) -> bool:
    """5. Instance Running."""
    return inp.instance is not None and inp.instance.phase == states.PHASE_RUNNING


def is_pvc_not_found(inp: StatusInput) -> bool:
    """6. Synchronized=False with reason FailedPvcNotFound."""
    return inp.synchronized_false_reason == REASON_PVC_NOT_FOUND


def is_data_volume_not_found(inp: StatusInput) -> bool:
    """6b. Synchronized=False with reason FailedDataVolumeNotFound."""
    return inp.synchronized_false_reason == REASON_DATA_VOLUME_NOT_FOUND


def is_data_volume_error(inp: StatusInput) -> bool:
    """7. Any referenced DataVolume Failed, or its Running condition False with an error."""
    return any(dv.phase == DV_FAILED or dv.running_error for dv in inp.datavolumes)


def is_unschedulable(inp: StatusInput) -> bool:
    """8. PodScheduled=False with reason Unschedulable."""
    return inp.pod_unschedulable


def is_provisioning(inp: StatusInput) -> bool:
    """9. A DataVolume is still being provisioned (not Succeeded or PendingPopulation; WaitForFirstConsumer only once bound)."""
    return any(dv.phase not in DV_DONE_PHASES and (dv.bound or dv.phase != DV_WAIT_FOR_FIRST_CONSUMER) for dv in inp.datavolumes)


def is_waiting_for_volume_binding(inp: StatusInput) -> bool:
    """10. Set to start (by its run strategy) and a claim is unbound."""
    return _set_to_start(inp) and inp.unbound_claims


def is_err_image_pull(inp: StatusInput) -> bool:
    """11. Synchronized=False with reason ErrImagePull."""
    return inp.synchronized_false_reason == REASON_ERR_IMAGE_PULL


def is_image_pull_back_off(inp: StatusInput) -> bool:
    """12. Synchronized=False with reason ImagePullBackOff."""
    return inp.synchronized_false_reason == REASON_IMAGE_PULL_BACK_OFF


def is_starting(inp: StatusInput) -> bool:
    """13. A start is expected and no instance yet, or the instance is unprocessed/scheduling/scheduled."""
    if inp.instance is None:
        return inp.start_expected
    return inp.instance.phase in (states.PHASE_UNSET, states.PENDING, states.SCHEDULING, states.SCHEDULED)


def is_crash_loop_back_off(inp: StatusInput) -> bool:
    """14. No live instance, no start expected, start failures > 0, run strategy Always/RerunOnFailure/Once."""
    if inp.instance is not None and not _instance_final(inp):
        return False
    if inp.start_expected:
        return False
    return inp.start_failures > 0 and inp.run_strategy in CRASH_LOOP_RUN_STRATEGIES


def is_stopped(inp: StatusInput) -> bool:
    """15. Instance final, or none and no start expected."""
    if inp.instance is not None:
        return _instance_final(inp)
    return not inp.start_expected


def is_waiting_for_receiver(inp: StatusInput) -> bool:
    """16. Run strategy WaitAsReceiver, and no instance or one waiting for its migration source."""
    return inp.run_strategy == 'WaitAsReceiver' and (inp.instance is None or inp.instance.phase == states.WAITING_FOR_SYNC)


# The precedence, first match wins (KubeVirt setPrintableStatus). 17: Unknown.
STATUS_RULES = (
    (TERMINATING, is_terminating),
    (STOPPING, is_stopping),
    (MIGRATING, is_migrating),
    (PAUSED, is_paused),
    (RUNNING, is_running),
    (ERROR_PVC_NOT_FOUND, is_pvc_not_found),
    (ERROR_DATA_VOLUME_NOT_FOUND, is_data_volume_not_found),
    (DATA_VOLUME_ERROR, is_data_volume_error),
    (ERROR_UNSCHEDULABLE, is_unschedulable),
    (PROVISIONING, is_provisioning),
    (WAITING_FOR_VOLUME_BINDING, is_waiting_for_volume_binding),
    (ERR_IMAGE_PULL, is_err_image_pull),
    (IMAGE_PULL_BACK_OFF, is_image_pull_back_off),
    (STARTING, is_starting),
    (CRASH_LOOP_BACK_OFF, is_crash_loop_back_off),
    (STOPPED, is_stopped),
    (WAITING_FOR_RECEIVER, is_waiting_for_receiver),
)

STATUSES = tuple(word for word, _rule in STATUS_RULES) + (UNKNOWN,)


def printable_status(inp: StatusInput) -> str:
    """The one status word for a :class:`StatusInput`; Unknown when no rule matches.

    Total: never raises for any StatusInput, always returns a word of
    :data:`STATUSES`.
    """
    for word, rule in STATUS_RULES:
        if rule(inp):
            return word
    return UNKNOWN
