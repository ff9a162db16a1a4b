"""Build the real Kubernetes stack of the KubeVirt tests from Go modules, into a cache outside the checkout.

What is built (pinned by the go.mod/go.sum files under tools/kubelab/go/, fetched through
the Go module proxy; nothing binary lives in the repository):

``etcd``                      go.etcd.io/etcd/server/v3 (wrapper module go/etcd)
``kube-apiserver``            k8s.io/kubernetes (wrapper module go/kube, every staging
``kube-controller-manager``   module replaced by its published v0.Y.Z)
``kubevirt-manifests``        prints KubeVirt's and CDI's own generated CRDs (go/kubevirt);
                              its output is kept beside it as ``crds.yaml``
``virt-api``                  KubeVirt's own virt-api (go/kubevirt), run out of cluster by ``up --virt-api``
``virt-controller``           KubeVirt's own virt-controller (go/kubevirt), run out of cluster by ``up --controllers real``
``kube-scheduler``            k8s.io/kubernetes' scheduler (go/kube), for ``up --controllers real``
``kwok``                      sigs.k8s.io/kwok (go/kwok): simulated nodes and pod lifecycles, for ``up --controllers real``

The real node (``up --nodes real``; built only by ``build --node`` / ``make kube-node``, or when named with ``--only``):

``kubelet``                   k8s.io/kubernetes' kubelet (go/kube)
``virt-handler``              KubeVirt's virt-handler and virt-launcher (go/kubevirt; cgo: libvirt-dev, <linux/kvm.h>)
``virt-launcher-tools``       virt-chroot, virt-launcher-monitor, virt-probe, virt-tail, virt-freezer (go/kubevirt, static)
``pause``                     Kubernetes' build/pause/linux/pause.c (gcc -static), the pause image's one file
``container-disk``            KubeVirt's cmd/container-disk-v2alpha/main.c (gcc -static), what a containerDisk's container runs

Each part lands in ``<cache>/<part>-<version>-<hash>/`` where the hash covers the part's
wrapper sources (go.mod, go.sum, *.go) and the Go version, so a changed pin or source
builds anew and an unchanged one is never rebuilt.  ``<cache>`` is
``$CONVERGE_VIRT_KUBE_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/converge-virt/kube``.
A part is built into a temporary directory and renamed into place only when complete.

Go runs with ``nice -n 10``, ``CGO_ENABLED=0`` (1 for the cgo parts), ``GOFLAGS=-mod=mod`` and ``GOTOOLCHAIN=local``.
Standard library only (``make kube`` needs no virtualenv).
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GO_DIR = os.path.join(HERE, "go")
GO_FALLBACK = "/usr/local/go/bin/go"


class KubelabError(Exception):
    """Anything kubelab cannot do; the message says what and why."""


class BuildError(KubelabError):
    """A build step failed or a built file is missing; the message says which and why."""


def cache_root():
    """The cache directory (outside the checkout)."""
    explicit = os.environ.get("CONVERGE_VIRT_KUBE_CACHE")
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "converge-virt", "kube")


@contextlib.contextmanager
def build_lock(root=None, log=None):
    """Hold the cache's build lock (``ROOT/.build.lock``, an exclusive flock) for a whole ``build``: make test's two lanes
    may both ask for the same parts (lane 0 builds the real node's parts first, lane 1 asks again before its real-node
    tier), and a second build waits for the first and then finds every part cached instead of building it twice."""
    root = root or cache_root()
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".build.lock"), "w", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("kubelab build: another build of %s is running; waiting for it" % root)
            started = time.monotonic()
            fcntl.flock(handle, fcntl.LOCK_EX)
            log("kubelab build: waited %.0f s" % (time.monotonic() - started))
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _module_version(module_dir, module):
    """The version of ``module`` required by the go.mod in ``module_dir``."""
    path = os.path.join(GO_DIR, module_dir, "go.mod")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    found = re.search(r"^\s*(?:require\s+)?" + re.escape(module) + r"\s+(v\S+)\s*$", text, re.M)
    if not found:
        raise BuildError(f"{path} does not require {module}")
    return found.group(1)


def _staging_replacements(module_dir):
    """(module, version) pairs of the replace lines in a wrapper go.mod."""
    with open(os.path.join(GO_DIR, module_dir, "go.mod"), encoding="utf-8") as handle:
        return re.findall(r"^\s*(\S+)\s*=>\s*\S+\s+(v\S+)\s*$", handle.read(), re.M)


class Part:  # pylint: disable=too-few-public-methods
    """One cached build: a wrapper module, the packages to build and the files it leaves."""

    # pylint: disable-next=too-many-arguments,too-many-positional-arguments
    # pylint: disable-next=too-many-arguments,too-many-positional-arguments
    def __init__(self, name, module_dir, version, packages, outputs, *, ldflags=(), after=None, cgo=False, local_modules=(),
                 patches=()):
        self.patches = list(patches)            # SourcePatch items laid over the module's files (go build -overlay)
        self.name = name
        self.module_dir = module_dir
        self.version = version
        self.packages = packages
        self.outputs = outputs
        self.ldflags = list(ldflags)
        self.after = after
        self.cgo = cgo                          # CGO_ENABLED=1 (libvirt, <linux/kvm.h>): linked against this machine's libraries
        self.local_modules = list(local_modules)  # directories under go/ that go.mod replaces a module by (hashed too)

    def source_hash(self, go_release):
        """Hash of what the build reads from the checkout (go.mod, go.sum, the packages' .go files, the local modules
        go.mod points at) and the Go version (and, with cgo, the C compiler's and libvirt's versions)."""
        digest = hashlib.sha256(go_release.encode() + b"\0" + " ".join(self.ldflags).encode() + b"\0")
        if self.cgo:
            digest.update(b"cgo\0" + _cgo_inputs().encode() + b"\0")
        root = os.path.join(GO_DIR, self.module_dir)
        files = [os.path.join(root, "go.mod"), os.path.join(root, "go.sum")]
        for package in self.packages:
            pkg_dir = os.path.normpath(os.path.join(root, package))
            files += sorted(os.path.join(pkg_dir, name) for name in os.listdir(pkg_dir) if name.endswith(".go"))
        for local in self.local_modules:
            local_dir = os.path.join(GO_DIR, local)
            files += sorted(os.path.join(local_dir, name) for name in os.listdir(local_dir) if name.endswith((".go", ".mod")))
        for path in files:
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(handle.read() + b"\0")
        for patch in self.patches:
            digest.update(repr((patch.module, patch.path, patch.old, patch.new)).encode() + b"\0")
        return digest.hexdigest()[:10]

    def directory(self, go_release, root=None):
        """Where this part lives in the cache."""
        return os.path.join(root or cache_root(), f"{self.name}-{self.version}-{self.source_hash(go_release)}")


def _cgo_inputs():
    """What a cgo build links against on this machine: the C compiler's and libvirt's versions (part of the cache key)."""
    found = []
    for argv in (["gcc", "-dumpfullversion"], ["pkg-config", "--modversion", "libvirt"]):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise BuildError(f"{argv[0]} is not installed ({exc.strerror}): the cgo builds (virt-handler, virt-launcher) need gcc, "
                             "pkg-config and libvirt-dev (make apt)") from exc
        if out.returncode != 0:
            raise BuildError(f"{' '.join(argv)} failed ({out.stderr.strip()}): the cgo builds need gcc, pkg-config and libvirt-dev (make apt)")
        found.append(f"{argv[0]}={out.stdout.strip()}")
    return " ".join(found)


class SourcePatch:  # pylint: disable=too-few-public-methods
    """A fix laid over one file of a pinned module at build time: the build uses a copy of the module (go.mod replace
    through ``go build -modfile``; the module cache and the checkout's go.mod are untouched) in which ``old``, which
    must occur exactly once in ``path``, is replaced by ``new``. Only for upstream fixes released after the pinned
    version (``reason`` names the upstream change)."""

    # pylint: disable-next=too-many-arguments,too-many-positional-arguments
    def __init__(self, module, version, path, old, new, reason):
        self.module, self.version, self.path, self.old, self.new, self.reason = module, version, path, old, new, reason


def _patched_modfile(part, workdir):
    """Copies of the patched modules under ``workdir`` and a go.mod/go.sum pair replacing them; returns the go.mod path."""
    module_dir = os.path.join(GO_DIR, part.module_dir)
    modfile = os.path.join(workdir, "go.mod")
    shutil.copyfile(os.path.join(module_dir, "go.mod"), modfile)
    shutil.copyfile(os.path.join(module_dir, "go.sum"), os.path.join(workdir, "go.sum"))
    copies = {}
    for patch in part.patches:
        key = f"{patch.module}@{patch.version}"
        if key not in copies:
            out = subprocess.run([find_go(), "mod", "download", "-json", key], cwd=module_dir, env=go_env(),
                                 capture_output=True, text=True, check=False)
            try:
                source = json.loads(out.stdout)["Dir"]
            except (ValueError, KeyError) as exc:
                raise BuildError(f"go mod download {key} failed: {(out.stderr or out.stdout).strip()[-2000:]}") from exc
            copies[key] = os.path.join(workdir, "mod-" + re.sub(r"[^A-Za-z0-9.-]", "_", key))
            shutil.copytree(source, copies[key])
            for root, dirs, files in os.walk(copies[key]):       # the module cache's files are read-only
                for name in dirs + files:
                    os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
            replace = subprocess.run([find_go(), "mod", "edit", f"-modfile={modfile}", f"-replace={patch.module}={copies[key]}"],
                                     cwd=module_dir, env=go_env(), capture_output=True, text=True, check=False)
            if replace.returncode != 0:
                raise BuildError(f"go mod edit -replace {patch.module} failed: {replace.stderr.strip()}")
        path = os.path.join(copies[key], patch.path)
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if text.count(patch.old) != 1:
            raise BuildError(f"patch for {key} {patch.path} ({patch.reason}): the text to replace occurs "
                             f"{text.count(patch.old)} times, not once")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text.replace(patch.old, patch.new))
    return modfile


def _emulation_cgroup_patch(kubevirt):
    """KubeVirt v1.8.0's virt-handler fails every VMI under useEmulation when the launcher has no /dev/kvm (the launcher
    pod asks for no kvm device then): generateDeviceRulesForVMI stats /dev/kvm unconditionally. Fixed upstream by
    kubevirt/kubevirt PR #17251 (regression of PR #16836), backported to release-1.8 as PR #17324 (after v1.8.0):
    the rule for a missing hypervisor device is skipped. Seen here: 'failed opening kvm for path root: /proc/N/root,
    relative: /dev/kvm: no such file or directory', the VMI stuck in Scheduled."""
    old = "\n".join([
        '\tpath, err := safepath.JoinNoFollow(mountRoot, fmt.Sprintf("/dev/%s", hypervisorDevice))',
        '\tif err != nil {',
        '\t\treturn nil, err',
        '\t}',
        ""])
    new = "\n".join([
        '\tpath, err := safepath.JoinNoFollow(mountRoot, fmt.Sprintf("/dev/%s", hypervisorDevice))',
        '\tif errors.Is(err, os.ErrNotExist) {',
        '\t\t// kubelab: as kubevirt/kubevirt PR #17251 / #17324 - without the device (software emulation: the launcher',
        '\t\t// pod asks for none) there is no rule to add',
        '\t\tlog.Log.V(loggingVerbosity).Infof("hypervisor device %s not present, no device rule for it", hypervisorDevice)',
        '\t\treturn vmiDeviceRules, nil',
        '\t}',
        '\tif err != nil {',
        '\t\treturn nil, err',
        '\t}',
        ""])
    return SourcePatch("kubevirt.io/kubevirt", kubevirt, "pkg/virt-handler/cgroup/util.go", old, new,
                       "kubevirt/kubevirt PR #17324, the release-1.8 backport of PR #17251")


