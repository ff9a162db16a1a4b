"""Build a tiny bootable guest (kernel + initramfs) from Debian packages.

Design
------
The guest is a Debian kernel booted directly by QEMU (``<kernel>``, ``<initrd>``,
``<cmdline>`` in the domain XML), with no disk at all.  Everything comes from
Debian packages fetched with ``apt-get download`` into ``<cache_dir>/debs``:

* the kernel image package that ``linux-image-amd64`` depends on; from it we take
  ``/boot/vmlinuz-*`` and the two modules needed to see the ACPI power button
  (``evdev.ko`` and ``button.ko``; ``.ko.xz`` and ``.ko.zst`` are decompressed);
* ``busybox-static``, whose ``/bin/busybox`` is the whole user space.

The initramfs is written by this module itself as a gzip-compressed ``newc`` cpio
archive (so it can contain ``/dev/console`` without needing ``mknod`` and the
result does not depend on the host's cpio).  Its ``/init`` is a busybox shell
script that mounts proc/sys/dev, loads the two modules, starts busybox ``acpid``
(the power button runs ``poweroff -f``, so ``virDomainShutdown`` ends the guest
with shutoff reason ``shutdown``), starts a small loop that keeps rewriting a
few MiB of tmpfs (dirty pages for live-migration tests) and then prints
``converge-guest: ready`` on the serial console.  With the kernel argument
:data:`TICKS_ARG` (opt-in: the domains of make test do not pass it) it also
writes a random token into tmpfs and prints a counter, its uptime and the token
read back from tmpfs once a second (:data:`TICK_PATTERN`).

The outputs are ``<cache_dir>/vmlinuz`` and ``<cache_dir>/initrd.img``; the build
is skipped when both exist and ``guest.json`` records the digest of the current
initramfs scripts (a changed script is a new initramfs).  Nothing here is committed: the cache lives under
``build/`` by default.  The guest needs TCG (``<domain type='qemu'>``) on this
kind of machine and at least 96 MiB of RAM; it boots in a few seconds.

Kernel ``cmdline`` to use: :data:`KERNEL_CMDLINE`; console marker: :data:`READY_MARKER`.
"""

import gzip
import hashlib
import io
import json
import lzma
import os
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass

DEFAULT_CACHE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "guest")
READY_MARKER = "converge-guest: ready"
# opt-in (kernel argument): the guest writes a random token into its tmpfs (/run, memory only) at boot, prints
# TOKEN_MARKER + the token once, then a TICK_PATTERN line once a second (a counter, /proc/uptime, the token read back
# from tmpfs): what a live-migration test reads on the console before and after the move
TICKS_ARG = "converge.ticks=1"
TOKEN_MARKER = "converge-guest: wrote /run/converge-token "
TICK_PATTERN = r"converge-guest: tick (\d+) up ([0-9.]+) token (\S+)"
POWEROFF_MARKER = "converge-guest: power button pressed, powering off"
# no_timer_check: under TCG on a loaded machine the kernel's IO-APIC timer check can fail and panic the guest at boot
# ("IO-APIC + timer doesn't work!", clean-clone CI of 2026-11-27, test_virtlab); the check is meaningless in a VM
KERNEL_CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check"
KERNEL_META_PACKAGE = "linux-image-amd64"
BUSYBOX_PACKAGE = "busybox-static"
MODULES = ("evdev", "button")

INIT_SCRIPT = """#!/bin/sh
export PATH=/bin:/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
hostname converge-guest
for m in {modules}; do
    insmod /lib/modules/$m.ko || echo "converge-guest: insmod $m failed"
done
acpid -c /etc/acpi -l /run/acpid.log
dd if=/dev/urandom of=/run/seed bs=4096 count=512 2>/dev/null
(
    while :; do
        cp /run/seed /run/dirty
        usleep 100000
    done
) &
echo "converge-guest: dirtier pid $!"
if grep -q "{ticks_arg}" /proc/cmdline; then
    head -c 8 /dev/urandom | md5sum | cut -c1-16 > /run/converge-token
    echo "converge-guest: wrote /run/converge-token $(cat /run/converge-token)"
    (
        n=0
        while :; do
            n=$((n + 1))
            echo "converge-guest: tick $n up $(cut -d' ' -f1 /proc/uptime) token $(cat /run/converge-token 2>/dev/null || echo missing)"
            sleep 1
        done
    ) &
fi
echo "{ready}"
while :; do
    sleep 3600
done
"""

POWER_SCRIPT = """#!/bin/sh
echo "{marker}" > /dev/console
sync
poweroff -f
"""


