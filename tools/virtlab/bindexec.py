"""bindexec.py SOURCE TARGET -- COMMAND [ARG...]: bind-mount SOURCE over TARGET, then exec COMMAND.

Run by :func:`tools.virtlab.sshd.controller_argv` under ``unshare --mount --propagation
private`` (so the mount is seen by COMMAND and its children only).  Standard library
only: it is started by file path.  Commands run with argument lists only.
"""

import os
import shutil
import subprocess
import sys


def main(argv):
    """Bind argv[1] over argv[2], exec argv[4:] (argv[3] is "--")."""
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: bindexec.py SOURCE TARGET -- COMMAND [ARG...]\n")
        return 2
    source, target, command = argv[1], argv[2], argv[4:]
    subprocess.run(["mount", "--bind", source, target], check=True)
    program = command[0] if os.sep in command[0] else shutil.which(command[0])
    if not program:
        sys.stderr.write(f"bindexec: {command[0]} not found\n")
        return 127
    os.execv(program, command)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