class CPart:  # pylint: disable=too-few-public-methods
    """One C program of a Go module's source tree, built with gcc -static (the pause binary, KubeVirt's container-disk)."""

    # pylint: disable-next=too-many-arguments,too-many-positional-arguments
    def __init__(self, name, module_dir, module, version, source, output, cflags=()):
        self.name = name
        self.module_dir = module_dir    # the wrapper module that pins ``module``
        self.module = module
        self.version = version
        self.source = source            # path inside the module
        self.outputs = [output]
        self.cflags = list(cflags)
        self.after = None

    def source_path(self):
        """The C file in Go's module cache (downloaded through the module proxy when missing)."""
        out = subprocess.run([find_go(), "mod", "download", "-json", f"{self.module}@{self.version}"], cwd=os.path.join(GO_DIR, self.module_dir),
                             env=go_env(), capture_output=True, text=True, check=False)
        try:
            directory = json.loads(out.stdout)["Dir"]
        except (ValueError, KeyError) as exc:
            raise BuildError(f"go mod download {self.module}@{self.version} failed: {(out.stderr or out.stdout).strip()[-2000:]}") from exc
        return os.path.join(directory, self.source)

    def source_hash(self, go_release):  # pylint: disable=unused-argument
        """Hash of the C source, the flags and the compiler's version."""
        digest = hashlib.sha256(_cgo_inputs().encode() + b"\0" + " ".join(self.cflags).encode() + b"\0")
        with open(self.source_path(), "rb") as handle:
            digest.update(handle.read())
        return digest.hexdigest()[:10]

    def directory(self, go_release, root=None):
        """Where this part lives in the cache."""
        return os.path.join(root or cache_root(), f"{self.name}-{self.version}-{self.source_hash(go_release)}")