@dataclass(frozen=True)
class GuestImage:
    """Paths of a built guest: kernel, initramfs, and the kernel command line to boot it with."""

    kernel: str
    initrd: str
    cmdline: str = KERNEL_CMDLINE
    ready_marker: str = READY_MARKER


class GuestBuildError(RuntimeError):
    """Raised when the guest image cannot be built."""


def _run(argv, cwd=None):
    """Run a command (argument list), returning stdout; raise GuestBuildError with its stderr on failure."""
    proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise GuestBuildError(f"command {argv!r} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def kernel_package_name():
    """Name of the versioned kernel image package that ``linux-image-amd64`` depends on."""
    out = _run(["apt-cache", "depends", KERNEL_META_PACKAGE])
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends:"):
            name = line.split(":", 1)[1].strip()
            if name.startswith("linux-image-"):
                return name
    raise GuestBuildError(f"cannot find the kernel package {KERNEL_META_PACKAGE} depends on (run apt-get update?)")


def _download(package, deb_dir):
    """``apt-get download`` a package into deb_dir (reusing an earlier download); return the .deb path."""
    os.makedirs(deb_dir, exist_ok=True)
    prefix = package + "_"
    found = sorted(name for name in os.listdir(deb_dir) if name.startswith(prefix) and name.endswith(".deb"))
    if not found:
        _run(["apt-get", "download", "-q", package], cwd=deb_dir)
        found = sorted(name for name in os.listdir(deb_dir) if name.startswith(prefix) and name.endswith(".deb"))
    if not found:
        raise GuestBuildError(f"apt-get download {package} produced no .deb in {deb_dir}")
    return os.path.join(deb_dir, found[-1])


def _extract_members(deb, wanted):
    """Read members of a .deb's data archive; wanted(name) -> key or None.  Returns {key: bytes}."""
    result = {}
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE) as proc:
        with tarfile.open(fileobj=proc.stdout, mode="r|*") as tar:
            for member in tar:
                key = wanted(member.name)
                if key is None or not member.isfile():
                    continue
                handle = tar.extractfile(member)
                result[key] = handle.read()
        proc.stdout.close()
        if proc.wait() != 0:
            raise GuestBuildError(f"dpkg-deb --fsys-tarfile {deb} failed")
    return result


def _decompress_module(name, data):
    """Return the plain .ko bytes of a possibly compressed kernel module."""
    if name.endswith(".ko.xz"):
        return lzma.decompress(data)
    if name.endswith(".ko.zst"):
        proc = subprocess.run(["zstd", "-d", "-c", "-q"], input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        if proc.returncode != 0:
            raise GuestBuildError(f"zstd failed on {name}: {proc.stderr.decode(errors='replace')}")
        return proc.stdout
    if name.endswith(".ko.gz"):
        return gzip.decompress(data)
    return data


def _kernel_wanted(name):
    """Select the kernel image and the wanted modules from a linux-image .deb."""
    base = os.path.basename(name)
    if name.startswith("./boot/vmlinuz-"):
        return "vmlinuz"
    for module in MODULES:
        for suffix in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
            if base == module + suffix and "/kernel/" in name:
                return "module:" + module + suffix
    return None


class CpioWriter:
    """Minimal writer of a ``newc`` (SVR4, no CRC) cpio archive, enough for an initramfs."""

    def __init__(self, stream):
        self._stream = stream
        self._ino = 1

    def _pad(self, length):
        self._stream.write(b"\0" * ((4 - length % 4) % 4))

    def _entry(self, name, mode, data=b"", rdev=(0, 0), nlink=1):
        name_bytes = name.encode() + b"\0"
        fields = (self._ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1], len(name_bytes), 0)
        header = b"070701" + b"".join(b"%08X" % value for value in fields)
        self._ino += 1
        self._stream.write(header)
        self._stream.write(name_bytes)
        self._pad(len(header) + len(name_bytes))
        self._stream.write(data)
        self._pad(len(data))

    def directory(self, name):
        """Add a directory (mode 0755)."""
        self._entry(name, stat.S_IFDIR | 0o755, nlink=2)

    def file(self, name, data, mode=0o644):
        """Add a regular file."""
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name, target):
        """Add a symbolic link."""
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name, major, minor, mode=0o600):
        """Add a character device node."""
        self._entry(name, stat.S_IFCHR | mode, rdev=(major, minor))

    def close(self):
        """Write the trailer."""
        self._entry("TRAILER!!!", 0, nlink=1)


def init_script():
    """The guest's /init as written into the initramfs."""
    return INIT_SCRIPT.format(modules=" ".join(MODULES), ready=READY_MARKER, ticks_arg=TICKS_ARG)


