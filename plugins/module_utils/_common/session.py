# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The part of a module run every backend shares: every error leaves as a clean, redacted failure.

::

    with SomeBackendSession(module) as session:
        client = session.connect()
        ...

Leaving the block with a :class:`ConvergeError` fails the module with the error's fields; any other
exception fails it with "unexpected error" and the traceback; every string with the backend's secrets
redacted (:meth:`ModuleSession.redact`). ``exit_json`` / ``fail_json`` inside the block pass through.
"""

from __future__ import annotations

import traceback

from ansible_collections.converge.virt.plugins.module_utils._base.errors import ConvergeError, unexpected
from ansible_collections.converge.virt.plugins.module_utils._common.redact import redact_fields


class ModuleSession:
    """Base of the backends' module sessions (_libvirt.connection / _kubevirt.client ``ModuleSession``)."""

    def __init__(self, module, available=True, library=None, import_error=None):
        """Fails the module naming ``library`` (pip name) when the backend's binding is not ``available``."""
        if not available:
            from ansible.module_utils.basic import missing_required_lib  # pylint: disable=import-outside-toplevel
            module.fail_json(msg=missing_required_lib(library), exception=import_error)
        self.module = module

    def redact(self, value):
        """value without any secret of this run (strings only; anything else unchanged)."""
        return self.redact_text(value) if isinstance(value, str) else value

    def redact_text(self, text):
        """text without the backend's secrets. Backends override it."""
        return text

    def redact_result(self, result):
        """A result dict with every string value redacted."""
        return redact_fields(result, self.redact)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, Exception):
            return False  # success, or SystemExit from exit_json / fail_json
        if isinstance(exc, ConvergeError):
            self.module.fail_json(**self.redact_result(exc.to_result()))
        self.module.fail_json(msg=self.redact(unexpected(exc)),
                              exception=self.redact(''.join(traceback.format_exception(exc_type, exc, tb))))
        return False
