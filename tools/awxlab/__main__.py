"""Command line of tools.awxlab (run from the repository root).

Usage::

    python -m tools.awxlab build [--only PART ...]
    python -m tools.awxlab packages [--missing]
    python -m tools.awxlab up --dir DIR
    python -m tools.awxlab status --dir DIR
    python -m tools.awxlab down --dir DIR

``packages`` prints the host's Debian packages the build and the mesh need (with ``--missing``: those not
installed), one a line; ``build`` checks them, then builds the missing parts into ~/.cache/converge-virt/awx (tools/awxlab/build.py); ``up`` starts the mesh
(tools/awxlab/mesh.py) and keeps it running until ``down``.
"""

import argparse
import json
import sys

from . import build


def _parser():
    parser = argparse.ArgumentParser(prog='python -m tools.awxlab', description='AWX-style jobs through a receptor mesh.')
    sub = parser.add_subparsers(dest='action', required=True)
    build_parser = sub.add_parser('build', help='build the missing parts into the cache')
    build_parser.add_argument('--only', action='append', choices=[step[0] for step in build.STEPS])
    packages_parser = sub.add_parser('packages', help="the host's Debian packages the build and the mesh need")
    packages_parser.add_argument('--missing', action='store_true', help='only those not installed')
    for name in ('up', 'down', 'status'):
        action = sub.add_parser(name, help=f"{name} the mesh in --dir")
        action.add_argument('--dir', required=True)
    return parser


def main(argv=None):
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.action == 'packages':
            for package in build.missing_packages() if args.missing else build.APT_PACKAGES:
                print(package)
            return 0
        if args.action == 'build':
            for name, directory, built, seconds in build.build(only=args.only):
                print(json.dumps({'part': name, 'dir': directory, 'built': built, 'seconds': seconds}), flush=True)
            return 0
        from . import mesh  # pylint: disable=import-outside-toplevel
        if args.action == 'up':
            print(json.dumps(mesh.up(args.dir)))
            return 0
        if args.action == 'status':
            return 0 if mesh.status(args.dir) else 3
        mesh.down(args.dir)
        return 0
    except build.AwxlabError as exc:
        print(f"awxlab: {exc}", file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
