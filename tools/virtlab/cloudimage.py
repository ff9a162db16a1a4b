"""Build a bootable Debian cloud disk (qcow2) from Debian's packages: the golden image of the cloud-image journey.

Design
------
What a user's golden image is (Debian's ``genericcloud``): a disk with an MBR partition table, GRUB in the MBR gap,
one ext4 root partition (the last one, so ``growpart`` can grow it on first boot), Debian's cloud kernel
(``linux-image-amd64``, the generic one: see :data:`KERNEL_PACKAGE`) with an initramfs, systemd, Debian's own ``cloud-init`` (22.4 in bookworm) with the
NoCloud datasource, ``cloud-guest-utils`` (growpart), ``openssh-server``, ``qemu-guest-agent``, ``sudo`` and Python 3.
No password is set for any account and no SSH host key is in the image (cloud-init makes them at first boot);
``/etc/machine-id`` is empty (systemd makes one at first boot).

How it is built (every step without a loop device or a mount, so it works in containers where those are missing):

1. ``mmdebstrap --variant=minbase`` with :data:`PACKAGES`, no recommends, no documentation except the copyright files,
   into a directory, from the machine's Debian mirrors (bookworm, bookworm-updates, bookworm-security). The .debs are
   kept in ``<cache>/debs`` (mmdebstrap's ``sync-in``/``sync-out``), so a rebuild after a change of the recipe does not
   download them again.
2. The tree is made a cloud image (:func:`customize`): fstab by label, the NoCloud datasource only
   (``datasource_list: [NoCloud, None]``), cloud-init's network config rendered for systemd-networkd (enabled), units
   that cost boot time under TCG and do nothing useful in a short-lived guest masked (:data:`MASKED_UNITS`), host keys,
   machine id, apt lists and cloud-init state removed; GRUB's ``core.img`` made by the image's own ``grub-mkimage``
   (from ``grub-pc-bin``) with ``/boot/grub/grub.cfg`` on the root file system.
3. ``mkfs.ext4 -d`` writes the tree into a file system image (GRUB 2.06 cannot read ext4's ``orphan_file`` and
   ``metadata_csum_seed`` features, so they are off); the raw disk gets an MBR (``sfdisk``), GRUB's ``boot.img`` in
   the first 440 bytes, ``core.img`` from sector 1 and the file system at 1 MiB; ``qemu-img convert`` makes it qcow2.

Why GRUB and not extlinux: extlinux installs only into a mounted file system (loop device + mount); GRUB's
``boot.img``/``core.img`` are plain bytes written at fixed offsets, and GRUB reads ext4 itself, so the kernel and
initramfs stay in ``/boot`` of the root file system (a kernel upgrade in the guest keeps working through the
``/vmlinuz`` and ``/initrd.img`` links). Why mmdebstrap: one call, its own apt (nothing installed on the host but
mmdebstrap), hooks to keep the .debs.

The result is ``<cache>/<key>/debian-cloud.qcow2`` with ``manifest.json`` (the key's inputs, the installed packages
and versions, the build time), where ``<cache>`` is ``$CONVERGE_VIRT_CLOUDIMAGE_CACHE`` or
``~/.cache/converge-virt/cloudimage`` (outside the checkout; nothing here is committed) and ``<key>`` is the sha256 of
this file, mmdebstrap's version and the candidate versions apt reports for the packages (so a point release of
cloud-init or the kernel, or a change to this recipe, builds a new image; an unchanged one is reused).

The guest boots under TCG (``<domain type='qemu'>``); give it 512 MiB of RAM or more. Root on ``/dev/vda1`` (by
label ``converge-root``), serial console on ``ttyS0``.

CLI: ``python -m tools.virtlab guest build --cloud`` (prints the manifest as JSON).
"""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# Debian's generic kernel, not its cloud kernel: linux-image-cloud-amd64 has no AHCI driver (CONFIG_SATA_AHCI unset), so
# the SATA cdrom that carries converge.virt.vm's NoCloud seed on libvirt is invisible to it and cloud-init boots without
# its seed (found on the first boot of this image: host name "localhost", DHCP instead of the static address). Drivers
# a VM never has are left out (:data:`EXCLUDED_MODULE_DIRS`) to keep the image small.
KERNEL_PACKAGE = "linux-image-amd64"
PACKAGES = (KERNEL_PACKAGE, "initramfs-tools", "systemd", "systemd-sysv", "systemd-resolved", "udev", "dbus", "iproute2", "cloud-init",
            "cloud-guest-utils", "fdisk", "e2fsprogs", "openssh-server", "qemu-guest-agent", "python3", "sudo", "grub-pc-bin")
