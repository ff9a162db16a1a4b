# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a libvirt migration module hands the run: its options (checked, and turned into libvirt's flags and typed
parameters) and its session (the source's secrets and the target's password redacted).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_text
from ansible_collections.converge.virt.plugins.module_utils._libvirt.connection import ModuleSession, libvirt, resolve_uri
from ansible_collections.converge.virt.plugins.module_utils._phase import tasks


class MigrationOptions(NamedTuple):  # pylint: disable=too-many-instance-attributes
    """How to migrate (validated by :func:`validate_options`)."""

    offline: bool = False
    persistent: bool = True
    undefine_source: bool = True
    bandwidth: Optional[int] = None          # MiB/s
    max_downtime: Optional[int] = None       # ms
    auto_converge: bool = False
    post_copy: bool = False
    completion_timeout: Optional[int] = None  # s
    completion_action: str = 'abort'
    copy_storage: bool = False
    peer_to_peer: bool = True
    wait_timeout: int = 600
    poll_interval: float = 0.05
    target_username: Optional[str] = None
    target_password: Optional[str] = None

    @property
    def action(self):
        """The action table row this migration takes."""
        return 'offline_migrate' if self.offline else 'live_migrate'


def validate_options(opts):
    """Raise :class:`InvalidDeclaration` naming the field of a bad option."""
    for field in ('bandwidth', 'max_downtime', 'completion_timeout'):
        value = getattr(opts, field)
        if value is not None and value <= 0:
            raise InvalidDeclaration(field, 'must be a positive number, got %r' % value)
    for field in ('wait_timeout', 'completion_timeout'):
        tasks.check_timeout(field, getattr(opts, field))
    if opts.offline:
        for field in ('post_copy', 'auto_converge', 'copy_storage'):
            if getattr(opts, field):
                raise InvalidDeclaration(field, 'is not possible with offline (a stopped VM has no memory to move; '
                                                'offline moves the definition only: its disks must be shared or absent)')
        if not opts.persistent:
            raise InvalidDeclaration('persistent', 'must be true with offline (libvirt needs a persistent destination)')
    if opts.completion_action == 'postcopy' and not opts.post_copy:
        raise InvalidDeclaration('completion_action', 'postcopy needs post_copy=true')
    return opts


# (option, VIR_MIGRATE_* flag it sets when true)
OPTION_FLAGS = (('persistent', 'VIR_MIGRATE_PERSIST_DEST'), ('undefine_source', 'VIR_MIGRATE_UNDEFINE_SOURCE'),
                ('auto_converge', 'VIR_MIGRATE_AUTO_CONVERGE'), ('post_copy', 'VIR_MIGRATE_POSTCOPY'),
                ('copy_storage', 'VIR_MIGRATE_NON_SHARED_DISK'), ('peer_to_peer', 'VIR_MIGRATE_PEER2PEER'))


def migration_flags(opts):
    """The VIR_MIGRATE_* flags for ``opts``."""
    flags = libvirt.VIR_MIGRATE_OFFLINE if opts.offline else libvirt.VIR_MIGRATE_LIVE
    for field, flag in OPTION_FLAGS:
        if getattr(opts, field):
            flags |= getattr(libvirt, flag)
    return flags


def migration_params(opts):
    """The typed parameters of ``migrate3`` / ``migrateToURI3``."""
    params = {}
    if opts.bandwidth:
        params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = int(opts.bandwidth)
    return params


class MigrationSession(ModuleSession):
    """The libvirt module session of migration, migration_info and host: the source's secrets and the target's password redacted."""

    def source_args(self):
        """(uri, username, password) of the source host (the module's uri, or the default: :func:`.connection.resolve_uri`)."""
        params = self.module.params
        return (resolve_uri(params.get('uri')), params.get('username'), params.get('password'))

    def redact_text(self, text):
        return redact_text(super().redact_text(text), [self.module.params.get('target_password')])

    def redact_result(self, result):
        """``result`` with every string redacted, also inside its lists and dicts (results, notes, history)."""
        def clean(value):
            if isinstance(value, list):
                return [clean(v) for v in value]
            if isinstance(value, dict):
                return dict((k, clean(v)) for k, v in value.items())
            return self.redact(value)
        return clean(result)
