"""Command line of tools.virtlab (run from the repository root).

Usage::

    python -m tools.virtlab hosts start --count 2 --state-dir build/lab [--ssh]
    python -m tools.virtlab hosts status --state-dir build/lab
    python -m tools.virtlab hosts stop --state-dir build/lab
    python -m tools.virtlab guest build --cache-dir build/guest
    python -m tools.virtlab guest build --login [--cache-dir ~/.cache/converge-virt/guest]
    python -m tools.virtlab guest build --cloud [--cache-dir ~/.cache/converge-virt/cloudimage] [--force]
    python -m tools.virtlab kvm
    python -m tools.virtlab netns [--new] -- COMMAND [ARG...]

``hosts start`` prints the hosts as JSON (the same data as ``<state-dir>/hosts.json``);
the hosts keep running after the command exits, until ``hosts stop``.
``hosts status`` exits with status 3 unless every recorded host is running.
"""

import argparse
import json
import sys

from . import cloudimage, guest, hosts, loginguest, netns

DEFAULT_STATE_DIR = "build/lab"


def _parser():
    parser = argparse.ArgumentParser(prog="python -m tools.virtlab", description="Private libvirt hosts and a tiny test guest.")
    sub = parser.add_subparsers(dest="area", required=True)

    hosts_parser = sub.add_parser("hosts", help="start, stop or show private libvirt hosts")
    hosts_sub = hosts_parser.add_subparsers(dest="action", required=True)
    start = hosts_sub.add_parser("start", help="start private hosts (stops the ones recorded in the state dir first)")
    start.add_argument("--count", type=int, default=2)
    start.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    start.add_argument("--first-address", default=hosts.DEFAULT_FIRST_ADDRESS)
    start.add_argument("--name-prefix", default=hosts.DEFAULT_NAME_PREFIX)
    start.add_argument("--first-tcp-port", type=int, default=hosts.DEFAULT_FIRST_TCP_PORT)
    start.add_argument("--first-migration-port", type=int, default=hosts.DEFAULT_FIRST_MIGRATION_PORT)
    start.add_argument("--ssh", action="store_true", help="every host also runs its own sshd; writes <state-dir>/inventory.json")
    for name in ("stop", "status"):
        action = hosts_sub.add_parser(name, help=f"{name} the hosts recorded in the state dir")
        action.add_argument("--state-dir", default=DEFAULT_STATE_DIR)

    guest_parser = sub.add_parser("guest", help="build the test guest (kernel + initramfs)")
    guest_sub = guest_parser.add_subparsers(dest="action", required=True)
    build = guest_sub.add_parser("build", help="build the guest from Debian packages (skipped if already built)")
    build.add_argument("--cache-dir", help=f"default: {guest.DEFAULT_CACHE_DIR}; with --login: $CONVERGE_VIRT_GUEST_CACHE or ~/.cache/converge-virt/guest")
    build.add_argument("--force", action="store_true", help="rebuild even if the outputs exist")
    kind = build.add_mutually_exclusive_group()
    kind.add_argument("--login", action="store_true", help="the guest you can log into (dropbear, Python, guest agent, NoCloud reader)")
    kind.add_argument("--cloud", action="store_true", help="the bootable Debian cloud disk (qcow2: GRUB, systemd, cloud-init, sshd, "
                      "qemu-guest-agent); cache: $CONVERGE_VIRT_CLOUDIMAGE_CACHE or ~/.cache/converge-virt/cloudimage")

    sub.add_parser("kvm", help="print the domain type usable for a diskless guest (kvm or qemu)")
    netns_parser = sub.add_parser("netns", help="run a command in a private network namespace (where lab hosts must run)")
    netns_parser.add_argument("--new", action="store_true", help="a namespace of its own even when already inside one")
    netns_parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    return parser


def main(argv=None):
    """Entry point; returns the exit status (2 with one line on stderr when the lab refuses or fails)."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (hosts.LabError, cloudimage.CloudImageError) as err:
        print(f"virtlab: {err}", file=sys.stderr)
        return 2


def _run(args):
    if args.area == "hosts":
        if args.action == "start":
            started = hosts.start_hosts(args.count, args.state_dir, first_address=args.first_address, name_prefix=args.name_prefix,
                                        first_tcp_port=args.first_tcp_port, first_migration_port=args.first_migration_port, ssh=args.ssh)
            print(json.dumps([host.to_dict() for host in started], indent=2))
        elif args.action == "stop":
            pids = hosts.stop_hosts(args.state_dir)
            print("stopped (signalled pids: " + (" ".join(str(pid) for pid in pids) or "none") + ")")
        else:
            status = hosts.hosts_status(args.state_dir)
            print(json.dumps(status, indent=2))
            return 0 if status and all(item["running"] for item in status) else 3
    elif args.area == "netns":
        netns.main((["--new"] if args.new else []) + args.command)
    elif args.area == "guest" and args.cloud:
        manifest = cloudimage.build_cloud_image(args.cache_dir, force=args.force)
        manifest.pop("installed")
        print(json.dumps(manifest, indent=2))
    elif args.area == "guest":
        build_image = loginguest.build_login_guest if args.login else guest.build_guest
        image = build_image(args.cache_dir or (None if args.login else guest.DEFAULT_CACHE_DIR), force=args.force)
        print(json.dumps({"kernel": image.kernel, "initrd": image.initrd, "cmdline": image.cmdline, "ready_marker": image.ready_marker}, indent=2))
    else:
        print(hosts.diskless_domain_type())
    return 0


if __name__ == "__main__":
    sys.exit(main())
