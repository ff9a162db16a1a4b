"""Two (or more) real Kubernetes nodes for a lab, each in a network namespace of its own (issue 37 item 1).

``python -m tools.kubelab.multinode up DIR --node-count 2`` (inside ``python -m tools.virtlab netns``) starts the lab
as ``up --controllers real`` does (tools/kubelab/lab.py) and then N real nodes ``kubelab-node1`` ... ``kubelab-nodeN``,
each what tools/kubelab/node.py makes of the single node (containerd, kubelet, KubeVirt's virt-handler, in a PID,
mount and UTS namespace of its own) plus a NETWORK namespace of its own::

    lab's network namespace (kube-apiserver, virt-api, virt-controller on 127.0.0.1)
      bridge kl<id>  10.200.X.1/24  (the lab's network; node._bridge picks X)
        |-- veth --  node 1's netns: eth0 10.200.X.11, lo; pod bridge cni0 10.211.X.1/24 (CNI bridge + host-local)
        '-- veth --  node 2's netns: eth0 10.200.X.12, lo; pod bridge cni0 10.212.X.1/24
      routes: 10.21N.X.0/24 via node N's IP (in the lab's netns and in every other node's)

Why a namespace per node and not the single node's placement (the node's processes in the lab's own namespace,
its pods on a bridge there): two kubelets, two containerds and two virt-handlers in one namespace would share one
IP, one 127.0.0.1 and one set of listening ports, so virt-handler's migration proxy would "cross" to itself and
nothing would tell the two nodes apart on the wire. With a namespace each, every node has its own address, routes
and loopback; what a migration sends from one virt-handler to the other goes through the veth pairs and the lab's
bridge (visible in each veth's counters), as between two machines on one switch.

The API server stays on 127.0.0.1 of the lab's namespace (lab.py binds every component there; its certificate names
127.0.0.1): each node gets tools/kubelab/nsforward.py, which listens on 127.0.0.1:<the same port> inside the node's
namespace and forwards to the lab's, so the node's kubelet and virt-handler use the lab's server URL unchanged.
kube-apiserver and virt-api reach the kubelets and virt-handlers at the node IPs over the bridge.

Per node (DIR/nodes/<name>/, the layout of node.py's DIR/node/): its own containerd root/state/socket, kubelet root,
cgroup root ``/kubelab-<id>-<name>``, client and serving certificates (system:node:<name>), virt-handler root and the
pod virt-api finds it by (``virt-handler-<name>``). The processes are recorded in the lab's state like node.py's, so
``lab.down`` stops them; :func:`down` also removes the lab bridge, each node's cgroup tree and its routes.

This module does not change the single node (``lab.up(..., nodes='real')``): it is a separate entry point, not run
by make test (the two-node tests are tests/integration/test_kubevirt_real_node_two.py: make test-real-node only).
"""

# this module extends lab.py and node.py with their own helpers
# pylint: disable=protected-access

import argparse
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from . import build, images, lab, node, pki

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_OFFSET = 10        # node N's IP on the lab's bridge: .(10 + N)
POD_NET_BASE = 210      # node N's pods: 10.(210 + N).X.0/24, X the lab bridge's third octet


class MultiNodeError(build.KubelabError):
    """The nodes cannot start; the message says why."""


def node_names(count):
    """The nodes' names."""
    return [f"kubelab-node{i}" for i in range(1, count + 1)]


def _in_netns(init_pid, argv):
    """argv run in the network namespace of the process ``init_pid`` (seen from here)."""
    return ["nsenter", f"--net=/proc/{init_pid}/ns/net", "--"] + list(argv)


def _node_argv(init_pid, argv, **kwargs):
    """node.nodeexec_argv, with the command also entering the node's network namespace (nodeexec enters mount, UTS and
    PID only: inside the node's PID namespace /proc/1 is the node's PID 1, whose network namespace is the node's)."""
    return node.nodeexec_argv(init_pid, ["nsenter", "--net=/proc/1/ns/net", "--"] + list(argv), **kwargs)


