# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for AnsibleModule where only params, fail_json and warn matter (module sessions)."""

from __future__ import annotations


class Failed(SystemExit):
    """What fail_json raises (AnsibleModule exits)."""


class FakeModule:
    def __init__(self, params):
        self.params = params
        self.failed = None
        self.warnings = []

    def warn(self, warning):
        self.warnings.append(warning)

    def fail_json(self, **kwargs):
        self.failed = kwargs
        raise Failed(1)
