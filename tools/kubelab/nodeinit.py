"""PID 1 of a kubelab real node (run by tools/kubelab/node.py; standard library only, started by file path).

``node.start_node`` runs::

    unshare --pid --fork --kill-child --mount --uts --propagation private --mount-proc <python> nodeinit.py DIR/node/nodeinit.json

so this script is PID 1 of a new PID namespace with a private mount and UTS namespace (the caller's network
namespace is kept). KubeVirt's virt-handler takes PID 1's root and mount namespace for the node's own
(``/proc/1/root``, ``/proc/1/ns/mnt``): here they are the node's. Inside, this script

1. bind-mounts the node's directories (under DIR/node) over the paths containerd, kubelet, the CNI plugins and
   KubeVirt use (/var/lib/kubelet, /run/containerd, /var/run/kubevirt, ...), so parallel labs never share them and
   nothing is written to the machine's own (mount propagation is private: nobody outside sees these mounts);
2. bind-mounts files with kubelet's expected values over the six kernel tunables kubelet checks
   (protectKernelDefaults: kubelet then only reads them; without it, kubelet would set vm.overcommit_memory,
   kernel.panic, kernel.panic_on_oops ... for the whole machine);
3. lays read-only overlays over directories where KubeVirt expects its binaries (/usr/bin/virt-chroot);
4. sets the node's host name, writes DIR/node/ready, and reaps orphans until SIGTERM (when PID 1 ends, the kernel
   kills every process of the node: containerd, its shims, the containers, kubelet, virt-handler).

The node's processes are started inside by tools/kubelab/nodeexec.py.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time


def main(argv):
    """Set the node up from the JSON file argv[1], then reap children until SIGTERM."""
    with open(argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    for source, target in config["binds"]:
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        subprocess.run(["mount", "--bind", source, target], check=True)
    for extra, target in config.get("overlays", []):
        # read-only overlay: the node sees ``extra``'s files in ``target`` too (e.g. /usr/bin/virt-chroot, a path
        # virt-handler has built in), the machine's directory is untouched
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={extra}:{target}", target], check=True)
    # kubelet's HostToContainer and Bidirectional volume mounts (KubeVirt's container-disks) need shared mounts: the
    # node's mounts become shared among the node and its containers; they stay private towards the machine (the
    # namespace was made with --propagation private, so no mount of the machine's is a peer of these)
    subprocess.run(["mount", "--make-rshared", "/"], check=True)
    socket.sethostname(config["hostname"])

    def stop(_signum, _frame):
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with open(config["ready"], "w", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()}\n")
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
