# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start or stop this molecule scenario's Kubernetes API.

By default the REAL stack of tools/kubelab: etcd + kube-apiserver + kube-controller-manager + KubeVirt's own virt-api
with KubeVirt's and CDI's CRDs, and the KubeVirt controller emulation (tests/kubeapi/kubevirt.py) running as KubeVirt's
controller account in a process of its own (``python -m tools.kubelab up --virt-api --controllers emulated``), with the
namespace the scenario uses. With ``CONVERGE_VIRT_KUBE_API=emulated`` the API emulator of tests/kubeapi instead (the
inner loop).

``python kubeapi_ctl.py start STATE_DIR REPO_ROOT`` starts it in the background, writes STATE_DIR/kubeconfig (admin)
and prints a JSON line (url, kubeconfig, mode). ``python kubeapi_ctl.py stop STATE_DIR`` ends it (kubelab down, or
the emulator's PID: SIGTERM, then SIGKILL after 10 s). No shell is involved.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time


NAMESPACES = ('demo',)
FEATURE_GATES = ('DeclarativeHotplugVolumes',)


def _lab(repo_root):
    if repo_root not in sys.path:
        sys.path.insert(0, repo_root)
    from tools.kubelab import lab  # pylint: disable=import-outside-toplevel
    return lab


def start_real(state_dir, repo_root):
    """Bring the real stack up in STATE_DIR/lab; return its JSON line."""
    lab = _lab(repo_root)
    lab_dir = os.path.join(state_dir, 'lab')
    info = lab.up(lab_dir, virt_api=True, feature_gates=list(FEATURE_GATES), controllers='emulated')
    with open(os.path.join(lab_dir, 'pki', 'admin.token'), encoding='utf-8') as handle:
        client = lab.Client(info['server'], info['ca_file'], handle.read().strip())
    for ns in NAMESPACES:
        client.apply('/api/v1/namespaces', {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': ns}})
    kubeconfig = os.path.join(state_dir, 'kubeconfig')
    shutil.copyfile(info['kubeconfig'], kubeconfig)
    with open(os.path.join(state_dir, 'mode'), 'w', encoding='utf-8') as handle:
        handle.write('real')
    return {'url': info['server'], 'kubeconfig': kubeconfig, 'mode': 'real'}


def start(state_dir, repo_root):
    """Start the API in the background; return its JSON line (url, kubeconfig, mode)."""
    os.makedirs(state_dir, exist_ok=True)
    if os.environ.get('CONVERGE_VIRT_KUBE_API', 'real') != 'emulated':
        return start_real(state_dir, repo_root)
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


def stop(state_dir, repo_root=None):
    """End what ``start`` started; return what was done."""
    mode_file = os.path.join(state_dir, 'mode')
    if os.path.exists(mode_file):
        lab = _lab(repo_root or os.getcwd())
        stopped = lab.down(os.path.join(state_dir, 'lab'))
        os.unlink(mode_file)
        return {'stopped': stopped}
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
    elif len(argv) in (2, 3) and argv[0] == 'stop':
        print(json.dumps(stop(*argv[1:])))
    else:
        raise SystemExit('usage: kubeapi_ctl.py start STATE_DIR REPO_ROOT | stop STATE_DIR [REPO_ROOT]')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
