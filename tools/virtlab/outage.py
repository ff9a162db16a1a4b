"""A private host's libvirtd stopped in the middle of a run, and started again (issue 22: the interrupted fleet).

:func:`kill_libvirtd_when` waits until a host has its first domains defined (a file
``<etc>/qemu/<prefix>*.xml``, read from outside the host, cheaply), freezes its
libvirtd (SIGSTOP: nothing more is defined after the count), counts, and kills it
(SIGKILL: its clients' connections are reset, as when a hypervisor's daemon
crashes).  :func:`restart_libvirtd` starts the daemon again in the host's mount and
UTS namespaces (entered through its virtlogd, which outlives libvirtd) and waits until
it answers; its running guests, if any, are taken back (their qemu processes never
stopped).  ``stop_hosts`` stops the new daemon too (it lives in the host's namespace).
Commands run with argument lists only.
"""

import os
import signal
import socket
import subprocess
import time


def defined(host, prefix):
    """Names of the domains with ``prefix`` whose definition files exist on ``host``."""
    directory = os.path.join(host.dirs['etc'], 'qemu')
    if not os.path.isdir(directory):
        return []
    return sorted(name[:-4] for name in os.listdir(directory) if name.startswith(prefix) and name.endswith('.xml'))


def kill_libvirtd_when(host, prefix, at_least=1, still_running=None, timeout=300.0, poll=0.005):
    """Kill host's libvirtd once ``at_least`` domains named ``prefix``* are defined; return the names defined then.

    ``still_running()`` (optional) is checked while waiting: when it returns False first (the run ended before the
    domains appeared) a RuntimeError says so, as does the timeout; the daemon is then left alone.
    """
    deadline = time.monotonic() + timeout
    while len(defined(host, prefix)) < at_least:
        if still_running is not None and not still_running():
            raise RuntimeError('the run ended before %d %s* domains were defined on %s' % (at_least, prefix, host.name))
        if time.monotonic() > deadline:
            raise RuntimeError('no %d %s* domains on %s after %.0f s' % (at_least, prefix, host.name, timeout))
        time.sleep(poll)
    pid = host.pids['libvirtd']
    os.kill(pid, signal.SIGSTOP)
    names = defined(host, prefix)
    os.kill(pid, signal.SIGKILL)
    return names


def restart_libvirtd(host, timeout=60.0):
    """Start host's libvirtd again and wait until its socket answers."""
    import libvirt  # pylint: disable=import-outside-toplevel
    from tools.virtlab import hosts  # pylint: disable=import-outside-toplevel
    libvirtd = hosts.which('libvirtd')
    argv = [hosts.which('nsenter'), '--target', str(host.pids['virtlogd']), '--mount', '--uts', libvirtd,
            '--listen', '--config', '/etc/libvirt/libvirtd.conf', '--pid-file', '/run/libvirt/libvirtd.pid']
    with open(os.path.join(host.root, 'daemon.log'), 'ab') as log:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # pylint: disable=consider-using-with
    deadline = time.monotonic() + timeout
    while True:  # the socket first (a refused libvirt.open would print libvirt's error on stderr), then libvirt itself
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(host.socket_path)
            libvirt.open(host.uri).close()
            return
        except (OSError, libvirt.libvirtError):
            if time.monotonic() > deadline:
                raise RuntimeError('libvirtd of %s did not come back within %.0f s' % (host.name, timeout)) from None
            time.sleep(0.1)
