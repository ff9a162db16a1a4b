"""Private libvirt hosts on one machine, for tests, molecule and the demo.

Design
------
Each "host" is its own ``libvirtd`` + ``virtlogd`` pair running in a private mount
and UTS namespace (``unshare --mount --uts --propagation private``, see
:mod:`tools.virtlab.nsinit`).  Under ``<state_dir>/<name>/`` every host has::

    etc/          written from scratch: libvirtd.conf, qemu.conf, virtlogd.conf  -> /etc/libvirt
    run/          -> /run/libvirt        (libvirt-sock, virtlogd-sock, pid files)
    lib/          -> /var/lib/libvirt
    log/          -> /var/log/libvirt    (libvirtd.log, qemu/<domain>.log)
    cache/        -> /var/cache/libvirt
    hosts         -> /etc/hosts          (every lab host's name -> its loopback address)
    nsinit.json   what nsinit.py mounts and runs
    daemon.log    stdout/stderr of the namespace launcher, virtlogd and libvirtd (and sshd)
    ssh/, home/   only with start_hosts(ssh=True): the host's sshd (see :mod:`tools.virtlab.sshd`)

The directories are reachable from the root namespace at their real paths, so a
client reaches host N through ``qemu+unix:///system?socket=<state_dir>/<name>/run/libvirt-sock``
or through loopback TCP ``qemu+tcp://127.0.0.1X:<tcp_port>/system`` (``listen_tcp=1``,
``auth_tcp="none"``, one ``listen_addr`` per host, ``libvirtd --listen``).  Each host
has its own host name (UTS namespace) and a distinct ``host_uuid``.

Private and clean
-----------------
Nothing of the machine's own libvirt reaches a private host: its ``/etc/libvirt``
holds only the three configuration files written here (no domain, network, storage
pool, secret, nwfilter, hook or autostart link of the system is ever copied), so a
private host cannot list, start or touch the machine's VMs or their disks.

An unauthenticated TCP listener of a daemon that runs qemu as root is a root door,
so hosts start only inside a private network namespace (one with no interface but
loopback: :mod:`tools.virtlab.netns`), on loopback addresses only; the unix sockets
are owner-only (``unix_sock_*_perms = "0700"``) in owner-only directories.

``stop_hosts`` kills only what the lab started: it records the boot id, every
daemon's start time and the identity (device, inode) of the host's private
``/etc/libvirt``, and a process is signalled only if it is seen through
``/proc/<pid>/root/etc/libvirt`` to live in that very host (and, for a recorded
daemon PID, started when recorded).  A state directory from an earlier boot is
cleaned up without signalling anything.

``qemu.conf`` per host: ``cgroup_controllers = []`` (no systemd/cgroup delegation
here), ``security_driver = "none"``, ``namespaces = []`` (qemu stays in the host's
mount namespace, so it sees the same paths and ``stop_hosts`` finds it),
``user``/``group`` root, ``migration_address`` = the host's loopback address and a
distinct ``migration_port_min``/``migration_port_max`` range per host.
``migration_host`` is deliberately NOT set (libvirt refuses a loopback address there);
instead the destination advertises its host name, which every host's private
``/etc/hosts`` resolves to that host's loopback address.

Live migration that works between these hosts (libvirt 9.0, QEMU 7.2), measured by
``tests/integration/test_virtlab.py``:

* managed, client-driven (non peer-to-peer)::

      dom.migrate(dest_conn, libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST, None, None, 0)

  with ``dest_conn`` opened on the destination's unix or TCP URI (both verified;
  ``dom.migrate3(dest_conn, {}, flags)`` works the same); no migration URI is
  needed: the destination picks a port in its range on its ``migration_address``
  and advertises ``tcp://<its host name>:<port>``, which the source qemu resolves
  through its private ``/etc/hosts``.  Returns the virDomain on the destination,
  which is ``RUNNING`` with reason ``VIR_DOMAIN_RUNNING_MIGRATED``.
* peer-to-peer::

      dom.migrateToURI3(dest.tcp_uri, {}, libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PEER2PEER | libvirt.VIR_MIGRATE_PERSIST_DEST)

  where the source libvirtd itself connects to the destination's TCP URI (the
  destination's unix URI also works: the socket's real path is visible in every
  namespace).

Without ``VIR_MIGRATE_UNDEFINE_SOURCE`` a persistent source domain stays defined and
ends ``SHUTOFF`` with reason ``VIR_DOMAIN_SHUTOFF_MIGRATED``; with it, the source
definition is removed.  Measured here: 2 hosts ready in ~0.15 s; a 64 MiB diskless
guest migrates in ~1.5-2.5 s; the booted 128 MiB TCG guest (with its dirtying
loop) in ~2.5-6 s; hosts stop in ~0.05 s.

``stop_hosts`` kills by recorded PIDs: every process whose mount namespace is the
host's recorded namespace (qemu, virtlogd, libvirtd), plus the qemu PIDs libvirt
recorded in ``run/qemu/*.pid``, each only after the identity checks above; qemu
first (SIGKILL), daemons with SIGTERM, then SIGKILL after a grace period, and waits
until none is left (zombies count as gone).  It is idempotent and does nothing when
no ``hosts.json`` exists.

:func:`kvm_usable` tells whether ``/dev/kvm`` can create a VM; on this kind of
machine KVM only runs diskless guests, so :func:`diskless_domain_type` uses it
and a guest that boots an OS always uses TCG (``type='qemu'``).
"""

