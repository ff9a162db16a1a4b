"""nodeexec.py PID [--root DIR [--bind SRC:DST]... [--file SRC:DST]...] -- COMMAND [ARG...]: run COMMAND inside the kubelab node whose
PID 1 is PID (as seen from here).

Enters the node's mount, UTS and PID namespaces (setns), forks, and the child execs COMMAND (with
PR_SET_PDEATHSIG SIGKILL: it dies with this process, whatever kills it); this process forwards SIGTERM, SIGINT
and SIGHUP to the child and exits with its status. So a lab records this process as the component and stops it
as it stops any other (tools/kubelab/lab.py). Standard library only (started by file path); argument lists only.

``--root DIR`` gives COMMAND a root of its own, as a container has on a cluster: the child makes a mount namespace
of its own (a slave of the node's: the node's later mounts reach it, its own mounts never reach the node), mounts a
tmpfs on DIR (an existing empty directory of the node), lays every top-level directory of the node's root into it
(recursive binds; symlinks copied), adds each ``--bind SRC:DST`` (DST a new top-level directory, e.g. KubeVirt's
virt-handler finds the kubelet's pods directory at ``/pods``, where its DaemonSet mounts it), binds each
``--file SRC:DST`` over the existing file DST of that root (e.g. an /etc/passwd with the user its image has) and
chroots there.
PID 1's root (``/proc/1/root``) stays the node's, as on a cluster. The tmpfs and binds vanish with the process.
"""

import ctypes
import os
import signal
import subprocess
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1


USAGE = "usage: nodeexec.py PID [--root DIR [--bind SRC:DST]... [--file SRC:DST]...] -- COMMAND [ARG...]\n"


def _parse(argv):
    """(pid, root or None, [(src, dst, is_file)], command) from argv; ValueError on bad usage."""
    if len(argv) < 3 or "--" not in argv[2:]:
        raise ValueError("missing '--'")
    pid, rest = int(argv[1]), argv[2:]
    split = rest.index("--")
    options, command = rest[:split], rest[split + 1:]
    if not command:
        raise ValueError("no COMMAND")
    root, binds = None, []
    while options:
        if len(options) < 2:
            raise ValueError(f"{options[0]} needs a value")
        name, value = options[0], options[1]
        options = options[2:]
        if name == "--root":
            root = value
        elif name == "--bind":
            source, _sep, target = value.partition(":")
            if not source.startswith("/") or not target.startswith("/") or target.count("/") != 1 or target == "/":
                raise ValueError(f"--bind {value!r}: SRC must be absolute and DST a new top-level directory like /pods")
            binds.append((source, target, False))
        elif name == "--file":
            source, _sep, target = value.partition(":")
            if not source.startswith("/") or not target.startswith("/") or ".." in target.split("/"):
                raise ValueError(f"--file {value!r}: SRC and DST must be absolute paths")
            binds.append((source, target, True))
        else:
            raise ValueError(f"unknown option {name}")
    if binds and root is None:
        raise ValueError("--bind and --file need --root")
    return pid, root, binds, command


def _own_root(root, binds):
    """In the child: a private mount namespace (slave of the node's) whose root is a tmpfs at ``root`` holding the
    node's top-level directories and ``binds``; chroot there."""
    if os.listdir(root):
        raise OSError(f"{root} is not empty")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    subprocess.run(["mount", "--make-rslave", "/"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "kubelab-root", root], check=True)
    skip = {os.path.basename(root.rstrip("/"))} if os.path.dirname(root.rstrip("/")) == "/" else set()
    for name in sorted(os.listdir("/")):
        if name in skip:
            continue
        source, target = "/" + name, os.path.join(root, name)
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
        elif os.path.isdir(source):
            os.mkdir(target)
            subprocess.run(["mount", "--rbind", source, target], check=True)
    for source, target, is_file in binds:
        path = os.path.join(root, target.lstrip("/"))
        if is_file:
            if not os.path.isfile(path) or os.path.islink(path):
                raise OSError(f"--file target {target} is not a regular file in the node's root")
            subprocess.run(["mount", "--bind", source, path], check=True)
            continue
        if os.path.lexists(path):
            raise OSError(f"--bind target {target} exists in the node's root")
        os.mkdir(path)
        subprocess.run(["mount", "--rbind", source, path], check=True)
    subprocess.run(["mount", "--make-rslave", root], check=True)
    os.chroot(root)


def main(argv):
    """Enter, fork, exec; return the child's exit status."""
    try:
        pid, root, binds, command = _parse(argv)
    except ValueError as exc:
        sys.stderr.write(f"nodeexec: {exc}\n" + USAGE)
        return 2
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
        if root is not None:
            try:
                _own_root(root, binds)
            except (OSError, subprocess.CalledProcessError) as exc:
                sys.stderr.write(f"nodeexec: cannot lay the root {root}: {exc}\n")
                os._exit(126)  # pylint: disable=protected-access
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
