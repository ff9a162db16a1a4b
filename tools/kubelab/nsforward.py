"""nsforward.py NETNS LISTEN_PORT TARGET_PORT: make the lab's API server reachable inside a node's network namespace.

Binds 127.0.0.1:LISTEN_PORT inside the network namespace NETNS (a path such as /proc/PID/ns/net) and forwards every
connection to 127.0.0.1:TARGET_PORT of the namespace this process was started in (the lab's, where kube-apiserver
binds 127.0.0.1 only). A socket stays in the namespace it was made in, so one process serves both sides: the
listening socket is made after setns(NETNS), the main thread returns to its own namespace before any connection is
made or any thread started. Bytes are copied as they are (TLS end to end: the node's kubelet and virt-handler see
the API server's own certificate for https://127.0.0.1:PORT). Used by tools/kubelab/multinode.py (two real nodes,
issue 37); standard library only, started by file path; runs until SIGTERM.
"""

import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def _setns(fd):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listen_in(netns, port):
    """A listening socket on 127.0.0.1:``port`` inside the network namespace ``netns``; this thread returns to its own."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen(128)
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)
    return server


def _pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
        try:
            sock.shutdown(how)
        except OSError:
            pass


def _serve(conn, target_port):
    try:
        upstream = socket.create_connection(("127.0.0.1", target_port), timeout=10)
    except OSError:
        conn.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
    back.start()
    _pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def main(argv):
    """Forward until killed."""
    if len(argv) != 4:
        sys.stderr.write("usage: nsforward.py NETNS LISTEN_PORT TARGET_PORT\n")
        return 2
    server = listen_in(argv[1], int(argv[2]))
    target_port = int(argv[3])
    sys.stdout.write(f"nsforward: 127.0.0.1:{argv[2]} in {argv[1]} -> 127.0.0.1:{target_port}\n")
    sys.stdout.flush()
    while True:
        conn, _addr = server.accept()
        threading.Thread(target=_serve, args=(conn, target_port), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
