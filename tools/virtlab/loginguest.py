"""Build a guest you can log into (kernel + initramfs) from Debian packages.

Design
------
The same Debian kernel as :mod:`tools.virtlab.guest`, booted directly, no disk: everything lives in the
initramfs.  On top of busybox it carries, from Debian's packages (``apt-get download`` into
``<cache_dir>/debs``, nothing taken from the machine's own file system):

* ``dropbear-bin``: an SSH server (root, public keys only; host keys made at the first connection);
* ``python3.11-minimal``, ``libpython3.11-minimal`` and ``libpython3.11-stdlib``, so Ansible modules run
  inside the guest (test suites, ensurepip, idle and tkinter are left out);
* ``qemu-guest-agent``, started when the domain has the ``org.qemu.guest_agent.0`` virtio-serial port;
* the shared libraries these need: the ELF ``DT_NEEDED`` closure, looked up in the library packages their
  ``Depends`` name (recursively), so only the libraries actually linked are packed;
* kernel modules (with the dependencies their ``.modinfo`` names) for virtio-net, virtio-console, the SATA
  CD-ROM that carries a NoCloud seed, and ISO9660.

``/init`` mounts the usual file systems, loads the modules, runs a tiny NoCloud reader
(``/usr/sbin/converge-nocloud``, Python: it finds a ``cidata`` ISO9660 file system, takes ``instance-id``,
the host name (``hostname`` of the user data, else ``local-hostname``) and the SSH keys
(``ssh_authorized_keys`` of the user data and ``public-keys`` of the meta data)), brings every ethernet
interface up with busybox ``udhcpc`` (sending the host name, so the DHCP lease names the guest), starts
dropbear on port 22 and the guest agent, and prints :data:`READY_MARKER` on the serial console.  The reader
understands the JSON-as-YAML seeds ``converge.virt.vm`` writes and simple block YAML; it is a test guest,
not cloud-init.

The outputs are ``<cache_dir>/login-<digest>/vmlinuz`` and ``initrd.img`` (about 20 MiB compressed), where the
cache directory is outside the checkout (``$CONVERGE_VIRT_GUEST_CACHE``, default ``~/.cache/converge-virt/guest``,
shared with the downloaded .debs) and the digest is that of this file and :mod:`tools.virtlab.guest`: a
clean clone reuses a guest built by the same code and never one built by older code.  The standard library
is precompiled (unchecked hash-based .pyc) so that Python under TCG does not compile it at every start.
Give the guest 384 MiB of RAM or more; it boots under TCG in about 20 s.
"""

import gzip
import hashlib
import importlib.util
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
from importlib import _bootstrap_external

from . import guest

READY_MARKER = "converge-guest: login ready"
KERNEL_CMDLINE = "console=ttyS0 quiet loglevel=3 panic=-1"
PRIMARY_PACKAGES = ("busybox-static", "dropbear-bin", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
                    "qemu-guest-agent")
# kernel modules wanted (their dependencies are added from .modinfo)
MODULES = ("evdev", "button", "virtio_pci", "virtio_net", "virtio_console", "virtio_blk", "ahci", "sr_mod", "isofs")
# parts of the primary packages a test guest does not need
SKIP_PREFIXES = ("usr/share/doc/", "usr/share/man/", "usr/share/lintian/", "usr/share/locale/", "usr/lib/python3.11/test/",
                 "usr/lib/python3.11/idlelib/", "usr/lib/python3.11/tkinter/", "usr/lib/python3.11/ensurepip/",
                 "usr/lib/python3.11/turtledemo/", "usr/lib/python3.11/lib2to3/", "usr/lib/python3.11/pydoc_data/",
                 "usr/lib/python3.11/config-3.11-x86_64-linux-gnu/", "usr/share/bug/", "etc/")
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib")

