"""Storage and snapshots through a real CSI stack for the real-node lab (issue 37 item 4; opt-in: ``make kube-csi``).

What is built (into the kube cache, ``<cache>/csi-<part>-<version>-<hash>/``, keyed by the inputs: the pinned module
versions or the committed sources, the Go version; standard library only, like build.py):

``csi-hostpath``         hostpathplugin of github.com/kubernetes-csi/csi-driver-host-path, from its source committed
                         unmodified under tools/kubelab/csi/csi-driver-host-path (the Go module proxy answers 403 for
                         that module: see the README there), built with its own go.mod/go.sum, dependencies from the proxy
``csi-registrar``        tools/kubelab/csi/registrar: registers the driver with the kubelet's plugin watcher
                         (pluginregistration/v1), what node-driver-registrar does (also not served by the proxy)
``csi-provisioner``      github.com/kubernetes-csi/external-provisioner/v5 (its own go.mod/go.sum, from the proxy)
``csi-snapshotter``      github.com/kubernetes-csi/external-snapshotter/v8: the snapshot-controller and the csi-snapshotter
                         sidecar (its own go.mod/go.sum; the module's ``./client`` replace points into the repository,
                         which a module zip does not carry: replaced by the published client/v8 of the same version),
                         and the VolumeSnapshot CRDs of client/v8's config/crd (``crds.yaml``)

What :func:`start` adds to a running lab with the real node (``lab.up(..., nodes="real")``): the snapshot CRDs, the
CSIDriver ``hostpath.csi.k8s.io`` (no attach), a StorageClass and a default VolumeSnapshotClass, Kubernetes'
PersistentVolume binder (storage.start_pv_binder: it gives a claim to the external provisioner), and the processes:
the driver, the registrar, external-provisioner and csi-snapshotter inside the node (nodeexec: the node's mount
namespace, where the kubelet sees the driver's socket and the driver's bind mounts), snapshot-controller outside it
(it talks to the API server only). The sidecars and the snapshot-controller use the lab's admin kubeconfig. Every
process is recorded in the lab's state, so ``lab.down`` stops them.
"""

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import build

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(HERE, "csi")
HOSTPATH_SOURCE = os.path.join(SOURCES, "csi-driver-host-path")
REGISTRAR_SOURCE = os.path.join(SOURCES, "registrar")
# the commit of github.com/kubernetes-csi/csi-driver-host-path whose files are committed (its README says which)
HOSTPATH_COMMIT = "1f2b2e64d01e8dd93e1f2e8fa6efcda7280208f2"
HOSTPATH_RELEASE = "v1.18.0-8-g1f2b2e64"      # `git describe --long --tags` of that commit
PROVISIONER = ("github.com/kubernetes-csi/external-provisioner/v5", "v5.3.0")
SNAPSHOTTER = ("github.com/kubernetes-csi/external-snapshotter/v8", "v8.7.0")
SNAPSHOT_CLIENT = ("github.com/kubernetes-csi/external-snapshotter/client/v8", "v8.7.0")

DRIVER = "hostpath.csi.k8s.io"
STORAGE_CLASS = "kubelab-csi-hostpath"
SNAPSHOT_CLASS = "kubelab-csi-hostpath-snapclass"
PLUGIN_DIR = "/var/lib/kubelet/plugins/csi-hostpath"       # inside the node (DIR/node/kubelet/plugins/csi-hostpath here)
SOCKET = PLUGIN_DIR + "/csi.sock"
ROLES = ("csi-hostpath", "csi-registrar", "csi-provisioner", "csi-snapshotter", "snapshot-controller")


class CsiError(build.KubelabError):
    """The CSI stack cannot be built or started; the message says why."""


