# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A libvirt migration as the phase layer sees it: what the backend reached and libvirt's job type, as a
:class:`.._phase.migration.MigrationObservation`.

Apart from :mod:`views` so that what observes VMs does not load the migration phase machine.
"""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.module_utils._phase import migration


# libvirt mapping (phase-model section 7): the step the libvirt backend
# reached, and the job type it reads from jobStats, to a phase.
LIBVIRT_JOB_NONE = 0
LIBVIRT_JOB_BOUNDED = 1
LIBVIRT_JOB_UNBOUNDED = 2
LIBVIRT_JOB_COMPLETED = 3
LIBVIRT_JOB_FAILED = 4
LIBVIRT_JOB_CANCELLED = 5


def libvirt_observation(phase, dest_connected=False, dest_checked=False, dest_accepts=False, job_type=LIBVIRT_JOB_NONE,
                        on_destination=False, vm_running=True, dest_failed=False, aborted=False, error=None):
    """Build a :class:`.._phase.migration.MigrationObservation` from what the libvirt backend saw.

    Scheduling/Scheduled = destination connection opened and checked;
    PreparingTarget/TargetReady = the destination accepts (Begin/Prepare);
    Running = the job is active; Succeeded = job completed and the domain runs
    on the destination; Failed = job failed or cancelled (a cancelled job is the
    source's answer to an abort: reason aborted). ``aborted``: an abort was asked.
    """
    active = job_type in (LIBVIRT_JOB_BOUNDED, LIBVIRT_JOB_UNBOUNDED)
    completed = on_destination and (job_type in (LIBVIRT_JOB_COMPLETED, LIBVIRT_JOB_NONE))
    ended_unfinished = job_type in (LIBVIRT_JOB_FAILED, LIBVIRT_JOB_CANCELLED) or bool(error)
    return migration.MigrationObservation(
        phase=phase,
        vm_running=vm_running or on_destination,
        target_exists=dest_connected,
        target_ready=dest_checked,
        target_node_known=dest_accepts,
        target_address_known=dest_accepts,
        transfer_started=active or completed,
        transfer_completed=completed,
        target_failed=dest_failed,
        source_failed=ended_unfinished and not on_destination,
        abort_requested=aborted or job_type == LIBVIRT_JOB_CANCELLED,
    )
