"""Run a command inside a private network namespace: where the private libvirt hosts live.

Usage (from the repository root)::

    python -m tools.virtlab netns -- pytest tests/integration
    python tools/virtlab/netns.py -- COMMAND ...   (the same, standard library only)
    python -m tools.virtlab netns -- ansible-playbook playbooks/demo.yml

Why
---
A private host's libvirtd listens on TCP with no authentication and runs qemu as
root; its migration ports accept a raw migration stream.  In the machine's own
network namespace any local user could connect to them and, for example, define
a domain whose disk is ``/dev/sda``: a root door.  So :func:`tools.virtlab.hosts.start_hosts`
refuses to start hosts in the machine's initial network namespace, and every
lab (tests, molecule, the demo) runs inside a network namespace of its own,
made here: ``unshare --net`` gives the command a namespace with nothing but a
loopback interface, which this module brings up (all of 127.0.0.0/8 then
answers on it).  Nothing outside the namespace can reach an address inside it,
and a user without CAP_SYS_ADMIN cannot enter it.  The namespace ends with its
last process.

The unix sockets of the hosts are reachable by path from everywhere, but they are
created owner-only (``unix_sock_*_perms = "0700"``) in owner-only directories.

A command that is already inside a private network namespace is run as it is
(``make test`` nests its tiers), unless ``--new`` asks for a namespace of its own
(a lab that must not share addresses with the labs around it).  Commands run with argument lists only.
"""

import fcntl
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
MARKER = "VIRTLAB_NETNS"  # set for the second pass, inside the namespace unshare made


def network_namespace(pid="self"):
    """The network namespace id ("net:[inode]") of a process, or "" if unknown."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


# link kinds that cannot lead out of a namespace: a bridge made inside it (whose ports can only be more of these)
# and tun/tap devices (their other end is a file descriptor of a process here, e.g. a guest's QEMU)
CLOSED_LINK_KINDS = ("bridge", "tun")


def _links_out():
    """The kinds of the interfaces of this namespace that lead out of it ([] when it is private; None when unknown)."""
    names = [name for _index, name in socket.if_nameindex()]
    if names == ["lo"]:
        return []
    ip = shutil.which("ip")
    if ip is None:
        return None
    try:
        links = json.loads(subprocess.run([ip, "-d", "-j", "link", "show"], capture_output=True, text=True, check=True, timeout=30).stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    out = []
    for link in links:
        if link.get("ifname") == "lo" and link.get("link_type") == "loopback":
            continue
        kind = (link.get("linkinfo") or {}).get("info_kind")
        if kind not in CLOSED_LINK_KINDS:
            out.append(kind)
    return out


def in_private_network_namespace():
    """True when no interface of the current network namespace leads out of it: nothing outside can reach into it.

    Loopback alone is the namespace ``unshare --net`` makes. A test may add a libvirt network (a bridge and the
    guests' tap devices) inside it, while other tests of the same namespace start labs: those are closed too (their
    kind is read with ``ip -d -j link``, netlink of this namespace). A veth pair, a physical NIC or anything of
    another kind leads out, and makes the namespace not private. (The machine's first network namespace cannot
    be told by PID 1's: in a container PID 1 may sit in yet another one; what matters is that no interface leads out.)
    """
    return _links_out() == []


def wait_private(timeout=600.0, poll=0.5):
    """True once this namespace is private (see :func:`in_private_network_namespace`); False when it is not.

    While the only interfaces that lead out are veth pairs, waits for them to go, up to ``timeout`` seconds: a test of
    the same namespace links a namespace nested in it for a while (tools/virtlab/jumphost.py, the ProxyJump check of
    test_golden_journey) and removes the link when done; a lab started meanwhile by the other test worker used to fail
    at once (clean-clone CI of 2026-11-27: 22 errors). Anything else (a physical NIC: not a test namespace) is False at
    once. Nothing is started while a link leads out.
    """
    deadline = time.monotonic() + timeout
    while True:
        kinds = _links_out()
        if kinds == []:
            return True
        if kinds is None or any(kind != "veth" for kind in kinds) or time.monotonic() > deadline:
            return False
        time.sleep(poll)


def no_ipv6_on_new_links():
    """Interfaces made later in this (new) namespace get no IPv6 address (``net.ipv6.conf.default.disable_ipv6``, a
    sysctl of this namespace only; loopback keeps ``::1``).

    A test's libvirt network brings a bridge up before it has its IPv4 address (and keeps it up a moment after): with
    only an IPv6 link-local address outside loopback, glibc's getaddrinfo(AI_ADDRCONFIG) refuses IPv4 literals
    ("Address family for hostname not supported"), and a lab host starting meanwhile on another xdist worker failed
    to listen on its loopback address.
    """
    try:
        with open("/proc/sys/net/ipv6/conf/default/disable_ipv6", "w", encoding="ascii") as handle:
            handle.write("1")
    except OSError:
        pass  # no IPv6 in this kernel: nothing to disable


def loopback_up():
    """Bring the loopback interface of the current network namespace up (ioctl, no external program)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def run(argv, new=False):
    """Exec argv inside a private network namespace (made here unless already in one, or always when new); never returns."""
    if not argv:
        raise SystemExit("netns: no command given")
    second_pass = os.environ.pop(MARKER, "") == "inside"
    if second_pass and not in_private_network_namespace():
        raise SystemExit("netns: the new network namespace has interfaces other than loopback: " +
                         ", ".join(name for _index, name in socket.if_nameindex()))
    if second_pass or (in_private_network_namespace() and not new):
        loopback_up()
        if second_pass:
            no_ipv6_on_new_links()
        os.execvp(argv[0], argv)
    unshare = shutil.which("unshare", path=os.environ.get("PATH", "") + ":/usr/bin:/bin")
    if not unshare:
        raise SystemExit("netns: unshare not found (util-linux)")
    # unshare execs this very file in the new namespace; that second pass brings loopback up and execs argv.
    os.execve(unshare, [unshare, "--net", "--", sys.executable, os.path.abspath(__file__), "--"] + list(argv),
              dict(os.environ, **{MARKER: "inside"}))


def main(argv=None):
    """python -m tools.virtlab.netns [--new] -- COMMAND [ARG...]  (--new: a namespace of its own even inside one)"""
    args = list(sys.argv[1:] if argv is None else argv)
    new = bool(args) and args[0] == "--new"
    if new:
        args = args[1:]
    if args and args[0] == "--":
        args = args[1:]
    run(args, new=new)


if __name__ == "__main__":
    main()
