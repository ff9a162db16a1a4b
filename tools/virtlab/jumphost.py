"""A controller that can reach a private libvirt host's sshd but not its guests: the ProxyJump pattern, in the lab.

A user reaches guests on a hypervisor's NAT or isolated network through the hypervisor (``ssh -J``, the
``ssh_proxy_jump`` option of the converge.virt.libvirt inventory). To test that pattern the controller must not
reach the guests itself. :func:`controller_namespace` makes a network namespace *inside* the test's own one (a
``sleep`` process holds it) linked to it by one veth pair with a /30 of addresses that exist only in these two
namespaces (``JUMP_ADDRESS`` on the test side, ``CONTROLLER_ADDRESS`` in the nested one). The nested namespace has
no other route: the guests' subnet is unreachable from it. :func:`start_jump_sshd` gives the private host a second
sshd (in the host's mount and UTS namespaces, like :mod:`tools.virtlab.sshd`'s) listening on ``JUMP_ADDRESS`` with
local TCP forwarding allowed (what ProxyJump's ``direct-tcpip`` channel needs; nothing else is forwarded). The
controller's ssh client configuration (:func:`write_client_config`) trusts exactly that sshd's host key and skips
the check for the guests (they make their host keys at first boot); :func:`controller_argv` runs a command in the
nested namespace with that file bind-mounted over ``/etc/ssh/ssh_config`` in a private mount namespace (the
machine's own ssh files are neither read nor written). Commands run with argument lists only.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

from tools.virtlab import sshd

JUMP_ADDRESS = "10.254.77.1"
CONTROLLER_ADDRESS = "10.254.77.2"
PREFIX = 30
VETH = "cvjump0"
PEER = "cvjump1"


def _tool(program):
    found = shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin")
    if not found:
        raise sshd.SshdError(f"{program} not found")
    return found


class ControllerNamespace:
    """The nested network namespace (held by ``self.proc``) and its veth link to the test's namespace."""

    def __init__(self):
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid

    def start(self):
        ours = os.readlink("/proc/self/ns/net")
        # unshare execs sleep: the PID holds the new namespace until stop()
        self.proc = subprocess.Popen([_tool("unshare"), "--net", _tool("sleep"), "infinity"],  # pylint: disable=consider-using-with
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{self.pid}/ns/net") == ours:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise sshd.SshdError("the controller's network namespace did not come up")
            time.sleep(0.01)
        ip = _tool("ip")
        subprocess.run([ip, "link", "add", VETH, "type", "veth", "peer", "name", PEER, "netns", str(self.pid)], check=True)
        subprocess.run([ip, "addr", "add", f"{JUMP_ADDRESS}/{PREFIX}", "dev", VETH], check=True)
        subprocess.run([ip, "link", "set", VETH, "up"], check=True)
        inside = [_tool("nsenter"), "--target", str(self.pid), "--net", ip]
        subprocess.run(inside + ["link", "set", "lo", "up"], check=True)
        subprocess.run(inside + ["addr", "add", f"{CONTROLLER_ADDRESS}/{PREFIX}", "dev", PEER], check=True)
        subprocess.run(inside + ["link", "set", PEER, "up"], check=True)
        return self

    def argv(self, argv, ssh_config=None):
        """``argv`` run in the nested namespace (with ``ssh_config`` as /etc/ssh/ssh_config in a private mount namespace)."""
        prefix = [_tool("nsenter"), "--target", str(self.pid), "--net"]
        if ssh_config:
            prefix += [_tool("unshare"), "--mount", "--propagation", "private", sys.executable, sshd.BINDEXEC, ssh_config, "/etc/ssh/ssh_config", "--"]
        return prefix + list(argv)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        # the veth pair goes with the namespace of its peer; delete our end if it is still there
        subprocess.run([_tool("ip"), "link", "del", VETH], check=False, capture_output=True)


def start_jump_sshd(host, root, port, public_key_text, deadline_seconds=30):
    """A second sshd of lab ``host`` (a hosts.HostInfo) on JUMP_ADDRESS:port allowing local forwarding; its PID.

    Its configuration, host key and home are under ``root`` (not the host's own sshd's files)."""
    config = sshd.prepare(root, JUMP_ADDRESS, port, public_key_text, os.path.join(root, "home"), forwarding=True)
    log = os.path.join(root, "sshd.log")
    pid = sshd.launch(_tool("nsenter"), host.pids["libvirtd"], config, log)

    def tail():
        with open(log, encoding="utf-8", errors="replace") as handle:
            return handle.read()[-2000:]
    try:
        sshd.wait_listening(JUMP_ADDRESS, port, pid, time.monotonic() + deadline_seconds, tail)
    except BaseException:
        stop_sshd(pid)
        raise
    return pid


def stop_sshd(pid):
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _tick in range(200):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)


def write_client_config(root, port, private_key):
    """<root>/ssh_config for the controller: the jump sshd's host key only (strict), guests unchecked; its path."""
    with open(os.path.join(root, "ssh", "ssh_host_ed25519_key.pub"), encoding="utf-8") as handle:
        key_type, key = handle.read().split()[:2]
    known_hosts = os.path.join(root, "known_hosts")
    with open(known_hosts, "w", encoding="utf-8") as handle:
        handle.write(f"[{JUMP_ADDRESS}]:{port} {key_type} {key}\n")
    path = os.path.join(root, "ssh_config")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("# written by tools.virtlab.jumphost: the hypervisor checked, its guests (new host keys at each first boot) not\n"
                     f"Host {JUMP_ADDRESS}\n    UserKnownHostsFile {sshd._plain(known_hosts, 'known_hosts')}\n"  # pylint: disable=protected-access
                     "    StrictHostKeyChecking yes\n"
                     "Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n    GlobalKnownHostsFile /dev/null\n"
                     f"    BatchMode yes\n    IdentitiesOnly yes\n    IdentityFile {sshd._plain(private_key, 'key')}\n")  # pylint: disable=protected-access
    return path
