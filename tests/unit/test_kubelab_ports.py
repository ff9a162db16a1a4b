# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/kubelab/lab.py's listener ports (issue 34 item 5): chosen outside the kernel's ephemeral range, never one that
another socket holds, and a component that lost its port between the choice and its bind is started again on a new one."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tools import procs  # noqa: E402  pylint: disable=wrong-import-position
from tools.kubelab import lab  # noqa: E402  pylint: disable=wrong-import-position


class Offer:
    """An rng that offers the given ports in order (then fails the test: the function asked too often)."""

    def __init__(self, *ports):
        self.ports = list(ports)

    def choices(self, pools, weights):
        assert len(pools) == len(weights)
        return [pools[0]]

    def choice(self, _pool):
        assert self.ports, 'asked for more ports than offered'
        return self.ports.pop(0)


def test_the_ephemeral_range_is_read_from_the_kernel(tmp_path):
    path = tmp_path / 'range'
    path.write_text('40000\t50000\n')
    assert lab._ephemeral_range(str(path)) == (40000, 50000)
    path.write_text('garbage')
    assert lab._ephemeral_range(str(path)) == (32768, 60999)
    assert lab._ephemeral_range(str(tmp_path / 'missing')) == (32768, 60999)
    low, high = lab._ephemeral_range()
    assert 0 < low <= high <= 65535


def test_reserved_ports_are_parsed(tmp_path):
    path = tmp_path / 'reserved'
    path.write_text('8080,9000-9002,x,\n')
    assert lab._reserved_ports(str(path)) == {8080, 9000, 9001, 9002}
    path.write_text('\n')
    assert lab._reserved_ports(str(path)) == set()


def test_pools_lie_outside_the_ephemeral_range():
    pools = lab._listen_pools(32768, 60999)
    assert [(p.start, p.stop) for p in pools] == [(10000, 32768), (61000, 65536)]
    assert lab._listen_pools(1024, 65535) == []                 # no room: the kernel's choice
    assert [(p.start, p.stop) for p in lab._listen_pools(20000, 65535)] == [(10000, 20000)]
    for low, high in ((32768, 60999), (15000, 30000), (50000, 65000)):
        for pool in lab._listen_pools(low, high):
            assert not set(pool) & set(range(low, high + 1))
            assert min(pool) >= lab.LISTEN_FLOOR


def test_every_port_chosen_is_outside_the_ephemeral_range_and_bindable():
    low, high = lab._ephemeral_range()
    chosen = [lab._free_port() for _attempt in range(20)]
    assert len(set(chosen)) == 20                               # never handed out twice
    for port in chosen:
        assert not low <= port <= high and port >= lab.LISTEN_FLOOR
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(('127.0.0.1', port))


def test_a_port_another_socket_holds_is_not_chosen():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(('127.0.0.1', 0))     # an ephemeral port, offered anyway: the bind check alone must refuse it
        held.listen(1)
        taken = held.getsockname()[1]
        spare = lab._free_port()
        lab._CHOSEN.discard(spare)
        assert lab._free_port(rng=Offer(taken, spare), ephemeral=(1, 2), reserved=set()) == spare


def test_reserved_and_already_chosen_ports_are_skipped():
    first, second = lab._free_port(), lab._free_port()          # both in _CHOSEN now
    lab._CHOSEN.discard(second)
    assert lab._free_port(rng=Offer(first, 12345, second), ephemeral=(32768, 60999), reserved={12345}) == second


def test_no_free_port_is_a_clear_error():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(('127.0.0.1', 0))
        held.listen(1)
        taken = held.getsockname()[1]
        with pytest.raises(lab.LabError, match='no free port on 127.0.0.1 outside the ephemeral range 1-2 after 3 tries'):
            lab._free_port(rng=Offer(taken, taken, taken), ephemeral=(1, 2), reserved=set(), tries=3)