def _write_crds(tmpdir, env):
    """Run the freshly built manifest printer and keep its CRDs beside it."""
    out = subprocess.run([os.path.join(tmpdir, "kubevirt-manifests"), "crds"], env=env, capture_output=True, check=False)
    if out.returncode != 0 or b"kind: CustomResourceDefinition" not in out.stdout:
        raise BuildError("kubevirt-manifests crds failed: " + out.stderr.decode(errors="replace")[-2000:])
    with open(os.path.join(tmpdir, "crds.yaml"), "wb") as handle:
        handle.write(out.stdout)


def parts():
    """Every part, with versions read from the wrapper go.mod files (the one place they are pinned)."""
    k8s = _module_version("kube", "k8s.io/kubernetes")
    major, minor = re.match(r"v(\d+)\.(\d+)\.", k8s).groups()
    staging = "v0.%s.%s" % (minor, k8s.split(".", 2)[2])
    wrong = [f"{mod} {ver}" for mod, ver in _staging_replacements("kube") if ver != staging]
    if wrong:
        raise BuildError(f"go/kube/go.mod: staging modules must be replaced by {staging} for k8s.io/kubernetes {k8s}: " + ", ".join(wrong))
    stamp = "1970-01-01T00:00:00Z"
    kube_ldflags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        kube_ldflags += [f"-X {pkg}.gitVersion={k8s}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}",
                         f"-X {pkg}.gitTreeState=clean", f"-X {pkg}.buildDate={stamp}"]
    kubevirt = _module_version("kubevirt", "kubevirt.io/kubevirt")
    cdi = _module_version("kubevirt", "kubevirt.io/containerized-data-importer")
    return [
        Part("etcd", "etcd", _module_version("etcd", "go.etcd.io/etcd/server/v3"), ["."], ["etcd"]),
        Part("kubernetes", "kube", k8s, ["./cmd/kube-apiserver", "./cmd/kube-controller-manager"],
             ["kube-apiserver", "kube-controller-manager"], ldflags=kube_ldflags),
        Part("kubevirt", "kubevirt", f"{kubevirt}-cdi-{cdi}", ["./cmd/kubevirt-manifests"], ["kubevirt-manifests", "crds.yaml"],
             after=_write_crds),
        # stage 2: KubeVirt's own virt-api, run out of cluster (`up --virt-api`)
        Part("virt-api", "kubevirt", kubevirt, ["./cmd/virt-api"], ["virt-api"]),
        # stage 3 (`up --controllers real`): KubeVirt's own virt-controller, Kubernetes' scheduler, kwok's simulated nodes
        Part("virt-controller", "kubevirt", kubevirt, ["./cmd/virt-controller"], ["virt-controller"]),
        Part("kube-scheduler", "kube", k8s, ["./cmd/kube-scheduler"], ["kube-scheduler"], ldflags=kube_ldflags),
        Part("kwok", "kwok", _module_version("kwok", "sigs.k8s.io/kwok"), ["./cmd/kwok"], ["kwok"]),
        # the real node (`up --nodes real`, issue 34): kubelet; KubeVirt's virt-handler and virt-launcher (cgo: libvirt,
        # <linux/kvm.h>); the launcher image's static helpers; the pause and container-disk programs (C, gcc -static)
        Part("kubelet", "kube", k8s, ["./cmd/kubelet"], ["kubelet"], ldflags=kube_ldflags),
        Part("virt-handler", "kubevirt", kubevirt, ["./cmd/virt-handler", "./cmd/virt-launcher"], ["virt-handler", "virt-launcher"],
             cgo=True, local_modules=["libnbd-unavailable"], patches=[_emulation_cgroup_patch(kubevirt)]),
        Part("virt-launcher-tools", "kubevirt", kubevirt,
             ["./cmd/virt-chroot", "./cmd/virt-launcher-monitor", "./cmd/virt-probe", "./cmd/virt-tail", "./cmd/virt-freezer"],
             ["virt-chroot", "virt-launcher-monitor", "virt-probe", "virt-tail", "virt-freezer"], local_modules=["libnbd-unavailable"]),
        CPart("pause", "kube", "k8s.io/kubernetes", k8s, "build/pause/linux/pause.c", "pause",
              cflags=["-Os", "-Wall", "-Werror", "-static", f"-DVERSION={k8s}-kubelab"]),
        CPart("container-disk", "kubevirt", "kubevirt.io/kubevirt", kubevirt, "cmd/container-disk-v2alpha/main.c", "container-disk",
              cflags=["-O2", "-Wall", "-static"]),
    ]


