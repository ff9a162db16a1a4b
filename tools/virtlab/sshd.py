"""An sshd per private host, an inventory of the lab, and a controller that trusts the lab's host keys.

Design
------
``start_hosts(..., ssh=True)`` (:mod:`tools.virtlab.hosts`) gives every private host
its own OpenSSH daemon (Debian's ``openssh-server``, ``/usr/sbin/sshd``), started with
``nsenter --target <libvirtd pid> --mount --uts`` so it lives in the host's mount and
UTS namespaces: a session on host N sees host N's ``/run/libvirt``, so
``qemu:///system`` (and ``virt-ssh-helper``, which ``qemu+ssh://`` runs there) reaches
host N's libvirtd, and ``hostname`` is host N's name.  ``nsenter`` without ``--fork``
execs sshd, so the PID recorded as ``pids["sshd"]`` is the daemon's; ``stop_hosts``
signals it (and every session left in the namespace) like the host's other daemons.

Under ``<state_dir>/<name>/``::

    ssh/sshd_config           written from scratch (nothing of /etc/ssh is read)
    ssh/ssh_host_ed25519_key  the host's own host key (made by ssh-keygen at start)
    ssh/authorized_keys       the one public key that may log in (user root)
    home/                     $HOME of every session (sshd ``SetEnv HOME=``): where Ansible's
                              ~/.ansible/tmp and the collection's ~/.cache/converge.virt/bytecode
                              land, one per host, as on separate machines

sshd listens on the host's loopback address only (``ListenAddress``, default port
22; the lab runs in a private network namespace), takes public keys only (no
password, no keyboard-interactive, no PAM), no forwarding of any kind (unless ``prepare(..., forwarding=True)``:
local TCP forwarding only, what ProxyJump needs; see :mod:`tools.virtlab.jumphost`).
``StrictModes no`` because the state directory may be under ``/tmp`` (mode 1777,
which sshd's path check refuses); every file here is owner-only anyway, and :func:`check_private_dir`
does the check sshd then skips: the state directory, the host directories and their ``ssh`` and ``home``
must be owned by the user running the lab and writable by nobody else, and every directory above them
owned by that user or root and, when others may write it, sticky (as ``/tmp``), so nobody else can put
an ``authorized_keys`` or a host key there or swap the directory (issue 33 item 6).
``/run/sshd`` (sshd's compiled-in privilege-separation directory) is created
(root, 0755) when the machine has none, as Debian's service unit does.

Under ``<state_dir>/``::

    ssh/id_ed25519[.pub]  the client key pair, unless start_hosts got ``ssh_public_key``
    ssh/known_hosts       every host's address (``[address]:port`` off port 22) and host key
    ssh/ssh_config        a client configuration: that known_hosts only, strict checking, batch mode
    inventory.json        Ansible inventory (YAML plugin, JSON syntax): group ``virtlab`` with every host's
                          ansible_host/port/user, key, ssh args (the lab's known_hosts, strict
                          checking) and ansible_python_interpreter; ``virtlab_qemu_ssh_uri`` per host

:func:`controller_argv` runs a command whose ``ssh`` client (for example libvirt's
``qemu+ssh://`` transport inside a module) must use the lab's ``ssh_config``: in a
private mount namespace (``unshare --mount``) where that file is bind-mounted over
``/etc/ssh/ssh_config``, so the machine's own ``~/.ssh/known_hosts`` is neither read
nor written.  Commands run with argument lists only.
"""

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time

DEFAULT_PORT = 22
SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = "/run/sshd"
INVENTORY_FILE = "inventory.json"
GROUP = "virtlab"
BINDEXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bindexec.py")


class SshdError(RuntimeError):
    """Raised when a host's sshd cannot be set up or does not come up."""


def _tool(program):
    found = shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin")
    if not found:
        raise SshdError(f"{program} not found (install openssh-server / openssh-client)")
    return found


def _plain(path, what):
    """Paths written into sshd_config/ssh_config lines must not need quoting."""
    if any(char.isspace() for char in path) or '"' in path:
        raise SshdError(f"{what} {path!r}: a path with blanks or quotes cannot go into an ssh configuration line")
    return path


