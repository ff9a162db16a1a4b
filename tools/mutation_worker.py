"""A warm test runner for ``make mutation`` (tools/mutation.py): cosmic-ray's test command for each mutant.

Starting Python, pytest and hypothesis for every mutant costs more than most mutants' tests. ``serve`` imports them
once (never the collection's own modules) and forks a child per request: the child imports the mutated code fresh
from disk and runs pytest. ``run`` is the test command cosmic-ray calls: it asks the server, waits, and exits with
pytest's code; when cosmic-ray times it out and kills it, the server kills the child.

Each request runs in two stages: the test files of the mutated module first (-x), and only when they all pass, the
rest of the ``_phase`` tests (-x); a mutant is judged by every test either way.
"""

import json
import os
import select
import signal
import socket
import sys

PRELOAD = ('pytest', '_pytest.assertion.rewrite', 'hypothesis', 'hypothesis.strategies', 'libvirt', 'yaml')


def _preload():
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass


def _child(request):
    import pytest  # pylint: disable=import-outside-toplevel
    os.chdir(request['cwd'])
    sys.path[:0] = [p for p in request['sys_path'] if p not in sys.path]
    os.environ.update(request['env'])
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    code = pytest.main(request['args'])
    os._exit(int(code))


def _run_stage(conn, request):
    """Fork a child for one pytest run; return its exit code (None when the client went away and it was killed)."""
    pid = os.fork()
    if pid == 0:
        conn.close()
        _child(request)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        readable, _w, _x = select.select([conn], [], [], 0.05)
        if readable and not conn.recv(1, socket.MSG_PEEK):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None


def serve(path):
    """Answer requests on the UNIX socket ``path`` until a request says stop."""
    _preload()
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(1)
    while True:
        conn, _addr = server.accept()
        with conn:
            request = json.loads(conn.makefile('r').readline())
            if request.get('stop'):
                break
            code = 0
            for args in request['stages']:
                code = _run_stage(conn, dict(request, args=args))
                if code != 0:
                    break
            if code is not None:
                conn.sendall(b'%d\n' % code)
    server.close()
    os.unlink(path)


def run(path, cwd, stages):
    """Ask the server at ``path`` to run ``stages`` (lists of pytest arguments) in ``cwd``; return pytest's code."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    env = dict((k, v) for k, v in os.environ.items() if k in ('PYTHONPATH', 'CONVERGE_HYPOTHESIS_PROFILE', 'HYPOTHESIS_STORAGE_DIRECTORY'))
    request = {'cwd': cwd, 'stages': stages, 'env': env, 'sys_path': os.environ.get('PYTHONPATH', '').split(os.pathsep)}
    client.sendall(json.dumps(request).encode('utf-8') + b'\n')
    answer = client.makefile('r').readline()
    return int(answer) if answer.strip() else 3


def stop(path):
    """Tell the server at ``path`` to end."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    client.sendall(b'{"stop": true}\n')
    client.close()


def main(argv):
    if argv[:1] == ['serve']:
        serve(argv[1])
        return 0
    if argv[:1] == ['run']:
        # run SOCKET CWD FIRST_FILES... -- REST_FILES...
        path, cwd, files = argv[1], argv[2], argv[3:]
        split = files.index('--') if '--' in files else len(files)
        common = ['-x', '-q', '-p', 'no:cacheprovider']
        stages = [common + files[:split]]
        if files[split + 1:]:
            stages.append(common + files[split + 1:])
        return run(path, cwd, stages)
    print('usage: mutation_worker.py serve SOCKET | run SOCKET CWD FIRST... -- REST...', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
