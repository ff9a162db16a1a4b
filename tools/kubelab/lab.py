"""Start, stop and inspect a lab: etcd + kube-apiserver + kube-controller-manager on loopback, with KubeVirt's CRDs.

Layout of ``DIR`` (created owner-only)::

    kubelab.json      what was started: PIDs with their start times and the boot id, ports, versions
    kubeconfig        admin (bearer token of a system:masters user), CA file, https://127.0.0.1:PORT
    kubeconfig-restricted  a ServiceAccount bound to the collection's documented minimal RBAC (docs/examples/kubevirt-rbac.yaml)
    pki/              CA, front-proxy CA, serving and proxy-client certs, service account key, tokens
    etcd/             etcd's data (kept across down/up: ``up`` on a stopped lab restarts it)
    logs/<role>.log   each process's output

Every process binds 127.0.0.1 only, and every port asks for credentials (etcd: client
certificates of its own CA, client and peer port; the API server: tokens), so the lab
is safe in the machine's own network namespace too; the tests run it inside
``python -m tools.virtlab netns`` all the same.  ``down`` signals a recorded PID only after
checking that it is still the process that was started (same boot, same start
time in /proc/<pid>/stat), so a reused PID is never signalled.
"""

import base64
import errno
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

from . import build, pki
from ..procs import boot_id, pid_alive, reap, start_time

STATE = "kubelab.json"
ROLES = ("etcd", "kube-apiserver", "kube-controller-manager")
# pvc/pv protection: a claim in use by a pod (a virt-launcher) is deleted only once no pod uses it, as on a cluster
CONTROLLERS = ("namespace-controller", "garbage-collector-controller", "serviceaccount-controller",
               "root-ca-certificate-publisher-controller", "persistentvolumeclaim-protection-controller",
               "persistentvolume-protection-controller")
SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
CRD_GROUPS = ("kubevirt.io", "cdi.kubevirt.io")
START_TIMEOUT = 120


class LabError(build.KubelabError):
    """The lab cannot do what was asked; the message says why."""


# ---------------------------------------------------------------- processes

def _is_ours(record, current_boot):
    """True when the recorded process is still the very process that was started (and not a zombie)."""
    if record.get("boot_id") != current_boot:
        return False
    return pid_alive(record["pid"]) and start_time(record["pid"]) == record["starttime"]


def _check_loopback():
    """Refuse early (not after a 120 s wait) when 127.0.0.1 cannot be reached: in a fresh network namespace the
    loopback interface is down, binding still works, and every connection fails with 'network is unreachable'."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            probe.settimeout(2)
            probe.connect(server.getsockname())
    except OSError as exc:
        raise LabError(f"127.0.0.1 is not reachable here ({exc.strerror or exc}): is the loopback interface up? "
                       "(`python -m tools.virtlab netns -- ...` brings it up in a namespace of its own)") from exc


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED_PORTS = "/proc/sys/net/ipv4/ip_local_reserved_ports"
LISTEN_FLOOR = 10000        # the lab's listeners stay above the machine's well-known and commonly configured ports
_CHOSEN = set()             # ports handed out by this process (a port chosen and released is not chosen again)
PORT_TAKEN = "address already in use"
START_ATTEMPTS = 3


def _ephemeral_range(path=EPHEMERAL_RANGE):
    """(low, high) of the kernel's ephemeral port range: the ports bind(0) and connect() pick for any socket."""
    try:
        with open(path, encoding="ascii") as handle:
            low, high = (int(word) for word in handle.read().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999     # the kernel's default
    return low, high


def _reserved_ports(path=RESERVED_PORTS):
    """The ports of ip_local_reserved_ports ("8080,9000-9010"): reserved by the machine's administrator."""
    ports = set()
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        return ports
    for part in filter(None, text.split(",")):
        try:
            first, _sep, last = part.partition("-")
            ports.update(range(int(first), int(last or first) + 1))
        except ValueError:
            continue
    return ports


def _listen_pools(low, high, floor=LISTEN_FLOOR):
    """The port ranges a listener may take: outside the ephemeral range [low, high] and above ``floor``."""
    return [pool for pool in (range(max(floor, 1024), min(low, 65536)), range(max(high + 1, floor, 1024), 65536)) if len(pool)]


def _free_port(rng=random, ephemeral=None, reserved=None, tries=500):
    """A loopback port for a lab component to listen on, chosen outside the kernel's ephemeral range.

    A port from the ephemeral range (what bind(("127.0.0.1", 0)) returns) can be taken by any outgoing connection
    between the moment it is released here and the moment the component binds it (seen: virt-api panicking with
    ``bind: address already in use`` right after another lab stopped). Outside that range only a listener can take it:
    the port is chosen at random (two labs in one network namespace rarely meet), checked free by binding it, and
    never handed out twice by this process. When the ephemeral range leaves no room, the kernel's choice is used.
    """
    low, high = ephemeral or _ephemeral_range()
    pools = _listen_pools(low, high)
    skip = (_reserved_ports() if reserved is None else reserved) | _CHOSEN
    for _attempt in range(tries if pools else 1):
        port = rng.choice(rng.choices(pools, weights=[len(p) for p in pools])[0]) if pools else 0
        if port in skip:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", port))
                port = sock.getsockname()[1]
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue
            raise LabError(f"cannot bind a port on 127.0.0.1 ({exc.strerror}): is the loopback interface up? "
                           "(`python -m tools.virtlab netns -- ...` brings it up in a namespace of its own)") from exc
        _CHOSEN.add(port)
        return port
    raise LabError(f"no free port on 127.0.0.1 outside the ephemeral range {low}-{high} after {tries} tries")


class PortTaken(LabError):
    """A component exited because a port it was given was taken before it could bind it."""


def _start(directory, role, argv, state, cwd=None):
    log_path = os.path.join(directory, "logs", role + ".log")
    with open(log_path, "ab") as log, open(os.devnull, "rb") as devnull:
        offset = log.tell()
        proc = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                cwd=cwd or directory, start_new_session=True, close_fds=True)
    proc.log_offset = offset
    started = start_time(proc.pid)
    state["processes"].append({"role": role, "pid": proc.pid, "starttime": started,
                               "boot_id": state["boot_id"], "argv": argv, "log": log_path})
    _save(directory, state)
    return proc


