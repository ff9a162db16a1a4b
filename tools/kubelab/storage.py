"""Static storage for a lab with the real node (issue 37 item 3): PersistentVolumes without a CSI driver.

The lab's kube-controller-manager runs only the controllers the emulated tests need (lab.CONTROLLERS: no
persistentvolume-binder-controller, so a claim stays Pending). :func:`start_pv_binder` starts a second
kube-controller-manager of the same Kubernetes build in a running lab that runs only
``persistentvolume-binder-controller`` (Kubernetes' own binder: it matches a claim with an Available volume of its class,
size and access modes, writes both sides and the claim's phase Bound), recorded in the lab's state like every other
process, so ``lab.down`` stops it. Nothing else of the lab changes.

A volume is a ``hostPath`` PersistentVolume (the kubelet's own hostPath plugin mounts it into a pod: no attach, no CSI)
on a directory of the lab holding ``disk.img``: the file KubeVirt uses on a Filesystem volume (virt-handler bind-mounts
``<volume>/disk.img`` from the hotplug attachment pod into the launcher). :func:`make_disk_image` writes a sparse raw
file with a marker at its start, owned by KubeVirt's qemu user (107): a guest that sees the disk can read the marker back.
"""

import os

from . import build, lab

BINDER_ROLE = "kube-controller-manager-pv-binder"
BINDER_CONTROLLERS = ("persistentvolume-binder-controller",)
QEMU_UID = 107          # KubeVirt's qemu user and group (virt-launcher runs QEMU as them)
STORAGE_CLASS = "kubelab-static"


def _binder_argv(binary, directory, paths, port):
    """kube-controller-manager's command line of lab.py with only the binder's controller and a certificate directory of
    its own (the lab's manager writes its serving certificate into pki/generated)."""
    kubeconfig = os.path.join(directory, "pki", "kube-controller-manager.kubeconfig")
    argv = lab._controller_manager_argv(binary, paths, kubeconfig, port)  # pylint: disable=protected-access
    out = []
    for arg in argv:
        if arg.startswith("--controllers="):
            arg = "--controllers=" + ",".join(BINDER_CONTROLLERS)
        elif arg.startswith("--cert-dir="):
            arg = "--cert-dir=" + os.path.join(directory, "pki", "generated-pv-binder")
        out.append(arg)
    return out


def start_pv_binder(directory):
    """Start Kubernetes' PersistentVolume binder in the running lab of ``directory``; return its PID."""
    directory = os.path.abspath(directory)
    state = lab._load_state(directory)  # pylint: disable=protected-access
    if not state:
        raise lab.LabError(f"no lab is running in {directory}")
    if any(p["role"] == BINDER_ROLE for p in state["processes"]):
        raise lab.LabError(f"{BINDER_ROLE} already runs in {directory}")
    binary = build.locate(build.STAGE1)["kube-controller-manager"]
    paths = {"ca": state["ca_file"]}
    port = lab._free_port()  # pylint: disable=protected-access
    state["ports"][BINDER_ROLE] = port
    proc = lab._start(directory, BINDER_ROLE, _binder_argv(binary, directory, paths, port), state)  # pylint: disable=protected-access
    return proc.pid


def storage_class():
    """A StorageClass for static volumes: no provisioner, bound at once (the module waits for Bound)."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": STORAGE_CLASS},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate", "reclaimPolicy": "Retain"}


def host_path_volume(name, path, size, class_name=STORAGE_CLASS):
    """A hostPath PersistentVolume of ``size`` (a quantity) on the existing directory ``path``."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": class_name,
                     "hostPath": {"path": path, "type": "Directory"}}}


def make_disk_image(directory, size_bytes, marker):
    """``directory``/disk.img: a sparse raw disk of ``size_bytes`` starting with ``marker`` (bytes), the directory and
    file owned by the qemu user; return the file's path."""
    os.makedirs(directory, mode=0o755, exist_ok=True)
    os.chown(directory, QEMU_UID, QEMU_UID)
    path = os.path.join(directory, "disk.img")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o660)
    with os.fdopen(fd, "wb") as handle:
        handle.write(marker)
        handle.truncate(size_bytes)
    os.chown(path, QEMU_UID, QEMU_UID)
    return path
