"""One real Kubernetes node for a lab (`up --nodes real`, issue 34): containerd + kubelet (+ KubeVirt's virt-handler).

The node is a PID, mount and UTS namespace of its own inside the caller's network namespace (nodeinit.py is its
PID 1; nodeexec.py starts its processes inside), so KubeVirt's assumptions about PID 1 and the standard paths hold
for this node alone and parallel labs never share a directory::

    DIR/node/
      nodeinit.json       what nodeinit.py binds (DIR/node/<name> over /var/lib/kubelet, /run/containerd, ...)
      containerd.toml     containerd's configuration (its own root, state and socket through those binds)
      kubelet.yaml        the KubeletConfiguration; kubelet.kubeconfig (client certificate system:node:NAME)
      cni/10-kubelab.conflist  bridge + host-local on the node's bridge, loopback
      pki/                the node's client and serving certificates (signed by the lab CA)

What the node uses of the machine: Debian's containerd, runc and CNI plugins (/usr/bin, /usr/sbin, /usr/lib/cni),
the cgroup v1 hierarchies (a root ``/kubelab-<id>`` of its own in each; removed by ``down``), a Linux bridge
``kl<id>`` with a private /24 in the caller's network namespace (removed by ``down``) and empty directories as
mount points for the binds (e.g. /var/lib/kubelet, /run/containerd: created on the machine when missing, nothing
is written into them outside the node). It refuses to start in the machine's own network namespace.
"""

import calendar
import hashlib
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from . import build, images, pki

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_NAME = "kubelab-node"
SUBNETS = ipaddress.ip_network("10.200.0.0/16")
# kubelet's expected kernel tunables (pkg/kubelet/cm/container_manager_linux.go setupKernelTunables): the node sees
# these values (bind-mounted files) and kubelet runs with protectKernelDefaults, so it never writes the machine's
KERNEL_TUNABLES = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10", "kernel/panic_on_oops": "1",
                   "kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000"}
# (directory under DIR/node, path inside the node)
BINDS = (("kubelet", "/var/lib/kubelet"), ("containerd-lib", "/var/lib/containerd"), ("containerd-run", "/run/containerd"),
         ("runc", "/run/runc"), ("netns", "/run/netns"), ("cni-lib", "/var/lib/cni"), ("cni", "/etc/cni/net.d"),
         ("pod-logs", "/var/log/pods"), ("container-logs", "/var/log/containers"),
         ("kubevirt", "/run/kubevirt"), ("kubevirt-private", "/run/kubevirt-private"),
         ("kubevirt-libvirt-runtimes", "/run/kubevirt-libvirt-runtimes"), ("kubevirt-lib", "/var/lib/kubevirt"),
         ("kubevirt-node-labeller", "/var/lib/kubevirt-node-labeller"))
CGROUP_ROOT = "/sys/fs/cgroup"
SOCKET = "/run/containerd/containerd.sock"


class NodeError(build.KubelabError):
    """The node cannot start; the message says why."""


def node_id(directory):
    """A short id of the lab directory (names of the bridge and the cgroup root)."""
    return hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:8]


def _run(argv, what):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NodeError(f"{what} failed ({' '.join(argv)}: exit {proc.returncode}): {proc.stderr.strip()[-1000:]}")
    return proc.stdout


def check_network_namespace():
    """Refuse the machine's own network namespace: the node's kubelet, CNI bridge and pods belong in a private one."""
    try:
        if os.readlink("/proc/self/ns/net") == os.readlink("/proc/1/ns/net"):
            raise NodeError("a real node starts only inside a private network namespace (`python -m tools.virtlab netns -- ...`): "
                            "its bridge, pods and kubelet must not be reachable from the machine's network")
    except PermissionError:
        pass


