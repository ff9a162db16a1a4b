"""Private lab hosts start clean, stay private and kill only what they started (tools/virtlab).

* A machine whose own libvirt daemon holds thousands of persistent domains, a running VM, a VM with a disk whose
  converge record says ACTIVE, a storage pool and a network: private hosts list none of it, a reconcile with ``fix``
  and the demo leave it byte-identical (tests/integration/system_world.py builds that machine in a private mount
  namespace, with the standard daemon and paths).
* No root door: lab hosts start only in a private network namespace, on loopback addresses; a local non-root user
  reaches neither their TCP listeners (from the machine's network namespace) nor their unix sockets.
* ``hosts stop`` with a state directory from an earlier boot, or with recorded PIDs and a namespace id that now
  belong to other processes, kills nothing.
"""

import ctypes
import json
import os
import stat
import subprocess
import sys
import time

import libvirt
import pytest

from tools.virtlab import hosts as virtlab_hosts
from tools.virtlab import netns as virtlab_netns

pytest_plugins = ["tests.integration.virtlab_fixtures"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEM_PYTHON = "/usr/bin/python3"  # nobody cannot run the pyenv/venv interpreters under /root
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
CLONE_NEWNS = 0x00020000
SYSTEM_DOMAINS = 2000


# ---------------------------------------------------------------------------------------------- the operator's machine

@pytest.fixture(scope="module")
def system_world(tmp_path_factory):
    """Run system_world.py in a private mount namespace; its JSON report."""
    work = tmp_path_factory.mktemp("system-world")
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                             os.path.join(ROOT, "tests", "integration", "system_world.py"), str(work), str(SYSTEM_DOMAINS)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, timeout=900)
    assert result.returncode == 0, result.stderr.decode()[-4000:]
    report = json.loads(result.stdout)
    report["work"] = str(work)
    return report


def test_private_hosts_see_nothing_of_the_machine(system_world):
    """No domain, pool, network, secret or nwfilter of the machine's daemon is on any private host."""
    before = system_world["system_before"]
    assert before["domains"] == SYSTEM_DOMAINS + 2  # the world was really built
    for when in ("hosts_at_start", "hosts_after_converge"):
        for name, view in system_world[when].items():
            assert view["domains"] == [], (when, name)
            assert view["pools"] == [] and view["networks"] == [] and view["secrets"] == [] and view["nwfilters"] == [], (when, name)
            # the configuration is the lab's own three files (libvirtd creates empty secrets/ and nwfilter/ itself)
            assert [entry for entry in view["etc"] if entry.endswith(".conf")] == ["libvirtd.conf", "qemu.conf", "virtlogd.conf"], view
            assert "hooks" not in view["etc"] and "storage" not in view["etc"], view


def test_reconcile_fix_on_private_hosts_touches_nothing_of_the_machine(system_world):
    """reconcile with fix ran on every private host and reported none of the machine's VMs."""
    assert len(system_world["converge"]) == 2
    for run in system_world["converge"]:
        assert run["rc"] == 0, run
        text = json.dumps(run["results"])
        assert "operator-precious" not in text and "bench-0" not in text and "operator-running" not in text
        info = [result for result in run["results"] if "vms" in result]
        assert info and info[0]["vms"] == [], run


def test_machine_vms_are_byte_identical_after_the_lab_and_the_demo(system_world):
    """The system VM's definition (daemon and file), its disk, its power state, the running VM, the pool and network."""
    assert system_world["demo_rc"] == 0, open(os.path.join(system_world["work"], "demo.out"), encoding="utf-8").read()[-4000:]
    before, after = system_world["system_before"], system_world["system_after"]
    assert after == before
    assert before["precious_state"] == libvirt.VIR_DOMAIN_SHUTOFF  # recorded ACTIVE, never started by anyone
    assert before["running_state"] == libvirt.VIR_DOMAIN_RUNNING and before["running_id"] > 0


# ------------------------------------------------------------------------------------------------------- no root door