INIT_SCRIPT = """#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /run /tmp /var/run /var/log
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
hostname converge-guest
for m in $(cat /etc/converge-modules); do
    insmod /usr/lib/modules/$m.ko 2>/dev/null || echo "converge-guest: insmod $m failed"
done
acpid -c /etc/acpi -l /run/acpid.log
ip link set lo up
sleep 1
/usr/bin/python3 /usr/sbin/converge-nocloud || echo "converge-guest: nocloud reader failed"
[ -s /etc/hostname ] && hostname -F /etc/hostname
for path in /sys/class/net/*; do
    iface=${path##*/}
    [ "$iface" = lo ] && continue
    ip link set "$iface" up
    udhcpc -i "$iface" -b -q -t 20 -T 1 -s /etc/udhcpc.script -x hostname:"$(hostname)" >/dev/null 2>&1
done
mkdir -p /etc/dropbear
dropbear -R -p 22 -P /run/dropbear.pid
for port in /sys/class/virtio-ports/*; do
    [ -f "$port/name" ] || continue
    if [ "$(cat "$port/name")" = org.qemu.guest_agent.0 ]; then
        qemu-ga -d -m virtio-serial -p "/dev/${port##*/}" -f /run/qemu-ga.pid
        echo "converge-guest: guest agent on /dev/${port##*/}"
    fi
done
echo "{ready}"
while :; do
    sleep 3600
done
"""

UDHCPC_SCRIPT = """#!/bin/sh
case "$1" in
    deconfig)
        ip addr flush dev "$interface"
        ip link set "$interface" up
        ;;
    bound|renew)
        ifconfig "$interface" "$ip" netmask "$subnet"
        for gw in $router; do
            ip route replace default via "$gw" dev "$interface"
            break
        done
        echo "converge-guest: $interface $ip" > /dev/console
        ;;
esac
exit 0
"""

NOCLOUD_READER = r'''#!/usr/bin/python3
"""A tiny NoCloud reader: instance-id, host name and SSH keys from a cidata ISO9660 seed."""
import glob
import json
import os
import subprocess

MOUNT = "/run/seed"


def simple_yaml(text):
    """Top-level "key: value" and "key:" + "- item" lists of block YAML (what a test seed needs)."""
    out, key = {}, None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith(" ") or line.startswith("-"):
            item = line.strip()
            if key and item.startswith("- "):
                value = item[2:].strip().strip("'\"")
                out.setdefault(key, [])
                if isinstance(out[key], list):
                    out[key].append(value)
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip().strip("'\"")
        out[key] = value if value else []
    return out


def load(text):
    try:
        data = json.loads(text)
    except ValueError:
        data = simple_yaml(text)
    return data if isinstance(data, dict) else {}


def find_seed():
    os.makedirs(MOUNT, exist_ok=True)
    for dev in sorted(glob.glob("/dev/sr*") + glob.glob("/dev/sd*") + glob.glob("/dev/vd*")):
        if subprocess.run(["mount", "-t", "iso9660", "-o", "ro", dev, MOUNT], stderr=subprocess.DEVNULL, check=False).returncode:
            continue
        if os.path.exists(os.path.join(MOUNT, "meta-data")):
            return dev
        subprocess.run(["umount", MOUNT], check=False)
    return None


def main():
    dev = find_seed()
    if dev is None:
        print("converge-guest: no NoCloud seed")
        return
    with open(os.path.join(MOUNT, "meta-data"), encoding="utf-8") as handle:
        meta = load(handle.read())
    user = {}
    path = os.path.join(MOUNT, "user-data")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if text.startswith("#cloud-config"):
            user = load(text.split("\n", 1)[1] if "\n" in text else "")
    hostname = str(user.get("hostname") or meta.get("local-hostname") or "converge-guest")
    keys = [key for key in (user.get("ssh_authorized_keys") or []) if isinstance(key, str)]
    public = meta.get("public-keys") or []
    keys += list(public.values()) if isinstance(public, dict) else [key for key in public if isinstance(key, str)]
    with open("/etc/hostname", "w", encoding="utf-8") as handle:
        handle.write(hostname + "\n")
    os.makedirs("/root/.ssh", mode=0o700, exist_ok=True)
    fd = os.open("/root/.ssh/authorized_keys", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("".join(key.strip() + "\n" for key in keys))
    state = {"instance-id": meta.get("instance-id"), "hostname": hostname, "keys": len(keys), "device": dev}
    with open("/run/converge-nocloud.json", "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    subprocess.run(["umount", MOUNT], check=False)
    print("converge-guest: nocloud " + json.dumps(state, sort_keys=True), flush=True)


main()
'''

PASSWD = "root:*:0:0:root:/root:/bin/sh\n"
GROUP = "root:x:0:\n"
SHELLS = "/bin/sh\n"