def _bridge(directory):
    """Create the node's bridge with a free /24 of 10.200.0.0/16 (gateway .1 = the node's IP); return (name, network, ip)."""
    name = "kl" + node_id(directory)
    existing = json.loads(_run(["ip", "-j", "addr", "show"], "listing addresses") or "[]")
    for link in existing:
        if link.get("ifname") == name:
            for addr in link.get("addr_info", []):
                if addr.get("family") == "inet":
                    network = ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False)
                    return name, network, addr["local"]
    used = {ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False) for link in existing
            for a in link.get("addr_info", []) if a.get("family") == "inet"}
    candidates = list(SUBNETS.subnets(new_prefix=24))
    random.shuffle(candidates)
    network = next((net for net in candidates if not any(net.overlaps(u) for u in used)), None)
    if network is None:
        raise NodeError("no free /24 left in 10.200.0.0/16 for the node's bridge")
    ip = str(network.network_address + 1)
    _run(["ip", "link", "add", "name", name, "type", "bridge"], "creating the node's bridge")
    _run(["ip", "addr", "add", f"{ip}/24", "dev", name], "addressing the node's bridge")
    _run(["ip", "link", "set", name, "up"], "bringing the node's bridge up")
    return name, network, ip


def _cgroup_root(directory):
    """/kubelab-<id> in every cgroup v1 hierarchy (cpuset: with its parent's cpus and mems); return its name."""
    name = "/kubelab-" + node_id(directory)
    if not os.path.isdir(os.path.join(CGROUP_ROOT, "memory")):
        raise NodeError(f"no cgroup v1 memory hierarchy at {CGROUP_ROOT}/memory: the lab's node runs kubelet on cgroup v1 (cgroupfs)")
    for hierarchy in sorted(os.listdir(CGROUP_ROOT)):
        base = os.path.join(CGROUP_ROOT, hierarchy)
        if not os.path.isdir(base) or os.path.islink(base) or not os.path.exists(os.path.join(base, "cgroup.procs")):
            continue
        path = base + name
        os.makedirs(path, exist_ok=True)
        if hierarchy == "cpuset":
            for item in ("cpuset.cpus", "cpuset.mems"):
                with open(os.path.join(base, item), encoding="utf-8") as handle:
                    value = handle.read().strip()
                with open(os.path.join(path, item), "w", encoding="utf-8") as handle:
                    handle.write(value)
    return name


def remove_cgroups(name, timeout=20):
    """Remove the node's cgroup tree (deepest first) in every hierarchy; returns what could not be removed."""
    left = []
    for hierarchy in sorted(os.listdir(CGROUP_ROOT)):
        top = os.path.join(CGROUP_ROOT, hierarchy) + name
        if not os.path.isdir(top) or os.path.islink(os.path.join(CGROUP_ROOT, hierarchy)):
            continue
        deadline = time.monotonic() + timeout
        while os.path.isdir(top):
            dirs = [root for root, _subdirs, _files in os.walk(top)]
            for path in sorted(dirs, key=len, reverse=True):
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            if not os.path.isdir(top) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if os.path.isdir(top):
            left.append(top)
    return left


def _kubeconfig_cert(path, server, ca_file, user, crt, key):
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "kubelab", "preferences": {},
              "clusters": [{"name": "kubelab", "cluster": {"server": server, "certificate-authority": ca_file}}],
              "users": [{"name": user, "user": {"client-certificate": crt, "client-key": key}}],
              "contexts": [{"name": "kubelab", "context": {"cluster": "kubelab", "user": user}}]}
    _write(path, json.dumps(config, indent=2))