import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field

from . import netns, sshd
from ..procs import boot_id, pid_alive, reap, start_time  # noqa: F401  (boot_id, pid_alive: part of this module's API)

HOSTS_FILE = "hosts.json"
DEFAULT_NAME_PREFIX = "virtlab-"
DEFAULT_FIRST_ADDRESS = "127.0.0.11"
DEFAULT_FIRST_TCP_PORT = 16611
DEFAULT_FIRST_MIGRATION_PORT = 49300
DEFAULT_MIGRATION_PORTS_PER_HOST = 50
PRIVATE_DIRS = (
    ("etc", "/etc/libvirt"),
    ("run", "/run/libvirt"),
    ("lib", "/var/lib/libvirt"),
    ("log", "/var/log/libvirt"),
    ("cache", "/var/cache/libvirt"),
)
NSINIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nsinit.py")

KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_API_VERSION = 12


class LabError(RuntimeError):
    """Raised when private hosts cannot be started."""


@dataclass
class HostInfo:  # pylint: disable=too-many-instance-attributes
    """One running private libvirt host, as recorded in hosts.json."""

    name: str
    index: int
    address: str
    host_uuid: str
    tcp_port: int
    migration_port_min: int
    migration_port_max: int
    root: str
    uri: str
    tcp_uri: str
    dirs: dict = field(default_factory=dict)
    pids: dict = field(default_factory=dict)
    mnt_ns: str = ""
    boot_id: str = ""
    # role -> start time of that PID (clock ticks since boot, /proc/<pid>/stat field 22)
    started: dict = field(default_factory=dict)
    # (st_dev, st_ino) of dirs["etc"]: what /proc/<pid>/root/etc/libvirt is for a process of this host
    etc_identity: list = field(default_factory=list)
    # the host's own sshd (start_hosts(ssh=True)): port on `address` (0: no sshd), the login's private home
    ssh_port: int = 0
    ssh_home: str = ""

    @property
    def socket_path(self):
        """Real path (valid in every namespace) of the read-write libvirt socket."""
        return os.path.join(self.dirs["run"], "libvirt-sock")

    @property
    def migration_ports(self):
        """(min, max) of the host's migration port range."""
        return (self.migration_port_min, self.migration_port_max)

    def qemu_log(self, domain_name):
        """Real path of libvirt's per-domain log (/var/log/libvirt/qemu/<name>.log inside the host)."""
        return os.path.join(self.dirs["log"], "qemu", domain_name + ".log")

    def real_path(self, path_in_host):
        """Translate a path as seen inside the host (e.g. /var/log/libvirt/x) to its real path."""
        for key, target in PRIVATE_DIRS:
            if path_in_host == target or path_in_host.startswith(target + "/"):
                return self.dirs[key] + path_in_host[len(target):]
        return path_in_host

    def to_dict(self):
        """JSON-serialisable form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data):
        """Inverse of to_dict (unknown keys are ignored)."""
        known = {key: value for key, value in data.items() if key in cls.__dataclass_fields__}  # pylint: disable=no-member
        return cls(**known)


# ----------------------------------------------------------------------------- KVM

def kvm_usable(device="/dev/kvm"):
    """True if device can be opened and a KVM VM created (env VIRTLAB_NO_KVM=1 forces False)."""
    if os.environ.get("VIRTLAB_NO_KVM", "") not in ("", "0"):
        return False
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if fcntl.ioctl(fd, KVM_GET_API_VERSION, 0) != KVM_API_VERSION:
            return False
        vm_fd = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
        os.close(vm_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def diskless_domain_type():
    """Domain type for a diskless (no OS) guest: 'kvm' when usable, else 'qemu' (TCG)."""
    return "kvm" if kvm_usable() else "qemu"


def os_guest_domain_type():
    """Domain type for a guest that boots an OS: always 'qemu' (TCG); KVM here only runs diskless guests."""
    return "qemu"


# ------------------------------------------------------------------- configuration

def _conf_value(value):
    """Render a Python value in libvirt's config syntax."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[ " + ", ".join(_conf_value(item) for item in value) + " ]"
    return json.dumps(str(value))