class Tree:
    """An initramfs being assembled: ``{path: ("file", bytes, mode) | ("link", target) | ("dir",)}``."""

    def __init__(self):
        self.entries = {}

    def add_dir(self, path):
        """Add a directory and its parents."""
        parts = path.strip("/").split("/")
        for index in range(1, len(parts) + 1):
            self.entries.setdefault("/".join(parts[:index]), ("dir",))

    def add_file(self, path, data, mode=0o644):
        """Add a regular file (and its parent directories)."""
        path = path.strip("/")
        if "/" in path:
            self.add_dir(path.rsplit("/", 1)[0])
        self.entries[path] = ("file", data, mode)

    def add_link(self, path, target):
        """Add a symbolic link (and its parent directories)."""
        path = path.strip("/")
        if "/" in path:
            self.add_dir(path.rsplit("/", 1)[0])
        self.entries[path] = ("link", target)

    def cpio(self):
        """The gzip-compressed newc archive of the tree (directories before their contents)."""
        raw = io.BytesIO()
        writer = guest.CpioWriter(raw)
        writer.chardev("dev/console", 5, 1)
        writer.chardev("dev/null", 1, 3, mode=0o666)
        for path in sorted(self.entries, key=lambda item: (item.count("/"), item)):
            entry = self.entries[path]
            if entry[0] == "dir":
                writer.directory(path)
            elif entry[0] == "link":
                writer.symlink(path, entry[1])
            else:
                writer.file(path, entry[1], mode=entry[2])
        writer.close()
        return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0)


def merged_path(name):
    """A .deb member name as its path on a merged-/usr system (``./lib/x`` -> ``usr/lib/x``), or None for ``.``."""
    name = name[2:] if name.startswith("./") else name
    name = name.strip("/")
    if not name:
        return None
    for top in ("lib", "lib64", "bin", "sbin"):
        if name == top or name.startswith(top + "/"):
            return "usr/" + name
    return name


def read_deb(deb):
    """Every member of a .deb's data archive: ``{path: ("file", bytes, mode) | ("link", target) | ("dir",)}``."""
    out = {}
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE) as proc:
        with tarfile.open(fileobj=proc.stdout, mode="r|*") as tar:
            for member in tar:
                path = merged_path(member.name)
                if path is None:
                    continue
                if member.isdir():
                    out[path] = ("dir",)
                elif member.issym():
                    out[path] = ("link", member.linkname)
                elif member.islnk():
                    target = merged_path(member.linkname)
                    if target in out and out[target][0] == "file":
                        out[path] = out[target]
                elif member.isfile():
                    out[path] = ("file", tar.extractfile(member).read(), member.mode & 0o7777)
        proc.stdout.close()
        if proc.wait() != 0:
            raise guest.GuestBuildError(f"dpkg-deb --fsys-tarfile {deb} failed")
    return out


def elf_needed(data):
    """The DT_NEEDED names of a 64-bit little-endian ELF file (empty for anything else)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for index in range(phnum):
        p_type, _flags, offset, vaddr, _paddr, filesz, _memsz, _align = struct.unpack_from("<IIQQQQQQ", data, phoff + index * phentsize)
        if p_type == 1:
            loads.append((vaddr, offset, filesz))
        elif p_type == 2:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []
    needed, strtab = [], None
    for position in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, position)
        if tag == 0:
            break
        if tag == 1:
            needed.append(value)
        elif tag == 5:
            strtab = value
    if strtab is None:
        return []
    base = next((offset + strtab - vaddr for vaddr, offset, filesz in loads if vaddr <= strtab < vaddr + filesz), None)
    if base is None:
        return []
    return [data[base + offset:data.index(b"\0", base + offset)].decode() for offset in needed]


def package_depends(package):
    """Names of the packages ``package`` depends on (first alternatives, no virtual packages)."""
    out = guest._run(["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",  # pylint: disable=protected-access
                      "--no-replaces", "--no-enhances", package])
    names = []
    for line in out.splitlines()[1:]:
        line = line.strip()
        if line.startswith(("Depends:", "PreDepends:")):
            name = line.split(":", 1)[1].strip().split(":", 1)[0]
            if not name.startswith("<"):
                names.append(name)
    return names


def library_pool(deb_dir):
    """Every file of the library packages the primary ones depend on, recursively: ``{path: entry}``."""
    pool, seen = {}, set()
    todo = [dep for package in PRIMARY_PACKAGES for dep in package_depends(package)]
    while todo:
        package = todo.pop()
        if package in seen or package in PRIMARY_PACKAGES or not (package.startswith("lib") or package == "zlib1g"):
            continue
        seen.add(package)
        pool.update(read_deb(guest._download(package, deb_dir)))  # pylint: disable=protected-access
        todo.extend(package_depends(package))
    return pool, sorted(seen)


def _resolve(tree_or_pool, path, depth=0):
    """Follow symbolic links inside a tree: the path of the regular file, or None."""
    entry = tree_or_pool.get(path)
    if entry is None or depth > 10:
        return None
    if entry[0] != "link":
        return path
    target = entry[1]
    target = target.lstrip("/") if target.startswith("/") else os.path.normpath(os.path.join(os.path.dirname(path), target))
    return _resolve(tree_or_pool, merged_path(target) or target, depth + 1)


def add_libraries(tree, pool):
    """Copy into the tree, from the pool, every library the tree's ELF files need (transitively); return the sonames added."""
    added = []
    todo = [path for path, entry in tree.entries.items() if entry[0] == "file"]
    while todo:
        entry = tree.entries.get(todo.pop())
        if entry is None or entry[0] != "file":
            continue
        for soname in elf_needed(entry[1]):
            if any(_resolve(tree.entries, directory + "/" + soname) for directory in LIBRARY_DIRS):
                continue
            for directory in LIBRARY_DIRS:
                real = _resolve(pool, directory + "/" + soname)
                if real:
                    tree.add_file(directory + "/" + soname, pool[real][1], pool[real][2])
                    todo.append(directory + "/" + soname)
                    added.append(soname)
                    break
            else:
                raise guest.GuestBuildError(f"no package provides {soname} (needed by the login guest)")
    return added


