"""One mesh link between two network namespaces, with no interface between them: a unix socket in the lab's directory.

``relay.py tcp-to-unix HOST PORT PATH``  (the control node's side): listens on loopback HOST:PORT, each connection is
joined to the unix socket PATH.
``relay.py unix-to-tcp PATH HOST PORT``  (the execution node's side, in its namespace): listens on the unix socket
PATH, each connection is joined to HOST:PORT (the node's receptor listener on its own loopback).

Stopping either side cuts the link (every connection through it is closed); starting it again restores it.
Standard library only; no data is read or logged, bytes are copied.
"""

import os
import signal
import socket
import sys
import threading


def _pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(listener, connect):
    while True:
        client = listener.accept()[0]
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        for pair in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=pair, daemon=True).start()


def main(argv):
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # pylint: disable=protected-access
    if argv[1] == 'tcp-to-unix':
        host, port, path = argv[2], int(argv[3]), argv[4]
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))

        def connect():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            return sock
    elif argv[1] == 'unix-to-tcp':
        path, host, port = argv[2], argv[3], int(argv[4])
        if os.path.exists(path):
            os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        os.chmod(path, 0o600)

        def connect():
            return socket.create_connection((host, port))
    else:
        sys.stderr.write('usage: relay.py tcp-to-unix HOST PORT PATH | unix-to-tcp PATH HOST PORT\n')
        return 2
    listener.listen(16)
    _serve(listener, connect)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