def _start_listening(directory, role, argv_for, port_keys, state, ready, attempts=START_ATTEMPTS):  # pylint: disable=too-many-arguments
    """Start ``role`` (argv from ``argv_for(state["ports"])``) and wait until ``ready()``; when it exits because one of its
    ports (``state["ports"][key]`` for ``port_keys``) was taken meanwhile, choose new ones and start it again (up to
    ``attempts`` starts). ``ready`` must read the ports when called."""
    for attempt in range(1, attempts + 1):
        proc = _start(directory, role, argv_for(state["ports"]), state)
        try:
            _wait(role, proc, state["processes"][-1]["log"], ready)
            return proc
        except PortTaken:
            if attempt == attempts:
                raise
            state["processes"].pop()
            state["ports"].update((key, _free_port()) for key in port_keys)
            _save(directory, state)
    raise AssertionError("unreachable")


def _log_tail(path, lines=25):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def _log_since(path, offset):
    """What the process wrote to its log from ``offset`` on (the log is appended to across starts)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def _wait(role, proc, log_path, ready, timeout=START_TIMEOUT):
    """Wait until ``ready()`` is true; raise LabError with the log tail if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            message = f"{role} exited with status {proc.returncode} while starting; last lines of {log_path}:\n{_log_tail(log_path)}"
            raise (PortTaken if PORT_TAKEN in _log_since(log_path, getattr(proc, "log_offset", 0)) else LabError)(message)
        if ready():
            return
        time.sleep(0.3)
    raise LabError(f"{role} did not become ready within {timeout} s; last lines of {log_path}:\n{_log_tail(log_path)}")


def _save(directory, state):
    path = os.path.join(directory, STATE)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2)
    os.replace(tmp, path)


def _load_state(directory):
    try:
        with open(os.path.join(directory, STATE), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------- API access

class Client:
    """A minimal HTTPS client of the lab's API server (bearer token, lab CA)."""

    def __init__(self, server, ca_file, token):
        self.server = server
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file)

    def request(self, method, path, body=None, timeout=10):
        """(status, parsed JSON or text) of one request."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
                code, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            code, raw = exc.code, exc.read()
        try:
            return code, json.loads(raw)
        except ValueError:
            return code, raw.decode(errors="replace")

    def ready(self):
        """True when /readyz answers ok."""
        try:
            return self.request("GET", "/readyz", timeout=3)[0] == 200
        except (OSError, ssl.SSLError):
            return False

    def apply(self, base, obj):
        """Create ``obj`` under the collection path ``base``, or replace it if it exists."""
        code, body = self.request("POST", base, obj)
        if code == 409:
            name = obj["metadata"]["name"]
            code, current = self.request("GET", f"{base}/{name}")
            if code == 200:
                obj = dict(obj, metadata=dict(obj["metadata"], resourceVersion=current["metadata"]["resourceVersion"]))
                code, body = self.request("PUT", f"{base}/{name}", obj)
        if code not in (200, 201):
            raise LabError(f"could not create {obj.get('kind')} {obj['metadata'].get('name')}: HTTP {code}: {body}")
        return body


def _kubeconfig(path, server, ca_file, user, token):
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kubelab", "preferences": {},
        "clusters": [{"name": "kubelab", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kubelab", "context": {"cluster": "kubelab", "user": user, "namespace": "default"}}],
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)     # JSON is YAML: every kubeconfig reader takes it


def _load_crds(path):
    import yaml  # pylint: disable=import-outside-toplevel
    with open(path, encoding="utf-8") as handle:
        crds = [doc for doc in yaml.load_all(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if doc]
    bad = [doc.get("metadata", {}).get("name") for doc in crds if doc.get("kind") != "CustomResourceDefinition"]
    if bad or not crds:
        raise LabError(f"{path} is not a stream of CRDs (odd documents: {bad}); rebuild with `make kube`")
    return crds


def _established(crd):
    # a CRD read while the server is still busy may come back without a status yet (or an error Status: not a CRD)
    conditions = ((crd.get("status") if isinstance(crd, dict) else None) or {}).get("conditions") if isinstance(crd, dict) else None
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions or [] if isinstance(c, dict))


def _install_crds(client, crds, timeout=60):
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        client.apply(base, crd)
    deadline = time.monotonic() + timeout
    waiting = [crd["metadata"]["name"] for crd in crds]
    while waiting and time.monotonic() < deadline:
        waiting = [name for name in waiting if not _established(client.request("GET", f"{base}/{name}")[1])]
        if waiting:
            time.sleep(0.3)
    if waiting:
        raise LabError("CRDs not Established within %d s: %s" % (timeout, ", ".join(waiting)))
    return [crd["metadata"]["name"] for crd in crds]


def _wait_for(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise LabError(f"{what} did not appear within {timeout} s")


# ---------------------------------------------------------------- virt-api (stage 2)

VIRT_API_NAMESPACE = "kubevirt"     # what virt-api assumes out of cluster (no service account namespace file)
VIRT_API_NAMES = ("virt-api", "virt-api.kubevirt", "virt-api.kubevirt.svc", "localhost")
WEBHOOK_KINDS = {"MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                 "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
                 "APIService": "/apis/apiregistration.k8s.io/v1/apiservices"}


def _virt_api_manifests(binary):
    """virt-api's webhook configurations and APIServices as KubeVirt's own code generates them."""
    import yaml  # pylint: disable=import-outside-toplevel
    out = subprocess.run([binary, "-namespace", VIRT_API_NAMESPACE, "virt-api"], capture_output=True, check=False)
    if out.returncode != 0:
        raise LabError("kubevirt-manifests virt-api failed: " + out.stderr.decode(errors="replace")[-2000:])
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _point_at(docs, port, ca_file):
    """Rewrite each webhook's service reference to https://127.0.0.1:PORT/<path> and give every object the lab CA."""
    with open(ca_file, "rb") as handle:
        bundle = base64.b64encode(handle.read()).decode()
    for doc in docs:
        if doc["kind"] == "APIService":
            # the aggregator resolves an ExternalName Service to https://<externalName>:<this port>
            doc["spec"]["service"]["port"] = port
            doc["spec"]["caBundle"] = bundle
            doc["spec"].pop("insecureSkipTLSVerify", None)
        else:
            for hook in doc["webhooks"]:
                service = hook["clientConfig"].pop("service")
                hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service.get('path') or '/'}"
                hook["clientConfig"]["caBundle"] = bundle
    return docs


def _remove_virt_api_registrations(client, docs):
    """Delete virt-api's webhooks and APIServices (left in etcd by an earlier `up --virt-api`: failurePolicy Fail)."""
    for doc in docs:
        code, body = client.request("DELETE", f"{WEBHOOK_KINDS[doc['kind']]}/{doc['metadata']['name']}")
        if code not in (200, 202, 404):
            raise LabError(f"could not delete {doc['kind']} {doc['metadata']['name']}: HTTP {code}: {body}")


