"""A machine whose own libvirt daemon holds VMs, pools and a network: do private lab hosts stay clear of it?

Run by tests/integration/test_lab_isolation.py as::

    unshare --mount --propagation private <python> tests/integration/system_world.py WORK_DIR DOMAIN_COUNT

Inside that private mount namespace this script plays the operator's machine without touching the real
one: it bind-mounts a copy of the machine's /etc/libvirt (the Debian configuration) and empty run/lib/log/cache
directories over the standard libvirt paths, and starts the standard system daemon (libvirtd + virtlogd, the
very binaries and paths of libvirt-daemon-system) there.  Through qemu:///system it then defines what an
operator has: DOMAIN_COUNT persistent domains, a persistent VM with a disk whose converge record says ACTIVE
while it is shut off (the drift a reconcile with ``fix`` would "repair" by starting it), a running VM, a storage
pool in a temporary directory with a volume, and a network.

Then, in the same mount namespace (so the lab code sees that populated /etc/libvirt at its real path): private
hosts start, every host lists what it holds, ``converge.virt.reconcile`` with ``fix`` and ``vm_info`` run against
each of them, and the demo playbook runs (in a network namespace of its own).  The script prints one JSON
document: what the system daemon held before and after (XML, file bytes, checksums, states, PIDs), what each
private host listed, and the ansible results.  The test asserts; this script only observes (it exits non-zero
only when it cannot build the world).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import libvirt  # noqa: E402  pylint: disable=wrong-import-position

from tests.integration import ansible_run  # noqa: E402  pylint: disable=wrong-import-position
from tools.virtlab import domains, hosts  # noqa: E402  pylint: disable=wrong-import-position

SYSTEM_PATHS = (("etc", "/etc/libvirt"), ("run", "/run/libvirt"), ("lib", "/var/lib/libvirt"), ("log", "/var/log/libvirt"),
                ("cache", "/var/cache/libvirt"))
CONVERGE_NS = "https://converge.virt/xmlns/vm/1"
PRECIOUS = "operator-precious"
RUNNING = "operator-running"
POOL = "operator-pool"
NETWORK = "operator-net"


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _bench_domain_xml(index):
    domain = ET.Element("domain", {"type": "qemu"})
    ET.SubElement(domain, "name").text = f"bench-{index:05d}"
    ET.SubElement(domain, "uuid").text = str(uuid.uuid4())
    ET.SubElement(domain, "memory", {"unit": "KiB"}).text = "65536"
    ET.SubElement(domain, "vcpu").text = "1"
    os_elem = ET.SubElement(domain, "os")
    ET.SubElement(os_elem, "type", {"arch": "x86_64", "machine": "pc"}).text = "hvm"
    ET.SubElement(domain, "devices")
    return ET.tostring(domain, encoding="unicode")


def _precious_xml(disk):
    domain = ET.fromstring(domains.diskless_domain_xml(PRECIOUS, "qemu", memory_mib=32))
    devices = domain.find("devices")
    disk_elem = ET.SubElement(devices, "disk", {"type": "file", "device": "disk"})
    ET.SubElement(disk_elem, "driver", {"name": "qemu", "type": "raw"})
    ET.SubElement(disk_elem, "source", {"file": disk})
    ET.SubElement(disk_elem, "target", {"dev": "vda", "bus": "virtio"})
    metadata = ET.SubElement(domain, "metadata")
    record = ET.SubElement(metadata, f"{{{CONVERGE_NS}}}vm")
    # The record of a VM that the collection started: reconcile sees ACTIVE vs a shut-off power state.
    for key, value in (("vm_state", "ACTIVE"), ("last_action", "start"), ("generation", "3")):
        ET.SubElement(record, f"{{{CONVERGE_NS}}}{key}").text = value
    return ET.tostring(domain, encoding="unicode")


def _pool_xml(path):
    pool = ET.Element("pool", {"type": "dir"})
    ET.SubElement(pool, "name").text = POOL
    ET.SubElement(ET.SubElement(pool, "target"), "path").text = path
    return ET.tostring(pool, encoding="unicode")


def _volume_xml():
    volume = ET.Element("volume")
    ET.SubElement(volume, "name").text = "operator-data.raw"
    ET.SubElement(volume, "capacity", {"unit": "MiB"}).text = "1"
    ET.SubElement(ET.SubElement(volume, "target"), "format", {"type": "raw"})
    return ET.tostring(volume, encoding="unicode")


def _network_xml():
    network = ET.Element("network")
    ET.SubElement(network, "name").text = NETWORK
    ET.SubElement(network, "bridge", {"name": "opbr0"})
    ip = ET.SubElement(network, "ip", {"address": "192.0.2.1", "netmask": "255.255.255.0"})
    del ip  # documentation range, never started: only defined
    return ET.tostring(network, encoding="unicode")


def _bind_system_paths(work):
    """The fake machine's libvirt: a copy of the real configuration, empty state, at the standard paths."""
    for key, target in SYSTEM_PATHS:
        source = os.path.join(work, "system", key)
        if key == "etc":
            shutil.copytree("/etc/libvirt", source, symlinks=True)
        else:
            os.makedirs(source)
        os.makedirs(target, exist_ok=True)
        subprocess.run(["mount", "--bind", source, target], check=True)
    # The operator's daemon runs qemu as root without cgroups or a security driver here (this machine has no
    # systemd); only these settings of its qemu.conf are ours, the rest of /etc/libvirt is the machine's.
    with open("/etc/libvirt/qemu.conf", "w", encoding="utf-8") as handle:
        handle.write('cgroup_controllers = [ ]\nsecurity_driver = "none"\nnamespaces = [ ]\nuser = "root"\ngroup = "root"\n')