def scripts_digest():
    """What the initramfs's own scripts are (part of the build's key: a changed script is a new initramfs)."""
    return hashlib.sha256((init_script() + "\0" + POWER_SCRIPT.format(marker=POWEROFF_MARKER)).encode()).hexdigest()[:16]


def _built_scripts(cache_dir):
    """The scripts digest recorded with the built outputs in cache_dir (None when unknown)."""
    try:
        with open(os.path.join(cache_dir, "guest.json"), encoding="utf-8") as handle:
            return json.load(handle).get("scripts")
    except (OSError, ValueError):
        return None


def make_initramfs(busybox, modules):
    """Return the gzip-compressed initramfs bytes, given busybox binary bytes and {module_name: ko_bytes}."""
    raw = io.BytesIO()
    cpio = CpioWriter(raw)
    for directory in ("bin", "sbin", "dev", "etc", "etc/acpi", "etc/acpi/PWRF", "lib", "lib/modules", "proc", "sys", "run", "tmp", "root"):
        cpio.directory(directory)
    cpio.chardev("dev/console", 5, 1)
    cpio.chardev("dev/null", 1, 3, mode=0o666)
    cpio.file("bin/busybox", busybox, mode=0o755)
    cpio.symlink("bin/sh", "busybox")
    for name, data in sorted(modules.items()):
        cpio.file(f"lib/modules/{name}.ko", data)
    cpio.file("etc/acpi/PWRF/00000080", POWER_SCRIPT.format(marker=POWEROFF_MARKER).encode(), mode=0o755)
    cpio.file("init", init_script().encode(), mode=0o755)
    cpio.close()
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)


def _atomic_write(path, data):
    """Write bytes to path through a temporary file in the same directory."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def build_guest(cache_dir=None, force=False):  # pylint: disable=too-many-locals
    """Build (or reuse) the guest kernel and initramfs in cache_dir and return a GuestImage."""
    cache_dir = os.path.abspath(cache_dir or DEFAULT_CACHE_DIR)
    kernel_path = os.path.join(cache_dir, "vmlinuz")
    initrd_path = os.path.join(cache_dir, "initrd.img")
    if not force and os.path.isfile(kernel_path) and os.path.isfile(initrd_path) and _built_scripts(cache_dir) == scripts_digest():
        return GuestImage(kernel=kernel_path, initrd=initrd_path)
    os.makedirs(cache_dir, exist_ok=True)
    deb_dir = os.path.join(cache_dir, "debs")
    kernel_pkg = kernel_package_name()
    kernel_deb = _download(kernel_pkg, deb_dir)
    busybox_deb = _download(BUSYBOX_PACKAGE, deb_dir)

    kernel_files = _extract_members(kernel_deb, _kernel_wanted)
    if "vmlinuz" not in kernel_files:
        raise GuestBuildError(f"no /boot/vmlinuz-* in {kernel_deb}")
    modules = {}
    for key, data in kernel_files.items():
        if key.startswith("module:"):
            file_name = key.split(":", 1)[1]
            modules[file_name.split(".ko", 1)[0]] = _decompress_module(file_name, data)
    missing = [module for module in MODULES if module not in modules]
    if missing:
        raise GuestBuildError("modules " + ", ".join(missing) + f" not found in {kernel_deb}")

    busybox = _extract_members(busybox_deb, lambda name: "busybox" if name in ("./bin/busybox", "./usr/bin/busybox") else None)
    if "busybox" not in busybox:
        raise GuestBuildError(f"no busybox binary in {busybox_deb}")

    _atomic_write(initrd_path, make_initramfs(busybox["busybox"], modules))
    _atomic_write(kernel_path, kernel_files["vmlinuz"])
    meta = {"kernel_package": kernel_pkg, "kernel_deb": os.path.basename(kernel_deb), "busybox_deb": os.path.basename(busybox_deb),
            "cmdline": KERNEL_CMDLINE, "ready_marker": READY_MARKER, "scripts": scripts_digest()}
    _atomic_write(os.path.join(cache_dir, "guest.json"), (json.dumps(meta, indent=2) + "\n").encode())
    return GuestImage(kernel=kernel_path, initrd=initrd_path)


def clean_guest(cache_dir=None):
    """Remove the built outputs (not the downloaded .debs)."""
    cache_dir = os.path.abspath(cache_dir or DEFAULT_CACHE_DIR)
    for name in ("vmlinuz", "initrd.img", "guest.json"):
        path = os.path.join(cache_dir, name)
        if os.path.exists(path):
            os.unlink(path)