def _addresses(network, index):
    """(node IP, pod network, pod gateway) of node ``index`` (1-based) on the lab network ``network``."""
    octet = int(str(network.network_address).split(".")[2])
    ip = str(network.network_address + NODE_OFFSET + index)
    pods = ipaddress.ip_network(f"10.{POD_NET_BASE + index}.{octet}.0/24")
    return ip, pods, str(pods.network_address + 1)


def start_node(client, directory, state, ports, name, index, found):  # pylint: disable=too-many-locals,too-many-arguments,too-many-statements
    """Start node ``name`` (number ``index``) of the lab in ``directory`` up to its kubelet; its description goes to
    state["nodes"]. Returns (the description, what :func:`_wait_all` waits for: the kubelet until the node is Ready)."""
    node_dir = os.path.join(directory, "nodes", name)
    os.makedirs(node_dir, mode=0o700, exist_ok=True)
    for sub, _target in node.BINDS:
        os.makedirs(os.path.join(node_dir, sub), mode=0o755, exist_ok=True)
    sysctl_dir = os.path.join(node_dir, "sysctl")
    os.makedirs(sysctl_dir, exist_ok=True)
    binds = [(os.path.join(node_dir, sub), target) for sub, target in node.BINDS]
    for tunable, value in node.KERNEL_TUNABLES.items():
        path = os.path.join(sysctl_dir, tunable.replace("/", "."))
        node._write(path, value + "\n", 0o444)
        binds.append((path, "/proc/sys/" + tunable))

    lab_net = state["lab_network"]
    network = ipaddress.ip_network(lab_net["network"])
    ip, pods, pod_gateway = _addresses(network, index)
    cgroup_root = node._cgroup_root(os.path.join(directory, "nodes", name))
    description = {"name": name, "ip": ip, "pod_network": str(pods), "cgroup_root": cgroup_root, "dir": node_dir,
                   "veth": f"{lab_net['bridge']}n{index}", "images": {kind: image.name for kind, image in found.items()}}
    state.setdefault("nodes", []).append(description)
    lab._save(directory, state)

    pki_dir = os.path.join(node_dir, "pki")
    os.makedirs(pki_dir, mode=0o700, exist_ok=True)
    ca = pki.ensure_ca(os.path.join(directory, "pki"), "ca", "converge-virt-kubelab-ca")
    ca_file = os.path.join(directory, "pki", "ca.crt")
    client_crt, client_key = pki.ensure_leaf(pki_dir, "kubelet-client", ca, f"system:node:{name}", client=True,
                                             organization="system:nodes")
    serving_crt, serving_key = pki.ensure_leaf(pki_dir, "kubelet-serving", ca, name, server=True, dns=(name,), addresses=(ip,))
    node._node_rbac(client, name)
    kubeconfig = os.path.join(node_dir, "kubelet.kubeconfig")
    node._kubeconfig_cert(kubeconfig, client.server, ca_file, f"system:node:{name}", client_crt, client_key)
    node._write(os.path.join(node_dir, "containerd.toml"), node.containerd_config(found["pause"].name))
    node._write(os.path.join(node_dir, "cni", "10-kubelab.conflist"), node.cni_config("cni0", pods, pod_gateway), 0o644)
    node._write(os.path.join(node_dir, "kubelet.yaml"),
                node.kubelet_config(ip, ports, cgroup_root, ca_file, serving_crt, serving_key))
    ready = os.path.join(node_dir, "ready")
    if os.path.exists(ready):
        os.remove(ready)
    usr_bin = os.path.join(node_dir, "usr-bin")
    os.makedirs(usr_bin, exist_ok=True)
    shutil.copy2(build.locate(("virt-launcher-tools",))["virt-chroot"], os.path.join(usr_bin, "virt-chroot"))
    node._write(os.path.join(node_dir, "nodeinit.json"), json.dumps({
        "binds": binds, "overlays": [(usr_bin, "/usr/bin")], "hostname": name, "ready": ready}, indent=2))

    unshare = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--uts", "--net", "--propagation", "private", "--mount-proc"]
    init = lab._start(directory, f"node-{name}", unshare + [
        sys.executable, os.path.join(HERE, "nodeinit.py"), os.path.join(node_dir, "nodeinit.json")], state)
    lab._wait(name, init, state["processes"][-1]["log"], lambda: os.path.exists(ready), timeout=30)
    init_pid = node._host_pid_of_child(init.pid)
    description["init_pid"] = init_pid
    lab._save(directory, state)

    # the node's network: a veth pair, one end on the lab's bridge, the other the node's eth0
    veth = description["veth"]
    node._run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(init_pid)], f"{name}: veth")
    node._run(["ip", "link", "set", veth, "master", lab_net["bridge"], "up"], f"{name}: veth on the lab bridge")
    for argv in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", f"{ip}/{network.prefixlen}", "dev", "eth0"],
                 ["ip", "link", "set", "eth0", "up"], ["ip", "route", "add", "default", "via", lab_net["ip"]]):
        node._run(_in_netns(init_pid, argv), f"{name}: {' '.join(argv)}")
    node._run(["ip", "route", "replace", str(pods), "via", ip], f"{name}: route to its pods")

    api_port = int(client.server.rsplit(":", 1)[1])
    forward = lab._start(directory, f"apiserver-forward-{name}", [
        sys.executable, os.path.join(HERE, "nsforward.py"), f"/proc/{init_pid}/ns/net", str(api_port), str(api_port)], state)
    lab._wait(f"apiserver-forward-{name}", forward, state["processes"][-1]["log"],
              lambda: "nsforward:" in lab._log_tail(state["processes"][-1]["log"]), timeout=10)

    containerd = lab._start(directory, f"containerd-{name}", _node_argv(init_pid, [
        "containerd", "--config", os.path.join(node_dir, "containerd.toml")]), state)
    socket_path = os.path.join(node_dir, "containerd-run", "containerd.sock")
    lab._wait(f"containerd-{name}", containerd, state["processes"][-1]["log"], lambda: os.path.exists(socket_path), timeout=60)
    for kind, image in found.items():
        started = time.monotonic()
        node._run(node.nodeexec_argv(init_pid, ["ctr", "--address", node.SOCKET, "-n", "k8s.io", "images", "import", image.archive]),
                  f"{name}: importing the {kind} image")
        description.setdefault("import_seconds", {})[kind] = round(time.monotonic() - started, 1)
        _name_by_config_digest(init_pid, image.name)
    node._run(node.nodeexec_argv(init_pid, ["ctr", "--address", node.SOCKET, "-n", "k8s.io", "images", "tag", "--force",
                                            found["virt-launcher"].name, "quay.io/kubevirt/virt-launcher:v1.8.0"]),
              f"{name}: naming the launcher image as virt-controller asks for it")

    binaries = build.locate(("kubelet",))
    kubelet = lab._start(directory, f"kubelet-{name}", _node_argv(init_pid, [
        binaries["kubelet"], f"--config={os.path.join(node_dir, 'kubelet.yaml')}", f"--kubeconfig={kubeconfig}",
        f"--hostname-override={name}", f"--node-ip={ip}", "--v=2"]), state)
    waiting = (f"kubelet-{name}", kubelet, state["processes"][-1]["log"], lambda: _node_ready(client, name))
    lab._save(directory, state)
    return description, waiting