def add_bytecode(tree):
    """Compile the guest's standard library into unchecked hash-based .pyc files (PEP 552): a guest under TCG imports
    without compiling, and the cpio's zero mtimes do not matter.  Only when this Python is the guest's version."""
    if sys.version_info[:2] != (3, 11):
        return 0
    count = 0
    for path, entry in list(tree.entries.items()):
        if entry[0] != "file" or not path.startswith("usr/lib/python3.11/") or not path.endswith(".py"):
            continue
        try:
            code = compile(entry[1], "/" + path, "exec", dont_inherit=True)
        except SyntaxError:
            continue
        directory, name = path.rsplit("/", 1)
        pyc = _bootstrap_external._code_to_hash_pyc(code, importlib.util.source_hash(entry[1]), checked=False)  # pylint: disable=protected-access
        tree.add_file(f"{directory}/__pycache__/{name[:-3]}.{sys.implementation.cache_tag}.pyc", bytes(pyc))
        count += 1
    return count


def module_files(kernel_deb):
    """{module name: .ko bytes} of every module in the kernel package (decompressed lazily by the caller)."""
    def wanted(name):
        return name if "/kernel/" in name and ".ko" in os.path.basename(name) else None

    found = guest._extract_members(kernel_deb, wanted)  # pylint: disable=protected-access
    out = {}
    for name, data in found.items():
        base = os.path.basename(name)
        out[base.split(".ko", 1)[0].replace("-", "_")] = (base, data)
    return out


def modinfo_depends(data):
    """The ``depends=`` names of a module's .modinfo."""
    marker = b"\0depends="
    index = data.find(marker)
    if index < 0:
        return []
    end = data.index(b"\0", index + len(marker))
    return [name.replace("-", "_") for name in data[index + len(marker):end].decode().split(",") if name]


def kernel_modules(kernel_deb):
    """The wanted modules and their dependencies, in load order: [(name, .ko bytes)]."""
    available = module_files(kernel_deb)
    ordered, seen = [], set()

    def visit(name):
        if name in seen:
            return
        if name not in available:
            raise guest.GuestBuildError(f"kernel module {name} not in {kernel_deb}")
        seen.add(name)
        base, data = available[name]
        plain = guest._decompress_module(base, data)  # pylint: disable=protected-access
        for dep in modinfo_depends(plain):
            visit(dep)
        ordered.append((name, plain))

    for module in MODULES:
        visit(module)
    return ordered