def _write(path, text, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def containerd_config(sandbox_image):
    """containerd's config.toml (version 2) for the node (paths as seen inside the node)."""
    return f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{SOCKET}"

[ttrpc]
  address = "{SOCKET}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # this machine refuses to lower oom_score_adj (runc: "failed to update /proc/self/oom_score_adj: Permission denied"
  # for the sandbox's -998): CRI clamps every container's value to containerd's own
  restrict_oom_score_adj = true
  disable_apparmor = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "/run/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
"""


def cni_config(bridge, network, ip):
    """The CNI network list: a bridge (the node's, gateway = node IP) with host-local addresses, and loopback."""
    return json.dumps({"cniVersion": "1.0.0", "name": "kubelab", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": str(network), "gateway": ip}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "loopback"}]}, indent=2)


def kubelet_config(ip, ports, cgroup_root, ca_file, serving_crt, serving_key):
    """The KubeletConfiguration (JSON is YAML)."""
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": ip, "port": ports["kubelet"], "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": ports["kubelet-healthz"],
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}, "x509": {"clientCAFile": ca_file}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": serving_crt, "tlsPrivateKeyFile": serving_key,
        "containerRuntimeEndpoint": "unix://" + SOCKET,
        "cgroupDriver": "cgroupfs", "cgroupRoot": cgroup_root, "cgroupsPerQOS": True, "failCgroupV1": False,
        "failSwapOn": False, "protectKernelDefaults": True,
        # the machine's disk is shared: never collect the imported images (they cannot be pulled again), never evict
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf", "maxPods": 50,
        "serializeImagePulls": False, "rotateCertificates": False, "serverTLSBootstrap": False,
        "nodeStatusUpdateFrequency": "4s", "nodeStatusReportFrequency": "10s", "syncFrequency": "10s",
        "fileCheckFrequency": "20s", "staticPodPath": "", "enableDebuggingHandlers": True,
        "localStorageCapacityIsolation": True, "containerLogMaxSize": "10Mi",
    }, indent=2)


def _host_pid_of_child(pid, timeout=10):
    """The PID (here) of ``pid``'s only child: unshare --fork's child, PID 1 of the node."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children", encoding="utf-8") as handle:
                children = handle.read().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise NodeError(f"unshare (pid {pid}) started no node process within {timeout} s")


def nodeexec_argv(init_pid, argv, root=None, binds=(), files=()):
    """The command line that runs ``argv`` inside the node whose PID 1 is ``init_pid`` (seen from here); with ``root``
    (an empty directory) in a root of its own holding the node's directories, ``binds`` ((src, /dst) pairs: new
    top-level directories) and ``files`` ((src, dst) pairs: files bound over the root's own)."""
    options = ["--root", root] if root else []
    for source, target in binds:
        options += ["--bind", f"{source}:{target}"]
    for source, target in files:
        options += ["--file", f"{source}:{target}"]
    return [sys.executable, os.path.join(HERE, "nodeexec.py"), str(init_pid)] + options + ["--"] + list(argv)


def _node_rbac(client, name):
    """The node's identity: User system:node:NAME (group system:nodes) bound to Kubernetes' own ClusterRole system:node
    (the Node authorizer is not run: RBAC only, as on clusters that bind it)."""
    client.apply("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": f"kubelab-node-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"system:node:{name}"}]})


def start_node(lab, client, directory, state, ports):  # pylint: disable=too-many-locals,too-many-statements
    """Start the node of the lab in ``directory`` (``lab`` is tools.kubelab.lab: its _start/_wait record the processes).
    Returns the node's description (name, ip, bridge, cgroup root, images)."""
    check_network_namespace()
    found = images.locate_images(kinds=("pause", "guest", "virt-launcher") if "virt-handler" in ports else ("pause",))
    binaries = build.locate(("kubelet",))
    for tool in ("containerd", "ctr", "unshare", "mount", "ip"):
        if not shutil.which(tool):
            raise NodeError(f"{tool} is not installed (make kube-node installs containerd, runc, containernetworking-plugins)")
    for plugin in ("bridge", "host-local", "loopback"):
        if not os.path.exists(os.path.join("/usr/lib/cni", plugin)):
            raise NodeError(f"/usr/lib/cni/{plugin} is missing (Debian's containernetworking-plugins)")
    node_dir = os.path.join(directory, "node")
    os.makedirs(node_dir, mode=0o700, exist_ok=True)
    for sub, _target in BINDS:
        os.makedirs(os.path.join(node_dir, sub), mode=0o755, exist_ok=True)
    sysctl_dir = os.path.join(node_dir, "sysctl")
    os.makedirs(sysctl_dir, exist_ok=True)
    binds = [(os.path.join(node_dir, sub), target) for sub, target in BINDS]
    for name, value in KERNEL_TUNABLES.items():
        path = os.path.join(sysctl_dir, name.replace("/", "."))
        _write(path, value + "\n", 0o444)
        binds.append((path, "/proc/sys/" + name))

    bridge, network, ip = _bridge(directory)
    cgroup_root = _cgroup_root(directory)
    state["node"] = {"name": NODE_NAME, "ip": ip, "bridge": bridge, "network": str(network), "cgroup_root": cgroup_root,
                     "images": {kind: image.name for kind, image in found.items()}}
    lab._save(directory, state)  # pylint: disable=protected-access

    pki_dir = os.path.join(node_dir, "pki")
    os.makedirs(pki_dir, mode=0o700, exist_ok=True)
    ca = pki.ensure_ca(os.path.join(directory, "pki"), "ca", "converge-virt-kubelab-ca")
    ca_file = os.path.join(directory, "pki", "ca.crt")
    client_crt, client_key = pki.ensure_leaf(pki_dir, "kubelet-client", ca, f"system:node:{NODE_NAME}", client=True,
                                             organization="system:nodes")
    serving_crt, serving_key = pki.ensure_leaf(pki_dir, "kubelet-serving", ca, NODE_NAME, server=True, dns=(NODE_NAME,),
                                               addresses=(ip,))
    _node_rbac(client, NODE_NAME)
    # the kubelet's heartbeat is a Lease in kube-node-lease (the namespace is not there on the lab's API server)
    client.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-node-lease"}})
    kubeconfig = os.path.join(node_dir, "kubelet.kubeconfig")
    _kubeconfig_cert(kubeconfig, client.server, ca_file, f"system:node:{NODE_NAME}", client_crt, client_key)
    _write(os.path.join(node_dir, "containerd.toml"), containerd_config(found["pause"].name))
    _write(os.path.join(node_dir, "cni", "10-kubelab.conflist"), cni_config(bridge, network, ip), 0o644)
    _write(os.path.join(node_dir, "kubelet.yaml"), kubelet_config(ip, ports, cgroup_root, ca_file, serving_crt, serving_key))
    ready = os.path.join(node_dir, "ready")
    if os.path.exists(ready):
        os.remove(ready)
    # virt-handler runs /usr/bin/virt-chroot (a built-in path): the node sees it there through a read-only overlay
    overlays = []
    if "virt-handler" in ports:
        usr_bin = os.path.join(node_dir, "usr-bin")
        os.makedirs(usr_bin, exist_ok=True)
        shutil.copy2(build.locate(("virt-launcher-tools",))["virt-chroot"], os.path.join(usr_bin, "virt-chroot"))
        overlays.append((usr_bin, "/usr/bin"))
    _write(os.path.join(node_dir, "nodeinit.json"), json.dumps({"binds": binds, "overlays": overlays, "hostname": NODE_NAME,
                                                                "ready": ready}, indent=2))

    unshare = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--uts", "--propagation", "private", "--mount-proc"]
    init = lab._start(directory, "node", unshare + [sys.executable, os.path.join(HERE, "nodeinit.py"),  # pylint: disable=protected-access
                                                    os.path.join(node_dir, "nodeinit.json")], state)
    lab._wait("node", init, state["processes"][-1]["log"], lambda: os.path.exists(ready), timeout=30)  # pylint: disable=protected-access
    init_pid = _host_pid_of_child(init.pid)
    state["node"]["init_pid"] = init_pid
    lab._save(directory, state)  # pylint: disable=protected-access

    containerd = lab._start(directory, "containerd", nodeexec_argv(init_pid, [  # pylint: disable=protected-access
        "containerd", "--config", os.path.join(node_dir, "containerd.toml")]), state)
    socket_path = os.path.join(node_dir, "containerd-run", "containerd.sock")
    lab._wait("containerd", containerd, state["processes"][-1]["log"], lambda: os.path.exists(socket_path), timeout=60)  # pylint: disable=protected-access
    for kind, image in found.items():
        started = time.monotonic()
        _run(nodeexec_argv(init_pid, ["ctr", "--address", SOCKET, "-n", "k8s.io", "images", "import", image.archive]),
             f"importing the {kind} image into the node's containerd")
        state["node"].setdefault("import_seconds", {})[kind] = round(time.monotonic() - started, 1)

    kubelet = lab._start(directory, "kubelet", nodeexec_argv(init_pid, [  # pylint: disable=protected-access
        binaries["kubelet"], f"--config={os.path.join(node_dir, 'kubelet.yaml')}", f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}", f"--node-ip={ip}", "--v=2"]), state)

    def node_ready():
        code, node = client.request("GET", f"/api/v1/nodes/{NODE_NAME}")
        if code != 200:
            return False
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])):
            return False
        # TaintNodesByCondition put node.kubernetes.io/not-ready on the new Node; the node lifecycle controller (not run by
        # the lab) lifts it once the Node is Ready
        taints = [t for t in node["spec"].get("taints") or [] if not t.get("key", "").startswith("node.kubernetes.io/")]
        if taints != (node["spec"].get("taints") or []):
            node["spec"]["taints"] = taints
            client.request("PUT", f"/api/v1/nodes/{NODE_NAME}", node)
            return False
        return True
    lab._wait("kubelet", kubelet, state["processes"][-1]["log"], node_ready, timeout=120)  # pylint: disable=protected-access
    lab._save(directory, state)  # pylint: disable=protected-access
    if "virt-handler" in ports:        # a lab with virt-api: KubeVirt's own virt-handler for the node
        start_handler(lab, client, directory, state, ports)
        lab._save(directory, state)  # pylint: disable=protected-access
    return state["node"]


HANDLER_POD = "virt-handler-" + NODE_NAME


def _handler_rbac(lab, client, manifests):
    """virt-handler's ServiceAccount, ClusterRole, Role and bindings exactly as virt-operator installs them (KubeVirt's
    GetAllHandler, printed by kubevirt-manifests handler-rbac); returns a token of that account."""
    account = lab.apply_operator_rbac(client, manifests, "handler-rbac")
    return account, lab.account_token(client, lab.VIRT_API_NAMESPACE, account)


def _emulation_config(client, namespace, launcher_image):
    """What virt-operator would write into the KubeVirt CR for this node: useEmulation (KVM cannot boot an OS on this
    machine: guests run under TCG) and IfNotPresent pulls (nothing can be pulled; the images are in the node's store)."""
    base = f"/apis/kubevirt.io/v1/namespaces/{namespace}/kubevirts/kubevirt"
    code, cr = client.request("GET", base)
    if code != 200:
        raise NodeError(f"no KubeVirt CR to configure (HTTP {code}): `--nodes real` with virt-handler needs --virt-api")
    config = cr["spec"].setdefault("configuration", {})
    config.setdefault("developerConfiguration", {})["useEmulation"] = True
    cr["spec"]["imagePullPolicy"] = "IfNotPresent"
    code, answer = client.request("PUT", base, cr)
    if code != 200:
        raise NodeError(f"could not configure the KubeVirt CR: HTTP {code}: {answer}")
    return launcher_image


def start_handler(lab, client, directory, state, ports):  # pylint: disable=too-many-locals
    """KubeVirt's own virt-handler for the node (inside it, as KubeVirt's kubevirt-handler account with virt-operator's
    rules), and the pod virt-api looks it up by (label kubevirt.io=virt-handler on the node, hostNetwork: its IP is the
    node's): a pause container standing in for virt-handler's DaemonSet pod, which runs out of a pod here."""
    node = state["node"]
    init_pid, ip = node["init_pid"], node["ip"]
    binaries = build.locate(("virt-handler", "virt-launcher-tools", "kubevirt"))
    namespace = lab.VIRT_API_NAMESPACE
    launcher = node["images"]["virt-launcher"]
    # virt-controller names the launcher image it was started with (quay.io/kubevirt/virt-launcher:v1.8.0 in the lab):
    # that reference is a second name of the local image in the node's store; nothing is pulled
    for alias in ("quay.io/kubevirt/virt-launcher:v1.8.0",):
        _run(nodeexec_argv(init_pid, ["ctr", "--address", SOCKET, "-n", "k8s.io", "images", "tag", "--force", launcher, alias]),
             "naming the launcher image as virt-controller asks for it")
    _emulation_config(client, namespace, launcher)
    account, token = _handler_rbac(lab, client, binaries["kubevirt-manifests"])
    node_dir = os.path.join(directory, "node")
    kubeconfig = os.path.join(node_dir, "virt-handler.kubeconfig")
    lab._kubeconfig(kubeconfig, client.server, os.path.join(directory, "pki", "ca.crt"),  # pylint: disable=protected-access
                    f"system:serviceaccount:{namespace}:{account}", token)
    crt, key = os.path.join(directory, "pki", "virt-handler.crt"), os.path.join(directory, "pki", "virt-handler.key")
    client.apply(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": HANDLER_POD, "namespace": namespace, "labels": {"kubevirt.io": "virt-handler"}},
        "spec": {"nodeName": NODE_NAME, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "virt-handler", "image": node["images"]["pause"], "imagePullPolicy": "Never"}]}})
    # what virt-handler's init container does on a cluster: the launcher image's node-labeller.sh writes libvirt's
    # capabilities into /var/lib/kubevirt-node-labeller (the node's), which virt-handler reads at start
    started = time.monotonic()
    _run(nodeexec_argv(init_pid, ["ctr", "--address", SOCKET, "-n", "k8s.io", "run", "--rm",
                                  "--mount", "type=bind,src=/var/lib/kubevirt-node-labeller,dst=/var/lib/kubevirt-node-labeller,options=rbind:rw",
                                  "--env", "HYPERVISOR_DEVICE=kvm", "--env", "PREFERRED_VIRTTYPE=qemu",
                                  launcher, "kubelab-node-labeller", "/bin/bash", "/usr/bin/node-labeller.sh"]),
         "the node labeller (virt-launcher image, node-labeller.sh)")
    node["node_labeller_seconds"] = round(time.monotonic() - started, 1)
    argv = virt_handler_argv(binaries, kubeconfig, NODE_NAME, ip, ports, (crt, key))
    handler_root, passwd = handler_files(node_dir)     # its root with /pods and its passwd with qemu (see there)
    handler_argv = nodeexec_argv(init_pid, argv, root=handler_root, binds=(("/var/lib/kubelet/pods", "/pods"),),
                                 files=((passwd, "/etc/passwd"),))
    handler = lab._start(directory, "node-virt-handler", handler_argv, state)  # pylint: disable=protected-access

    def schedulable():
        code, body = client.request("GET", f"/api/v1/nodes/{NODE_NAME}")
        return code == 200 and body["metadata"].get("labels", {}).get("kubevirt.io/schedulable") == "true" and \
            all(body["status"].get("allocatable", {}).get(dev, "0") not in ("0", "") for dev in ("devices.kubevirt.io/kvm", "devices.kubevirt.io/tun"))
    lab._wait("virt-handler", handler, state["processes"][-1]["log"], schedulable, timeout=120)  # pylint: disable=protected-access