def _wait_all(waiting, timeout):
    """Wait until every ``(role, process, log, ready)`` of ``waiting`` is ready (lab._wait's errors), polling them in
    turn: the nodes' kubelets (or virt-handlers) come up side by side instead of one after the other."""
    deadline = time.monotonic() + timeout
    pending = list(waiting)
    while pending:
        left = max(0.0, deadline - time.monotonic())
        pending = [one for one in pending if not _ready_now(one, left)]
        if pending:
            time.sleep(0.3)


def _ready_now(one, left):
    """Whether ``one`` (role, process, log, ready) is ready now; MultiNodeError (naming the role, with its log's tail) when
    the process exited or ``left`` ran out."""
    role, proc, log, ready = one
    if proc.poll() is not None:
        raise MultiNodeError(f"{role} exited with status {proc.returncode} while starting; last lines of {log}:\n{lab._log_tail(log)}")
    if ready():
        return True
    if left <= 0:
        raise MultiNodeError(f"{role} did not become ready in time; last lines of {log}:\n{lab._log_tail(log)}")
    return False


def _name_by_config_digest(init_pid, name):
    """Give the imported image ``name`` (repo:tag) a second name ``repo@<its config digest>`` in the node's containerd.

    A migration target pod asks for each containerDisk / kernel-boot image by digest: KubeVirt
    (pkg/container-disk ExtractImageIDsFromSourcePod) takes the source container's status imageID, which for an image
    imported with ``ctr images import`` (no registry, no repo digest) is its config digest, and writes
    ``repo@sha256:<that digest>`` into the target pod. Without this name the target's kubelet refuses it
    (``ErrImageNeverPull: Container image "kubelab.local/guest@sha256:68c2..." is not present with pull policy of
    Never``, 2026-11-29 05:03) and the migration stays Scheduling until KubeVirt's unschedulable timeout. A registry
    pull would have written the digest name; here each node gets it from the same archive, so it is the same on every
    node."""
    listing = node._run(node.nodeexec_argv(init_pid, ["ctr", "--address", node.SOCKET, "-n", "k8s.io", "images", "ls"]), "listing images")
    manifest = next((line.split()[2] for line in listing.splitlines()[1:] if line.split() and line.split()[0] == name), None)
    if manifest is None:
        raise MultiNodeError(f"{name} is not in the node's containerd after its import")
    content = json.loads(node._run(node.nodeexec_argv(init_pid, ["ctr", "--address", node.SOCKET, "-n", "k8s.io", "content", "get",
                                                                 manifest]), f"reading {name}'s manifest"))
    if "config" not in content:
        raise MultiNodeError(f"{name}: {manifest} is not a single image manifest (an index?): no config digest to name it by")
    repo = name.rsplit(":", 1)[0] if name.rfind(":") > name.rfind("/") else name
    node._run(node.nodeexec_argv(init_pid, ["ctr", "--address", node.SOCKET, "-n", "k8s.io", "images", "tag", "--force", name,
                                            f"{repo}@{content['config']['digest']}"]), f"naming {name} by its config digest")


