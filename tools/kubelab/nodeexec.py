"""nodeexec.py PID -- COMMAND [ARG...]: run COMMAND inside the kubelab node whose PID 1 is PID (as seen from here).

Enters the node's mount, UTS and PID namespaces (setns), forks, and the child execs COMMAND (with
PR_SET_PDEATHSIG SIGKILL: it dies with this process, whatever kills it); this process forwards SIGTERM, SIGINT
and SIGHUP to the child and exits with its status. So a lab records this process as the component and stops it
as it stops any other (tools/kubelab/lab.py). Standard library only (started by file path); argument lists only.
"""

import ctypes
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1


def main(argv):
    """Enter, fork, exec; return the child's exit status."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: nodeexec.py PID -- COMMAND [ARG...]\n")
        return 2
    pid, command = int(argv[1]), argv[3:]
    libc = ctypes.CDLL(None, use_errno=True)
    for name, flag in (("uts", CLONE_NEWUTS), ("pid", CLONE_NEWPID), ("mnt", CLONE_NEWNS)):
        fd = os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY)
        try:
            if libc.setns(fd, flag) != 0:
                err = ctypes.get_errno()
                sys.stderr.write(f"nodeexec: setns {name} of pid {pid}: {os.strerror(err)}\n")
                return 125
        finally:
            os.close(fd)
    child = os.fork()
    if child == 0:
        # (getppid() is 0 here: the parent is outside the node's PID namespace)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.chdir("/")
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            sys.stderr.write(f"nodeexec: cannot run {command[0]}: {exc.strerror}\n")
            os._exit(127)  # pylint: disable=protected-access

    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            _pid, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
