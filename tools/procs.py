"""Processes a lab started, told apart from whatever reuses their PIDs (tools.virtlab, tools.kubelab).

Standard library only. A PID alone names a process only until it exits: a lab records the boot id and each
process's start time (clock ticks since boot, /proc/<pid>/stat field 22) and signals a recorded PID only
while both still match.
"""

import os

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def boot_id():
    """This boot's id: a state directory recorded under another one names PIDs that are not ours any more."""
    with open(BOOT_ID_FILE, encoding="ascii") as handle:
        return handle.read().strip()


def proc_stat(pid):
    """The fields of /proc/<pid>/stat after the command name (field 3, the state letter, first), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            data = handle.read()
    except OSError:
        return None
    return data.rsplit(")", 1)[1].split()


def start_time(pid):
    """Start time of a process (clock ticks since boot, /proc/<pid>/stat field 22), or None if there is none."""
    fields = proc_stat(pid)
    return int(fields[19]) if fields else None


def pid_alive(pid):
    """True if pid is a live (non-zombie) process."""
    fields = proc_stat(pid) if pid else None
    return fields is not None and fields[0] not in ("Z", "X")


def reap(pid):
    """Collect the exit status of pid if it is our own child (no zombie left behind)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
