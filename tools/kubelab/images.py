"""The real node's container images, built locally and reproducibly (issue 34): no registry exists here.

Each image is written as an OCI image archive (``oci-layout``, ``index.json``, ``blobs/sha256``; uncompressed
layers, every file owned by root with modification time 0, entries sorted) into the kube cache
(``build.cache_root()``), in ``<image>-<key>/image.tar`` where the key hashes every input, and imported into a
node's containerd with ``ctr -n k8s.io images import`` (see tools/kubelab/node.py). The image references live in
the ``kubelab.local`` domain, which no registry answers: a pod that names them must find them in containerd's
store (imagePullPolicy Never or IfNotPresent).

``pause``          Kubernetes' pause program (build part ``pause``), the pod sandbox image.
``guest``          the project's bootable test guest (tools/virtlab/guest.py: kernel + initramfs) as a KubeVirt
                   kernel-boot container: ``/boot/vmlinuz`` and ``/boot/initrd.img`` (spec.domain.firmware.kernelBoot).
``virt-launcher``  a Debian 12 root file system made by ``mmdebstrap`` from the machine's own apt sources with Debian's
                   libvirt and QEMU, plus KubeVirt v1.8.0's launcher binaries and configuration at the paths KubeVirt's
                   own image has them (cmd/virt-launcher/BUILD.bazel): /usr/bin/virt-launcher, virt-launcher-monitor,
                   virt-probe, virt-tail, virt-freezer, container-disk, node-labeller.sh; /etc/libvirt/qemu.conf and
                   virtqemud.conf, the qemu hook, the qemu user and group (107), /var/run -> ../run. Adapted for Debian
                   12 (see LAUNCHER_ADAPTATIONS).
``cloud-disk``     the golden image of tools/virtlab/cloudimage.py (a bootable Debian cloud disk with Debian's cloud-init
                   22.4) as a KubeVirt containerDisk: the qcow2 at ``/disk/debian-cloud.qcow2``, owned by uid/gid 107 (the
                   qemu user of a non-root launcher) and readable by all, as KubeVirt's containerDisk documentation builds
                   one (``ADD --chown=107:107 image.qcow2 /disk/``). Keyed by the qcow2's sha256 (from the golden image's
                   manifest) and this file. Built by ``build_images`` (``make kube-node``), not imported at node start
                   (``start_node`` imports pause, guest and virt-launcher): a test that boots it imports it (``import_argv``).

Standard library only.
"""

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from . import build

REGISTRY = "kubelab.local"
EPOCH = 0
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# the Debian packages of the launcher image (their dependencies come along; no Recommends)
# xorriso: virt-launcher writes a cloudInitNoCloud/configDrive volume's ISO with xorrisofs (pkg/cloud-init, defaultIsoFunc);
# without it the VMI fails at its first sync ("exec: \"xorrisofs\": executable file not found in $PATH")
LAUNCHER_PACKAGES = ("libvirt-daemon", "libvirt-daemon-driver-qemu", "libvirt-clients", "qemu-system-x86", "qemu-utils",
                     "procps", "iproute2", "util-linux", "xorriso")
# What the Debian 12 launcher image changes against KubeVirt's own (and why): each is a file of LAUNCHER_FILES
LAUNCHER_ADAPTATIONS = {
    "/usr/sbin/virtqemud": "Debian 12's libvirt 9.0.0 has no modular daemons (libvirt-daemon ships libvirtd, virtlockd, "
                           "virtlogd only); virt-launcher starts /usr/sbin/virtqemud -f /var/run/libvirt/virtqemud.conf: this "
                           "script runs libvirtd with that configuration and, for a non-root launcher, links the socket path "
                           "virt-launcher connects to (virtqemud-sock) to libvirtd's (libvirt-sock)",
    "/usr/libexec/qemu-kvm": "KubeVirt's image (CentOS Stream) has QEMU there; Debian's is /usr/bin/qemu-system-x86_64",
}
VIRTQEMUD_WRAPPER = """#!/bin/sh
# kubelab: Debian 12's libvirt has no virtqemud; run libvirtd with the same configuration (tools/kubelab/images.py)
mkdir -p /var/run/libvirt
ln -sf libvirt-sock /var/run/libvirt/virtqemud-sock
exec /usr/sbin/libvirtd "$@"
"""
# appended to KubeVirt's virtqemud.conf: libvirtd (for a non-root user too) puts its sockets where virt-launcher looks
VIRTQEMUD_CONF_EXTRA = '\n# kubelab: libvirtd stands in for virtqemud (tools/kubelab/images.py)\nunix_sock_dir = "/var/run/libvirt"\n'