ROOT_LABEL = "converge-root"
# quiet: every line on the emulated serial console costs time under TCG
KERNEL_CMDLINE = "root=LABEL=%s ro console=ttyS0,115200 no_timer_check panic=-1 quiet" % ROOT_LABEL
IMAGE_NAME = "debian-cloud.qcow2"
# timers and units that only cost time at boot under TCG (or wake up later) and do nothing useful in a test guest
MASKED_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer",
                "systemd-tmpfiles-clean.timer", "getty@tty1.service", "modprobe@dm_mod.service", "modprobe@drm.service",
                "modprobe@fuse.service", "modprobe@efi_pstore.service", "systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount",
                "sys-kernel-debug.mount", "sys-kernel-tracing.mount", "dev-hugepages.mount")
# initramfs: only what a virtio-blk ext4 root needs (MODULES=list), so it stays small and unpacks fast under TCG
EXCLUDED_MODULE_DIRS = ("drivers/gpu", "drivers/media", "drivers/net/wireless", "drivers/net/ethernet", "drivers/infiniband",
                        "drivers/staging", "drivers/bluetooth", "drivers/iio", "drivers/isdn", "drivers/mtd", "drivers/usb",
                        "drivers/video", "drivers/hid", "drivers/input/touchscreen", "drivers/net/can", "drivers/net/usb",
                        "drivers/scsi/qla2xxx", "drivers/scsi/lpfc", "drivers/scsi/mpt3sas", "drivers/scsi/bfa",
                        "drivers/scsi/be2iscsi", "drivers/scsi/qedf", "drivers/scsi/qedi", "drivers/scsi/megaraid", "drivers/scsi/aacraid",
                        "drivers/net/hamradio", "drivers/net/wwan", "drivers/nfc", "drivers/thunderbolt", "drivers/platform",
                        "sound", "net/wireless", "net/mac80211", "net/bluetooth")
INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "virtio_scsi", "ext4", "crc32c_generic")
GRUB_MODULES = ("biosdisk", "part_msdos", "ext2", "normal", "linux", "gzio", "echo", "test", "configfile", "search", "serial", "terminal")
CLOUD_CFG = """# converge.virt golden image (tools/virtlab/cloudimage.py): NoCloud only, network through systemd-networkd
datasource_list: [NoCloud, None]
system_info:
  network:
    renderers: [networkd]
# the host name resolves (sudo), as in Debian's own cloud images
manage_etc_hosts: true
# no locale is generated in this image (locales' data is not installed): C.UTF-8 is built into glibc
locale: C.UTF-8
# RSA key generation costs seconds under TCG; the guest gets ECDSA and Ed25519 host keys
ssh_genkeytypes: [ecdsa, ed25519]
"""
GRUB_CFG = """set timeout=0
set default=0
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
menuentry 'Debian (converge.virt golden image)' {
    linux /vmlinuz %s
    initrd /initrd.img
}
""" % KERNEL_CMDLINE


class CloudImageError(RuntimeError):
    """The image cannot be built (the message names the step and the tool's error)."""


def _run(argv, **kwargs):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        raise CloudImageError(f"{argv[0]} failed ({proc.returncode}): {argv!r}\n{proc.stderr.strip()[-3000:]}")
    return proc.stdout