def check_private_dir(path):
    """Refuse (SshdError naming the path and the reason) a directory sshd is to trust without StrictModes: ``path`` (if it
    exists) must be a directory (not a symbolic link) owned by this user with no write bit for group or others; every
    directory above it must be owned by this user or root and, if group or others may write it, sticky."""
    uid = os.getuid()
    path = os.path.abspath(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None:
        if not stat.S_ISDIR(info.st_mode):
            raise SshdError(f"state directory {path!r}: not a directory (a symbolic link or a file): refused")
        if info.st_uid != uid:
            raise SshdError(f"state directory {path!r}: owned by uid {info.st_uid}, not by this user (uid {uid}): refused")
        if info.st_mode & 0o022:
            raise SshdError(f"state directory {path!r}: mode {stat.S_IMODE(info.st_mode):04o} lets group or others write it: refused")
    parent = os.path.dirname(path)
    while True:
        info = os.stat(parent)
        if info.st_uid not in (0, uid):
            raise SshdError(f"state directory {path!r}: {parent!r} above it is owned by uid {info.st_uid}: refused")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise SshdError(f"state directory {path!r}: {parent!r} above it is writable by group or others and not sticky: refused")
        if parent == os.path.dirname(parent):
            return
        parent = os.path.dirname(parent)


def _private_dirs(*paths):
    """makedirs (0700) each of ``paths`` after checking it and what is above it (check_private_dir)."""
    for path in paths:
        check_private_dir(path)
        os.makedirs(path, mode=0o700, exist_ok=True)
        check_private_dir(path)


def _keygen(path, comment):
    subprocess.run([_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def client_key(state_dir, public_key=None):
    """(private key path or "", public key text): the given public key file, else a pair made at <state_dir>/ssh/id_ed25519."""
    ssh_dir = os.path.join(state_dir, "ssh")
    _private_dirs(state_dir, ssh_dir)
    private = ""
    if public_key is None:
        private = os.path.join(ssh_dir, "id_ed25519")
        if not os.path.exists(private):
            _keygen(private, "virtlab-client")
        public_key = private + ".pub"
    with open(public_key, encoding="utf-8") as handle:
        text = handle.read().strip()
    if not text.startswith(("ssh-", "ecdsa-", "sk-")):
        raise SshdError(f"ssh_public_key {public_key!r} is not an OpenSSH public key")
    return private, text


def prepare(root, address, port, public_key_text, home, forwarding=False, listen=()):  # pylint: disable=too-many-arguments
    """Write the host's sshd_config, host key and authorized_keys under <root>/ssh; return the config path.

    ``forwarding``: allow local TCP forwarding only (``AllowTcpForwarding local``: the ``direct-tcpip`` channels that
    ``ssh -J`` / ProxyJump opens through this host), for a test that reaches guests through the hypervisor; never remote
    forwarding, agent, X11, tunnels or stream-local forwarding. ``listen``: more addresses to listen on (beside ``address``).
    """
    ssh_dir = os.path.join(root, "ssh")
    _private_dirs(root, ssh_dir, home)
    host_key = os.path.join(ssh_dir, "ssh_host_ed25519_key")
    _keygen(host_key, os.path.basename(root))
    authorized = os.path.join(ssh_dir, "authorized_keys")
    with open(os.open(authorized, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        handle.write(public_key_text + "\n")
    settings = [("Port", str(port)), ("ListenAddress", address)] + [("ListenAddress", extra) for extra in listen] + [
        ("AddressFamily", "inet"), ("HostKey", _plain(host_key, "host key")), ("PidFile", "none"),
        ("AuthorizedKeysFile", _plain(authorized, "authorized_keys")), ("AllowUsers", "root"),
        ("PermitRootLogin", "prohibit-password"), ("PubkeyAuthentication", "yes"), ("PasswordAuthentication", "no"),
        ("KbdInteractiveAuthentication", "no"), ("UsePAM", "no"), ("StrictModes", "no"),
        ("AllowTcpForwarding", "local" if forwarding else "no"), ("AllowStreamLocalForwarding", "no"), ("AllowAgentForwarding", "no"),
        ("X11Forwarding", "no"), ("PermitTunnel", "no"), ("PermitUserEnvironment", "no"),
        ("PrintMotd", "no"), ("PrintLastLog", "no"), ("UseDNS", "no"), ("MaxStartups", "100:30:200"), ("MaxSessions", "50"),
        ("SetEnv", "HOME=" + _plain(home, "home")), ("Subsystem", "sftp internal-sftp"), ("LogLevel", "ERROR"),
    ]
    config = os.path.join(ssh_dir, "sshd_config")
    with open(config, "w", encoding="utf-8") as handle:
        handle.write("# written by tools.virtlab: a private lab host's whole sshd configuration\n")
        handle.write("".join(f"{key} {value}\n" for key, value in settings))
    if not os.path.isdir(PRIVSEP_DIR):
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
    checked = subprocess.run([SSHD if os.path.exists(SSHD) else _tool("sshd"), "-t", "-f", config], check=False, capture_output=True, text=True)
    if checked.returncode:
        raise SshdError(f"sshd -t refuses {config}: {checked.stderr.strip()}")
    return config


def launch(nsenter, target_pid, config, log_path):
    """Start sshd in the mount and UTS namespaces of target_pid; return its PID (nsenter execs sshd)."""
    sshd = SSHD if os.path.exists(SSHD) else _tool("sshd")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [nsenter, "--target", str(target_pid), "--mount", "--uts", sshd, "-D", "-e", "-f", config],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    return proc.pid


def wait_listening(address, port, pid, deadline, log_tail):
    """Wait until sshd accepts TCP connections on address:port (SshdError with the log tail if it dies or times out)."""
    while time.monotonic() < deadline:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = 0, 0
        if done:
            raise SshdError(f"sshd on {address}:{port} exited (status {status})\n{log_tail()}")
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            time.sleep(0.01)
    raise SshdError(f"sshd on {address}:{port} not listening\n{log_tail()}")


def _known_host(address, port):
    return address if port == 22 else f"[{address}]:{port}"


def write_known_hosts(state_dir, hosts):
    """<state_dir>/ssh/known_hosts (from (address, port, root) of each host) and the client ssh_config that uses it."""
    ssh_dir = os.path.join(state_dir, "ssh")
    lines = []
    for address, port, root in hosts:
        with open(os.path.join(root, "ssh", "ssh_host_ed25519_key.pub"), encoding="utf-8") as handle:
            key_type, key = handle.read().split()[:2]
        lines.append(f"{_known_host(address, port)} {key_type} {key}\n")
    known_hosts = os.path.join(ssh_dir, "known_hosts")
    with open(known_hosts, "w", encoding="utf-8") as handle:
        handle.write("".join(lines))
    with open(os.path.join(ssh_dir, "ssh_config"), "w", encoding="utf-8") as handle:
        handle.write("# written by tools.virtlab: an ssh client that trusts exactly the lab's host keys\n"
                     f"Host *\n    UserKnownHostsFile {_plain(known_hosts, 'known_hosts')}\n    GlobalKnownHostsFile /dev/null\n"
                     "    StrictHostKeyChecking yes\n    BatchMode yes\n    IdentitiesOnly yes\n")
    return known_hosts


def ssh_args(state_dir):
    """ssh options (a list) for a client of the lab: its known_hosts only, strict host key checking, batch mode."""
    known_hosts = os.path.join(state_dir, "ssh", "known_hosts")
    return ["-o", "UserKnownHostsFile=" + _plain(known_hosts, "known_hosts"), "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]


def qemu_ssh_uri(address, port=DEFAULT_PORT):
    """libvirt's URI of a lab host over SSH (no query options: add keyfile/no_verify as needed)."""
    return f"qemu+ssh://root@{address}/system" if port == 22 else f"qemu+ssh://root@{address}:{port}/system"


def write_inventory(state_dir, hosts, private_key, python):
    """<state_dir>/inventory.json from hosts [{"name", "address", "port", "home"}]; returns its path."""
    common = " ".join(ssh_args(state_dir))
    members = {}
    for host in hosts:
        variables = {
            "ansible_host": host["address"], "ansible_port": host["port"], "ansible_user": "root",
            "ansible_ssh_common_args": common, "ansible_python_interpreter": python,
            "virtlab_home": host["home"],
            "virtlab_qemu_ssh_uri": qemu_ssh_uri(host["address"], host["port"]),
        }
        if private_key:
            variables["ansible_ssh_private_key_file"] = private_key
        members[host["name"]] = variables
    path = os.path.join(state_dir, INVENTORY_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"all": {"children": {GROUP: {"hosts": members}}}}, handle, indent=2)
        handle.write("\n")
    return path


def controller_argv(state_dir, argv):
    """argv run in a private mount namespace where the lab's ssh_config is /etc/ssh/ssh_config (see the module doc)."""
    unshare = _tool("unshare")
    return [unshare, "--mount", "--propagation", "private", sys.executable, BINDEXEC,
            os.path.join(os.path.abspath(state_dir), "ssh", "ssh_config"), "/etc/ssh/ssh_config", "--"] + list(argv)
