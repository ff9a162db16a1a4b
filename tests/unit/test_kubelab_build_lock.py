# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/kubelab/build.build_lock: two builds of one cache never run at once (make test's lanes both ask for the real
node's parts); the second waits for the first, says so, and then runs."""

import threading
import time

from tools.kubelab import build


def test_a_second_build_waits_for_the_first(tmp_path):
    lines = []
    held = threading.Event()
    release = threading.Event()

    def first():
        with build.build_lock(root=str(tmp_path), log=lines.append):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(10)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    with build.build_lock(root=str(tmp_path), log=lines.append):
        waited = time.monotonic() - started
        assert release.is_set()  # the first build had ended before the second one got the lock
    thread.join(10)
    assert waited >= 0.4, waited
    assert lines[0] == 'kubelab build: another build of %s is running; waiting for it' % tmp_path, lines
    assert lines[1].startswith('kubelab build: waited '), lines


def test_an_uncontended_build_does_not_wait_and_says_nothing(tmp_path):
    lines = []
    with build.build_lock(root=str(tmp_path / 'new'), log=lines.append):
        pass
    with build.build_lock(root=str(tmp_path / 'new'), log=lines.append):  # released: taken again at once
        pass
    assert not lines
    assert (tmp_path / 'new' / '.build.lock').exists()