# A component that binds its port the way Go's net.Listen reports a lost one.
COMPONENT = '''
import socket, sys, time
port = int(sys.argv[1])
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:
    sock.bind(("127.0.0.1", port))
except OSError:
    print("listen tcp 127.0.0.1:%d: bind: address already in use" % port, flush=True)
    sys.exit(1)
sock.listen(4)
print("listening on", port, flush=True)
deadline = time.time() + 60
sock.settimeout(1)
while time.time() < deadline:
    try:
        conn, _addr = sock.accept()
    except OSError:
        continue
    conn.sendall(b"fake ok\\n")
    conn.close()
'''


def _accepts(port):
    """The component answers on ``port`` (a socket that merely listens there, like the thief's, does not)."""
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=0.5) as conn:
            conn.settimeout(0.5)
            return conn.recv(16) == b'fake ok\n'
    except OSError:
        return False


@pytest.fixture
def lab_dir(tmp_path):
    (tmp_path / 'logs').mkdir()
    state = {'boot_id': procs.boot_id(), 'dir': str(tmp_path), 'ports': {}, 'processes': []}
    yield tmp_path, state
    for record in state['processes']:
        if lab._is_ours(record, procs.boot_id()):
            os.kill(record['pid'], signal.SIGKILL)
            while lab._is_ours(record, procs.boot_id()):
                procs.reap(record['pid'])
                time.sleep(0.02)


def test_a_component_that_lost_its_port_is_started_again_on_a_new_one(lab_dir):
    directory, state = lab_dir
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as thief:
        thief.bind(('127.0.0.1', 0))        # somebody took the port between its choice and the component's bind
        thief.listen(1)
        lost = thief.getsockname()[1]
        state['ports']['fake'] = lost
        ports = state['ports']
        proc = lab._start_listening(str(directory), 'fake', lambda p: [sys.executable, '-c', COMPONENT, str(p['fake'])], ('fake',),
                                    state, lambda: _accepts(ports['fake']))
        assert proc.poll() is None
        assert state['ports']['fake'] != lost and _accepts(state['ports']['fake'])
        assert [r['pid'] for r in state['processes']] == [proc.pid]       # the dead first start is not recorded
        assert state['processes'][0]['argv'][-1] == str(state['ports']['fake'])
        log = (directory / 'logs' / 'fake.log').read_text()
        assert 'bind: address already in use' in log and 'listening on %d' % state['ports']['fake'] in log
        saved = lab._load_state(str(directory))
        assert saved['ports']['fake'] == state['ports']['fake']


def test_a_component_that_keeps_losing_its_port_fails_clearly(lab_dir, monkeypatch):
    directory, state = lab_dir
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as thief:
        thief.bind(('127.0.0.1', 0))
        thief.listen(1)
        lost = thief.getsockname()[1]
        state['ports']['fake'] = lost
        monkeypatch.setattr(lab, '_free_port', lambda: lost)         # every new choice is taken too
        with pytest.raises(lab.PortTaken, match='fake exited with status 1 while starting'):
            lab._start_listening(str(directory), 'fake', lambda p: [sys.executable, '-c', COMPONENT, str(p['fake'])], ('fake',),
                                 state, lambda: False, attempts=2)
        assert (directory / 'logs' / 'fake.log').read_text().count('address already in use') == 2


def test_an_old_lost_port_in_the_log_is_not_this_start(lab_dir):
    # the log is appended to across starts: a failure for another reason is a LabError, not a lost port
    directory, state = lab_dir
    (directory / 'logs' / 'fake.log').write_text('listen tcp 127.0.0.1:1: bind: address already in use\n')
    state['ports']['fake'] = 1
    with pytest.raises(lab.LabError) as info:
        lab._start_listening(str(directory), 'fake', lambda p: [sys.executable, '-c', 'import sys; sys.exit(3)'], ('fake',),
                             state, lambda: False)
    assert not isinstance(info.value, lab.PortTaken) and 'status 3' in str(info.value)