def cleanup(state):
    """After the node's processes are gone: remove its bridge and cgroup tree. Returns what was left behind."""
    node = state.get("node") or {}
    left = []
    if node.get("bridge"):
        proc = subprocess.run(["ip", "link", "del", node["bridge"]], capture_output=True, text=True, check=False)
        if proc.returncode != 0 and "Cannot find device" not in proc.stderr:
            left.append(f"bridge {node['bridge']}: {proc.stderr.strip()}")
    if node.get("cgroup_root"):
        left += remove_cgroups(node["cgroup_root"])
    return left


# ---------------------------------------------------------------- faults: one component of the node down, restarted
NODE_ROLES = ("containerd", "kubelet", "node-virt-handler")


def _lab_module():
    # imported here: tools/kubelab/lab.py imports this module
    from . import lab  # pylint: disable=import-outside-toplevel
    return lab


def _since(stamp, started):
    """Whether the RFC 3339 time ``stamp`` (as the API server writes it) is at or after ``started`` (time.time())."""
    if not stamp:
        return False
    whole = stamp.rstrip("Z").split(".")[0]
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) >= int(started)


def stop_component(directory, role, kill=False, timeout=20):
    """Stop the running ``role`` of the lab's node (one of NODE_ROLES; SIGTERM, or SIGKILL with ``kill``, to its nodeexec
    process, which hands SIGTERM to the component and takes it along when killed): a fault for the tests; the rest
    keeps running. Returns the PID that was stopped (None when it was not running)."""
    lab = _lab_module()
    if role not in NODE_ROLES:
        raise NodeError(f"{role} is not a component of the node that can be stopped alone (one of {', '.join(NODE_ROLES)})")
    state = lab._load_state(os.path.abspath(directory))  # pylint: disable=protected-access
    record = lab._role_record(state, role)  # pylint: disable=protected-access
    stopped = lab._stop(record, lab.boot_id(), timeout, signal.SIGKILL if kill else signal.SIGTERM)  # pylint: disable=protected-access
    return record["pid"] if stopped else None