def _virt_api_healthy(port, ca_file):
    context = ssl.create_default_context(cafile=ca_file)
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/apis/subresources.kubevirt.io/v1/healthz", timeout=2,
                                    context=context) as resp:
            return resp.status == 200
    except (OSError, ValueError):
        return False


def _apiservices_available(client, docs):
    for doc in docs:
        if doc["kind"] != "APIService":
            continue
        body = client.request("GET", f"{WEBHOOK_KINDS['APIService']}/{doc['metadata']['name']}")[1]
        conditions = body.get("status", {}).get("conditions", []) if isinstance(body, dict) else []
        if not any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions):
            return False
    return True


# ---------------------------------------------------------------- commands

def _etcd_argv(binary, directory, paths, client_port, peer_port):  # pylint: disable=too-many-arguments
    client, peer = f"https://127.0.0.1:{client_port}", f"https://127.0.0.1:{peer_port}"
    tls = []
    for prefix in ("", "peer-"):
        tls += [f"--{prefix}cert-file={paths['etcd_crt']}", f"--{prefix}key-file={paths['etcd_key']}",
                f"--{prefix}trusted-ca-file={paths['etcd_ca']}", f"--{prefix}client-cert-auth=true"]
    return [binary, "--name", "kubelab", "--data-dir", os.path.join(directory, "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"kubelab={peer}", "--unsafe-no-fsync", "--log-level", "warn"] + tls


def _apiserver_argv(binary, directory, paths, etcd_port, port):  # pylint: disable=too-many-arguments
    return [binary,
            f"--etcd-servers=https://127.0.0.1:{etcd_port}", "--etcd-prefix=/registry",
            f"--etcd-cafile={paths['etcd_ca']}", f"--etcd-certfile={paths['etcd_client_crt']}",
            f"--etcd-keyfile={paths['etcd_client_key']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--tls-cert-file={paths['apiserver_crt']}", f"--tls-private-key-file={paths['apiserver_key']}",
            f"--client-ca-file={paths['ca']}",
            f"--token-auth-file={paths['tokens']}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={paths['sa_pub']}",
            f"--service-account-signing-key-file={paths['sa_key']}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--cert-dir={os.path.join(directory, 'pki', 'generated')}",
            # the aggregation layer (virt-api's subresources.kubevirt.io APIService)
            f"--proxy-client-cert-file={paths['proxy_client_crt']}", f"--proxy-client-key-file={paths['proxy_client_key']}",
            f"--requestheader-client-ca-file={paths['front_proxy_ca']}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--enable-aggregator-routing=false"]


def _controller_manager_argv(binary, paths, kubeconfig, port):
    return [binary,
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={os.path.join(os.path.dirname(kubeconfig), 'generated')}",
            "--controllers=" + ",".join(CONTROLLERS),
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--root-ca-file={paths['ca']}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--profiling=false"]


def _write_tokens(path, entries):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        for token, user, uid, groups in entries:
            handle.write(f'{token},{user},{uid},"{",".join(groups)}"\n')


def _kubevirt_cr(client, feature_gates):
    """The KubeVirt CR virt-api reads its configuration from (it counts only with status.phase set, as virt-operator does)."""
    base = f"/apis/kubevirt.io/v1/namespaces/{VIRT_API_NAMESPACE}/kubevirts"
    body = client.apply(base, {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt", "namespace": VIRT_API_NAMESPACE},
                               "spec": {"configuration": {"developerConfiguration": {"featureGates": list(feature_gates)}}}})
    body["status"] = {"phase": "Deployed"}
    code, answer = client.request("PUT", f"{base}/kubevirt/status", body)
    if code != 200:
        raise LabError(f"could not set the KubeVirt CR's status: HTTP {code}: {answer}")


# ---------------------------------------------------------------- kubeconfig-restricted

RBAC_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "examples",
                         "kubevirt-rbac.yaml")
RESTRICTED_NAMESPACE = "default"
RESTRICTED_ACCOUNT = "converge-virt-restricted"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"


def documented_rbac(path=RBAC_FILE):
    """(rules of the Role, rules of the ClusterRole) of the collection's documented minimal RBAC."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(path, encoding="utf-8") as handle:
        items = yaml.safe_load(handle)["items"]
    found = {item["kind"]: item["rules"] for item in items if item["kind"] in ("Role", "ClusterRole")}
    if set(found) != {"Role", "ClusterRole"}:
        raise LabError(f"{path} must hold one Role and one ClusterRole, found {sorted(found)}")
    return found["Role"], found["ClusterRole"]


def grant(client, namespace, account, role_rules, cluster_rules=None, name=None):
    """A ServiceAccount ``namespace/account`` bound to a Role (in ``namespace``) and a ClusterRole with these rules;
    returns a token for it from the TokenRequest API (valid one day)."""
    name = name or account
    client.apply(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                 {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}})
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    client.apply(f"{RBAC_API}/namespaces/{namespace}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                                              "metadata": {"name": name, "namespace": namespace}, "rules": role_rules})
    client.apply(f"{RBAC_API}/namespaces/{namespace}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}, "subjects": subject})
    if cluster_rules is not None:
        cluster_name = f"{name}-{namespace}"
        client.apply(f"{RBAC_API}/clusterroles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                                  "metadata": {"name": cluster_name}, "rules": cluster_rules})
        client.apply(f"{RBAC_API}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": cluster_name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name}, "subjects": subject})
    return account_token(client, namespace, account)


def account_token(client, namespace, account):
    """A token for the ServiceAccount ``namespace/account`` from the TokenRequest API (valid one day)."""
    code, answer = client.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}})
    if code != 201:
        raise LabError(f"could not get a token for {namespace}/{account}: HTTP {code}: {answer}")
    return answer["status"]["token"]


RBAC_KINDS = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings"}


def apply_operator_rbac(client, binary, what):
    """Apply the ServiceAccount, ClusterRole, Role and bindings that ``kubevirt-manifests -namespace kubevirt WHAT``
    prints (virt-operator's own, e.g. ``rbac`` for virt-api, ``handler-rbac`` for virt-handler); returns the account."""
    import yaml  # pylint: disable=import-outside-toplevel
    out = subprocess.run([binary, "-namespace", VIRT_API_NAMESPACE, what], capture_output=True, check=False)
    if out.returncode != 0:
        raise LabError(f"kubevirt-manifests {what} failed: " + out.stderr.decode(errors="replace")[-2000:])
    account = None
    for doc in (d for d in yaml.safe_load_all(out.stdout) if d):
        meta = doc["metadata"]
        if doc["kind"] == "ServiceAccount":
            account = meta["name"]
            client.apply(f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts", doc)
        elif doc["kind"] in ("Role", "RoleBinding"):
            client.apply(f"{RBAC_API}/namespaces/{meta['namespace']}/{RBAC_KINDS[doc['kind']]}", doc)
        else:
            client.apply(f"{RBAC_API}/{RBAC_KINDS[doc['kind']]}", doc)
    if account is None:
        raise LabError(f"kubevirt-manifests {what} printed no ServiceAccount")
    return account


def _virt_api_rbac(client, binary):
    """virt-api's ServiceAccount, ClusterRole, Role and bindings exactly as virt-operator installs them (KubeVirt's
    GetAllApiServer, printed by kubevirt-manifests); returns a token of that account."""
    account = apply_operator_rbac(client, binary, "rbac")
    # an earlier lab (same etcd data) bound this account to every rule: that binding must not survive
    client.request("DELETE", f"{RBAC_API}/clusterrolebindings/{account}-{VIRT_API_NAMESPACE}")
    client.request("DELETE", f"{RBAC_API}/clusterroles/{account}-{VIRT_API_NAMESPACE}")
    return account, account_token(client, VIRT_API_NAMESPACE, account)


def _restricted_kubeconfig(client, directory, server, ca_file):
    """DIR/kubeconfig-restricted: a ServiceAccount bound to exactly the Role/ClusterRole of docs/examples/kubevirt-rbac.yaml."""
    role_rules, cluster_rules = documented_rbac()
    token = grant(client, RESTRICTED_NAMESPACE, RESTRICTED_ACCOUNT, role_rules, cluster_rules)
    path = os.path.join(directory, "kubeconfig-restricted")
    _kubeconfig(path, server, ca_file, f"system:serviceaccount:{RESTRICTED_NAMESPACE}:{RESTRICTED_ACCOUNT}", token)
    return path


def up(directory, virt_api=False, feature_gates=(), controllers=None, nodes=None):  # pylint: disable=too-many-locals,too-many-statements
    """Start the lab in ``directory`` (stopping what an earlier ``up`` there left running); return its description.

    ``virt_api``: also run KubeVirt's own virt-api out of cluster, with its webhooks (URL + caBundle) and the
    subresources.kubevirt.io APIService registered, configured by a KubeVirt CR ``kubevirt/kubevirt`` with the given
    ``feature_gates`` (e.g. DeclarativeHotplugVolumes); without it, registrations an earlier ``up --virt-api`` left
    are removed (their failurePolicy is Fail).

    ``controllers="emulated"``: also run tests/kubeapi's KubeVirt controller emulation as a process
    (``python -m tests.kubeapi.controller``, role ``controllers``) as KubeVirt's own controller service account.

    ``controllers="real"``: KubeVirt's own virt-controller (leader election in namespace kubevirt, as KubeVirt's
    controller service account), kube-scheduler, kwok (nodes node01-03, annotated kwok.x-k8s.io/node=fake, labelled as
    virt-handler's node labeller would, with KubeVirt's device resources) and tests/kubeapi/node_agent.py (role
    ``virt-handler``); implies ``virt_api``.

    ``nodes="real"``: one real node (tools/kubelab/node.py: containerd + kubelet in a PID/mount/UTS namespace of its
    own, in the caller's network namespace), registered as ``kubelab-node`` (issue 34).
    """
    directory = os.path.abspath(directory)
    if controllers == "real":
        virt_api = True     # virt-controller's VMIs need virt-api's defaults (mutating webhooks) and its subresources
    binaries = build.locate(build.STAGE1 + (("virt-api",) if virt_api else ()) + (build.REAL_CONTROLLERS if controllers == "real" else ()))
    for role in ROLES + (("virt-api",) if virt_api else ()):
        if not os.access(binaries[role], os.X_OK):
            raise LabError(f"{binaries[role]} is not executable; rebuild with `make kube`")
    crds = _load_crds(binaries["crds.yaml"])
    _check_loopback()
    if _load_state(directory):
        down(directory)
    for sub in ("", "logs", "pki", "etcd"):
        os.makedirs(os.path.join(directory, sub), mode=0o700, exist_ok=True)
    os.chmod(os.path.join(directory, "etcd"), 0o700)

    pki_dir = os.path.join(directory, "pki")
    paths = pki.make_all(pki_dir)
    admin_token = pki.ensure_token(os.path.join(pki_dir, "admin.token"))
    kcm_token = pki.ensure_token(os.path.join(pki_dir, "kube-controller-manager.token"))
    paths["tokens"] = os.path.join(pki_dir, "tokens.csv")
    _write_tokens(paths["tokens"], [(admin_token, "kubelab-admin", "kubelab-admin", ["system:masters"]),
                                    (kcm_token, "system:kube-controller-manager", "system:kube-controller-manager", [])])

    ports = {"etcd": _free_port(), "etcd-peer": _free_port(), "kube-apiserver": _free_port(), "kube-controller-manager": _free_port()}
    if virt_api:
        ports["virt-api"] = _free_port()
        ports["virt-handler"] = _free_port()    # where virt-api reaches "virt-handler" (see handler_endpoint)
    if controllers == "real":
        ports.update({role: _free_port() for role in ("kube-scheduler", "virt-controller", "kwok")})
    if nodes == "real":
        ports.update({role: _free_port() for role in ("kubelet", "kubelet-healthz", "virt-handler-metrics")})
    state = {"boot_id": boot_id(), "dir": directory, "ports": ports, "versions": build.versions(), "processes": []}
    _save(directory, state)
    server = f"https://127.0.0.1:{ports['kube-apiserver']}"
    client = Client(server, paths["ca"], admin_token)
    try:
        # a component whose port was taken between its choice and its bind is started again on new ports
        _start_listening(directory, "etcd", lambda p: _etcd_argv(binaries["etcd"], directory, paths, p["etcd"], p["etcd-peer"]),
                         ("etcd", "etcd-peer"), state, lambda: _etcd_healthy(ports["etcd"], paths))

        def apiserver_ready():
            client.server = f"https://127.0.0.1:{ports['kube-apiserver']}"     # new after a lost port
            return client.ready()
        _start_listening(directory, "kube-apiserver",
                         lambda p: _apiserver_argv(binaries["kube-apiserver"], directory, paths, p["etcd"], p["kube-apiserver"]),
                         ("kube-apiserver",), state, apiserver_ready)
        server = client.server
        kcm_kubeconfig = os.path.join(pki_dir, "kube-controller-manager.kubeconfig")
        _kubeconfig(kcm_kubeconfig, server, paths["ca"], "system:kube-controller-manager", kcm_token)
        kcm = _start(directory, "kube-controller-manager",
                     _controller_manager_argv(binaries["kube-controller-manager"], paths, kcm_kubeconfig, ports["kube-controller-manager"]), state)
        installed = _install_crds(client, crds)
        client.apply("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubevirt"}})
        # kube-apiserver publishes its client and requestheader CAs here; virt-api reads them (and panics without)
        _wait_for("kube-system/extension-apiserver-authentication with requestheader-client-ca-file",
                  lambda: "requestheader-client-ca-file" in (client.request(
                      "GET", "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")[1] or {}).get("data", {}))
        _wait_for("the default ServiceAccount (kube-controller-manager)",
                  lambda: client.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200)
        if kcm.poll() is not None:
            raise LabError(f"kube-controller-manager exited with status {kcm.returncode}:\n{_log_tail(state['processes'][-1]['log'])}")
        registrations = _virt_api_manifests(binaries["kubevirt-manifests"])
        kubeconfig = os.path.join(directory, "kubeconfig")
        _kubeconfig(kubeconfig, server, paths["ca"], "kubelab-admin", admin_token)
        restricted = _restricted_kubeconfig(client, directory, server, paths["ca"])
        if virt_api:
            crt, key = pki.ensure_leaf(pki_dir, "virt-api", pki.ensure_ca(pki_dir, "ca", "converge-virt-kubelab-ca"), "virt-api",
                                       server=True, client=True, dns=VIRT_API_NAMES, addresses=("127.0.0.1",))
            _kubevirt_cr(client, feature_gates)
            handler_client_crt, handler_client_key = _handler_identity(client, pki_dir)
            # virt-api acts as KubeVirt's own kubevirt:kubevirt-apiserver account, with exactly the rules virt-operator gives
            # it: its webhooks let only KubeVirt's accounts change a VMI (a stop with a grace period patches the VMI:
            # refused when virt-api ran as the admin)
            api_account, api_token = _virt_api_rbac(client, binaries["kubevirt-manifests"])
            api_kubeconfig = os.path.join(pki_dir, "virt-api.kubeconfig")
            _kubeconfig(api_kubeconfig, server, paths["ca"], f"system:serviceaccount:{VIRT_API_NAMESPACE}:{api_account}", api_token)
            _start_listening(directory, "virt-api", lambda p: [
                binaries["virt-api"], "--kubeconfig", api_kubeconfig, "--listen", "127.0.0.1", "--port", str(p["virt-api"]),
                "--tls-cert-file", crt, "--tls-key-file", key,
                "--handler-cert-file", handler_client_crt, "--handler-key-file", handler_client_key,
                "--console-server-port", str(p["virt-handler"])], ("virt-api",), state,
                lambda: _virt_api_healthy(ports["virt-api"], paths["ca"]))
            client.apply("/api/v1/namespaces/kubevirt/services", {
                "apiVersion": "v1", "kind": "Service", "metadata": {"name": "virt-api", "namespace": VIRT_API_NAMESPACE},
                "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"name": "https", "port": ports["virt-api"]}]}})
            for doc in _point_at(registrations, ports["virt-api"], paths["ca"]):
                client.apply(WEBHOOK_KINDS[doc["kind"]], doc)
            _wait_for("the subresources.kubevirt.io APIServices Available", lambda: _apiservices_available(client, registrations))
        else:
            _remove_virt_api_registrations(client, registrations)
        if controllers == "emulated":
            _start_emulated_controllers(client, directory, state, server, paths["ca"], virt_api)
        elif controllers == "real":
            _start_real_controllers(client, directory, state, binaries, kubeconfig)
        if nodes == "real":
            from . import node  # pylint: disable=import-outside-toplevel
            node.start_node(sys.modules[__name__], client, directory, state, ports)
    except BaseException:
        down(directory)
        raise
    state.update(server=server, kubeconfig=kubeconfig, kubeconfig_restricted=restricted, ca_file=paths["ca"], crds=installed)
    _save(directory, state)
    return {"server": server, "kubeconfig": kubeconfig, "kubeconfig_restricted": restricted, "ca_file": paths["ca"], "versions": state["versions"],
            "ports": ports, "pids": {p["role"]: p["pid"] for p in state["processes"]}, "crds": len(installed)}


# ---------------------------------------------------------------- where virt-api reaches virt-handler

HANDLER_CN = "kubevirt.io:system:node:virt-handler"     # what virt-api's client TLS config requires of a handler
# what a real virt-handler's server requires of its clients (pkg/util/tls verifyPeerCert: 'kubevirt.io:system:client:'
# + 'virt-handler'; virt-operator's kubevirt-virt-handler-certs secret): with virt-api's own certificate a real
# handler refuses pause/unpause with 'remote error: tls: bad certificate' (issue 34, real node)
HANDLER_CLIENT_CN = "kubevirt.io:system:client:virt-handler"


def _handler_identity(client, pki_dir):
    """What virt-api needs to talk to a virt-handler: the ``kubevirt-ca`` ConfigMap (the CA it verifies handlers
    against) and a serving certificate with virt-handler's common name signed by it (pki/virt-handler.crt). Returns
    virt-api's client certificate and key for virt-handler (pki/virt-handler-client.crt, HANDLER_CLIENT_CN)."""
    ca = pki.ensure_ca(pki_dir, "ca", "converge-virt-kubelab-ca")
    pki.ensure_leaf(pki_dir, "virt-handler", ca, HANDLER_CN, server=True, client=True, addresses=("127.0.0.1",))
    client_pair = pki.ensure_leaf(pki_dir, "virt-handler-client", ca, HANDLER_CLIENT_CN, client=True)
    with open(os.path.join(pki_dir, "ca.crt"), encoding="utf-8") as handle:
        bundle = handle.read()
    client.apply(f"/api/v1/namespaces/{VIRT_API_NAMESPACE}/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubevirt-ca", "namespace": VIRT_API_NAMESPACE},
        "data": {"ca-bundle": bundle}})
    return client_pair


def handler_endpoint(directory):
    """(port, cert file, key file, CA file) for an emulated virt-handler of a lab started with virt-api: virt-api calls
    ``https://<virt-handler pod IP>:<port>/v1/namespaces/NS/virtualmachineinstances/NAME/{pause,unpause,...}`` of the
    virt-handler pod (label kubevirt.io=virt-handler, namespace kubevirt) on the VMI's node."""
    return handler_endpoint_of(_load_state(os.path.abspath(directory)), directory)


def handler_endpoint_of(state, directory):
    """``handler_endpoint`` from a lab's state record."""
    if not state or "virt-handler" not in state.get("ports", {}):
        raise LabError(f"no lab with virt-api is up in {directory}")
    pki_dir = os.path.join(state["dir"], "pki")
    return (state["ports"]["virt-handler"], os.path.join(pki_dir, "virt-handler.crt"), os.path.join(pki_dir, "virt-handler.key"),
            os.path.join(pki_dir, "ca.crt"))


# ---------------------------------------------------------------- emulated controllers (issue 14 item 4)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTROLLER_ACCOUNT = "kubevirt-controller"      # virt-api lets only KubeVirt's own service accounts change a VMI's spec
ALL_RULES = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]


def controller_kubeconfig(directory):
    """DIR/pki/controllers.kubeconfig for a running lab: KubeVirt's own controller identity
    (``system:serviceaccount:kubevirt:kubevirt-controller``), what an emulated controller run in a test process uses."""
    state = _load_state(os.path.abspath(directory))
    if not state or "server" not in state:
        raise LabError(f"no lab is up in {directory}")
    with open(os.path.join(state["dir"], "pki", "admin.token"), encoding="utf-8") as handle:
        client = Client(state["server"], state["ca_file"], handle.read().strip())
    return _controller_identity(client, state["dir"], state["server"], state["ca_file"])


def _controller_identity(client, directory, server, ca_file):
    token = grant(client, VIRT_API_NAMESPACE, CONTROLLER_ACCOUNT, ALL_RULES, ALL_RULES)
    # virt-operator writes the cluster's default architecture into the KubeVirt CR's status; without it virt-api's
    # mutators leave spec.architecture empty and its VMI validator refuses every VMI ("unsupported architecture: ")
    base = f"/apis/kubevirt.io/v1/namespaces/{VIRT_API_NAMESPACE}/kubevirts/kubevirt"
    code, cr = client.request("GET", base)
    if code == 200 and not cr.get("status", {}).get("defaultArchitecture"):
        cr.setdefault("status", {})["defaultArchitecture"] = "amd64"
        code, answer = client.request("PUT", base + "/status", cr)
        if code != 200:
            raise LabError(f"could not set the KubeVirt CR's default architecture: HTTP {code}: {answer}")
    kubeconfig = os.path.join(directory, "pki", "controllers.kubeconfig")
    _kubeconfig(kubeconfig, server, ca_file, f"system:serviceaccount:{VIRT_API_NAMESPACE}:{CONTROLLER_ACCOUNT}", token)
    return kubeconfig


def _start_emulated_controllers(client, directory, state, server, ca_file, virt_api):  # pylint: disable=too-many-arguments
    """Start tests/kubeapi/controller.py as ``system:serviceaccount:kubevirt:kubevirt-controller`` (with virt-api, also
    virt-handler's REST endpoint as ``kubevirt:kubevirt-handler``: tests/kubeapi/handler.py); wait for its nodes."""
    kubeconfig = _controller_identity(client, directory, server, ca_file)
    argv = [sys.executable, "-m", "tests.kubeapi.controller", "--kubeconfig", kubeconfig]
    if virt_api:
        handler = os.path.join(directory, "pki", "handler.kubeconfig")
        _kubeconfig(handler, server, ca_file, f"system:serviceaccount:{VIRT_API_NAMESPACE}:kubevirt-handler",
                    grant(client, VIRT_API_NAMESPACE, "kubevirt-handler", ALL_RULES, ALL_RULES))
        port, crt, key, _ca = handler_endpoint_of(state, directory)
        argv += ["--handler-kubeconfig", handler, "--handler-port", str(port), "--handler-cert", crt, "--handler-key", key]
    proc = _start(directory, "controllers", argv, state, cwd=REPO_ROOT)

    def seeded():
        code, nodes = client.request("GET", "/api/v1/nodes")
        items = nodes.get("items", []) if code == 200 else []
        if not items or not all(n.get("status", {}).get("conditions") and not n["spec"].get("taints") for n in items):
            return False
        if not virt_api:
            return True
        code, pods = client.request("GET", f"/api/v1/namespaces/{VIRT_API_NAMESPACE}/pods?labelSelector=kubevirt.io%3Dvirt-handler")
        return code == 200 and len(pods.get("items", [])) >= len(items)
    _wait("controllers", proc, state["processes"][-1]["log"], seeded, timeout=60)


# ---------------------------------------------------------------- KubeVirt's own virt-controller (issue 15)

NODES = ("node01", "node02", "node03")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# kwok's pod stages: its default ones plus the start failures a VM chooses with this label on its template (issue 15)
KWOK_STAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kwok-stages.conf")
LAUNCHER_FAULT_LABEL = "kubelab.converge.virt/launcher-fault"
LAUNCHER_FAULTS = ("crash", "errimagepull")
# what virt-controller's launcher pods ask of a node besides cpu and memory (virt-handler's device plugins advertise them)
NODE_DEVICES = {"devices.kubevirt.io/kvm": "1k", "devices.kubevirt.io/tun": "1k", "devices.kubevirt.io/vhost-net": "1k"}
NODE_CAPACITY = dict({"cpu": "64", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}, **NODE_DEVICES)


def _kwok_node(name):
    """A Node kwok keeps alive (annotation kwok.x-k8s.io/node=fake), schedulable for KubeVirt, with the devices
    virt-handler's device plugins would advertise."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_ANNOTATION: "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                    "type": "kwok", "kubevirt.io/schedulable": "true",
                                    # what virt-handler's node labeller writes and launcher pods select on
                                    "machine-type.node.kubevirt.io/q35": "true",
                                    "cpu-model.node.kubevirt.io/Skylake-Client-IBRS": "true",
                                    "host-model-cpu.node.kubevirt.io/Skylake-Client-IBRS": "true",
                                    "cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS": "true"}},
            "spec": {},
            "status": {"capacity": NODE_CAPACITY, "allocatable": NODE_CAPACITY}}


def _start_real_controllers(client, directory, state, binaries, kubeconfig):  # pylint: disable=too-many-locals
    """kube-scheduler, kwok (simulated nodes and pods), KubeVirt's own virt-controller, and the small emulation of what only
    virt-handler writes (tests/kubeapi/node_agent.py, which also serves virt-handler's REST endpoint for virt-api)."""
    ports, server, ca_file = state["ports"], client.server, os.path.join(directory, "pki", "ca.crt")
    for name in NODES:
        client.apply("/api/v1/nodes", _kwok_node(name))
        _node_status(client, name)
    scheduler = _start(directory, "kube-scheduler", [
        binaries["kube-scheduler"], f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1", f"--secure-port={ports['kube-scheduler']}",
        "--leader-elect=false", "--profiling=false", "--v=1"], state)
    kwok = _start(directory, "kwok", [
        binaries["kwok"], f"--kubeconfig={kubeconfig}", f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        "--manage-all-nodes=false", "--node-ip=127.0.0.1", "--node-name=kwok-controller", "--node-port=0",
        f"--server-address=127.0.0.1:{ports['kwok']}", "--cidr=10.244.0.1/16", f"--config={KWOK_STAGES}"], state)
    controller_kubeconfig = _controller_identity(client, directory, server, ca_file)
    pki_dir = os.path.join(directory, "pki")
    crt, key = pki.ensure_leaf(pki_dir, "virt-controller", pki.ensure_ca(pki_dir, "ca", "converge-virt-kubelab-ca"),
                               "virt-controller", server=True, client=True, dns=("virt-controller", "localhost"), addresses=("127.0.0.1",))
    _drop_stale_lease(client)
    controller = _start(directory, "virt-controller", [
        binaries["virt-controller"], "--kubeconfig", controller_kubeconfig, "--listen", "127.0.0.1", "--port", str(ports["virt-controller"]),
        "--prom-cert-file", crt, "--prom-key-file", key, "--launcher-image", "quay.io/kubevirt/virt-launcher:v1.8.0",
        "--exporter-image", "quay.io/kubevirt/virt-exportserver:v1.8.0",
        # virt-controller exits when it cannot renew its lease within the renew deadline: 3 s, and then 10 s, lost it at
        # load average 20-70 (the API server answered too late; the stack then had no controller). The lab runs one
        # virt-controller, so the lease only has to survive a slow API server; the stale lease of a stopped lab is
        # deleted before the start (_drop_stale_lease), so a long lease costs no wait
        "--leader-elect-lease-duration=90s", "--leader-elect-renew-deadline=60s", "--leader-elect-retry-period=2s"], state)
    handler = os.path.join(directory, "pki", "handler.kubeconfig")
    _kubeconfig(handler, server, ca_file, f"system:serviceaccount:{VIRT_API_NAMESPACE}:kubevirt-handler",
                grant(client, VIRT_API_NAMESPACE, "kubevirt-handler", ALL_RULES, ALL_RULES))
    port, h_crt, h_key, _ca = handler_endpoint_of(state, directory)
    agent = _start(directory, "virt-handler", [sys.executable, "-m", "tests.kubeapi.node_agent", "--kubeconfig", handler,
                                               "--nodes", ",".join(NODES), "--handler-port", str(port),
                                               "--handler-cert", h_crt, "--handler-key", h_key], state, cwd=REPO_ROOT)

    def nodes_ready():
        for proc, role in ((scheduler, "kube-scheduler"), (kwok, "kwok"), (controller, "virt-controller"), (agent, "virt-handler")):
            if proc.poll() is not None:
                record = [p for p in state["processes"] if p["role"] == role][-1]
                raise LabError(f"{role} exited with status {proc.returncode} while starting; last lines of {record['log']}:\n{_log_tail(record['log'])}")
        code, nodes = client.request("GET", "/api/v1/nodes")
        items = [n for n in nodes.get("items", []) if n["metadata"]["name"] in NODES] if code == 200 else []
        ready = [n for n in items if any(c.get("type") == "Ready" and c.get("status") == "True" for c in n.get("status", {}).get("conditions", []))]
        for node in ready:
            # the TaintNodesByCondition admission plugin tainted the new Node not-ready; the node lifecycle controller
            # (not run by the lab) lifts that once the Node reports Ready: do it here
            taints = [t for t in node["spec"].get("taints") or [] if not t.get("key", "").startswith("node.kubernetes.io/")]
            if taints != (node["spec"].get("taints") or []):
                node["spec"]["taints"] = taints
                client.request("PUT", f"/api/v1/nodes/{node['metadata']['name']}", node)
        return len(ready) == len(NODES) and not any(n["spec"].get("taints") for n in ready)
    _wait_for("kwok's nodes Ready and untainted", nodes_ready, timeout=60)
    _wait_for("virt-controller's leader lease", lambda: _virt_controller_leading(client), timeout=90)


def _node_status(client, name):
    """Capacity and allocatable of a new Node (status is not taken on create)."""
    code, node = client.request("GET", f"/api/v1/nodes/{name}")
    if code != 200:
        raise LabError(f"could not read node {name}: HTTP {code}: {node}")
    node.setdefault("status", {}).update(capacity=NODE_CAPACITY, allocatable=NODE_CAPACITY)
    code, answer = client.request("PUT", f"/api/v1/nodes/{name}/status", node)
    if code != 200:
        raise LabError(f"could not set node {name}'s capacity: HTTP {code}: {answer}")


def _drop_stale_lease(client):
    """Delete virt-controller's lease left by a stopped lab (its holder is gone; the new one would wait it out)."""
    code, answer = client.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{VIRT_API_NAMESPACE}/leases/virt-controller")
    if code not in (200, 404):
        raise LabError(f"could not delete virt-controller's stale lease: HTTP {code}: {answer}")


def _virt_controller_leading(client):
    code, lease = client.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{VIRT_API_NAMESPACE}/leases/virt-controller")
    return code == 200 and bool(lease.get("spec", {}).get("holderIdentity"))


def _etcd_healthy(port, paths):
    context = ssl.create_default_context(cafile=paths["etcd_ca"])
    context.load_cert_chain(paths["etcd_client_crt"], paths["etcd_client_key"])
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/health", timeout=2, context=context) as resp:
            return json.loads(resp.read()).get("health") == "true"
    except (OSError, ValueError):
        return False


def _stop(record, current, timeout, sig=signal.SIGTERM):
    """End one recorded process (``sig``, then SIGKILL after ``timeout``); True when it was running."""
    if not _is_ours(record, current):
        return False
    try:
        os.kill(record["pid"], sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while _is_ours(record, current) and time.monotonic() < deadline:
        reap(record["pid"])
        time.sleep(0.05)
    if _is_ours(record, current):
        try:
            os.kill(record["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        while _is_ours(record, current):
            reap(record["pid"])
            time.sleep(0.05)
    reap(record["pid"])
    return True


def down(directory, timeout=20):
    """Stop every process recorded in ``directory`` (newest first); return the PIDs signalled."""
    directory = os.path.abspath(directory)
    state = _load_state(directory)
    if not state:
        return []
    current = boot_id()
    signalled = [record["pid"] for record in reversed(state["processes"]) if _stop(record, current, timeout)]
    if state.get("node"):       # the real node's bridge and cgroups (tools/kubelab/node.py)
        from . import node  # pylint: disable=import-outside-toplevel
        node.cleanup(state)
    state["processes"] = []
    _save(directory, state)
    os.remove(os.path.join(directory, STATE))
    return signalled


# ---------------------------------------------------------------- faults: one component down, restarted
RESTARTABLE = ROLES + ("virt-api", "virt-controller", "kube-scheduler", "kwok", "virt-handler")


def _role_record(state, role):
    records = [p for p in state["processes"] if p["role"] == role]
    if not records:
        raise LabError(f"no {role} was started in {state['dir']}")
    return records[-1]


def _role_ready(directory, state, role):
    paths = pki.make_all(os.path.join(directory, "pki"))
    ports = state["ports"]
    if role == "etcd":
        return lambda: _etcd_healthy(ports["etcd"], paths)
    if role == "kube-apiserver":
        return Client(state["server"], paths["ca"], pki.ensure_token(os.path.join(directory, "pki", "admin.token"))).ready
    if role == "virt-api":
        client = Client(state["server"], paths["ca"], pki.ensure_token(os.path.join(directory, "pki", "admin.token")))
        return lambda: _virt_api_healthy(ports["virt-api"], paths["ca"]) and _subresources_served(client)
    return lambda: True


def _subresources_apiservices_available(client):
    """Whether every subresources.kubevirt.io APIService says Available=True (as the API server reports it)."""
    code, body = client.request("GET", WEBHOOK_KINDS["APIService"], timeout=3)
    if code != 200 or not isinstance(body, dict):
        return False
    services = [s for s in body.get("items", []) if s.get("spec", {}).get("group") == "subresources.kubevirt.io"]
    return bool(services) and all(any(c.get("type") == "Available" and c.get("status") == "True"
                                      for c in s.get("status", {}).get("conditions", [])) for s in services)


def _subresources_served(client):
    """What a test of virt-api needs once it is back: the subresources.kubevirt.io APIServices Available and a
    subresources request through the API server's aggregator answered (after a restart of virt-api the aggregator
    answers 503 until its availability controller has probed virt-api again)."""
    try:
        return _subresources_apiservices_available(client) and \
            client.request("GET", "/apis/subresources.kubevirt.io/v1/healthz", timeout=3)[0] == 200
    except (OSError, ssl.SSLError):
        return False


def subresources_available(directory):
    """Whether kube-apiserver's aggregator takes virt-api's subresources.kubevirt.io APIServices for Available now
    (False while it has not yet seen a restarted virt-api: its subresources answer 503 meanwhile)."""
    directory = os.path.abspath(directory)
    state = _load_state(directory)
    paths = pki.make_all(os.path.join(directory, "pki"))
    client = Client(state["server"], paths["ca"], pki.ensure_token(os.path.join(directory, "pki", "admin.token")))
    try:
        return _subresources_apiservices_available(client)
    except (OSError, ssl.SSLError):
        return False


def stop_role(directory, role, kill=False, timeout=20):
    """Stop the running ``role`` of the lab (SIGTERM, or SIGKILL with ``kill``): a fault for the tests; the rest keeps
    running. Returns the PID that was stopped (None when it was not running)."""
    if role not in RESTARTABLE:
        raise LabError(f"{role} cannot be stopped alone (one of {', '.join(RESTARTABLE)})")
    directory = os.path.abspath(directory)
    state = _load_state(directory)
    record = _role_record(state, role)
    return record["pid"] if _stop(record, boot_id(), timeout, signal.SIGKILL if kill else signal.SIGTERM) else None


def start_role(directory, role, until="ready"):
    """Start ``role`` again, with the command line, ports, certificates and data it had; wait until it is ready.

    Ready for virt-api: its own health check passes and kube-apiserver serves its subresources (the APIServices
    Available, a request through the aggregator answered). ``until="healthy"``: only virt-api's own health check - the
    moment right after a restart, when the aggregator may still answer 503 (tests of that window)."""
    if until not in ("ready", "healthy"):
        raise LabError(f"until must be ready or healthy, not {until!r}")
    if role not in RESTARTABLE:
        raise LabError(f"{role} cannot be started alone (one of {', '.join(RESTARTABLE)})")
    directory = os.path.abspath(directory)
    state = _load_state(directory)
    record = _role_record(state, role)
    if _is_ours(record, boot_id()):
        return record["pid"]
    state["processes"].remove(record)
    if role == "virt-controller":      # the only one: its old lease would keep the new one waiting up to 90 s
        paths = pki.make_all(os.path.join(directory, "pki"))
        _drop_stale_lease(Client(state["server"], paths["ca"], pki.ensure_token(os.path.join(directory, "pki", "admin.token"))))
    proc = _start(directory, role, record["argv"], state, cwd=REPO_ROOT if role == "virt-handler" else None)
    ready = _role_ready(directory, state, role)
    if until == "healthy" and role == "virt-api":
        ca_file = pki.make_all(os.path.join(directory, "pki"))["ca"]

        def ready():
            return _virt_api_healthy(state["ports"]["virt-api"], ca_file)
    _wait(role, proc, state["processes"][-1]["log"], ready)
    return proc.pid


def restart_role(directory, role, kill=False, down_seconds=0.0):
    """Stop ``role`` (SIGTERM, or SIGKILL with ``kill``), leave it down ``down_seconds``, start it again; returns
    (old PID, new PID)."""
    old = stop_role(directory, role, kill=kill)
    time.sleep(down_seconds)
    return old, start_role(directory, role)


def status(directory):
    """One dict per recorded process: role, pid, port and whether it is still the process that was started."""
    state = _load_state(os.path.abspath(directory))
    if not state:
        return []
    current = boot_id()
    return [{"role": p["role"], "pid": p["pid"], "port": state["ports"].get(p["role"]), "running": _is_ours(p, current),
             "log": p["log"]} for p in state["processes"]]