def _node_ready(client, name):
    code, body = client.request("GET", f"/api/v1/nodes/{name}")
    if code != 200:
        return False
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in body.get("status", {}).get("conditions", [])):
        return False
    # as node.py: the lab runs no node lifecycle controller to lift TaintNodesByCondition's not-ready taint
    taints = [t for t in body["spec"].get("taints") or [] if not t.get("key", "").startswith("node.kubernetes.io/")]
    if taints != (body["spec"].get("taints") or []):
        body["spec"]["taints"] = taints
        client.request("PUT", f"/api/v1/nodes/{name}", body)
        return False
    return True


def start_handler(client, directory, state, ports, description, account, token):  # pylint: disable=too-many-locals,too-many-arguments
    """KubeVirt's virt-handler on one node (as node.start_handler does for the single node); returns what
    :func:`_wait_all` waits for (the node schedulable for KubeVirt: its label and device plugins)."""
    name, init_pid, ip, node_dir = description["name"], description["init_pid"], description["ip"], description["dir"]
    binaries = build.locate(("virt-handler", "virt-launcher-tools"))
    namespace = lab.VIRT_API_NAMESPACE
    launcher = description["images"]["virt-launcher"]
    kubeconfig = os.path.join(node_dir, "virt-handler.kubeconfig")
    lab._kubeconfig(kubeconfig, client.server, os.path.join(directory, "pki", "ca.crt"),
                    f"system:serviceaccount:{namespace}:{account}", token)
    crt, key = os.path.join(directory, "pki", "virt-handler.crt"), os.path.join(directory, "pki", "virt-handler.key")
    # the migration target's proxy (SetupTLSForVirtHandlerServer with --migration-cn-types virt-handler,migration)
    # accepts only a client certificate named kubevirt.io:system:client:virt-handler (or :migration); the source dials
    # with the migration client certificate: lab.py's virt-handler-client pair (HANDLER_CLIENT_CN)
    migration_crt = os.path.join(directory, "pki", "virt-handler-client.crt")
    migration_key = os.path.join(directory, "pki", "virt-handler-client.key")
    client.apply(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"virt-handler-{name}", "namespace": namespace, "labels": {"kubevirt.io": "virt-handler"}},
        "spec": {"nodeName": name, "hostNetwork": True, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "virt-handler", "image": description["images"]["pause"], "imagePullPolicy": "Never"}]}})
    started = time.monotonic()
    node._run(node.nodeexec_argv(init_pid, [
        "ctr", "--address", node.SOCKET, "-n", "k8s.io", "run", "--rm",
        "--mount", "type=bind,src=/var/lib/kubevirt-node-labeller,dst=/var/lib/kubevirt-node-labeller,options=rbind:rw",
        "--env", "HYPERVISOR_DEVICE=kvm", "--env", "PREFERRED_VIRTTYPE=qemu",
        launcher, "kubelab-node-labeller", "/bin/bash", "/usr/bin/node-labeller.sh"]), f"{name}: the node labeller")
    description["node_labeller_seconds"] = round(time.monotonic() - started, 1)
    argv = node.virt_handler_argv(binaries, kubeconfig, name, ip, ports, (crt, key), (migration_crt, migration_key))
    handler_root, passwd = node.handler_files(node_dir)
    handler = lab._start(directory, f"node-virt-handler-{name}", _node_argv(
        init_pid, argv, root=handler_root, binds=(("/var/lib/kubelet/pods", "/pods"),), files=((passwd, "/etc/passwd"),)), state)

    def schedulable():
        code, body = client.request("GET", f"/api/v1/nodes/{name}")
        return code == 200 and body["metadata"].get("labels", {}).get("kubevirt.io/schedulable") == "true" and \
            all(body["status"].get("allocatable", {}).get(dev, "0") not in ("0", "") for dev in ("devices.kubevirt.io/kvm", "devices.kubevirt.io/tun"))
    return (f"virt-handler-{name}", handler, state["processes"][-1]["log"], schedulable)