class CsiPart:  # pylint: disable=too-few-public-methods
    """One cached build: a source tree (committed, or a module of the proxy copied out of Go's module cache), the
    packages to build in it, the files it leaves."""

    # pylint: disable-next=too-many-arguments,too-many-positional-arguments
    def __init__(self, name, version, packages, outputs, *, local=None, module=None, replaces=(), after=None, release=None):
        self.name, self.version, self.packages, self.outputs = name, version, list(packages), list(outputs)
        # what the upstream Makefiles (release-tools/build.make) stamp into main.version: `git describe` of the commit.
        # The hostpath driver answers GetPluginInfo with "Driver is missing version" without it (every sidecar exits)
        self.release = release
        self.local = local              # a committed directory with go.mod/go.sum
        self.module = module            # (path, version) of a module of the proxy
        self.replaces = list(replaces)  # go mod edit -replace arguments applied to the copy
        self.after = after

    def source_hash(self, go_release):
        """Hash of the inputs: the Go version, the module pin and replaces, or every file of the committed tree."""
        digest = hashlib.sha256(go_release.encode() + b"\0" + repr((self.module, self.replaces, self.packages, self.release)).encode() + b"\0")
        if self.local:
            for root, dirs, files in os.walk(self.local):
                dirs.sort()
                for name in sorted(files):
                    path = os.path.join(root, name)
                    digest.update(os.path.relpath(path, self.local).encode() + b"\0")
                    with open(path, "rb") as handle:
                        digest.update(handle.read() + b"\0")
        return digest.hexdigest()[:10]

    def directory(self, go_release, root=None):
        """Where this part lives in the cache."""
        return os.path.join(root or build.cache_root(), f"csi-{self.name}-{self.version}-{self.source_hash(go_release)}")


def module_dir(module, version):
    """The module's directory in Go's module cache (downloaded through the proxy when missing)."""
    out = subprocess.run([build.find_go(), "mod", "download", "-json", f"{module}@{version}"], cwd=SOURCES, env=build.go_env(),
                         capture_output=True, text=True, check=False)
    try:
        return json.loads(out.stdout)["Dir"]
    except (ValueError, KeyError) as exc:
        raise CsiError(f"go mod download {module}@{version} failed: {(out.stderr or out.stdout).strip()[-2000:]}") from exc


def _snapshot_crds(tmpdir, _env):
    """client/v8's VolumeSnapshot CRDs (and the group snapshot ones, which snapshot-controller watches) as one stream."""
    crd_dir = os.path.join(module_dir(*SNAPSHOT_CLIENT), "config", "crd")
    paths = sorted(glob.glob(os.path.join(crd_dir, "*.yaml")))
    paths = [p for p in paths if os.path.basename(p) != "kustomization.yaml"]
    if not paths:
        raise CsiError(f"no CRDs in {crd_dir}")
    with open(os.path.join(tmpdir, "crds.yaml"), "w", encoding="utf-8") as out:
        for path in paths:
            with open(path, encoding="utf-8") as handle:
                out.write("---\n" + handle.read().lstrip("-\n"))


def parts():
    """Every part of the CSI stack."""
    return [
        CsiPart("hostpath", HOSTPATH_COMMIT[:12], ["./cmd/hostpathplugin"], ["hostpathplugin"], local=HOSTPATH_SOURCE,
                release=HOSTPATH_RELEASE),
        CsiPart("registrar", "v1", ["."], ["kubelab-csi-registrar"], local=REGISTRAR_SOURCE),
        CsiPart("provisioner", PROVISIONER[1], ["./cmd/csi-provisioner"], ["csi-provisioner"], module=PROVISIONER, release=PROVISIONER[1]),
        CsiPart("snapshotter", SNAPSHOTTER[1], ["./cmd/snapshot-controller", "./cmd/csi-snapshotter"],
                ["snapshot-controller", "csi-snapshotter", "crds.yaml"], module=SNAPSHOTTER, release=SNAPSHOTTER[1],
                replaces=[f"{SNAPSHOT_CLIENT[0]}={SNAPSHOT_CLIENT[0]}@{SNAPSHOT_CLIENT[1]}"], after=_snapshot_crds),
    ]