def _outer_network_namespace():
    """The network namespace of the nearest ancestor outside ours: where the machine's other users are."""
    own = virtlab_netns.network_namespace()
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            pid = int(next(line.split()[1] for line in handle if line.startswith("PPid:")))
        if pid and virtlab_netns.network_namespace(pid) not in ("", own):
            return f"/proc/{pid}/ns/net"
    return "/proc/1/ns/net"


PROBE = """
import json, socket, sys
out = {}
for kind, target in json.loads(sys.argv[1]):
    family = socket.AF_UNIX if kind == "unix" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(target if kind == "unix" else tuple(target))
        out[str(target)] = "connected"
    except OSError as err:
        out[str(target)] = type(err).__name__
    finally:
        sock.close()
print(json.dumps(out))
"""


def _probe(targets, outer=False):
    argv = NOBODY + [SYSTEM_PYTHON, "-c", PROBE, json.dumps(targets)]
    if outer:
        argv = ["nsenter", "--net=" + _outer_network_namespace()] + argv
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True, timeout=60)
    return json.loads(result.stdout)


def test_lab_runs_in_a_private_network_namespace(libvirt_hosts):
    """The lab's network namespace has no interface but loopback, and it is not the machine's."""
    assert virtlab_netns.wait_private()  # (waits while test_golden_journey's veth to its nested namespace exists)
    assert virtlab_netns.network_namespace() != os.readlink(_outer_network_namespace())
    for host in libvirt_hosts:
        assert virtlab_netns.network_namespace(host.pids["libvirtd"]) == virtlab_netns.network_namespace()


def test_a_bridge_and_taps_made_inside_keep_the_namespace_private_and_a_veth_does_not():
    """What counts as leading out, checked in a namespace of its own (a test's libvirt network must not stop other labs)."""
    script = (
        "import subprocess, json\n"
        "from tools.virtlab import netns\n"
        "out = [netns.in_private_network_namespace()]\n"
        "run = lambda *argv: subprocess.run(['ip'] + list(argv), check=True)\n"
        "run('link', 'add', 'iso-br0', 'type', 'bridge'); run('tuntap', 'add', 'dev', 'iso-tap0', 'mode', 'tap')\n"
        "run('link', 'set', 'iso-tap0', 'master', 'iso-br0')\n"
        "out.append(netns.in_private_network_namespace())\n"
        "run('link', 'add', 'iso-veth0', 'type', 'veth', 'peer', 'name', 'iso-veth1')\n"
        "out.append(netns.in_private_network_namespace())\n"
        # a veth that stays: a lab start waits, then refuses; one removed meanwhile (another test's link): it waits, then starts
        "out.append(netns.wait_private(timeout=1))\n"
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(1), run('link', 'del', 'iso-veth0'))).start()\n"
        "out.append(netns.wait_private(timeout=30))\n"
        "print(json.dumps(out))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-m", "tools.virtlab", "netns", "--new", "--", sys.executable, "-c", script], cwd=root,
                            capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(result.stdout) == [True, True, False, False, True], result.stderr


def test_local_user_cannot_reach_a_lab_daemon(libvirt_hosts):
    """nobody: TCP refused from the machine's network namespace, unix sockets refused everywhere; root gets in."""
    host = libvirt_hosts[0]
    sockets = [os.path.join(host.dirs["run"], name) for name in ("libvirt-sock", "libvirt-sock-ro", "libvirt-admin-sock")]
    for path in sockets:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
    assert stat.S_IMODE(os.stat(host.root).st_mode) & 0o077 == 0
    tcp = ["tcp", [host.address, host.tcp_port]]
    outside = _probe([tcp], outer=True)
    assert outside[str(tcp[1])] == "ConnectionRefusedError", outside
    inside = _probe([tcp] + [["unix", path] for path in sockets])
    # the probe itself works: inside the lab's namespace the TCP port answers (only the namespace guards it) ...
    assert inside[str(tcp[1])] == "connected", inside
    # ... and the unix sockets refuse the non-root user
    for path in sockets:
        assert inside[path] == "PermissionError", inside
    conn = libvirt.open(host.uri)  # root still gets in
    assert conn.getHostname() == host.name
    conn.close()


