"""Real tests of tools.virtlab: private libvirt hosts, live migration, the TCG test guest.

Run with ``cd /work/main && .venv/bin/python -m pytest tests/integration/test_virtlab.py``
(as root, with libvirt-daemon-system and qemu-system-x86 installed).  Timings are
printed (``-s`` shows them).
"""

import gzip
import os
import time
import xml.etree.ElementTree as ET

import libvirt

from tools.virtlab import guest as virtlab_guest
from tools.virtlab import hosts as virtlab_hosts
from tools.virtlab.domains import (diskless_domain_xml, kernel_domain_xml, remove_domain, start_diskless_guest, start_kernel_guest,
                                   wait_for_console, wait_for_state)

pytest_plugins = ["tests.integration.virtlab_fixtures"]


def _host_uuid(conn):
    return ET.fromstring(conn.getCapabilities()).findtext("host/uuid")


def _etc_hosts_seen_by(host):
    """The /etc/hosts that the host's libvirtd sees (through /proc/<pid>/root)."""
    with open(f"/proc/{host.pids['libvirtd']}/root/etc/hosts", encoding="utf-8") as handle:
        return handle.read()


def test_hosts_have_distinct_identities_and_both_uris_work(libvirt_hosts):
    """Two hosts: own name, host UUID and namespace; reachable by unix and TCP URIs; private /etc/hosts."""
    assert len(libvirt_hosts) == 2
    first, second = libvirt_hosts
    assert first.name != second.name
    assert first.address != second.address
    assert first.host_uuid != second.host_uuid
    assert first.mnt_ns != second.mnt_ns
    assert first.migration_port_max < second.migration_port_min
    for host in libvirt_hosts:
        for uri in (host.uri, host.tcp_uri):
            conn = libvirt.open(uri)
            try:
                assert conn.getHostname() == host.name, uri
                assert _host_uuid(conn) == host.host_uuid, uri
                assert conn.getURI().startswith("qemu")
            finally:
                conn.close()
        # Every host resolves every lab host name to its loopback address.
        seen = _etc_hosts_seen_by(host)
        for other in libvirt_hosts:
            assert f"{other.address}\t{other.name}" in seen
    # The root namespace is untouched.
    with open("/etc/hosts", encoding="utf-8") as handle:
        assert first.name not in handle.read()


def test_hosts_json_records_running_hosts(libvirt_hosts, virtlab_state_dir):
    """hosts.json describes exactly the running hosts, and their daemons are alive."""
    recorded = virtlab_hosts.load_hosts(virtlab_state_dir)
    assert [host.to_dict() for host in recorded] == [host.to_dict() for host in libvirt_hosts]
    for status in virtlab_hosts.hosts_status(virtlab_state_dir):
        assert status["running"]
        assert status["processes"]["libvirtd"] and status["processes"]["virtlogd"]


def test_kvm_detection_is_consistent():
    """kvm_usable() and the domain-type helpers agree."""
    usable = virtlab_hosts.kvm_usable()
    assert isinstance(usable, bool)
    assert virtlab_hosts.diskless_domain_type() == ("kvm" if usable else "qemu")
    assert virtlab_hosts.os_guest_domain_type() == "qemu"
    if not os.path.exists("/dev/kvm"):
        assert not usable


def test_domain_xml_builders(guest_image):
    """The ElementTree XML builders produce the expected domain definitions (and escape paths)."""
    disk_less = ET.fromstring(diskless_domain_xml("d1", "kvm", memory_mib=64))
    assert disk_less.get("type") == "kvm"
    assert disk_less.findtext("name") == "d1"
    assert disk_less.find("memory").get("unit") == "MiB" and disk_less.findtext("memory") == "64"
    assert disk_less.find("devices/disk") is None
    kernel = ET.fromstring(kernel_domain_xml("k1", guest_image, memory_mib=128, console_log="/x/<&>.log"))
    assert kernel.get("type") == "qemu"
    assert kernel.findtext("os/kernel") == guest_image.kernel
    assert kernel.findtext("os/initrd") == guest_image.initrd
    assert "console=ttyS0" in kernel.findtext("os/cmdline")
    assert kernel.find("features/acpi") is not None
    assert kernel.find("devices/serial/source").get("path") == "/x/<&>.log"


