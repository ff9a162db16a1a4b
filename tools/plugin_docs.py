"""Is ``ansible-doc --json`` of every plugin the same at two commits? (issue 35: "identical except intended fixes").

Not part of ``make test``: a check to run when plugin documentation is moved (doc fragments, split modules).

    python -m tools.plugin_docs compare BASE_REF [HEAD_REF|.]   # worktrees in a temporary folder, dump both, diff
    python -m tools.plugin_docs dump ROOT OUT.json              # one collection checkout -> one JSON file
    python -m tools.plugin_docs diff A.json B.json              # exit 1 when they differ

A dump is every plugin ``ansible-doc -t TYPE --list --json converge.virt`` names (modules, inventory, filter, lookup,
callback, test), each as ``ansible-doc -t TYPE --json NAME`` prints it, with the checkout's own path in ``filename``
replaced by ``<root>``. Each checkout is made visible to Ansible through its own ``ansible_collections/converge/virt``
symlink (its own layout), so the two dumps never read each other's files. ``.`` as HEAD_REF is the working tree as it is
(uncommitted edits included); any other ref is checked out with ``git worktree add --detach``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTION = "converge.virt"
TYPES = ("module", "inventory", "filter", "lookup", "callback", "test")


def _ansible_doc():
    here = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    return here if os.path.exists(here) else "ansible-doc"


def _run_doc(args, collections):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_COLLECTIONS_PATHS", None)
    proc = subprocess.run([_ansible_doc()] + args, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit("ansible-doc %s failed (%d): %s" % (" ".join(args), proc.returncode, proc.stderr.strip()))
    return json.loads(proc.stdout or "{}")


def _scrub(node, root):
    if isinstance(node, dict):
        return {key: _scrub(value, root) for key, value in node.items()}
    if isinstance(node, list):
        return [_scrub(item, root) for item in node]
    if isinstance(node, str) and root in node:
        return node.replace(root, "<root>")
    return node


def dump(root):
    """{"TYPE NAME": ansible-doc's JSON for it} of every plugin of the checkout at ``root``."""
    root = os.path.abspath(root)
    out = {}
    with tempfile.TemporaryDirectory(prefix="plugin-docs-") as tmp:
        link = os.path.join(tmp, "ansible_collections", "converge", "virt")
        os.makedirs(os.path.dirname(link))
        os.symlink(root, link)
        for kind in TYPES:
            names = sorted(_run_doc(["-t", kind, "--list", "--json", COLLECTION], tmp))
            if not names:
                continue
            docs = _run_doc(["-t", kind, "--json"] + names, tmp)
            missing = set(names) - set(docs)
            if missing:
                raise SystemExit("ansible-doc -t %s gave no documentation for %s" % (kind, ", ".join(sorted(missing))))
            for name in names:
                out["%s %s" % (kind, name)] = _scrub(docs[name], link)
    return out


def differences(a, b, path=""):
    """Where two JSON values differ: a list of "path: old -> new" lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            sub = "%s/%s" % (path, key)
            if key not in a:
                out.append("%s: added %s" % (sub, json.dumps(b[key], sort_keys=True)[:300]))
            elif key not in b:
                out.append("%s: removed %s" % (sub, json.dumps(a[key], sort_keys=True)[:300]))
            else:
                out += differences(a[key], b[key], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for index, (left, right) in enumerate(zip(a, b)):
            out += differences(left, right, "%s[%d]" % (path, index))
        return out
    if a == b and type(a) is type(b):
        return []
    return ["%s: %s -> %s" % (path or "/", json.dumps(a, sort_keys=True)[:300], json.dumps(b, sort_keys=True)[:300])]


def _worktree(ref, parent):
    where = os.path.join(parent, "tree-" + "".join(c if c.isalnum() else "_" for c in ref))
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach", where, ref], check=True)
    return where


def compare(base, head):
    """Dump ``base`` and ``head`` (``.`` = the working tree) and return (number of plugins, difference lines)."""
    with tempfile.TemporaryDirectory(prefix="plugin-docs-trees-") as tmp:
        trees = []
        try:
            for ref in (base, head):
                trees.append(ROOT if ref == "." else _worktree(ref, tmp))
            a, b = dump(trees[0]), dump(trees[1])
        finally:
            for tree in trees:
                if tree != ROOT:
                    subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=False)
    return len(set(a) | set(b)), differences(a, b)


def main(argv=None):
    """CLI (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tools.plugin_docs")
    sub = parser.add_subparsers(dest="command", required=True)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("base")
    cmp_.add_argument("head", nargs="?", default=".")
    dmp = sub.add_parser("dump")
    dmp.add_argument("root")
    dmp.add_argument("out")
    dif = sub.add_parser("diff")
    dif.add_argument("a")
    dif.add_argument("b")
    args = parser.parse_args(argv)
    if args.command == "dump":
        docs = dump(args.root)
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(docs, handle, indent=1, sort_keys=True)
        print("%d plugins -> %s" % (len(docs), args.out))
        return 0
    if args.command == "diff":
        with open(args.a, encoding="utf-8") as left, open(args.b, encoding="utf-8") as right:
            a, b = json.load(left), json.load(right)
        count, lines = len(set(a) | set(b)), differences(a, b)
    else:
        count, lines = compare(args.base, args.head)
    for line in lines:
        print(line)
    print("%d plugins, %d differences" % (count, len(lines)))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