def default_cache_dir():
    """``$CONVERGE_VIRT_CLOUDIMAGE_CACHE`` or ``~/.cache/converge-virt/cloudimage``."""
    return os.environ.get("CONVERGE_VIRT_CLOUDIMAGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "converge-virt", "cloudimage")


def candidate_versions(packages=PACKAGES):
    """{package: candidate version} from ``apt-cache policy`` (the kernel meta package's dependency included)."""
    names = list(packages)
    depends = _run(["apt-cache", "depends", KERNEL_PACKAGE])
    names += [line.split(":", 1)[1].strip() for line in depends.splitlines()
              if line.strip().startswith("Depends:") and "linux-image-" in line]
    out, current = {}, None
    for line in _run(["apt-cache", "policy"] + names).splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        elif current and line.strip().startswith("Candidate:"):
            out[current] = line.split(":", 1)[1].strip()
    missing = sorted(name for name in names if out.get(name) in (None, "(none)"))
    if missing:
        raise CloudImageError("apt knows no candidate for %s (run apt-get update)" % ", ".join(missing))
    return out


def build_inputs():
    """What the image is a function of: this recipe's source, mmdebstrap's version, the packages' versions."""
    with open(__file__, "rb") as handle:
        recipe = hashlib.sha256(handle.read()).hexdigest()
    mmdebstrap = _run(["mmdebstrap", "--version"]).strip()
    return {"recipe_sha256": recipe, "mmdebstrap": mmdebstrap, "suite": SUITE, "mirrors": list(MIRRORS), "packages": candidate_versions()}


def cache_key(inputs):
    """The sha256 of the canonical JSON of :func:`build_inputs`."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def _chroot(root, *argv):
    return _run(["chroot", root] + list(argv), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})


def bootstrap(root, deb_cache):
    """mmdebstrap the tree into ``root`` (an empty directory is made), keeping the .debs in ``deb_cache``."""
    os.makedirs(deb_cache, exist_ok=True)
    modules = "\\n".join(INITRAMFS_MODULES)
    excluded_modules = ["--dpkgopt=path-exclude=%s/modules/*/kernel/%s/*" % (lib, directory) for lib in ("/lib", "/usr/lib")
                        for directory in EXCLUDED_MODULE_DIRS]
    argv = ["mmdebstrap", "--mode=root", "--variant=minbase", "--format=directory", "--include=" + ",".join(PACKAGES),
            "--aptopt=APT::Install-Recommends \"false\"", "--aptopt=Acquire::Languages \"none\"",
            "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--dpkgopt=path-exclude=/usr/share/info/*"]
    argv += excluded_modules
    argv += ["--skip=download/empty",
             # before any package: a small initramfs (only the modules a virtio ext4 root needs), gzip
             '--setup-hook=mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"',
             '--setup-hook=printf "MODULES=list\\nCOMPRESS=gzip\\n" > "$1/etc/initramfs-tools/conf.d/converge.conf"',
             '--setup-hook=printf "%s\\n" > "$1/usr/share/initramfs-tools/modules.d/converge-virtio"' % modules,
             '--setup-hook=mkdir -p "$1/var/cache/apt/archives/"',
             "--setup-hook=sync-in %s /var/cache/apt/archives/" % deb_cache,
             "--customize-hook=sync-out /var/cache/apt/archives %s" % deb_cache,
             '--customize-hook=rm -f "$1"/var/cache/apt/archives/*.deb',
             SUITE, root] + list(MIRRORS)
    _run(argv)


def customize(root):
    """Make the bootstrapped tree a cloud image (see the module's docstring, step 2)."""
    def write(path, text, mode=0o644):
        full = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(full, mode)

    for link in ("vmlinuz", "initrd.img"):
        if not os.path.exists(os.path.join(root, link)):
            raise CloudImageError(f"no /{link} in the tree (the kernel package did not install it)")
    write("/etc/fstab", f"LABEL={ROOT_LABEL} / ext4 defaults,errors=remount-ro 0 1\n")
    write("/etc/hostname", "localhost\n")
    write("/etc/cloud/cloud.cfg.d/90_converge_nocloud.cfg", CLOUD_CFG)
    write("/boot/grub/grub.cfg", GRUB_CFG)
    _chroot(root, "systemctl", "enable", "systemd-networkd.service")
    _chroot(root, "systemctl", "mask", *MASKED_UNITS)
    # no host keys, no machine id, no state: every clone makes its own at first boot
    for name in os.listdir(os.path.join(root, "etc", "ssh")):
        if name.startswith("ssh_host_"):
            os.unlink(os.path.join(root, "etc", "ssh", name))
    write("/etc/machine-id", "", 0o444)
    for path in ("var/lib/dbus/machine-id",):
        if os.path.lexists(os.path.join(root, path)):
            os.unlink(os.path.join(root, path))
    for directory in ("var/lib/cloud", "var/lib/apt/lists", "var/log/journal", "tmp"):
        full = os.path.join(root, directory)
        if os.path.isdir(full):
            for name in os.listdir(full):
                target = os.path.join(full, name)
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target)
                else:
                    os.unlink(target)
    check_no_secrets(root)
    _chroot(root, "grub-mkimage", "-O", "i386-pc", "-o", "/boot/grub/core.img", "-p", "(hd0,msdos1)/boot/grub", *GRUB_MODULES)


def check_no_secrets(root):
    """Refuse an image with a password hash or an SSH host key in it."""
    with open(os.path.join(root, "etc", "shadow"), encoding="utf-8") as handle:
        for line in handle:
            fields = line.split(":")
            if len(fields) > 1 and fields[1] not in ("", "*", "!", "!*") and not fields[1].startswith("!"):
                raise CloudImageError(f"account {fields[0]} has a password in the image")
    keys = [name for name in os.listdir(os.path.join(root, "etc", "ssh")) if name.startswith("ssh_host_")]
    if keys:
        raise CloudImageError(f"SSH host keys in the image: {keys}")


def installed_packages(root):
    """{package: version} of the tree (dpkg-query in the image)."""
    out = _chroot(root, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n")
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def _tree_size(root):
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                total += os.lstat(path).st_blocks * 512
    return total


def make_disk(root, raw):
    """The raw disk: MBR + GRUB + one ext4 partition from 1 MiB holding the tree. Returns its size in bytes."""
    mib = 1024 * 1024
    fs_size = ((_tree_size(root) * 13 // 10 + 192 * mib) // (64 * mib) + 1) * 64 * mib
    fs_image = raw + ".ext4"
    _run(["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-O", "^orphan_file,^metadata_csum_seed", "-E", "root_owner=0:0",
          "-d", root, fs_image, str(fs_size // 1024) + "k"])
    disk_size = mib + fs_size
    with open(raw, "wb") as handle:
        handle.truncate(disk_size)
    _run(["sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", raw], input="label: dos\nstart=2048, type=83, bootable\n")
    with open(os.path.join(root, "usr", "lib", "grub", "i386-pc", "boot.img"), "rb") as handle:
        boot = handle.read()
    with open(os.path.join(root, "boot", "grub", "core.img"), "rb") as handle:
        core = handle.read()
    if len(boot) != 512 or len(core) > (2048 - 1) * 512:
        raise CloudImageError(f"GRUB images of unexpected size: boot.img {len(boot)}, core.img {len(core)}")
    with open(raw, "r+b") as disk, open(fs_image, "rb") as fs:
        disk.seek(0)
        disk.write(boot[:440])  # the boot code; the disk signature and the partition table stay sfdisk's
        disk.seek(512)
        disk.write(core)
        disk.seek(mib)
        while True:
            block = fs.read(mib)
            if not block:
                break
            if block.count(0) == len(block):
                disk.seek(len(block), os.SEEK_CUR)  # keep the raw disk sparse
            else:
                disk.write(block)
    os.unlink(fs_image)
    return disk_size


def build_cloud_image(cache_dir=None, force=False):
    """Build (or reuse) the image in ``<cache_dir>/<key>/``; return its manifest (``path``, ``key``, ``inputs``, ...)."""
    cache_dir = os.path.abspath(cache_dir or default_cache_dir())
    os.makedirs(cache_dir, exist_ok=True)
    inputs = build_inputs()
    key = cache_key(inputs)
    out_dir = os.path.join(cache_dir, key)
    manifest_path = os.path.join(out_dir, "manifest.json")
    with open(os.path.join(cache_dir, ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; a second caller reuses the first one's image
        if not force and os.path.isfile(manifest_path):
            with open(manifest_path, encoding="utf-8") as handle:
                manifest = json.load(handle)
            if os.path.isfile(manifest["path"]):
                manifest["cached"] = True
                return manifest
        started = time.monotonic()
        os.makedirs(out_dir, exist_ok=True)
        work = tempfile.mkdtemp(prefix="build-", dir=cache_dir)
        try:
            root = os.path.join(work, "root")
            bootstrap(root, os.path.join(cache_dir, "debs"))
            customize(root)
            packages = installed_packages(root)
            raw = os.path.join(work, "disk.raw")
            raw_size = make_disk(root, raw)
            shutil.rmtree(root)
            tmp = os.path.join(out_dir, IMAGE_NAME + ".tmp")
            _run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, tmp])
            path = os.path.join(out_dir, IMAGE_NAME)
            os.replace(tmp, path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        digest = _sha256(path)
        manifest = {"path": path, "key": key, "format": "qcow2", "virtual_size": raw_size, "size": os.path.getsize(path), "sha256": digest,
                    "kernel_cmdline": KERNEL_CMDLINE, "root_label": ROOT_LABEL, "masked_units": list(MASKED_UNITS),
                    "inputs": inputs, "installed": packages, "build_seconds": round(time.monotonic() - started, 1)}
        with open(manifest_path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
        os.replace(manifest_path + ".tmp", manifest_path)
        manifest["cached"] = False
        return manifest


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()