def test_hosts_refuse_outside_a_private_network_namespace(tmp_path):
    """start_hosts in the machine's network namespace, or on a non-loopback address, is refused before anything starts."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from tools.virtlab import hosts\n"
            "try:\n    hosts.start_hosts(1, sys.argv[2])\nexcept hosts.LabError as err:\n    print(err)\n")
    result = subprocess.run(["nsenter", "--net=" + _outer_network_namespace(), sys.executable, "-c", code, ROOT, str(tmp_path / "lab")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True, timeout=60)
    assert b"private network namespace" in result.stdout, result
    assert not (tmp_path / "lab").exists()
    with pytest.raises(virtlab_hosts.LabError, match="loopback"):
        virtlab_hosts.start_hosts(1, str(tmp_path / "lab2"), first_address="192.0.2.10")
    assert not (tmp_path / "lab2").exists()


# -------------------------------------------------------------------------------------------- stop kills only the lab's

def _victim(tmp_path, name, own_mount_namespace=True):
    """A process that looks like a qemu (argv[0] and -name) in a mount namespace of its own."""
    libc = ctypes.CDLL(None, use_errno=True)

    def _unshare():
        if own_mount_namespace and libc.unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare")

    return subprocess.Popen(  # pylint: disable=consider-using-with
        ["qemu-system-x86_64", "-c", "import time; time.sleep(600)", "-name", name], executable=sys.executable,
        preexec_fn=_unshare, cwd=str(tmp_path))


def _stale_state(tmp_path, victims, boot):
    """A state directory as a lab leaves it, naming the victims' PIDs and namespace."""
    state_dir = tmp_path / "state"
    host_root = state_dir / "virtlab-1"
    dirs = {key: str(host_root / key) for key, _target in virtlab_hosts.PRIVATE_DIRS}
    for path in dirs.values():
        os.makedirs(path, exist_ok=True)
    os.makedirs(os.path.join(dirs["run"], "qemu"))
    with open(os.path.join(dirs["run"], "qemu", "vm.pid"), "w", encoding="utf-8") as handle:
        handle.write(f"{victims[2].pid}\n")
    etc = os.stat(dirs["etc"])
    info = virtlab_hosts.HostInfo(
        name="virtlab-1", index=0, address="127.0.0.11", host_uuid="00000000-0000-0000-0000-000000000001", tcp_port=16611,
        migration_port_min=49300, migration_port_max=49349, root=str(host_root), uri="qemu+unix:///system", tcp_uri="qemu+tcp://127.0.0.11/system",
        dirs=dirs, pids={"libvirtd": victims[0].pid, "virtlogd": victims[1].pid}, mnt_ns=virtlab_hosts.mount_namespace(victims[0].pid),
        boot_id=boot, started={"libvirtd": 1, "virtlogd": 1}, etc_identity=[etc.st_dev, etc.st_ino])
    with open(state_dir / "hosts.json", "w", encoding="utf-8") as handle:
        json.dump({"version": 1, "hosts": [info.to_dict()]}, handle)
    return state_dir


@pytest.mark.parametrize("boot", ["earlier-boot", "this-boot"])
def test_stale_state_dir_kills_nothing_else(tmp_path, boot):
    """After a (simulated) reboot, or with PIDs and a namespace id reused by others, hosts stop signals nothing."""
    victims = [_victim(tmp_path, f"victim-{index}") for index in range(3)]
    try:
        time.sleep(0.2)  # the victims are in their own mount namespace
        # the victims share one namespace id for the record: make the first one's the recorded namespace
        state_dir = _stale_state(tmp_path, victims, virtlab_hosts.boot_id() if boot == "this-boot" else "0000-" + boot)
        assert virtlab_hosts.processes_in_namespace(virtlab_hosts.mount_namespace(victims[0].pid)) == [victims[0].pid]
        signalled = virtlab_hosts.stop_hosts(str(state_dir), timeout=2)
        assert signalled == []
        for victim in victims:
            assert victim.poll() is None, "an unrelated process was killed"
        assert not (state_dir / "hosts.json").exists()
    finally:
        for victim in victims:
            victim.kill()
            victim.wait()
