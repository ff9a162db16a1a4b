"""Issue 33 item 6: the lab's sshd runs with StrictModes no, so the lab itself refuses a state directory someone else
could write into (an authorized_keys or host key planted there) or that is not the user's."""

import os

import pytest

from tools.virtlab import hosts, sshd

NOBODY = 65534


@pytest.fixture
def base(tmp_path):
    os.chmod(str(tmp_path), 0o700)
    return tmp_path


def test_a_private_directory_and_a_new_one_are_accepted(base):
    state = base / 'lab'
    sshd.check_private_dir(str(state))          # not there yet: the lab makes it 0700
    state.mkdir(mode=0o700)
    sshd.check_private_dir(str(state))
    sticky = base / 'tmp'                       # like /tmp: others may write, but the sticky bit keeps them off our directory
    sticky.mkdir()
    os.chmod(str(sticky), 0o1777)
    (sticky / 'lab').mkdir(mode=0o700)
    sshd.check_private_dir(str(sticky / 'lab'))


@pytest.mark.parametrize('mode', [0o777, 0o775, 0o757, 0o720])
def test_a_state_directory_others_may_write_is_refused(base, mode):
    state = base / 'lab'
    state.mkdir()
    os.chmod(str(state), mode)
    with pytest.raises(sshd.SshdError, match=r"lab'?: mode %04o lets group or others write it: refused" % mode):
        sshd.check_private_dir(str(state))


@pytest.mark.skipif(os.getuid() != 0, reason='chown to another user needs root')
def test_a_state_directory_of_another_user_is_refused(base):
    state = base / 'lab'
    state.mkdir(mode=0o700)
    os.chown(str(state), NOBODY, NOBODY)
    with pytest.raises(sshd.SshdError, match=r'owned by uid %d, not by this user' % NOBODY):
        sshd.check_private_dir(str(state))


def test_a_writable_directory_above_without_the_sticky_bit_is_refused(base):
    shared = base / 'shared'
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    (shared / 'lab').mkdir(mode=0o700)
    with pytest.raises(sshd.SshdError, match=r'above it is writable by group or others and not sticky'):
        sshd.check_private_dir(str(shared / 'lab'))


def test_a_symbolic_link_is_refused(base):
    (base / 'real').mkdir(mode=0o700)
    os.symlink(str(base / 'real'), str(base / 'lab'))
    with pytest.raises(sshd.SshdError, match='not a directory'):
        sshd.check_private_dir(str(base / 'lab'))


def test_the_ssh_setup_refuses_before_writing_anything(base):
    # client_key (start_hosts(ssh=True)) and prepare (each host's sshd) check before they write a key
    state = base / 'lab'
    state.mkdir()
    os.chmod(str(state), 0o777)
    with pytest.raises(sshd.SshdError, match='lets group or others write it'):
        sshd.client_key(str(state))
    assert not (state / 'ssh').exists()
    root = base / 'host'
    root.mkdir(mode=0o700)
    (root / 'ssh').mkdir()
    os.chmod(str(root / 'ssh'), 0o770)
    with pytest.raises(sshd.SshdError, match='ssh'):
        sshd.prepare(str(root), '127.0.0.1', 2222, 'ssh-ed25519 AAAA test', str(root / 'home'))
    assert not (root / 'ssh' / 'authorized_keys').exists()


def test_start_hosts_refuses_such_a_state_directory(base, monkeypatch):
    state = base / 'lab'
    state.mkdir()
    os.chmod(str(state), 0o777)
    monkeypatch.setattr(hosts.netns, 'wait_private', lambda: True)   # the check comes before anything starts
    monkeypatch.setattr(hosts, 'stop_hosts', lambda _state_dir: pytest.fail('went on past the check'))
    with pytest.raises(hosts.LabError, match='lets group or others write it: refused'):
        hosts.start_hosts(1, str(state))
