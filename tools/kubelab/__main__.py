"""Command line of tools.kubelab (run from the repository root).

Usage::

    python -m tools.kubelab build [--only PART ...] [--node]
    python -m tools.kubelab up --dir DIR [--virt-api [--feature-gate GATE ...]] [--controllers emulated|real] [--nodes real]
    python -m tools.kubelab status --dir DIR
    python -m tools.kubelab down --dir DIR

``build`` builds what is missing in the cache (see tools/kubelab/build.py); ``--node`` adds the real node's parts
and images (tools/kubelab/images.py).
``up`` starts etcd, kube-apiserver and kube-controller-manager on loopback,
installs KubeVirt's and CDI's generated CRDs and writes ``DIR/kubeconfig``;
``--virt-api`` adds KubeVirt's own virt-api (webhooks and subresources);
``--controllers emulated`` adds tests/kubeapi's emulation of virt-controller, virt-handler,
the scheduler, the kubelet and CDI as a process (VMs then reach Running); ``--controllers real`` runs KubeVirt's
own virt-controller instead, with kube-scheduler, kwok's simulated nodes and pods and tests/kubeapi/node_agent.py for
what only virt-handler writes (implies ``--virt-api``); ``--nodes real`` adds one real node (containerd + kubelet:
tools/kubelab/node.py).  The
processes keep running until ``down``.  ``status`` exits 3 unless every
recorded process is running.
"""

import argparse
import json
import sys

from . import build


def _parser():
    parser = argparse.ArgumentParser(prog="python -m tools.kubelab", description="A real Kubernetes API server with KubeVirt's CRDs.")
    sub = parser.add_subparsers(dest="action", required=True)
    build_parser = sub.add_parser("build", help="build the missing binaries into the cache")
    build_parser.add_argument("--only", action="append", choices=[part.name for part in build.parts()])
    build_parser.add_argument("--node", action="store_true", help="also build the real node's parts (kubelet, virt-handler, "
                              "virt-launcher and its tools, pause, container-disk) and images")
    sub.add_parser("versions", help="print the pinned versions")
    for name in ("up", "down", "status"):
        action = sub.add_parser(name, help=f"{name} the lab in --dir")
        action.add_argument("--dir", required=True)
        if name == "up":
            action.add_argument("--virt-api", action="store_true", help="also run KubeVirt's virt-api (webhooks, subresources)")
            action.add_argument("--feature-gate", action="append", default=[], metavar="GATE",
                                help="a KubeVirt feature gate for virt-api (repeatable), e.g. DeclarativeHotplugVolumes")
            action.add_argument("--controllers", choices=["emulated", "real"],
                                help="emulated: run tests/kubeapi's KubeVirt controller emulation (virt-controller, virt-handler, "
                                     "scheduler, kubelet, CDI) against the server; real: KubeVirt's own virt-controller with kube-scheduler, "
                                     "kwok's simulated nodes and a small virt-handler emulation (implies --virt-api)")
            action.add_argument("--nodes", choices=["real"], help="real: one real node (containerd, kubelet) in the caller's "
                                "network namespace (make kube-node builds its parts and images)")
    return parser


def main(argv=None):
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.action == "build":
            with build.build_lock():
                results = build.build(only=args.only, node=args.node)
                if args.node:
                    from . import images  # pylint: disable=import-outside-toplevel
                    results.append({"images": images.build_images()})
            print(json.dumps(results, indent=2))
            return 0
        if args.action == "versions":
            print(json.dumps(build.versions(), indent=2))
            return 0
        from . import lab  # pylint: disable=import-outside-toplevel
        if args.action == "up":
            if args.feature_gate and not args.virt_api:
                raise build.KubelabError("--feature-gate configures virt-api: give --virt-api too")
            answer = lab.up(args.dir, virt_api=args.virt_api, feature_gates=args.feature_gate, controllers=args.controllers,
                            nodes=args.nodes)
            print(json.dumps(answer, indent=2))
            return 0
        if args.action == "down":
            stopped = lab.down(args.dir)
            print("stopped (signalled pids: " + (" ".join(str(pid) for pid in stopped) or "none") + ")")
            return 0
        status = lab.status(args.dir)
        print(json.dumps(status, indent=2))
        return 0 if status and all(item["running"] for item in status) else 3
    except build.KubelabError as exc:
        print(f"kubelab: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