def find_go():
    """Path of the go command (PATH first, then /usr/local/go)."""
    found = shutil.which("go") or (GO_FALLBACK if os.access(GO_FALLBACK, os.X_OK) else None)
    if not found:
        raise BuildError("the go command is not installed (looked on PATH and at /usr/local/go/bin/go): Go 1.26 is needed to build the stack")
    return found


def go_env(cgo=False):
    """Environment for every go command (CGO_ENABLED=0 unless ``cgo``)."""
    env = dict(os.environ)
    env.update(CGO_ENABLED="1" if cgo else "0", GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    return env


def go_version(go):
    """The version string of the go command, e.g. go1.26.8."""
    out = subprocess.run([go, "env", "GOVERSION"], env=go_env(), capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise BuildError(f"{go} env GOVERSION failed: {out.stderr.strip()}")
    return out.stdout.strip()


STAGE1 = ("etcd", "kubernetes", "kubevirt")
REAL_CONTROLLERS = ("virt-controller", "kube-scheduler", "kwok")
REAL_NODE = ("kubelet", "virt-handler", "virt-launcher-tools", "pause", "container-disk")


def locate(names=STAGE1, root=None):
    """{output name: path} of every output of the named parts, or raise BuildError naming what is missing and how to build it."""
    go = find_go()
    version = go_version(go)
    found, missing = {}, []
    for part in parts():
        if part.name not in names:
            continue
        directory = part.directory(version, root)
        for output in part.outputs:
            path = os.path.join(directory, output)
            if os.path.exists(path):
                found[output] = path
            else:
                missing.append(path)
    if missing:
        raise BuildError("not built: " + ", ".join(missing) + " (run `make kube` or `python -m tools.kubelab build`)")
    return found


def versions():
    """{component: pinned version}."""
    return {part.name: part.version for part in parts()}


def _build_part(part, go, version, root, log):
    target = part.directory(version, root)
    if all(os.path.exists(os.path.join(target, output)) for output in part.outputs):
        log(f"{part.name} {part.version}: cached in {target}")
        return {"part": part.name, "cached": True, "dir": target}
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmpdir = tempfile.mkdtemp(prefix=f".{part.name}-", dir=os.path.dirname(target))
    patch_dir = None
    try:
        started = time.monotonic()
        if isinstance(part, CPart):
            source = part.source_path()
            cmd = ["nice", "-n", "10", "gcc"] + part.cflags + ["-o", os.path.join(tmpdir, part.outputs[0]), source]
            log(f"{part.name} {part.version}: building ({source}) ...")
            tool = "gcc"
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        else:
            overlay = []
            if part.patches:
                patch_dir = tempfile.mkdtemp(prefix=f".{part.name}-patched-", dir=os.path.dirname(target))
                overlay = [f"-modfile={_patched_modfile(part, patch_dir)}"]
            cmd = ["nice", "-n", "10", go, "build", "-trimpath", "-o", tmpdir + os.sep,
                   "-ldflags", " ".join(["-s", "-w"] + part.ldflags)] + overlay + part.packages
            log(f"{part.name} {part.version}: building ({' '.join(part.packages)}{', cgo' if part.cgo else ''}) ...")
            tool = "go build"
            proc = subprocess.run(cmd, cwd=os.path.join(GO_DIR, part.module_dir), env=go_env(part.cgo), capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - started
        if proc.returncode != 0:
            raise BuildError(f"building {part.name} {part.version} failed ({tool} exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        if part.after:
            part.after(tmpdir, go_env())
        with open(os.path.join(tmpdir, "build.json"), "w", encoding="utf-8") as handle:
            json.dump({"part": part.name, "version": part.version, "go": version, "packages": getattr(part, "packages", [part.outputs[0]]),
                       "patches": [f"{p.module}@{p.version} {p.path}: {p.reason}" for p in getattr(part, "patches", [])],
                       "seconds": round(elapsed, 1)}, handle, indent=2)
        os.chmod(tmpdir, 0o755)          # mkdtemp made it owner-only
        if os.path.isdir(target):        # incomplete leftover of an older run
            shutil.rmtree(target)
        os.rename(tmpdir, target)
        log(f"{part.name} {part.version}: built in {elapsed:.0f} s into {target}")
        return {"part": part.name, "cached": False, "dir": target, "seconds": round(elapsed, 1)}
    finally:
        if os.path.isdir(tmpdir):
            shutil.rmtree(tmpdir, ignore_errors=True)
        if patch_dir:
            shutil.rmtree(patch_dir, ignore_errors=True)


def build(only=None, root=None, log=None, node=False):
    """Build every missing part (or only the named ones); return one dict per part. The real node's parts
    (REAL_NODE: `make kube-node`) are built only with ``node`` or when named in ``only``."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    go = find_go()
    version = go_version(go)
    results = []
    for part in parts():
        if only and part.name not in only:
            continue
        if not only and part.name in REAL_NODE and not node:
            continue
        results.append(_build_part(part, go, version, root, log))
    return results
