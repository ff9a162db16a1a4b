"""Domain XML builders and small helpers to run the virtlab test guests.

Design
------
All domain XML is built with :mod:`xml.etree.ElementTree` (never by string
concatenation).  Two guests:

* :func:`diskless_domain_xml` -- no disk, no OS: SeaBIOS finds nothing to boot and
  waits forever (``rebootTimeout='-1'``).  Runs under KVM where
  :func:`tools.virtlab.hosts.kvm_usable` says so, else TCG; good enough to start,
  pause, resume, live-migrate and destroy.
* :func:`kernel_domain_xml` -- boots the :mod:`tools.virtlab.guest` kernel and
  initramfs directly under TCG (``type='qemu'``), serial console to a file, ACPI
  on so that ``virDomainShutdown`` presses the power button; every guest exit ends
  as shutoff (``on_poweroff``/``on_reboot``/``on_crash`` = destroy).

The console log is written by qemu, which runs inside the private host's mount
namespace; use a real path (e.g. under the host's state directory, see
:func:`console_log_path`), which is the same file in every namespace.

The helpers take a libvirt connection; libvirt is imported lazily so that the XML
builders can be used without libvirt-python.
"""

import os
import time
import xml.etree.ElementTree as ET

from . import guest as virtlab_guest
from . import hosts as virtlab_hosts


def _libvirt():
    import libvirt  # pylint: disable=import-outside-toplevel
    return libvirt


def _sub(parent, tag, text=None, **attrib):
    element = ET.SubElement(parent, tag, {key.rstrip("_"): str(value) for key, value in attrib.items()})
    if text is not None:
        element.text = str(text)
    return element


def _domain_skeleton(name, domain_type, memory_mib, vcpus):
    domain = ET.Element("domain", {"type": domain_type})
    _sub(domain, "name", name)
    _sub(domain, "memory", memory_mib, unit="MiB")
    _sub(domain, "vcpu", vcpus)
    return domain


def _minimal_devices(domain):
    devices = _sub(domain, "devices")
    _sub(devices, "controller", type="usb", model="none")
    _sub(devices, "memballoon", model="none")
    return devices


def diskless_domain_xml(name, domain_type="qemu", memory_mib=64, vcpus=1):
    """XML of a guest with no disk and no OS: SeaBIOS finds nothing to boot and waits (never reboots)."""
    domain = _domain_skeleton(name, domain_type, memory_mib, vcpus)
    os_el = _sub(domain, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_el, "bios", useserial="no", rebootTimeout="-1")
    _minimal_devices(domain)
    return ET.tostring(domain, encoding="unicode")


def kernel_domain_xml(name, guest_image, memory_mib=128, *, console_log=None, domain_type="qemu", vcpus=1):  # pylint: disable=too-many-arguments
    """XML of a guest booting guest_image's kernel + initramfs directly (TCG by default).

    The serial console (ttyS0) is written to console_log (a path valid inside the
    libvirt host; use a real path under the state dir) if given, else to a pty.
    ACPI is on so that virDomainShutdown presses the power button; every guest exit
    (poweroff, reboot, crash) ends as shutoff.
    """
    domain = _domain_skeleton(name, domain_type, memory_mib, vcpus)
    os_el = _sub(domain, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_el, "kernel", guest_image.kernel)
    _sub(os_el, "initrd", guest_image.initrd)
    _sub(os_el, "cmdline", guest_image.cmdline)
    features = _sub(domain, "features")
    _sub(features, "acpi")
    _sub(domain, "on_poweroff", "destroy")
    _sub(domain, "on_reboot", "destroy")
    _sub(domain, "on_crash", "destroy")
    devices = _minimal_devices(domain)
    if console_log:
        serial = _sub(devices, "serial", type="file")
        _sub(serial, "source", path=console_log, append="on")
    else:
        serial = _sub(devices, "serial", type="pty")
    _sub(serial, "target", port=0)
    return ET.tostring(domain, encoding="unicode")


def remove_domain(conn, name):
    """Destroy and undefine a domain if it exists on conn (quietly)."""
    libvirt = _libvirt()
    matches = [dom for dom in conn.listAllDomains() if dom.name() == name]
    if not matches:
        return
    dom = matches[0]
    try:
        if dom.isActive():
            dom.destroy()
    except libvirt.libvirtError:
        pass
    try:
        if dom.isPersistent():
            dom.undefine()
    except libvirt.libvirtError:
        pass


def start_diskless_guest(conn, name, domain_type=None, memory_mib=64):
    """Define and start a diskless guest (KVM when usable, else TCG); returns the virDomain."""
    xml = diskless_domain_xml(name, domain_type or virtlab_hosts.diskless_domain_type(), memory_mib=memory_mib)
    dom = conn.defineXML(xml)
    dom.create()
    return dom


def console_log_path(host, name):
    """Default console log of a guest on host: <host log dir>/qemu/<name>.console.log (real path)."""
    return os.path.join(host.dirs["log"], "qemu", name + ".console.log")


def start_kernel_guest(conn, host, name, guest_image, memory_mib=128):
    """Define and start the TCG kernel guest on host; returns (virDomain, console log path)."""
    log = console_log_path(host, name)
    if os.path.exists(log):
        os.unlink(log)
    dom = conn.defineXML(kernel_domain_xml(name, guest_image, memory_mib=memory_mib, console_log=log))
    dom.create()
    return dom, log


def wait_for_console(path, marker=virtlab_guest.READY_MARKER, timeout=90.0):
    """Wait until marker appears in the console log file; return the seconds waited (raises TimeoutError)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                if marker in handle.read():
                    return time.monotonic() - start
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    text = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()[-2000:]
    raise TimeoutError(f"{marker!r} not seen in {path} within {timeout:.0f}s; last output:\n{text}")


def wait_for_state(dom, state, reason=None, timeout=30.0):
    """Wait until dom.state() is (state[, reason]); return the seconds waited (raises TimeoutError)."""
    start = time.monotonic()
    current = dom.state()
    while time.monotonic() - start < timeout:
        current = dom.state()
        if current[0] == state and (reason is None or current[1] == reason):
            return time.monotonic() - start
        time.sleep(0.05)
    raise TimeoutError(f"domain {dom.name()} is in state {current!r}, expected ({state!r}, {reason!r})")
