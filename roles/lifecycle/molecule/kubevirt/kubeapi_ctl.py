# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start or stop the Kubernetes API test server (tests/kubeapi) for this molecule scenario.

``python kubeapi_ctl.py start STATE_DIR REPO_ROOT`` starts ``python -m tests.kubeapi --port 0`` in its own
session, waits until it has written its kubeconfig and printed its address, records its PID in
STATE_DIR/kubeapi.pid and prints the server's JSON line. ``python kubeapi_ctl.py stop STATE_DIR``
ends that PID (SIGTERM, then SIGKILL after 10 s). No shell is involved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def start(state_dir, repo_root):
    """Start the server in the background; return its JSON line (url, kubeconfig)."""
    os.makedirs(state_dir, exist_ok=True)
    kubeconfig = os.path.join(state_dir, 'kubeconfig')
    log_path = os.path.join(state_dir, 'kubeapi.log')
    with open(log_path, 'wb') as log:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, '-m', 'tests.kubeapi', '--port', '0', '--kubeconfig', kubeconfig, '--step-delay', '0.02'],
            cwd=repo_root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(state_dir, 'kubeapi.pid'), 'w', encoding='utf-8') as handle:
        handle.write(str(proc.pid))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with open(log_path, 'rb') as handle:
            first = handle.readline()
        if first.endswith(b'\n') and os.path.exists(kubeconfig):
            return json.loads(first)
        time.sleep(0.1)
    with open(log_path, 'rb') as handle:
        output = handle.read().decode('utf-8', 'replace')
    raise SystemExit('the Kubernetes API test server did not start (exit %s): %s' % (proc.poll(), output[-2000:]))


def _running(pid):
    """Whether pid is alive (a zombie left to a PID 1 that does not reap counts as ended)."""
    try:
        with open('/proc/%d/stat' % pid, encoding='utf-8') as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def stop(state_dir):
    """End the recorded server process; return what was done."""
    pid_file = os.path.join(state_dir, 'kubeapi.pid')
    if not os.path.exists(pid_file):
        return {'stopped': None}
    with open(pid_file, encoding='utf-8') as handle:
        pid = int(handle.read().strip())
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _running(pid):
            time.sleep(0.1)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.unlink(pid_file)
    return {'stopped': pid}


def main(argv):
    """Entry point."""
    if len(argv) == 3 and argv[0] == 'start':
        print(json.dumps(start(argv[1], argv[2])))
    elif len(argv) == 2 and argv[0] == 'stop':
        print(json.dumps(stop(argv[1])))
    else:
        raise SystemExit('usage: kubeapi_ctl.py start STATE_DIR REPO_ROOT | stop STATE_DIR')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
