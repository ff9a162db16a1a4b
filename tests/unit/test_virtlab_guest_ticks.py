"""The test guest's opt-in console ticks (tools/virtlab/guest.py, issue 37 item 2) and its build key: the ticks run only
with the kernel argument, and a changed init script is a new initramfs (the build does not reuse a stale one)."""

# pylint: disable=missing-function-docstring

import json
import os
import re

import pytest

from tools.virtlab import guest


def test_the_ticks_run_only_with_the_kernel_argument():
    script = guest.init_script()
    guard = 'if grep -q "%s" /proc/cmdline; then' % guest.TICKS_ARG
    assert guard in script
    block = script[script.index(guard):script.index('\nfi\n', script.index(guard))]
    # the token goes to tmpfs (/run is mounted tmpfs above) and every tick reads it back from there
    assert 'mount -t tmpfs tmpfs /run' in script[:script.index(guard)]
    assert '> /run/converge-token' in block and 'cat /run/converge-token' in block and 'tick $n up' in block
    assert guest.TICKS_ARG not in guest.KERNEL_CMDLINE, 'make test boots the guest without the ticks'
    assert guest.TOKEN_MARKER.strip() in block


def test_a_tick_line_as_the_guest_prints_it_matches_the_pattern():
    line = 'converge-guest: tick 17 up 34.52 token 7bc018922302d726'
    assert re.search(guest.TICK_PATTERN, '2026-11-29T07:20:00Z stdout F ' + line).groups() == ('17', '34.52', '7bc018922302d726')


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A cache dir with outputs and a guest.json; building again raises (it would fetch packages) unless reused."""
    for name in ('vmlinuz', 'initrd.img'):
        (tmp_path / name).write_bytes(b'x')

    def fetch():
        raise RuntimeError('rebuilt')
    monkeypatch.setattr(guest, 'kernel_package_name', fetch)
    return tmp_path


def test_outputs_of_the_current_scripts_are_reused(built):
    (built / 'guest.json').write_text(json.dumps({'scripts': guest.scripts_digest()}))
    image = guest.build_guest(str(built))
    assert image.initrd == os.path.join(str(built), 'initrd.img')


@pytest.mark.parametrize('meta', [{'scripts': '0000000000000000'}, {}, None])
def test_outputs_of_other_scripts_or_unknown_ones_are_rebuilt(built, meta):
    if meta is not None:
        (built / 'guest.json').write_text(json.dumps(meta))
    with pytest.raises(RuntimeError, match='rebuilt'):
        guest.build_guest(str(built))


def test_the_digest_follows_the_scripts(monkeypatch):
    before = guest.scripts_digest()
    monkeypatch.setattr(guest, 'INIT_SCRIPT', guest.INIT_SCRIPT.replace('sleep 1', 'sleep 2'))
    assert guest.scripts_digest() != before
