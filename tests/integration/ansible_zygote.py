"""The ``ansible`` and ``ansible-playbook`` CLIs, forked from a process that has already imported them.

Every ``run_module`` call of the tests is one ad-hoc ``ansible`` run; about 0.6 s of its controller's CPU is Python
importing ansible-core before the CLI reads its first argument (cProfile, 2026-11-29), and the tests make well over a
thousand such calls on 2 cores. A zygote process imports the CLIs once; each call connects to its Unix socket and the
zygote forks a child that runs the CLI's own ``main`` with the call's arguments, environment and working directory,
stdout and stderr in files, exactly as the console script would (a fresh process per call: nothing of one run reaches
the next). What the child cannot change is what ansible-core read while it was imported (its configuration:
``ANSIBLE_*`` variables, ``ansible.cfg`` of the working directory, the home directory, the locale), so a zygote serves
only calls whose values of those equal its own; :func:`run` answers ``None`` for the others and the caller starts the
console script as before. A zygote per pytest process, started on the first call, gone with that process.

Run as ``python tests/integration/ansible_zygote.py SOCKET``.
"""

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading

# what ansible-core reads once, at import: a call whose values differ runs the console script instead
_CONFIG_KEYS = ('HOME', 'LANG', 'LC_ALL', 'LC_CTYPE', 'PYTHONPATH')


def config_key(env, cwd):
    """What a zygote must share with a call: the environment ansible-core reads at import, and the working directory."""
    return (cwd,) + tuple(sorted((k, v) for k, v in env.items() if k.startswith('ANSIBLE_') or k in _CONFIG_KEYS))


def _child(conn, clis):
    """In the forked child: run one CLI call as its console script would, answer {rc, stdout, stderr} and exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setsid()
    request = json.loads(_recv_all_request(conn))
    conn.sendall(json.dumps({'pid': os.getpid()}).encode() + b'\n')
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    os.environ.clear()
    os.environ.update(request['env'])
    tempfile.tempdir = None     # read TMPDIR again: the call's, not the zygote's
    os.chdir(request['cwd'])
    sys.argv = list(request['argv'])
    code = 250
    try:
        clis[request['cli']](list(request['argv']))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # pylint: disable=broad-except
        import traceback  # pylint: disable=import-outside-toplevel
        traceback.print_exc()
        code = 250
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    answer = {'rc': code}
    for name, handle in (('stdout', out), ('stderr', err)):
        handle.seek(0)
        answer[name] = handle.read().decode('utf-8', 'replace')
    try:
        conn.sendall(json.dumps(answer).encode())
        conn.shutdown(socket.SHUT_WR)
    finally:
        os._exit(0)  # pylint: disable=protected-access  # no atexit: the zygote's temporary directory is shared


def _config_env(env):
    """The zygote's own environment: only what ansible-core reads at import (each call brings its whole environment,
    which may hold secrets: they never stay in the long-lived zygote's environment)."""
    return dict((k, v) for k, v in env.items() if k.startswith('ANSIBLE_') or k in _CONFIG_KEYS or k == 'PATH')


def _recv_all_request(conn):
    """The request is one line of JSON."""
    data = b''
    while not data.endswith(b'\n'):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def serve(path):
    """The zygote: import the CLIs, then fork a child per connection on the Unix socket ``path``."""
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]     # as the console script: this folder's files are not importable by the CLI
    parent = os.getppid()   # the zygote ends within a second of its pytest process (polled: no thread-bound signal)
    # terminated by its owner: exit through atexit, which removes ansible-core's local temporary directory
    signal.signal(signal.SIGTERM, lambda *_args: sys.exit(0))
    from ansible.cli import adhoc, playbook  # pylint: disable=import-outside-toplevel
    # what every call loads anyway; imported once here (the executor, the strategy, the worker, templating)
    import ansible.executor.task_queue_manager  # pylint: disable=import-outside-toplevel,unused-import
    import ansible.executor.process.worker  # pylint: disable=import-outside-toplevel,unused-import
    import ansible.plugins.strategy.linear  # pylint: disable=import-outside-toplevel,unused-import
    import ansible.executor.module_common  # pylint: disable=import-outside-toplevel,unused-import
    clis = {'ansible': adhoc.main, 'ansible-playbook': playbook.main}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    server.settimeout(1.0)
    sys.stdout.write('ready\n')
    sys.stdout.flush()
    while os.getppid() == parent:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        try:
            conn, _addr = server.accept()
        except socket.timeout:
            continue
        conn.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            try:
                _child(conn, clis)
            finally:
                os._exit(250)  # pylint: disable=protected-access
        conn.close()


class Zygote:
    """One zygote process (started by :func:`run` for a configuration key)."""

    def __init__(self, env, cwd):
        self.directory = tempfile.mkdtemp(prefix='converge-virt-zygote-')
        self.path = os.path.join(self.directory, 'socket')
        self.log = open(os.path.join(self.directory, 'zygote.log'), 'w+b')  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, os.path.abspath(__file__), self.path], env=_config_env(env), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=self.log)
        self.ready = self.proc.stdout.readline().strip() == b'ready'
        self.owner = os.getpid()

    def call(self, cli, argv, env, cwd, timeout):  # pylint: disable=too-many-arguments
        """(rc, stdout, stderr) of one CLI run in a forked child; subprocess.TimeoutExpired after ``timeout`` s."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        pid = None
        try:
            conn.connect(self.path)
            conn.sendall(json.dumps({'cli': cli, 'argv': argv, 'env': env, 'cwd': cwd}).encode() + b'\n')
            reader = conn.makefile('rb')
            pid = json.loads(reader.readline())['pid']
            answer = json.loads(reader.read())
        except socket.timeout:
            if pid:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            raise subprocess.TimeoutExpired(argv, timeout)  # pylint: disable=raise-missing-from
        finally:
            conn.close()
        return answer['rc'], answer['stdout'], answer['stderr']

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        for name in ('socket', 'zygote.log'):
            try:
                os.unlink(os.path.join(self.directory, name))
            except OSError:
                pass
        try:
            os.rmdir(self.directory)
        except OSError:
            pass


_ZYGOTES = {}
_LOCK = threading.Lock()
_MAX_ZYGOTES = 3


def _stop_all():
    for zygote in list(_ZYGOTES.values()):
        if zygote.owner == os.getpid():
            zygote.stop()
    _ZYGOTES.clear()


atexit.register(_stop_all)


def run(cli, argv, env, cwd=None, timeout=600):
    """(rc, stdout, stderr) of ``argv`` (the console script ``cli`` and its arguments) run by a zygote whose
    configuration equals ``env``'s and ``cwd``'s; None when no zygote serves it (CONVERGE_VIRT_ZYGOTE=0, a zygote
    that did not start, more configurations than zygotes): the caller runs the console script."""
    if os.environ.get('CONVERGE_VIRT_ZYGOTE', '1') == '0':
        return None
    cwd = cwd or os.getcwd()
    key = config_key(env, cwd)
    with _LOCK:
        zygote = _ZYGOTES.get(key)
        if zygote is not None and (zygote.owner != os.getpid() or zygote.proc.poll() is not None):
            _ZYGOTES.pop(key)
            zygote = None
        if zygote is None:
            if len(_ZYGOTES) >= _MAX_ZYGOTES:
                return None
            zygote = _ZYGOTES[key] = Zygote(env, cwd)
    if not zygote.ready:
        return None
    return zygote.call(cli, argv, env, cwd, timeout)


if __name__ == '__main__':
    serve(sys.argv[1])