def up(directory, node_count=2):
    """``lab.up(directory, controllers='real')`` and ``node_count`` real nodes, each in its own network namespace;
    returns lab.up's answer with ``nodes`` (each node's description) and ``node_seconds``."""
    if not 1 <= node_count <= 8:
        raise MultiNodeError(f"node_count must be between 1 and 8, not {node_count}")
    node.check_network_namespace()
    for tool in ("containerd", "ctr", "unshare", "nsenter", "mount", "ip"):
        if not shutil.which(tool):
            raise MultiNodeError(f"{tool} is not installed (make kube-node)")
    found = images.locate_images(kinds=("pause", "guest", "virt-launcher"))
    directory = os.path.abspath(directory)
    info = lab.up(directory, controllers="real")
    started = time.monotonic()
    try:
        state = lab._load_state(directory)
        client = lab.Client(state["server"], state["ca_file"], pki.ensure_token(os.path.join(directory, "pki", "admin.token")))
        ports = state["ports"]
        ports.update({role: lab._free_port() for role in ("kubelet", "kubelet-healthz", "virt-handler-metrics")})
        bridge, network, gateway = node._bridge(directory)
        state["lab_network"] = {"bridge": bridge, "network": str(network), "ip": gateway}
        lab._save(directory, state)
        client.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-node-lease"}})
        names = node_names(node_count)
        # each node is started up to its kubelet, one after the other (the lab's state is written by one thread), then
        # the kubelets are waited for together; likewise the virt-handlers below
        started_nodes = [start_node(client, directory, state, ports, name, index, found) for index, name in enumerate(names, 1)]
        descriptions = [description for description, _waiting in started_nodes]
        _wait_all([waiting for _description, waiting in started_nodes], timeout=180)
        for description in descriptions:
            description["ready_after_seconds"] = round(time.monotonic() - started, 1)
        lab._save(directory, state)
        # every node reaches every other node's pods through that node
        for one in descriptions:
            for other in descriptions:
                if other is not one:
                    node._run(_in_netns(one["init_pid"], ["ip", "route", "replace", other["pod_network"], "via", other["ip"]]),
                              f"{one['name']}: route to {other['name']}'s pods")
        binaries = build.locate(("kubevirt",))
        node._emulation_config(client, lab.VIRT_API_NAMESPACE, found["virt-launcher"].name)
        account, token = node._handler_rbac(lab, client, binaries["kubevirt-manifests"])
        handlers = []
        for description in descriptions:
            handlers.append(start_handler(client, directory, state, ports, description, account, token))
            lab._save(directory, state)
        _wait_all(handlers, timeout=180)
    except BaseException:
        down(directory)
        raise
    info.update(nodes=descriptions, node_seconds=round(time.monotonic() - started, 1),
                pids={p["role"]: p["pid"] for p in state["processes"]})
    return info


