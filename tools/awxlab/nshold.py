"""Hold an execution node's network namespace: run under ``unshare --net`` (which execs it in the new namespace), bring
its loopback up, write ``ready`` to the file named by argv[1] and wait for SIGTERM.  The namespace has nothing but
loopback; the node's receptor, its libvirt hosts and the EE containers it starts join it with ``nsenter --net``."""

import signal
import sys

from tools.virtlab import netns


def main(argv):
    netns.loopback_up()
    with open(argv[1], 'w', encoding='utf-8') as handle:
        handle.write('ready\n')
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == '__main__':
    main(sys.argv)
