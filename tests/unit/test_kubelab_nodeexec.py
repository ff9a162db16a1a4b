# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/kubelab/nodeexec.py (issue 34): a command inside a kubelab node, optionally in a root of its own.

KubeVirt's virt-handler finds the kubelet's pods directory at /pods (where its DaemonSet mounts it) and looks the user
qemu up in its own /etc/passwd; on the real node it runs with ``--root DIR --bind /var/lib/kubelet/pods:/pods --file
PASSWD:/etc/passwd``. Checked here on a throw-away PID + mount namespace standing in for the node (root only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tools.kubelab import nodeexec  # noqa: E402  pylint: disable=wrong-import-position

NODEEXEC = os.path.join(ROOT, 'tools', 'kubelab', 'nodeexec.py')


def test_usage_errors_are_refused_naming_the_option():
    for argv, word in ((['nodeexec.py', '1', 'ls'], "'--'"), (['nodeexec.py', '1', '--'], 'COMMAND'),
                       (['nodeexec.py', '1', '--bind', '/a:/pods', '--', 'ls'], '--root'),
                       (['nodeexec.py', '1', '--root', '/r', '--bind', '/a:/deep/pods', '--', 'ls'], 'top-level'),
                       (['nodeexec.py', '1', '--root', '/r', '--bind', 'a:/pods', '--', 'ls'], 'absolute'),
                       (['nodeexec.py', '1', '--root', '/r', '--file', '/a:etc/passwd', '--', 'ls'], 'absolute'),
                       (['nodeexec.py', '1', '--root', '/r', '--other', 'x', '--', 'ls'], 'unknown option')):
        with pytest.raises(ValueError, match=word):
            nodeexec._parse(argv)  # pylint: disable=protected-access
    argv = ['nodeexec.py', '7', '--root', '/r', '--bind', '/k/pods:/pods', '--file', '/p:/etc/passwd', '--', 'cat', '--', 'x']
    expected = (7, '/r', [('/k/pods', '/pods', False), ('/p', '/etc/passwd', True)], ['cat', '--', 'x'])
    assert nodeexec._parse(argv) == expected  # pylint: disable=protected-access


def _can_unshare():
    if os.geteuid() != 0 or not shutil.which('unshare'):
        return False
    return subprocess.run(['unshare', '--pid', '--fork', '--mount', '--propagation', 'private', 'true'],
                          capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason='needs root and unshare (mount and PID namespaces)')
def test_own_root_shows_the_binds_and_the_file_and_leaves_the_node_unchanged(tmp_path):
    pods = tmp_path / 'kubelet-pods'
    (pods / 'pod-uid').mkdir(parents=True)
    (pods / 'pod-uid' / 'marker').write_text('in the pods dir\n')
    passwd = tmp_path / 'passwd'
    passwd.write_text('root:x:0:0:root:/root:/bin/sh\nqemu:x:107:107:qemu:/:/usr/sbin/nologin\n')
    root = tmp_path / 'root'
    root.mkdir()
    unshare = ['unshare', '--pid', '--fork', '--kill-child', '--mount', '--propagation', 'private', '--mount-proc']
    node = subprocess.Popen(unshare + ['sleep', '60'])  # pylint: disable=consider-using-with
    try:
        deadline = time.monotonic() + 10
        child = None
        while child is None and time.monotonic() < deadline:
            try:
                with open('/proc/%d/task/%d/children' % (node.pid, node.pid), encoding='utf-8') as handle:
                    child = int(handle.read().split()[0])
            except (OSError, IndexError, ValueError):
                time.sleep(0.05)
        assert child, 'the stand-in node did not start'
        script = ('cat /pods/pod-uid/marker; grep ^qemu: /etc/passwd; test -d /proc/1 && echo proc; '
                  'test -e "%s" && echo tmp-visible; readlink /proc/1/exe' % pods)
        out = subprocess.run([sys.executable, NODEEXEC, str(child), '--root', str(root), '--bind', '%s:/pods' % pods,
                              '--file', '%s:/etc/passwd' % passwd, '--', 'sh', '-c', script],
                             capture_output=True, text=True, timeout=30, check=False)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == 'in the pods dir'                        # --bind: a new top-level directory
        assert lines[1].startswith('qemu:x:107:107:')               # --file: bound over the root's own file
        assert 'proc' in lines and 'tmp-visible' in lines           # the node's directories are all there
        assert lines[-1].endswith('sleep')                          # /proc is the node's: its PID 1 is the node's
        # nothing of it reached the node or the machine: no /pods, the machine's passwd unchanged, DIR still empty
        assert not os.path.exists('/pods')
        with open('/etc/passwd', encoding='utf-8') as handle:
            assert 'qemu:x:107:107:qemu:/:/usr/sbin/nologin' not in handle.read()
        assert not os.listdir(root)
        # a non-empty DIR is refused (it would hide what is there)
        (root / 'x').write_text('')
        out = subprocess.run([sys.executable, NODEEXEC, str(child), '--root', str(root), '--', 'true'],
                             capture_output=True, text=True, timeout=30, check=False)
        assert out.returncode == 126 and 'not empty' in out.stderr, (out.returncode, out.stderr)
    finally:
        node.kill()
        node.wait()