def start_component(directory, role, timeout=120):
    """Start the node's ``role`` again with the command line it had, and wait until it works: the kubelet once it
    renewed its Lease after this start; virt-handler once it wrote its heartbeat on the Node after this start with the
    node schedulable (its device plugins registered with the kubelet again); containerd once its socket answers.
    Returns the new PID (the old one when it still runs)."""
    lab = _lab_module()
    if role not in NODE_ROLES:
        raise NodeError(f"{role} is not a component of the node that can be started alone (one of {', '.join(NODE_ROLES)})")
    directory = os.path.abspath(directory)
    state = lab._load_state(directory)  # pylint: disable=protected-access
    record = lab._role_record(state, role)  # pylint: disable=protected-access
    if lab._is_ours(record, lab.boot_id()):  # pylint: disable=protected-access
        return record["pid"]
    paths = pki.make_all(os.path.join(directory, "pki"))
    client = lab.Client(state["server"], paths["ca"], pki.ensure_token(os.path.join(directory, "pki", "admin.token")))
    state["processes"].remove(record)
    started = time.time()
    proc = lab._start(directory, role, record["argv"], state)  # pylint: disable=protected-access

    def ready():
        if role == "containerd":
            return subprocess.run(nodeexec_argv(state["node"]["init_pid"], ["ctr", "--address", SOCKET, "version"]),
                                  capture_output=True, check=False).returncode == 0
        if role == "kubelet":
            code, lease = client.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE_NAME}")
            return code == 200 and _since(lease["spec"].get("renewTime"), started)
        code, node = client.request("GET", f"/api/v1/nodes/{NODE_NAME}")
        return code == 200 and node["metadata"].get("labels", {}).get("kubevirt.io/schedulable") == "true" and \
            _since(node["metadata"].get("annotations", {}).get("kubevirt.io/heartbeat"), started)
    lab._wait(role, proc, state["processes"][-1]["log"], ready, timeout=timeout)  # pylint: disable=protected-access
    return proc.pid