def _copy_source(part, workdir):
    """A writable copy of the part's source tree (Go may complete go.sum; the checkout and the module cache stay as they are)."""
    source = part.local or module_dir(*part.module)
    target = os.path.join(workdir, "src")
    shutil.copytree(source, target)
    for root, dirs, files in os.walk(target):       # the module cache's files are read-only
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    for replace in part.replaces:
        proc = subprocess.run([build.find_go(), "mod", "edit", f"-replace={replace}"], cwd=target, env=build.go_env(),
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CsiError(f"go mod edit -replace={replace} failed: {proc.stderr.strip()}")
    return target


def _build_part(part, go, version, root, log):
    target = part.directory(version, root)
    if all(os.path.exists(os.path.join(target, output)) for output in part.outputs):
        log(f"csi {part.name} {part.version}: cached in {target}")
        return {"part": part.name, "cached": True, "dir": target}
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmpdir = tempfile.mkdtemp(prefix=f".csi-{part.name}-", dir=os.path.dirname(target))
    workdir = tempfile.mkdtemp(prefix=f".csi-{part.name}-src-", dir=os.path.dirname(target))
    try:
        started = time.monotonic()
        source = _copy_source(part, workdir)
        log(f"csi {part.name} {part.version}: building ({' '.join(part.packages)}) ...")
        # a main package in "." would be named after its module path: name its output
        output = os.path.join(tmpdir, part.outputs[0]) if part.packages == ["."] else tmpdir + os.sep
        ldflags = "-s -w" + (f" -X main.version={part.release}" if part.release else "")
        proc = subprocess.run(["nice", "-n", "10", go, "build", "-trimpath", "-o", output, "-ldflags", ldflags] + part.packages,
                              cwd=source, env=build.go_env(), capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - started
        if proc.returncode != 0:
            raise CsiError(f"building csi {part.name} {part.version} failed (go build exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        if part.after:
            part.after(tmpdir, build.go_env())
        with open(os.path.join(tmpdir, "build.json"), "w", encoding="utf-8") as handle:
            json.dump({"part": part.name, "version": part.version, "go": version, "packages": part.packages,
                       "module": part.module, "replaces": part.replaces, "release": part.release, "seconds": round(elapsed, 1)}, handle, indent=2)
        os.chmod(tmpdir, 0o755)
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.rename(tmpdir, target)
        log(f"csi {part.name} {part.version}: built in {elapsed:.0f} s into {target}")
        return {"part": part.name, "cached": False, "dir": target, "seconds": round(elapsed, 1)}
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def build_all(root=None, log=None):
    """Build every missing part; one dict per part."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    go = build.find_go()
    version = build.go_version(go)
    return [_build_part(part, go, version, root, log) for part in parts()]


def locate(root=None):
    """{output name: path}, or CsiError naming what is missing and how to build it."""
    version = build.go_version(build.find_go())
    found, missing = {}, []
    for part in parts():
        directory = part.directory(version, root)
        for output in part.outputs:
            path = os.path.join(directory, output)
            (found.__setitem__(output, path) if os.path.exists(path) else missing.append(path))
    if missing:
        raise CsiError("not built: " + ", ".join(missing) + " (run `make kube-csi` or `python -m tools.kubelab.csi build`)")
    return found


# ---------------------------------------------------------------- the stack in a running lab with the real node

def csi_driver():
    """The CSIDriver object of the hostpath driver (as its deploy/kubernetes-1.34/hostpath/csi-hostpath-driverinfo.yaml,
    without the ephemeral mode): no attach, pod info on mount, fsGroup applied by the kubelet."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
            "spec": {"attachRequired": False, "podInfoOnMount": True, "volumeLifecycleModes": ["Persistent"], "fsGroupPolicy": "File"}}


def storage_class():
    """A StorageClass of the driver: provisioned at once (the module waits for Bound), deleted with its claim."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": STORAGE_CLASS},
            "provisioner": DRIVER, "volumeBindingMode": "Immediate", "reclaimPolicy": "Delete", "allowVolumeExpansion": True}


def snapshot_class():
    """The default VolumeSnapshotClass of the driver (KubeVirt picks the class of a volume's driver; the default one when several)."""
    return {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
            "metadata": {"name": SNAPSHOT_CLASS, "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"}},
            "driver": DRIVER, "deletionPolicy": "Delete"}


def state_dir(directory):
    """The driver's state directory (its volumes are DIR/node/csi-hostpath/<volume handle>, its snapshots <id>.snap)."""
    return os.path.join(os.path.abspath(directory), "node", "csi-hostpath")


def volume_path(directory, volume_handle):
    """Where the driver keeps the volume ``volume_handle`` (a PV's spec.csi.volumeHandle) on this machine."""
    if not volume_handle or "/" in volume_handle or volume_handle in (".", ".."):
        raise CsiError(f"volume handle {volume_handle!r} is not a plain name")
    return os.path.join(state_dir(directory), volume_handle)


def _lab():
    from . import lab  # pylint: disable=import-outside-toplevel
    return lab


def _registered(client):
    code, csinode = client.request("GET", "/apis/storage.k8s.io/v1/csinodes/kubelab-node")
    return code == 200 and any(d.get("name") == DRIVER for d in (csinode.get("spec") or {}).get("drivers") or [])


def start(directory, timeout=120):  # pylint: disable=too-many-locals
    """Start the CSI stack in the running lab of ``directory`` (which has the real node); return {role: pid, ...} and
    the seconds it took. Raises CsiError naming what did not come up (with its log's last lines)."""
    from . import node, pki, storage  # pylint: disable=import-outside-toplevel
    lab = _lab()
    directory = os.path.abspath(directory)
    state = lab._load_state(directory)  # pylint: disable=protected-access
    if not state or not (state.get("node") or {}).get("init_pid"):
        raise CsiError(f"no lab with the real node runs in {directory} (lab.up(..., nodes='real') first)")
    if any(p["role"] in ROLES for p in state["processes"]):
        raise CsiError(f"the CSI stack already runs in {directory}")
    binaries = locate()
    started = time.monotonic()
    client = lab.Client(state["server"], state["ca_file"], pki.ensure_token(os.path.join(directory, "pki", "admin.token")))
    lab._install_crds(client, lab._load_crds(binaries["crds.yaml"]))  # pylint: disable=protected-access
    client.apply("/apis/storage.k8s.io/v1/csidrivers", csi_driver())
    client.apply("/apis/storage.k8s.io/v1/storageclasses", storage_class())
    client.apply("/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses", snapshot_class())
    if not any(p["role"] == storage.BINDER_ROLE for p in state["processes"]):
        storage.start_pv_binder(directory)
        state = lab._load_state(directory)  # pylint: disable=protected-access
    init_pid, kubeconfig = state["node"]["init_pid"], state["kubeconfig"]
    plugin_dir = os.path.join(directory, "node", "kubelet", "plugins", "csi-hostpath")   # PLUGIN_DIR inside the node
    os.makedirs(plugin_dir, mode=0o750, exist_ok=True)
    os.makedirs(state_dir(directory), mode=0o750, exist_ok=True)
    procs = {}

    def run(role, argv, ready, in_node=True):
        proc = lab._start(directory, role, node.nodeexec_argv(init_pid, argv) if in_node else argv, state)  # pylint: disable=protected-access
        lab._wait(role, proc, state["processes"][-1]["log"], ready, timeout=timeout)  # pylint: disable=protected-access
        procs[role] = (proc, state["processes"][-1]["log"])

    run("csi-hostpath", [binaries["hostpathplugin"], f"--drivername={DRIVER}", f"--endpoint=unix://{SOCKET}",
                         f"--nodeid={node.NODE_NAME}", f"--statedir={state_dir(directory)}", "--enable-attach=false", "--v=4"],
        lambda: os.path.exists(os.path.join(plugin_dir, "csi.sock")))
    # the kubelet calls the registrar, then NodeGetInfo on the driver, and writes the driver into the node's CSINode
    run("csi-registrar", [binaries["kubelab-csi-registrar"], f"--driver-name={DRIVER}", f"--csi-address={SOCKET}"],
        lambda: _registered(client))
    sidecar = [f"--csi-address={SOCKET}", f"--kubeconfig={kubeconfig}", "--leader-election=false", "--v=4"]
    run("csi-provisioner", [binaries["csi-provisioner"]] + sidecar + ["--extra-create-metadata", "--timeout=60s"],
        lambda: True)
    run("csi-snapshotter", [binaries["csi-snapshotter"]] + sidecar + ["--extra-create-metadata", "--timeout=60s"], lambda: True)
    run("snapshot-controller", [binaries["snapshot-controller"], f"--kubeconfig={kubeconfig}", "--leader-election=false", "--v=4"],
        lambda: True, in_node=False)
    # a sidecar that cannot reach the driver or the API server exits within seconds (e.g. "Error getting CSI driver
    # name"): give them that time, then check
    time.sleep(5)
    for role, (proc, log_path) in procs.items():
        if proc.poll() is not None:
            raise CsiError(f"{role} exited with status {proc.returncode} while starting; last lines of {log_path}:\n"
                           f"{lab._log_tail(log_path)}")  # pylint: disable=protected-access
    return {"pids": {role: proc.pid for role, (proc, _log) in procs.items()}, "seconds": round(time.monotonic() - started, 1)}


def main(argv=None):
    """``python -m tools.kubelab.csi build`` | ``up --dir DIR`` (the CSI stack into the running lab of DIR)."""
    import argparse  # pylint: disable=import-outside-toplevel
    parser = argparse.ArgumentParser(prog="python -m tools.kubelab.csi", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("build", help="build the CSI stack's parts into the kube cache")
    up = sub.add_parser("up", help="start the CSI stack in the running lab (with the real node) of --dir")
    up.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    try:
        if args.action == "build":
            with build.build_lock():
                print(json.dumps(build_all(), indent=2))
        else:
            print(json.dumps(start(args.dir), indent=2))
    except build.KubelabError as exc:
        print(f"kubelab csi: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