def _start_system_daemon(work):
    log = open(os.path.join(work, "system-daemon.log"), "ab")  # pylint: disable=consider-using-with
    virtlogd = subprocess.Popen([hosts.which("virtlogd")], stdout=log, stderr=subprocess.STDOUT)
    libvirtd = subprocess.Popen([hosts.which("libvirtd")], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            return virtlogd, libvirtd, libvirt.open("qemu:///system")
        except libvirt.libvirtError:
            if time.monotonic() > deadline or libvirtd.poll() is not None:
                raise
            time.sleep(0.1)


def _system_view(conn, work):
    precious = conn.lookupByName(PRECIOUS)
    running = conn.lookupByName(RUNNING)
    with open(os.path.join("/etc/libvirt/qemu", PRECIOUS + ".xml"), "rb") as handle:
        precious_file = handle.read()
    pool = conn.storagePoolLookupByName(POOL)
    pool.refresh(0)
    return {
        "domains": len(conn.listAllDomains()),
        "precious_xml": precious.XMLDesc(0),
        "precious_file_sha256": hashlib.sha256(precious_file).hexdigest(),
        "precious_state": precious.state()[0],
        "precious_disk_sha256": _sha256(os.path.join(work, "precious-disk.raw")),
        "running_state": running.state()[0],
        "running_id": running.ID(),
        "pool_xml": _pool_definition(pool),
        "pool_volumes": sorted(pool.listVolumes()),
        "network_xml": conn.networkLookupByName(NETWORK).XMLDesc(0),
    }


def _pool_definition(pool):
    """The pool's XML without the figures of its filesystem (capacity, allocation, available move with the whole disk)."""
    root = ET.fromstring(pool.XMLDesc(0))
    for tag in ("capacity", "allocation", "available"):
        for element in root.findall(tag):
            root.remove(element)
    return ET.tostring(root, encoding="unicode")


def _host_view(host):
    conn = libvirt.open(host.tcp_uri)
    try:
        return {
            "domains": sorted(dom.name() for dom in conn.listAllDomains()),
            "pools": sorted(pool.name() for pool in conn.listAllStoragePools()),
            "networks": sorted(net.name() for net in conn.listAllNetworks()),
            "secrets": sorted(secret.UUIDString() for secret in conn.listAllSecrets()),
            "nwfilters": sorted(nwfilter.name() for nwfilter in conn.listAllNWFilters()),
            "etc": sorted(os.listdir(host.dirs["etc"])),
        }
    finally:
        conn.close()


def _ansible(argv, work, name):
    env = ansible_run.ansible_env({"ANSIBLE_LOCAL_TEMP": os.path.join(work, "ansible-tmp")})
    result = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    with open(os.path.join(work, name + ".out"), "wb") as handle:
        handle.write(result.stdout)
    return result.returncode, result.stdout.decode("utf-8", "replace")


def _module_results(output):
    """The module results of a results_json ansible-playbook run (tests/integration/callback_plugins)."""
    try:
        data = json.loads(output[output.index("{"):])
    except ValueError:
        return []
    return [result for play in data.get("plays", []) for task in play.get("tasks", []) for result in task.get("hosts", {}).values()]


def _converge_on_lab(lab, work):
    """converge.virt.reconcile with fix, then vm_info, on every private host (a playbook per host)."""
    bindir = os.path.dirname(sys.executable)
    runs = []
    for host in lab:
        playbook = os.path.join(work, f"converge-{host.name}.yml")
        with open(playbook, "w", encoding="utf-8") as handle:
            json.dump([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
                {"name": "reconcile with fix", "converge.virt.reconcile": {"uri": host.tcp_uri, "fix": True}},
                {"name": "every VM", "converge.virt.vm_info": {"uri": host.tcp_uri}},
            ]}], handle)
        returncode, output = _ansible([os.path.join(bindir, "ansible-playbook"), "-i", "localhost,", "-e",
                                       "ansible_python_interpreter=" + sys.executable, playbook], work, "converge-" + host.name)
        runs.append({"host": host.name, "rc": returncode, "results": _module_results(output)})
    return runs