stop_seconds = {}      # the last down(): seconds each recorded process took to stop (a measurement, not an interface)


def down(directory, timeout=20):
    """``lab.down`` (every recorded process), then the lab bridge, each node's cgroup tree and routes; returns what was
    left behind (empty when everything was removed)."""
    directory = os.path.abspath(directory)
    state = lab._load_state(directory) or {}
    stop_seconds.clear()
    current = lab.boot_id()
    inits = {f"node-{description['name']}" for description in state.get("nodes", [])}
    for record in reversed(state.get("processes", [])):
        started = time.monotonic()
        # a node's PID 1 (unshare --kill-child) outlived SIGTERM until lab._stop's SIGKILL 20 s later, each node (run of
        # 2026-11-29 13:46: 20.1 s and 20.05 s of a 48.3 s down); its SIGKILL ends the node's PID namespace, so what the
        # node still runs (shims, launchers, QEMU) ends with it - its kubelet, containerd and virt-handler were already
        # asked to stop (SIGTERM) before it, newest first
        if lab._stop(record, current, timeout, sig=signal.SIGKILL if record["role"] in inits else signal.SIGTERM):
            stop_seconds[record["role"]] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    lab.down(directory, timeout)
    stop_seconds["lab.down"] = round(time.monotonic() - started, 2)
    left = []
    for description in state.get("nodes", []):
        subprocess.run(["ip", "route", "del", description["pod_network"]], capture_output=True, check=False)
        left += node.remove_cgroups(description["cgroup_root"])
    bridge = state.get("lab_network", {}).get("bridge")
    if bridge:
        left += node.cleanup({"node": {"bridge": bridge}})
    return left