def restart_component(directory, role, kill=False, down_seconds=0.0):
    """Stop the node's ``role`` (SIGTERM, or SIGKILL with ``kill``), leave it down ``down_seconds``, start it again;
    returns (old PID, new PID)."""
    old = stop_component(directory, role, kill=kill)
    time.sleep(down_seconds)
    return old, start_component(directory, role)


def virt_handler_argv(binaries, kubeconfig, name, ip, ports, client, migration=None):  # pylint: disable=too-many-arguments
    """virt-handler's command line for node ``name`` at ``ip``: ``client`` (cert, key) for the API server, console and
    vsock, ``migration`` (cert, key) for the migration proxy (default: ``client``)."""
    crt, key = client
    migration_crt, migration_key = migration or client
    tools = os.path.dirname(binaries["virt-chroot"])
    return ["env", f"PATH={tools}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}", binaries["virt-handler"],
            "--kubeconfig", kubeconfig, "--hostname-override", name, "--pod-ip-address", ip,
            "--listen", ip, "--port", str(ports["virt-handler-metrics"]), "--console-server-port", str(ports["virt-handler"]),
            "--client-cert-file", crt, "--client-key-file", key, "--tls-cert-file", crt, "--tls-key-file", key,
            "--migration-client-cert-file", migration_crt, "--migration-client-key-file", migration_key,
            "--vsock-client-cert-file", crt, "--vsock-client-key-file", key]