def main(work, count):
    """Build the world, run the lab against it, print what was seen."""
    _bind_system_paths(work)
    for index in range(count):
        with open(f"/etc/libvirt/qemu/bench-{index:05d}.xml", "w", encoding="utf-8") as handle:
            handle.write(_bench_domain_xml(index))
    disk = os.path.join(work, "precious-disk.raw")
    with open(disk, "wb") as handle:
        handle.write(os.urandom(4 << 20))
    os.makedirs(os.path.join(work, "operator-pool"))
    virtlogd, libvirtd, conn = _start_system_daemon(work)
    report = {}
    try:
        conn.defineXML(_precious_xml(disk))
        running = conn.defineXML(domains.diskless_domain_xml(RUNNING, "qemu", memory_mib=32))
        running.create()
        pool = conn.storagePoolDefineXML(_pool_xml(os.path.join(work, "operator-pool")), 0)
        pool.create(0)
        pool.createXML(_volume_xml(), 0)
        conn.networkDefineXML(_network_xml())
        report["system_before"] = _system_view(conn, work)

        lab_dir = os.path.join(work, "lab")
        lab = hosts.start_hosts(2, lab_dir, first_address="127.0.9.11", name_prefix="iso-", first_tcp_port=17911,
                                first_migration_port=50900, migration_ports_per_host=20)
        try:
            report["hosts_at_start"] = {host.name: _host_view(host) for host in lab}
            report["converge"] = _converge_on_lab(lab, work)
            report["hosts_after_converge"] = {host.name: _host_view(host) for host in lab}
        finally:
            hosts.stop_hosts(lab_dir)

        bindir = os.path.dirname(sys.executable)
        demo_rc, _output = _ansible([sys.executable, "-m", "tools.virtlab", "netns", "--new", "--",
                                     os.path.join(bindir, "ansible-playbook"), "-i", "playbooks/inventory/localhost.yml",
                                     "-e", "lab_dir=" + os.path.join(work, "demo-lab"), "playbooks/demo.yml"], work, "demo")
        report["demo_rc"] = demo_rc
        report["system_after"] = _system_view(conn, work)
    finally:
        try:
            conn.lookupByName(RUNNING).destroy()
        except libvirt.libvirtError:
            pass
        conn.close()
        for proc in (libvirtd, virtlogd):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