class ImageError(build.KubelabError):
    """An image cannot be built; the message says why."""


# ---------------------------------------------------------------- OCI archives

def _tar_info(name, size=0, mode=0o644, kind=tarfile.REGTYPE, link="", owner=0):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.linkname = size, mode, kind, link
    info.uid = info.gid = owner
    info.uname = info.gname = "root" if owner == 0 else ""
    info.mtime = EPOCH
    return info


# file capabilities (security.capability, struct vfs_cap_data revision 2: magic | effective, then permitted/inheritable
# low and high words): cap_net_bind_service+ep, what KubeVirt's image sets on virt-launcher-monitor (which execs
# virt-launcher with that ambient capability: without it, "fork/exec /usr/bin/virt-launcher: operation not permitted")
CAP_NET_BIND_SERVICE_EP = (0x02000001).to_bytes(4, "little") + (1 << 10).to_bytes(4, "little") + bytes(12)


def layer_from_files(entries, xattrs=None):
    """An uncompressed layer tar (bytes) from ``entries``: (path, content bytes | None for a directory | ("symlink", target),
    mode), in sorted order with their parent directories; ``xattrs``: {path: {name: bytes}} (PAX SCHILY.xattr records)."""
    xattrs = {key.strip("/"): value for key, value in (xattrs or {}).items()}
    buf = io.BytesIO()
    seen = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content, mode in sorted(entries, key=lambda item: item[0]):
            parts = path.strip("/").split("/")
            for depth in range(1, len(parts)):
                parent = "/".join(parts[:depth])
                if parent not in seen:
                    seen.add(parent)
                    tar.addfile(_tar_info(parent, mode=0o755, kind=tarfile.DIRTYPE))
            name = "/".join(parts)
            seen.add(name)
            if content is None:
                tar.addfile(_tar_info(name, mode=mode, kind=tarfile.DIRTYPE))
            elif isinstance(content, tuple):
                tar.addfile(_tar_info(name, mode=0o777, kind=tarfile.SYMTYPE, link=content[1]))
            else:
                info = _tar_info(name, size=len(content), mode=mode)
                if name in xattrs:
                    info.pax_headers = {"SCHILY.xattr." + key: value.decode("utf-8", "surrogateescape")
                                        for key, value in xattrs[name].items()}
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def layer_from_file(out, target, source, mode=0o444, owner=0):
    """Write an uncompressed layer tar to ``out`` holding one file ``target`` (its parent directories owned by root,
    0755) with the bytes of ``source``, streamed (a disk image is not read into memory), owned by uid/gid ``owner``."""
    parts = target.strip("/").split("/")
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for depth in range(1, len(parts)):
            tar.addfile(_tar_info("/".join(parts[:depth]), mode=0o755, kind=tarfile.DIRTYPE))
        with open(source, "rb") as handle:
            tar.addfile(_tar_info("/".join(parts), size=os.fstat(handle.fileno()).st_size, mode=mode, owner=owner), handle)


def _digest_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest(), os.path.getsize(path)