def handler_files(node_dir):
    """(virt-handler's root with /pods, its /etc/passwd) under ``node_dir``.

    virt-handler's DaemonSet mounts the kubelet's pods directory at /pods (a built-in path: cmd-client finds the
    launcher's command socket and container-disk finds the kernel-boot/container-disk sockets under
    /pods/<pod uid>/volumes/kubernetes.io~empty-dir/); without it virt-handler reads the launcher as gone and fails
    the VMI on its first sync. Here it gets a root of its own with /pods, as its container has on a cluster.
    virt-handler's image has the user qemu (uid 107, KubeVirt's non-root launcher user): it looks it up by name to
    hand the launcher its domain-notify socket ("failed to look up user qemu" without it)."""
    handler_root = os.path.join(node_dir, "handler-root")
    os.makedirs(handler_root, exist_ok=True)
    os.makedirs(os.path.join(node_dir, "kubelet", "pods"), exist_ok=True)
    passwd = os.path.join(node_dir, "handler-passwd")
    with open("/etc/passwd", encoding="utf-8") as handle:
        users = handle.read()
    if not any(line.startswith("qemu:") for line in users.splitlines()):
        users = users.rstrip("\n") + "\nqemu:x:107:107:qemu user (virt-handler image):/:/usr/sbin/nologin\n"
    _write(passwd, users, 0o644)
    return handler_root, passwd
