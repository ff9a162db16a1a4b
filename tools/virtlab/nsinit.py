"""In-namespace launcher of one private libvirt host (run by :mod:`tools.virtlab.hosts`).

Design
------
``hosts.start_hosts`` runs, for each host::

    unshare --mount --uts --propagation private <python> nsinit.py <host-dir>/nsinit.json

``unshare`` (without ``--fork``) execs this script in a new mount and UTS namespace,
so the PID that ``hosts.py`` got back from ``subprocess.Popen`` stays the PID of
the whole host.  This script then, inside the namespace:

1. bind-mounts the host's private directories over ``/etc/libvirt``, ``/run/libvirt``,
   ``/var/lib/libvirt``, ``/var/log/libvirt``, ``/var/cache/libvirt`` and its private
   hosts file over ``/etc/hosts`` (mount propagation is private, so none of this is
   seen outside the namespace);
2. sets the host name of the UTS namespace;
3. starts ``virtlogd`` in the foreground as a child (its PID is written to a file);
4. waits for the virtlogd socket and then ``exec``\\ s ``libvirtd`` (foreground,
   ``--listen``), which therefore keeps the PID that ``hosts.py`` recorded.

It is a standalone script (standard library only, no package imports) because it
is started by file path under ``unshare``.  Commands run with argument lists only.
"""

import json
import os
import socket
import subprocess
import sys
import time


def _mount_bind(source, target):
    """Bind-mount source over target (both must exist)."""
    subprocess.run(["mount", "--bind", source, target], check=True)


def main(argv):
    """Set the namespace up as described by the JSON file argv[1], then exec libvirtd."""
    with open(argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    for source, target in config["binds"]:
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        _mount_bind(source, target)
    socket.sethostname(config["hostname"])

    with open(config["virtlogd_stdout"], "ab") as out:
        virtlogd = subprocess.Popen(  # pylint: disable=consider-using-with
            config["virtlogd_argv"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    with open(config["virtlogd_pid_file"], "w", encoding="utf-8") as handle:
        handle.write(f"{virtlogd.pid}\n")

    deadline = time.monotonic() + 20
    while not os.path.exists(config["virtlogd_socket"]):
        if virtlogd.poll() is not None:
            sys.stderr.write(f"virtlogd exited with status {virtlogd.returncode}\n")
            return 1
        if time.monotonic() > deadline:
            sys.stderr.write(f"virtlogd socket {config['virtlogd_socket']} did not appear\n")
            return 1
        time.sleep(0.02)

    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(config["libvirtd_argv"][0], config["libvirtd_argv"])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