def test_guest_image_is_built_from_debian_packages(guest_image):
    """The guest kernel is a bzImage and the initramfs holds init, busybox and the modules; rebuilds are skipped."""
    assert os.path.getsize(guest_image.kernel) > 1000000
    with open(guest_image.kernel, "rb") as handle:
        assert handle.read(0x210)[0x202:0x206] == b"HdrS"  # Linux x86 boot protocol header
    with gzip.open(guest_image.initrd, "rb") as handle:
        archive = handle.read()
    assert archive.startswith(b"070701")
    for name in (b"init\0", b"bin/busybox\0", b"lib/modules/evdev.ko\0", b"lib/modules/button.ko\0", b"dev/console\0"):
        assert name in archive
    assert virtlab_guest.READY_MARKER.encode() in archive
    # A second build reuses the outputs.
    mtime = os.path.getmtime(guest_image.initrd)
    again = virtlab_guest.build_guest(os.path.dirname(guest_image.initrd))
    assert again.initrd == guest_image.initrd and os.path.getmtime(again.initrd) == mtime


def guest_qemu(host, name):
    """The host's qemu processes that run the domain called name (libvirt names it on qemu's command line)."""
    mine = []
    for pid in virtlab_hosts.host_processes(host)["qemu"]:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if any(arg == b"guest=" + name.encode() or arg.startswith(b"guest=" + name.encode() + b",") for arg in argv):
            mine.append(pid)
    return mine


def test_diskless_guest_lifecycle_and_live_migration(libvirt_hosts, host_conns):
    """Start, pause, resume, managed live migration 1 -> 2, then peer-to-peer live migration back."""
    src_conn, dst_conn = host_conns
    name = "vlt-diskless"
    for conn in host_conns:
        remove_domain(conn, name)
    try:
        dom = start_diskless_guest(src_conn, name)
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        dom.suspend()
        assert dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED
        dom.resume()
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING

        flags = libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
        start = time.monotonic()
        migrated = dom.migrate(dst_conn, flags, None, None, 0)
        elapsed = time.monotonic() - start
        print(f"\nvirtlab: managed live migration {libvirt_hosts[0].name} -> {libvirt_hosts[1].name} took {elapsed:.2f}s")

        assert migrated.name() == name
        on_dest = dst_conn.lookupByName(name)
        assert on_dest.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        assert on_dest.isPersistent()
        assert dom.state() == [libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_MIGRATED]
        assert dom.isPersistent()
        # this guest's qemu now runs on the destination host only (other tests on this worker may keep guests of
        # their own on these hosts: only this domain's qemu counts)
        assert guest_qemu(libvirt_hosts[1], name)
        assert not guest_qemu(libvirt_hosts[0], name)

        # And back, peer to peer: the destination's libvirtd drives it over TCP.
        start = time.monotonic()
        on_dest.migrateToURI3(libvirt_hosts[0].tcp_uri, {}, flags | libvirt.VIR_MIGRATE_PEER2PEER)
        print(f"virtlab: peer-to-peer live migration back took {time.monotonic() - start:.2f}s")
        assert src_conn.lookupByName(name).state()[0] == libvirt.VIR_DOMAIN_RUNNING
        assert on_dest.state() == [libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_MIGRATED]
    finally:
        for conn in host_conns:
            remove_domain(conn, name)