def _parents():
    """{pid: parent pid} of every process seen from here."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return parents


NODE_ROLES = ("node-{}", "containerd-{}", "kubelet-{}", "node-virt-handler-{}", "apiserver-forward-{}")


def node_of(pid, state, parents=None):
    """The name of the node process ``pid`` belongs to: the lab recorded it or one of its ancestors as one of the node's
    processes (its PID 1's unshare, the nodeexec processes of containerd, kubelet and virt-handler, its API server
    forwarder); container shims are reparented to the node's PID 1, so pod containers, launchers and QEMU count too.
    None for any other process."""
    parents = _parents() if parents is None else parents
    recorded = {}
    for description in state.get("nodes", []):
        roles = {role.format(description["name"]) for role in NODE_ROLES}
        recorded.update({p["pid"]: description["name"] for p in state.get("processes", []) if p["role"] in roles})
        if description.get("init_pid"):
            recorded[description["init_pid"]] = description["name"]
    seen = set()
    while pid and pid not in seen:
        if pid in recorded:
            return recorded[pid]
        seen.add(pid)
        pid = parents.get(pid)
    return None


def memory(state):
    """{node name: {"rss_kib", "pss_kib", "processes"}} over every process of each node (node_of: its PID 1, containerd,
    kubelet, virt-handler, the nodeexec processes that started them, shims, pod containers, launchers, QEMU, its API
    server forwarder); "total" (the nodes'); and "lab": the lab's own recorded processes and their children (etcd,
    kube-apiserver, kube-controller-manager, kube-scheduler, kwok, virt-api, virt-controller). RSS counts shared pages once
    per process; PSS divides them among the processes sharing them."""
    parents = _parents()
    result = {n["name"]: {"rss_kib": 0, "pss_kib": 0, "processes": 0} for n in state.get("nodes", [])}
    control = {"rss_kib": 0, "pss_kib": 0, "processes": 0}
    recorded = {p["pid"] for p in state.get("processes", [])}
    for pid in parents:
        name = node_of(pid, state, parents)
        if name is None and _descends(pid, recorded, parents):
            name = "lab"
        if name not in result and name != "lab":
            continue
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line and not line.startswith(" "))
        except (OSError, ValueError):
            continue
        into = control if name == "lab" else result[name]
        into["rss_kib"] += int(fields.get("Rss", "0 kB").split()[0])
        into["pss_kib"] += int(fields.get("Pss", "0 kB").split()[0])
        into["processes"] += 1
    result["total"] = {key: sum(v[key] for v in result.values()) for key in ("rss_kib", "pss_kib", "processes")}
    result["lab"] = control
    return result


def _descends(pid, recorded, parents):
    """Whether ``pid`` is one of the ``recorded`` processes or a descendant of one."""
    seen = set()
    while pid and pid not in seen:
        if pid in recorded:
            return True
        seen.add(pid)
        pid = parents.get(pid)
    return False


def veth_bytes(state, name):
    """(bytes the node sent, bytes it received) on its veth, read at the lab's end (netlink: /sys/class/net shows the
    network namespace sysfs was mounted in, not necessarily this one)."""
    veth = _veth(state, name)
    link = json.loads(node._run(["ip", "-j", "-s", "link", "show", "dev", veth], f"{name}: veth counters"))[0]
    stats = link.get("stats64") or link["stats"]
    return stats["rx"]["bytes"], stats["tx"]["bytes"]


def _veth(state, name):
    return next(n["veth"] for n in state.get("nodes", []) if n["name"] == name)


def shape(state, name, rate_kbit):
    """Hold what node ``name`` receives over the lab's bridge to ``rate_kbit`` kbit/s (a token bucket on its veth's
    lab end: the node's ingress; the API server's traffic to the node's kubelet and virt-handler goes through nsforward
    on the node's own loopback, not through it). A MigrationPolicy's bandwidthPerMigration did not slow a transfer here
    (5.2 MB/s on the veth under a 1Mi policy, 2026-11-29): this does. :func:`unshape` takes it off."""
    if not 8 <= int(rate_kbit) <= 10_000_000:
        raise MultiNodeError(f"rate_kbit must be between 8 and 10000000, not {rate_kbit}")
    node._run(["tc", "qdisc", "replace", "dev", _veth(state, name), "root", "tbf", "rate", f"{int(rate_kbit)}kbit",
               "burst", "256kb", "latency", "400ms"], f"{name}: holding its ingress to {rate_kbit} kbit/s")


def unshape(state, name):
    """Take :func:`shape`'s limit off (nothing when there is none)."""
    subprocess.run(["tc", "qdisc", "del", "dev", _veth(state, name), "root"], capture_output=True, check=False)


def set_link(state, name, up):
    """Cut (``up=False``) or restore node ``name``'s link to the lab's bridge (its veth's lab end): the node is lost to
    the other nodes (its kubelet and virt-handler still reach the API server, through nsforward)."""
    node._run(["ip", "link", "set", "dev", _veth(state, name), "up" if up else "down"], f"{name}: link {'up' if up else 'down'}")


def main(argv=None):
    """``up DIR [--node-count N]`` / ``down DIR`` / ``memory DIR``."""
    parser = argparse.ArgumentParser(prog="python -m tools.kubelab.multinode")
    parser.add_argument("command", choices=("up", "down", "memory"))
    parser.add_argument("directory")
    parser.add_argument("--node-count", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command == "up":
        answer = up(args.directory, args.node_count)
    elif args.command == "down":
        answer = {"left": down(args.directory)}
    else:
        answer = memory(lab._load_state(os.path.abspath(args.directory)) or {})
    print(json.dumps(answer, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