def write_conf(path, settings):
    """Write a libvirt .conf file holding exactly settings (nothing of the system's configuration)."""
    lines = ["# written by tools.virtlab: a private lab host's whole configuration"]
    lines += [f"{key} = {_conf_value(value)}" for key, value in settings.items()]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def _check_address(address):
    """Lab hosts listen on loopback addresses only."""
    try:
        parsed = ipaddress.IPv4Address(address)
    except ValueError as err:
        raise LabError(f"first_address {address!r} is not an IPv4 address") from err
    if not parsed.is_loopback:
        raise LabError(f"first_address {address}: lab hosts listen on loopback addresses (127.0.0.0/8) only")


def _plan_hosts(count, state_dir, first_address, *,  # pylint: disable=too-many-arguments,too-many-locals
                name_prefix, first_tcp_port, first_migration_port, ports_per_host):
    """Compute the HostInfo of every host (no pids yet)."""
    _check_address(first_address)
    base = ipaddress.IPv4Address(first_address)
    hosts = []
    for index in range(count):
        name = f"{name_prefix}{index + 1}"
        address = str(base + index)
        _check_address(address)
        root = os.path.join(state_dir, name)
        dirs = {key: os.path.join(root, key) for key, _target in PRIVATE_DIRS}
        dirs["hosts_file"] = os.path.join(root, "hosts")
        tcp_port = first_tcp_port + index
        port_min = first_migration_port + index * ports_per_host
        hosts.append(HostInfo(
            name=name, index=index, address=address, host_uuid=str(uuid.uuid4()), tcp_port=tcp_port,
            migration_port_min=port_min, migration_port_max=port_min + ports_per_host - 1, root=root,
            uri="qemu+unix:///system?socket=" + os.path.join(dirs["run"], "libvirt-sock"),
            tcp_uri=f"qemu+tcp://{address}:{tcp_port}/system", dirs=dirs))
    return hosts