def test_kernel_guest_boots_and_shuts_down_cleanly(libvirt_hosts, host_conns, guest_image):
    """The TCG guest prints its ready marker, and virDomainShutdown ends it with reason SHUTDOWN."""
    conn = host_conns[0]
    name = "vlt-kernel"
    remove_domain(conn, name)
    try:
        dom, console = start_kernel_guest(conn, libvirt_hosts[0], name, guest_image)
        root = ET.fromstring(dom.XMLDesc(0))
        assert root.get("type") == "qemu"
        boot = wait_for_console(console, virtlab_guest.READY_MARKER, timeout=90)
        print(f"\nvirtlab: TCG guest ready after {boot:.1f}s")
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        # libvirt's own per-domain log exists under the host's private /var/log/libvirt.
        assert os.path.exists(libvirt_hosts[0].qemu_log(name))

        dom.shutdown()
        down = wait_for_state(dom, libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN, timeout=30)
        print(f"virtlab: guest shut down {down:.1f}s after virDomainShutdown")
        with open(console, encoding="utf-8", errors="replace") as handle:
            assert virtlab_guest.POWEROFF_MARKER in handle.read()
    finally:
        remove_domain(conn, name)


def test_stop_hosts_leaves_no_process(tmp_path, virtlab_layout):
    """stop_hosts kills libvirtd, virtlogd and qemu of its hosts, removes hosts.json and is idempotent."""
    state_dir = str(tmp_path / "lab")
    start = time.monotonic()
    started = virtlab_hosts.start_hosts(2, state_dir, **virtlab_layout(1))
    print(f"\nvirtlab: 2 hosts started in {time.monotonic() - start:.2f}s")
    try:
        conn = libvirt.open(started[0].uri)
        try:
            start_diskless_guest(conn, "vlt-stop-guest")
        finally:
            conn.close()
        processes = [virtlab_hosts.host_processes(host) for host in started]
        assert processes[0]["qemu"], "a qemu process should run on the first host"
        pids = [pid for per_host in processes for role in per_host.values() for pid in role]
        assert len(pids) == 5  # 2 x (libvirtd + virtlogd) + 1 qemu
        assert all(virtlab_hosts.pid_alive(pid) for pid in pids)
    finally:
        start = time.monotonic()
        signalled = virtlab_hosts.stop_hosts(state_dir)
        print(f"virtlab: hosts stopped in {time.monotonic() - start:.2f}s")
    assert set(pids) <= set(signalled)
    assert not any(virtlab_hosts.pid_alive(pid) for pid in pids)
    for host in started:
        assert not virtlab_hosts.processes_in_namespace(host.mnt_ns)
    assert not os.path.exists(os.path.join(state_dir, virtlab_hosts.HOSTS_FILE))
    assert not virtlab_hosts.stop_hosts(state_dir)  # idempotent
    assert not virtlab_hosts.load_hosts(state_dir)


def test_kernel_guest_live_migrates_and_keeps_running(libvirt_hosts, host_conns, guest_image):
    """The booted TCG guest (with its memory-dirtying loop) live-migrates 1 -> 2 and still answers the power button there."""
    src_conn, dst_conn = host_conns
    name = "vlt-kernel-mig"
    for conn in host_conns:
        remove_domain(conn, name)
    try:
        dom, console = start_kernel_guest(src_conn, libvirt_hosts[0], name, guest_image)
        wait_for_console(console, virtlab_guest.READY_MARKER, timeout=90)
        with open(console, encoding="utf-8", errors="replace") as handle:
            assert "converge-guest: dirtier pid" in handle.read()
        start = time.monotonic()
        dom.migrate(dst_conn, libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST, None, None, 0)
        print(f"\nvirtlab: TCG guest live migration took {time.monotonic() - start:.2f}s")
        assert dom.state() == [libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_MIGRATED]
        on_dest = dst_conn.lookupByName(name)
        assert on_dest.state() == [libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_RUNNING_MIGRATED]
        on_dest.shutdown()
        wait_for_state(on_dest, libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN, timeout=30)
        with open(console, encoding="utf-8", errors="replace") as handle:
            assert virtlab_guest.POWEROFF_MARKER in handle.read()
    finally:
        for conn in host_conns:
            remove_domain(conn, name)
