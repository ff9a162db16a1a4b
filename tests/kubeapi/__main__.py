"""Command line: ``python -m tests.kubeapi --port 0 --kubeconfig build/kube/kubeconfig``.

Starts the server, writes the kubeconfig (admin token over HTTPS), prints the
address and tokens, and runs until SIGTERM / Ctrl-C.
"""

# pylint: disable=consider-using-f-string

import argparse
import json
import signal
import sys
import threading

from . import KubeTestServer


def main(argv=None):
    """Entry point."""
    parser = argparse.ArgumentParser(prog='python -m tests.kubeapi', description=__doc__)
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--kubeconfig', default=None, help='where to write the kubeconfig (admin token)')
    parser.add_argument('--limited-kubeconfig', default=None, help='where to write a kubeconfig with the limited token')
    parser.add_argument('--step-delay', type=float, default=0.05, help='seconds per emulated phase step')
    parser.add_argument('--nodes', default='node01,node02,node03')
    parser.add_argument('--namespaces', default='default,demo')
    parser.add_argument('--no-tls', action='store_true', help='kubeconfig uses http:// (the port serves both anyway)')
    args = parser.parse_args(argv)
    srv = KubeTestServer(host=args.host, port=args.port, kubeconfig_path=args.kubeconfig, step_delay=args.step_delay,
                         nodes=[n for n in args.nodes.split(',') if n], namespaces=[n for n in args.namespaces.split(',') if n],
                         tls=not args.no_tls)
    srv.start()
    if args.limited_kubeconfig:
        srv.write_kubeconfig(args.limited_kubeconfig, token=srv.limited_token)
    print(json.dumps({'url': srv.url, 'http_url': srv.http_url, 'kubeconfig': srv.kubeconfig_path,
                      'tokens': {t: v['namespaces'] for t, v in srv.tokens.items()}}), flush=True)
    done = threading.Event()

    def on_signal(signum, frame):  # pylint: disable=unused-argument
        done.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(0.5):
        pass
    srv.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