def _prepare_host(host, all_hosts):
    """Create the host's private directories and configuration from scratch."""
    shutil.rmtree(host.root, ignore_errors=True)
    os.makedirs(host.root, mode=0o700)
    for key, _target in PRIVATE_DIRS:
        os.makedirs(host.dirs[key], mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(host.dirs["log"], "qemu"), exist_ok=True)
    etc = os.stat(host.dirs["etc"])
    host.etc_identity = [etc.st_dev, etc.st_ino]

    # Written from scratch: nothing of the system's /etc/libvirt (domains, pools, networks, secrets, nwfilters,
    # hooks, autostart links) may reach a private host, or it would see, start and touch the machine's own VMs.
    write_conf(os.path.join(host.dirs["etc"], "libvirtd.conf"), {
        "listen_tls": 0,
        "listen_tcp": 1,
        "listen_addr": host.address,
        "tcp_port": str(host.tcp_port),
        "auth_tcp": "none",
        "auth_unix_ro": "none",
        "auth_unix_rw": "none",
        "unix_sock_group": "root",
        "unix_sock_ro_perms": "0700",
        "unix_sock_rw_perms": "0700",
        "unix_sock_admin_perms": "0700",
        "host_uuid": host.host_uuid,
        "log_outputs": "3:file:/var/log/libvirt/libvirtd.log",
    })
    write_conf(os.path.join(host.dirs["etc"], "qemu.conf"), {
        "cgroup_controllers": [],
        "security_driver": "none",
        "namespaces": [],
        "user": "root",
        "group": "root",
        "dynamic_ownership": 0,
        "remember_owner": 0,
        "migration_address": host.address,
        "migration_port_min": host.migration_port_min,
        "migration_port_max": host.migration_port_max,
    })
    write_conf(os.path.join(host.dirs["etc"], "virtlogd.conf"), {
        "log_outputs": "3:file:/var/log/libvirt/virtlogd.log",
    })
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{other.address}\t{other.name}" for other in all_hosts]
    with open(host.dirs["hosts_file"], "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")

    config = {
        "hostname": host.name,
        "binds": [[host.dirs[key], target] for key, target in PRIVATE_DIRS] + [[host.dirs["hosts_file"], "/etc/hosts"]],
        "virtlogd_argv": [which("virtlogd"), "--config", "/etc/libvirt/virtlogd.conf", "--pid-file", "/run/libvirt/virtlogd.pid"],
        "virtlogd_pid_file": os.path.join(host.dirs["run"], "virtlogd.child-pid"),
        "virtlogd_stdout": os.path.join(host.root, "daemon.log"),
        "virtlogd_socket": "/run/libvirt/virtlogd-sock",
        "libvirtd_argv": [which("libvirtd"), "--listen", "--config", "/etc/libvirt/libvirtd.conf", "--pid-file", "/run/libvirt/libvirtd.pid"],
    }
    with open(os.path.join(host.root, "nsinit.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)


def which(program):
    """Absolute path of a program, also looking in the sbin directories."""
    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    found = shutil.which(program, path=path)
    if not found:
        raise LabError(f"{program} not found (install libvirt-daemon-system)")
    return found


# -------------------------------------------------------------------- processes

def belongs_to(pid, host):
    """True if pid lives in host: the /etc/libvirt it sees is the host's private etc directory (same device and inode).

    A recorded mount namespace id or a PID in a stale pid file may name an unrelated process (ids are reused,
    after a reboot or within one boot); the private configuration directory bind-mounted over /etc/libvirt is
    seen only by the host's own processes.
    """
    if not host.etc_identity:
        return False
    try:
        seen = os.stat(f"/proc/{pid}/root/etc/libvirt")
    except OSError:
        return False
    return [seen.st_dev, seen.st_ino] == list(host.etc_identity)


def mount_namespace(pid):
    """The mount namespace id ("mnt:[inode]") of a process, or "" if unknown."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def processes_in_namespace(mnt_ns):
    """PIDs of live processes whose mount namespace is mnt_ns."""
    if not mnt_ns:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and mount_namespace(int(entry)) == mnt_ns and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def _qemu_pids(host):
    """Live qemu PIDs of a host: its mount namespace, plus libvirt's run/qemu/*.pid files; each checked to be the host's."""
    pids = set()
    for pid in processes_in_namespace(host.mnt_ns):
        if pid not in host.pids.values() and belongs_to(pid, host):
            pids.add(pid)
    qemu_run = os.path.join(host.dirs.get("run", ""), "qemu")
    if os.path.isdir(qemu_run):
        for entry in os.listdir(qemu_run):
            if not entry.endswith(".pid"):
                continue
            try:
                with open(os.path.join(qemu_run, entry), encoding="utf-8") as handle:
                    pid = int(handle.read().strip() or 0)
            except (OSError, ValueError):
                continue
            argv = _cmdline(pid)
            if pid > 0 and pid_alive(pid) and argv and b"qemu" in os.path.basename(argv[0]) and b"-name" in argv and belongs_to(pid, host):
                pids.add(pid)
    return sorted(pids)


def _recorded_daemon(host, role):
    """The recorded PID of a daemon if that very process still runs in the host (same start time, same /etc/libvirt)."""
    pid = host.pids.get(role)
    if not pid or not pid_alive(pid):
        return None
    if start_time(pid) != host.started.get(role) or not belongs_to(pid, host):
        return None
    return pid


def _signal(pid, signum):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_gone(pids, timeout):
    """Wait until none of pids is alive (reaping our own children); return the ones still alive."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        reap(pid)
    alive = [pid for pid in pids if pid_alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        for pid in alive:
            reap(pid)
        alive = [pid for pid in alive if pid_alive(pid)]
    return alive


# ------------------------------------------------------------------------ public

def load_hosts(state_dir):
    """The hosts recorded in <state_dir>/hosts.json ([] if none)."""
    path = os.path.join(os.path.abspath(state_dir), HOSTS_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return [HostInfo.from_dict(item) for item in data.get("hosts", [])]


def _write_hosts(state_dir, hosts):
    path = os.path.join(state_dir, HOSTS_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"version": 1, "hosts": [host.to_dict() for host in hosts]}, handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)


def _log_tail(host, lines=30):
    text = []
    for name in (os.path.join(host.root, "daemon.log"), os.path.join(host.dirs["log"], "libvirtd.log")):
        if os.path.exists(name):
            with open(name, encoding="utf-8", errors="replace") as handle:
                text.append(f"==> {name} <==\n" + "".join(handle.readlines()[-lines:]))
    return "\n".join(text)


def _wait_ready(host, proc, deadline):
    """Wait until the host answers on its unix socket with its own host name; fill pids and mnt_ns."""
    import libvirt  # pylint: disable=import-outside-toplevel
    last_error = "socket not created"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"host {host.name} exited with status {proc.returncode}\n{_log_tail(host)}")
        if os.path.exists(host.socket_path):
            try:
                conn = libvirt.open(host.uri)
                try:
                    hostname = conn.getHostname()
                finally:
                    conn.close()
                if hostname == host.name:
                    break
                last_error = f"host name is {hostname!r}"
            except libvirt.libvirtError as err:
                last_error = str(err)
        time.sleep(0.02)
    else:
        raise LabError(f"host {host.name} not ready: {last_error}\n{_log_tail(host)}")
    host.mnt_ns = mount_namespace(proc.pid)
    if not host.mnt_ns or host.mnt_ns == mount_namespace(os.getpid()):
        raise LabError(f"host {host.name} does not run in a private mount namespace")
    with open(os.path.join(host.dirs["run"], "virtlogd.child-pid"), encoding="utf-8") as handle:
        host.pids["virtlogd"] = int(handle.read().strip())
    host.started["virtlogd"] = start_time(host.pids["virtlogd"])


def _abort_start(state_dir, hosts, procs):
    """Clean up after a failed start: stop the launchers/libvirtds, then everything in their namespaces."""
    for proc in procs:
        if proc.poll() is None:
            _signal(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    own_ns = mount_namespace(os.getpid())
    for host in hosts:
        # virtlogd outlives a libvirtd that failed; find it (and so the namespace) through its pid file.
        try:
            with open(os.path.join(host.dirs["run"], "virtlogd.child-pid"), encoding="utf-8") as handle:
                pid = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        namespace = mount_namespace(pid)
        if pid_alive(pid) and namespace and namespace != own_ns and belongs_to(pid, host):
            host.pids["virtlogd"] = pid
            host.started["virtlogd"] = start_time(pid)
            host.mnt_ns = namespace
    _write_hosts(state_dir, hosts)
    stop_hosts(state_dir)


def start_hosts(count, state_dir, first_address=DEFAULT_FIRST_ADDRESS, *, name_prefix=DEFAULT_NAME_PREFIX,  # pylint: disable=too-many-arguments,too-many-locals
                first_tcp_port=DEFAULT_FIRST_TCP_PORT, first_migration_port=DEFAULT_FIRST_MIGRATION_PORT,
                migration_ports_per_host=DEFAULT_MIGRATION_PORTS_PER_HOST, timeout=60.0, ssh=False,
                ssh_port=sshd.DEFAULT_PORT, ssh_public_key=None, ssh_python=None):
    """Start count private libvirt hosts under state_dir (stopping any recorded there first).

    Returns the list of HostInfo, also written to <state_dir>/hosts.json.  With ``ssh=True`` every host also
    runs its own sshd (see :mod:`tools.virtlab.sshd`) on ``<address>:<ssh_port>`` accepting root with the
    public key file ``ssh_public_key`` (default: a key pair the lab makes, ``<state_dir>/ssh/id_ed25519``),
    and the lab writes ``<state_dir>/inventory.json`` (managed nodes use ``ssh_python``, default this Python).
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    if not netns.wait_private():
        raise LabError("private hosts listen on TCP without authentication and run qemu as root: they start only inside a "
                       "private network namespace (no interface but loopback), e.g. python -m tools.virtlab netns -- COMMAND")
    state_dir = os.path.abspath(state_dir)
    hosts = _plan_hosts(count, state_dir, first_address, name_prefix=name_prefix, first_tcp_port=first_tcp_port,
                        first_migration_port=first_migration_port, ports_per_host=migration_ports_per_host)
    # an existing state directory must be this user's and writable by nobody else (its sshd runs StrictModes no)
    try:
        sshd.check_private_dir(state_dir)
    except sshd.SshdError as exc:
        raise LabError(str(exc)) from None
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    stop_hosts(state_dir)
    unshare = which("unshare")
    procs = []
    try:
        for host in hosts:
            _prepare_host(host, hosts)
            with open(os.path.join(host.root, "daemon.log"), "ab") as log:
                proc = subprocess.Popen(  # pylint: disable=consider-using-with
                    [unshare, "--mount", "--uts", "--propagation", "private", sys.executable, NSINIT, os.path.join(host.root, "nsinit.json")],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
            host.pids = {"libvirtd": proc.pid}
            host.boot_id = boot_id()
            host.started = {"libvirtd": start_time(proc.pid)}
            procs.append(proc)
            # Record as we go so that stop_hosts can clean up after a failure.
            _write_hosts(state_dir, hosts[:len(procs)])
        deadline = time.monotonic() + timeout
        for host, proc in zip(hosts, procs):
            _wait_ready(host, proc, deadline)
        if ssh:
            try:
                _start_sshds(state_dir, hosts, procs, ssh_port, ssh_public_key, ssh_python, deadline)
            except (sshd.SshdError, subprocess.CalledProcessError, OSError) as err:
                raise LabError(f"sshd: {err}") from err
        _write_hosts(state_dir, hosts)
    except BaseException:
        _abort_start(state_dir, hosts[:len(procs)], procs)
        raise
    return hosts


def _start_sshds(state_dir, hosts, procs, port, public_key, python, deadline):  # pylint: disable=too-many-arguments
    """Give every (ready) host its sshd inside its namespaces; write the inventory and known_hosts."""
    client_key, public_key = sshd.client_key(state_dir, public_key)
    for host, proc in zip(hosts, procs):
        host.ssh_port = port
        host.ssh_home = os.path.join(host.root, "home")
        config = sshd.prepare(host.root, host.address, port, public_key, host.ssh_home)
        host.pids["sshd"] = sshd.launch(which("nsenter"), proc.pid, config, os.path.join(host.root, "daemon.log"))
        host.started["sshd"] = start_time(host.pids["sshd"])
        _write_hosts(state_dir, hosts)
    for host in hosts:
        sshd.wait_listening(host.address, port, host.pids["sshd"], deadline, lambda host=host: _log_tail(host))
    sshd.write_known_hosts(state_dir, [(host.address, port, host.root) for host in hosts])
    sshd.write_inventory(state_dir, [{"name": host.name, "address": host.address, "port": port, "home": host.ssh_home} for host in hosts],
                         client_key, python or sys.executable)


def host_processes(host):
    """All live processes belonging to a host: {"libvirtd": [..], "virtlogd": [..], "qemu": [..]}.

    Nothing is a host's unless proven: same boot, and each process seen to live in the host (see belongs_to).
    """
    if not host.boot_id or host.boot_id != boot_id():
        return {"qemu": [], **{role: [] for role in host.pids}}
    result = {"qemu": _qemu_pids(host)}
    for role in host.pids:
        pid = _recorded_daemon(host, role)
        result[role] = [pid] if pid else []
    return result


def stop_hosts(state_dir, timeout=15.0):
    """Stop the hosts recorded in <state_dir>/hosts.json; returns the PIDs signalled.

    Idempotent and safe when nothing runs.  qemu processes are killed first, then
    virtlogd and libvirtd get SIGTERM, and SIGKILL after timeout seconds.
    """
    state_dir = os.path.abspath(state_dir)
    hosts = load_hosts(state_dir)
    signalled = []
    daemons = []
    for host in hosts:
        processes = host_processes(host)
        for pid in processes["qemu"]:
            _signal(pid, signal.SIGKILL)
            signalled.append(pid)
        for role, pids in processes.items():
            if role != "qemu":
                daemons.extend(pids)
    for pid in daemons:
        _signal(pid, signal.SIGTERM)
        signalled.append(pid)
    leftover = _wait_gone(signalled, timeout)
    # Anything else that is still in one of the hosts' namespaces (and proven to be the host's).
    current_boot = boot_id()
    for host in hosts:
        if host.boot_id == current_boot:
            leftover.extend(pid for pid in processes_in_namespace(host.mnt_ns) if pid not in leftover and belongs_to(pid, host))
    for pid in leftover:
        _signal(pid, signal.SIGKILL)
    leftover = _wait_gone(leftover, 10.0)
    if leftover:
        raise LabError(f"processes still alive after SIGKILL: {leftover}")
    path = os.path.join(state_dir, HOSTS_FILE)
    if os.path.exists(path):
        os.unlink(path)
    return signalled


def hosts_status(state_dir):
    """Status of each recorded host: name, uris and live PIDs per role."""
    status = []
    for host in load_hosts(state_dir):
        processes = host_processes(host)
        status.append({
            "name": host.name, "address": host.address, "uri": host.uri, "tcp_uri": host.tcp_uri,
            "running": bool(processes.get("libvirtd")), "processes": processes,
        })
    return status