def default_cache_dir():
    """Where login guests and their .debs are kept: ``$CONVERGE_VIRT_GUEST_CACHE`` or ``~/.cache/converge-virt/guest``."""
    return os.environ.get("CONVERGE_VIRT_GUEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "converge-virt", "guest")


def source_digest():
    """A digest of the code that builds the guest (this file and tools/virtlab/guest.py): the key of a built guest."""
    digest = hashlib.sha256()
    for module in (__file__, guest.__file__):
        with open(module, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:12]


def build_login_guest(cache_dir=None, force=False):  # pylint: disable=too-many-locals
    """Build (or reuse) the login guest in ``<cache_dir>/login-<source digest>`` and return a guest.GuestImage."""
    cache_dir = os.path.abspath(cache_dir or default_cache_dir())
    out_dir = os.path.join(cache_dir, "login-" + source_digest())
    kernel_path = os.path.join(out_dir, "vmlinuz")
    initrd_path = os.path.join(out_dir, "initrd.img")
    if not force and os.path.isfile(kernel_path) and os.path.isfile(initrd_path):
        return guest.GuestImage(kernel=kernel_path, initrd=initrd_path, cmdline=KERNEL_CMDLINE, ready_marker=READY_MARKER)
    os.makedirs(out_dir, exist_ok=True)
    deb_dir = os.path.join(cache_dir, "debs")
    kernel_deb = guest._download(guest.kernel_package_name(), deb_dir)  # pylint: disable=protected-access
    tree = Tree()
    debs = {}
    for package in PRIMARY_PACKAGES:
        debs[package] = guest._download(package, deb_dir)  # pylint: disable=protected-access
        for path, entry in read_deb(debs[package]).items():
            if path.startswith(SKIP_PREFIXES) or "/__pycache__/" in path:
                continue
            if entry[0] == "dir":
                tree.add_dir(path)
            elif entry[0] == "link":
                tree.add_link(path, entry[1])
            else:
                tree.add_file(path, entry[1], entry[2])
    # busybox's applets live in /bin (links made by /init); the packages' programs in /usr/bin and /usr/sbin
    busybox = tree.entries.pop("usr/bin/busybox")
    tree.add_file("bin/busybox", busybox[1], 0o755)
    tree.add_link("bin/sh", "busybox")
    tree.add_link("lib", "usr/lib")
    tree.add_link("lib64", "usr/lib64")
    tree.add_link("usr/bin/python3", "python3.11")
    compiled = add_bytecode(tree)
    pool, lib_packages = library_pool(deb_dir)
    libraries = add_libraries(tree, pool)
    loader = _resolve(pool, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    if loader is None:
        raise guest.GuestBuildError("no dynamic loader in libc6")
    tree.add_file("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", pool[loader][1], 0o755)
    tree.add_link("usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    modules = kernel_modules(kernel_deb)
    for name, data in modules:
        tree.add_file(f"usr/lib/modules/{name}.ko", data)
    for directory in ("proc", "sys", "dev", "run", "tmp", "root", "mnt", "etc/acpi/PWRF", "var"):
        tree.add_dir(directory)
    tree.add_link("var/run", "/run")
    tree.add_file("etc/converge-modules", ("\n".join(name for name, _data in modules) + "\n").encode())
    tree.add_file("etc/passwd", PASSWD.encode())
    tree.add_file("etc/group", GROUP.encode())
    tree.add_file("etc/shells", SHELLS.encode())
    tree.add_file("etc/udhcpc.script", UDHCPC_SCRIPT.encode(), 0o755)
    tree.add_file("etc/acpi/PWRF/00000080", guest.POWER_SCRIPT.format(marker=guest.POWEROFF_MARKER).encode(), 0o755)
    tree.add_file("usr/sbin/converge-nocloud", NOCLOUD_READER.encode(), 0o755)
    tree.add_file("init", INIT_SCRIPT.replace("{ready}", READY_MARKER).encode(), 0o755)
    kernel = guest._extract_members(kernel_deb, lambda name: "vmlinuz" if name.startswith("./boot/vmlinuz-") else None)  # pylint: disable=protected-access
    guest._atomic_write(initrd_path, tree.cpio())  # pylint: disable=protected-access
    guest._atomic_write(kernel_path, kernel["vmlinuz"])  # pylint: disable=protected-access
    meta = {"packages": {package: os.path.basename(deb) for package, deb in debs.items()}, "library_packages": lib_packages,
            "libraries": sorted(libraries), "compiled_modules": compiled, "modules": [name for name, _data in modules], "cmdline": KERNEL_CMDLINE,
            "ready_marker": READY_MARKER}
    guest._atomic_write(os.path.join(out_dir, "guest.json"), (json.dumps(meta, indent=2) + "\n").encode())  # pylint: disable=protected-access
    return guest.GuestImage(kernel=kernel_path, initrd=initrd_path, cmdline=KERNEL_CMDLINE, ready_marker=READY_MARKER)