def write_oci_archive(path, name, layers, entrypoint, env=(PATH_ENV,), cmd=None, user=None):
    """Write an OCI image archive with the layer files ``layers`` (paths of uncompressed tars) to ``path``; the image is
    called ``name`` (``io.containerd.image.name``, what ``ctr images import`` names it). Returns the manifest digest."""
    layer_descs, diff_ids = [], []
    for layer in layers:
        digest, size = _digest_file(layer)
        layer_descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": digest, "size": size})
        diff_ids.append(digest)
    config = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
              "config": {"Entrypoint": list(entrypoint), "Env": list(env), "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": diff_ids},
              "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tools/kubelab/images.py"} for _layer in layers]}
    if cmd:
        config["config"]["Cmd"] = list(cmd)
    if user:
        config["config"]["User"] = user
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + hashlib.sha256(config_bytes).hexdigest(),
                   "size": len(config_bytes)}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config_desc, "layers": layer_descs}
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": len(manifest_bytes),
                            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}}]}
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        def add_bytes(member, data):
            tar.addfile(_tar_info(member, size=len(data)), io.BytesIO(data))
        add_bytes("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes("index.json", json.dumps(index, sort_keys=True, separators=(",", ":")).encode())
        tar.addfile(_tar_info("blobs", mode=0o755, kind=tarfile.DIRTYPE))
        tar.addfile(_tar_info("blobs/sha256", mode=0o755, kind=tarfile.DIRTYPE))
        add_bytes("blobs/sha256/" + config_desc["digest"].split(":")[1], config_bytes)
        add_bytes("blobs/sha256/" + manifest_digest.split(":")[1], manifest_bytes)
        written = set()
        for layer, desc in zip(layers, layer_descs):
            member = "blobs/sha256/" + desc["digest"].split(":")[1]
            if member in written:
                continue
            written.add(member)
            with open(layer, "rb") as handle:
                tar.addfile(_tar_info(member, size=desc["size"]), handle)
    os.replace(tmp, path)
    return manifest_digest


# ---------------------------------------------------------------- the images

class Image:  # pylint: disable=too-few-public-methods
    """One image: its name (with a tag derived from the key) and where its archive is cached."""

    def __init__(self, kind, key, root=None):
        self.kind = kind
        self.key = key
        self.name = f"{REGISTRY}/{kind}:{key}"
        self.directory = os.path.join(root or build.cache_root(), f"image-{kind}-{key}")
        self.archive = os.path.join(self.directory, "image.tar")
        self.source = None      # cloud-disk: the golden image's manifest

    def built(self):
        """Whether the archive exists."""
        return os.path.exists(self.archive)


def _hash(*items):
    digest = hashlib.sha256()
    for item in items:
        if isinstance(item, str) and os.path.isfile(item):
            with open(item, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        else:
            digest.update(json.dumps(item, sort_keys=True).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def _guest_files(guest_dir):
    from ..virtlab import guest  # pylint: disable=import-outside-toplevel
    image = guest.build_guest(guest_dir)
    return image.kernel, image.initrd


def _apt_candidates(packages):
    """{package: candidate version} from the machine's apt lists (part of the launcher image's key)."""
    out = subprocess.run(["apt-cache", "policy"] + list(packages), capture_output=True, text=True, check=False)
    found, current = {}, None
    for line in out.stdout.splitlines():
        if line and not line.startswith(" "):
            current = line.rstrip(":")
        elif "Candidate:" in line and current:
            found[current] = line.split(":", 1)[1].strip()
    missing = [p for p in packages if found.get(p) in (None, "(none)")]
    if missing:
        raise ImageError(f"apt has no candidate for {', '.join(missing)}: run apt-get update (the launcher image is made of Debian packages)")
    return found


def _module_file(module_dir, module, version, path):
    return os.path.join(build.CPart("file", module_dir, module, version, path, "x").source_path())


KINDS = ("pause", "guest", "virt-launcher")
# what build_images (make kube-node) builds: KINDS, which every real node imports, and the golden image's containerDisk
BUILT_KINDS = KINDS + ("cloud-disk",)
PARTS = {"pause": ("pause",), "guest": (), "virt-launcher": ("virt-handler", "virt-launcher-tools", "container-disk"), "cloud-disk": ()}
CLOUD_DISK_PATH = "/disk/debian-cloud.qcow2"
QEMU_UID = 107


def _cloud_image():
    """The golden image's manifest (tools/virtlab/cloudimage.py: built by ``make guest``; reused when cached)."""
    from ..virtlab import cloudimage  # pylint: disable=import-outside-toplevel
    return cloudimage.build_cloud_image()


def images(guest_dir=None, root=None, kinds=KINDS):
    """{kind: Image} of the images for the current inputs (the build parts they contain must be built)."""
    needed = tuple(sorted({part for kind in kinds for part in PARTS[kind]}))
    binaries = build.locate(needed, root) if needed else {}
    found = {}
    if "pause" in kinds:
        found["pause"] = Image("pause", _hash("pause", binaries["pause"]), root)
    if "guest" in kinds:
        kernel, initrd = _guest_files(guest_dir)
        found["guest"] = Image("guest", _hash("guest", kernel, initrd), root)
    if "virt-launcher" in kinds:
        kubevirt = build.versions()["virt-handler"]
        found["virt-launcher"] = Image("virt-launcher", _hash("virt-launcher", _launcher_inputs(binaries, kubevirt),
                                                              *[binaries[n] for n in LAUNCHER_BINARIES]), root)
    if "cloud-disk" in kinds:
        golden = _cloud_image()
        found["cloud-disk"] = Image("cloud-disk", _hash("cloud-disk", golden["sha256"], CLOUD_DISK_PATH, QEMU_UID,
                                                        _hash(os.path.abspath(__file__))), root)
        found["cloud-disk"].source = golden
    return found


LAUNCHER_BINARIES = ("virt-launcher", "virt-launcher-monitor", "virt-probe", "virt-tail", "virt-freezer", "container-disk")


def _launcher_inputs(binaries, kubevirt):  # pylint: disable=unused-argument
    return {"packages": _apt_candidates(LAUNCHER_PACKAGES), "adaptations": LAUNCHER_ADAPTATIONS, "wrapper": VIRTQEMUD_WRAPPER,
            "recipe": _hash(os.path.abspath(__file__)),      # this file builds the image: a change of it is a new image
            "conf": VIRTQEMUD_CONF_EXTRA, "kubevirt": kubevirt, "files": [_hash(path) for path in _kubevirt_files(kubevirt).values()]}


def _kubevirt_files(kubevirt):
    """KubeVirt's launcher image files from the module (cmd/virt-launcher): {path in the image: source file}."""
    base = "cmd/virt-launcher/"
    wanted = {"/etc/libvirt/qemu.conf": base + "qemu.conf", "/etc/libvirt/virtqemud.conf": base + "virtqemud.conf",
              "/etc/libvirt/hooks/qemu": base + "qemu", "/etc/nsswitch.conf": base + "nsswitch.conf",
              "/usr/bin/node-labeller.sh": base + "node-labeller/node-labeller.sh"}
    return {target: _module_file("kubevirt", "kubevirt.io/kubevirt", kubevirt, source) for target, source in wanted.items()}


def _build_pause(image, binaries, workdir):
    with open(binaries["pause"], "rb") as handle:
        layer = layer_from_files([("/pause", handle.read(), 0o755)])
    path = os.path.join(workdir, "layer.tar")
    with open(path, "wb") as handle:
        handle.write(layer)
    return [path], {"entrypoint": ["/pause"]}


def _build_guest(image, guest_dir, workdir):  # pylint: disable=unused-argument
    kernel, initrd = _guest_files(guest_dir)
    entries = []
    for source, target in ((kernel, "/boot/vmlinuz"), (initrd, "/boot/initrd.img")):
        with open(source, "rb") as handle:
            entries.append((target, handle.read(), 0o644))
    path = os.path.join(workdir, "layer.tar")
    with open(path, "wb") as handle:
        handle.write(layer_from_files(entries))
    # a kernel-boot container never runs its own entrypoint (virt-controller runs the launcher's container-disk in it)
    return [path], {"entrypoint": ["/boot/vmlinuz"]}


def _build_cloud_disk(image, workdir):
    path = os.path.join(workdir, "layer.tar")
    layer_from_file(path, CLOUD_DISK_PATH, image.source["path"], mode=0o444, owner=QEMU_UID)
    # virt-controller runs its own container-disk program in a containerDisk container; the image's entrypoint is never run
    return [path], {"entrypoint": [CLOUD_DISK_PATH]}


def _apt_sources():
    """The machine's own apt source files (mmdebstrap reads them as mirrors): no mirror is written into the code."""
    found = [p for p in ["/etc/apt/sources.list"] if os.path.isfile(p) and os.path.getsize(p)]
    directory = "/etc/apt/sources.list.d"
    if os.path.isdir(directory):
        found += sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith((".list", ".sources")))
    if not found:
        raise ImageError("no apt sources on this machine (/etc/apt/sources.list, /etc/apt/sources.list.d): the launcher image is made "
                         "of Debian packages")
    return found


MMDEBSTRAP_OPTIONS = ("--variant=essential", "--mode=root", "--format=tar", "--dpkgopt=path-exclude=/usr/share/doc/*",
                      "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/locale/*")


def launcher_base(root=None, log=None):
    """The launcher image's Debian layer (a tar made by mmdebstrap), cached in ``image-launcher-base-<key>/base.tar``
    (key: the options and the candidate versions of LAUNCHER_PACKAGES); built when missing."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    key = _hash("launcher-base", MMDEBSTRAP_OPTIONS, _apt_candidates(LAUNCHER_PACKAGES))
    directory = os.path.join(root or build.cache_root(), f"image-launcher-base-{key}")
    base = os.path.join(directory, "base.tar")
    if os.path.exists(base):
        return base
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=".image-launcher-base-", dir=os.path.dirname(directory))
    try:
        out = os.path.join(workdir, "base.tar")
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH))
        argv = ["nice", "-n", "10", "mmdebstrap", *MMDEBSTRAP_OPTIONS, "--include=" + ",".join(LAUNCHER_PACKAGES), "bookworm", out] + _apt_sources()
        log("virt-launcher image: " + " ".join(argv))
        started = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError(f"mmdebstrap failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        seconds = round(time.monotonic() - started, 1)
        with open(os.path.join(workdir, "base.json"), "w", encoding="utf-8") as handle:
            json.dump({"packages": _apt_candidates(LAUNCHER_PACKAGES), "seconds": seconds, "bytes": os.path.getsize(out)}, handle, indent=2)
        os.chmod(workdir, 0o755)
        os.rename(workdir, directory)
        log(f"virt-launcher image: Debian root file system in {seconds} s ({os.path.getsize(base) >> 20} MiB)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return base


def _build_launcher(image, binaries, workdir, log):  # pylint: disable=unused-argument
    kubevirt = build.versions()["virt-handler"]
    base = launcher_base(log=log)
    entries = []
    for name in LAUNCHER_BINARIES:
        with open(binaries[name], "rb") as handle:
            entries.append((f"/usr/bin/{name}", handle.read(), 0o755))
    for target, source in _kubevirt_files(kubevirt).items():
        with open(source, "rb") as handle:
            data = handle.read()
        if target == "/etc/libvirt/virtqemud.conf":
            data += VIRTQEMUD_CONF_EXTRA.encode()
        entries.append((target, data, 0o755 if target.startswith(("/usr/bin/", "/etc/libvirt/hooks/")) else 0o644))
    entries.append(("/usr/sbin/virtqemud", VIRTQEMUD_WRAPPER.encode(), 0o755))
    entries.append(("/usr/libexec/qemu-kvm", ("symlink", "/usr/bin/qemu-system-x86_64"), 0o777))
    entries.append(("/usr/lib64/qemu-kvm", None, 0o755))
    entries.append(("/var/lib/kubevirt-node-labeller", None, 0o755))
    entries.append(("/var/log/libvirt", None, 0o755))       # libvirtd -d (node-labeller.sh's virtqemud -d) logs there
    # virt-launcher starts /usr/sbin/virtlogd -f /etc/libvirt/virtlogd.conf; Debian ships that file in libvirt-daemon-system
    # (not installed): without it virtlogd exits at once and virt-launcher logs "virtlogd exited, restarting" every second
    entries.append(("/etc/libvirt/virtlogd.conf", b"# kubelab: virtlogd's defaults (tools/kubelab/images.py)\n", 0o644))
    # KubeVirt's image: /var/run -> ../run, relative (virt-handler resolves it through /proc/<pid>/root; Debian's is absolute)
    entries.append(("/var/run", ("symlink", "../run"), 0o777))
    # KubeVirt's image: the qemu user and group 107 beside root (passwd/group of the Debian base are extended)
    with tarfile.open(base) as tar:
        passwd = tar.extractfile("./etc/passwd").read().decode()
        group = tar.extractfile("./etc/group").read().decode()
    passwd += "qemu:x:107:107:qemu:/home/qemu:/bin/bash\n"
    group += "qemu:x:107:\n"
    # Debian's libvirt resolves its built-in QEMU user libvirt-qemu before reading qemu.conf ("Failed to parse user
    # 'libvirt-qemu'": the QEMU driver does not start); libvirt-daemon-system's maintainer script creates it on Debian
    passwd += "libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin\n"
    group += "libvirt-qemu:x:64055:\n"
    entries += [("/etc/passwd", passwd.encode(), 0o644), ("/etc/group", group.encode(), 0o644), ("/home/qemu", None, 0o755)]
    top = os.path.join(workdir, "kubevirt.tar")
    with open(top, "wb") as handle:
        handle.write(layer_from_files(entries, xattrs={"/usr/bin/virt-launcher-monitor": {"security.capability": CAP_NET_BIND_SERVICE_EP}}))
    return [base, top], {"entrypoint": ["/usr/bin/virt-launcher"]}


def build_images(guest_dir=None, root=None, log=None, kinds=BUILT_KINDS):
    """Build the missing image archives; return {kind: {"name", "archive", "cached", "seconds"}}."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    needed = tuple(sorted({part for kind in kinds for part in PARTS[kind]}))
    binaries = build.locate(needed, root) if needed else {}
    results = {}
    for kind, image in images(guest_dir, root, kinds).items():
        if image.built():
            results[kind] = {"name": image.name, "archive": image.archive, "cached": True}
            continue
        started = time.monotonic()
        os.makedirs(os.path.dirname(image.directory), exist_ok=True)
        workdir = tempfile.mkdtemp(prefix=f".image-{kind}-", dir=os.path.dirname(image.directory))
        try:
            if kind == "pause":
                layers, config = _build_pause(image, binaries, workdir)
            elif kind == "guest":
                layers, config = _build_guest(image, guest_dir, workdir)
            elif kind == "cloud-disk":
                layers, config = _build_cloud_disk(image, workdir)
            else:
                layers, config = _build_launcher(image, binaries, workdir, log)
            out = os.path.join(workdir, "out")
            os.makedirs(out)
            digest = write_oci_archive(os.path.join(out, "image.tar"), image.name, layers, **config)
            seconds = round(time.monotonic() - started, 1)
            with open(os.path.join(out, "image.json"), "w", encoding="utf-8") as handle:
                json.dump({"name": image.name, "manifest": digest, "seconds": seconds}, handle, indent=2)
            os.chmod(out, 0o755)
            if os.path.isdir(image.directory):
                shutil.rmtree(image.directory)
            os.rename(out, image.directory)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        log(f"image {image.name}: built in {seconds} s")
        results[kind] = {"name": image.name, "archive": image.archive, "cached": False, "seconds": seconds}
    return results


def locate_images(guest_dir=None, root=None, kinds=KINDS):
    """{kind: Image} of built images, or raise naming what to build."""
    found = images(guest_dir, root, kinds)
    missing = [image.archive for image in found.values() if not image.built()]
    if missing:
        raise ImageError("images not built: " + ", ".join(missing) + " (run `make kube-node` or `python -m tools.kubelab build --node`)")
    return found


def import_argv(node, archive):
    """The argv that imports the image archive ``archive`` into the containerd of the running lab node ``node`` (the lab
    state's ``node``: its ``init_pid``)."""
    from . import node as node_module  # pylint: disable=import-outside-toplevel
    return node_module.nodeexec_argv(node["init_pid"], ["ctr", "--address", node_module.SOCKET, "-n", "k8s.io", "images", "import", archive])
