# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A failed live attach never leaves a half-changed definition without saying so (issue 17, part 2, item 3).

The rollback itself runs on real libvirt hosts (tests/integration/test_volume_module.py); here the two other
outcomes, which a real host does not produce on demand: the persistent definition already held the disk before the
run, and the rollback failing. Each says what stays where, with ``rolled_back`` false.
"""

from __future__ import annotations

import types

from ansible_collections.converge.virt.plugins.module_utils._base.errors import BackendError
from ansible_collections.converge.virt.plugins.module_utils._libvirt import attachments
from ansible_collections.converge.virt.plugins.module_utils._phase import volumes as phase

OP = phase.Operation(phase.ATTACH_LIVE, 'pool/data.raw', 'web', 'sdb', (('bus', 'sata'),))
CONNECTION = types.SimpleNamespace(redact=lambda text: text)
VIEW = types.SimpleNamespace(name='web')
REFUSED = BackendError("attach_live of pool/data.raw at web:sdb failed: disk bus 'sata' cannot be hotplugged.")


def test_rolled_back_marks_the_config_item_and_says_nothing_changed(monkeypatch):
    monkeypatch.setattr(attachments, 'rollback_attach_config', lambda *args: None)
    item = {'op': 'attach_config'}
    error = attachments._live_attach_failed(CONNECTION, VIEW, OP, REFUSED, item, [], None)  # pylint: disable=protected-access
    assert item['rolled_back'] is True and error.details['rolled_back'] is True
    assert error.message.startswith(REFUSED.message) and 'rolled back' in error.message and 'nothing was changed' in error.message


def test_a_disk_the_persistent_definition_held_before_the_run_is_kept_and_said_so(monkeypatch):
    def no_rollback(*args):
        raise AssertionError('must not roll back: %r' % (args,))
    monkeypatch.setattr(attachments, 'rollback_attach_config', no_rollback)
    error = attachments._live_attach_failed(CONNECTION, VIEW, OP, REFUSED, None, None, None)  # pylint: disable=protected-access
    assert error.details['rolled_back'] is False and 'already held' in error.message and 'next run retries' in error.message


def test_a_failed_rollback_says_the_disk_stays_in_the_persistent_definition(monkeypatch):
    monkeypatch.setattr(attachments, 'rollback_attach_config', lambda *args: 'connection lost')
    item = {'op': 'attach_config'}
    error = attachments._live_attach_failed(CONNECTION, VIEW, OP, REFUSED, item, [], None)  # pylint: disable=protected-access
    assert 'rolled_back' not in item and error.details['rolled_back'] is False
    assert 'rolling back the persistent definition of VM web (sdb) failed (connection lost)' in error.message
    assert 'stays in the persistent definition only' in error.message and 'next run attaches it live' in error.message
