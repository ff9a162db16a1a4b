# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 35: no file in plugins/ above 600 lines (split a file by responsibility; generated data is written compactly)."""

from __future__ import annotations

import os

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), 'plugins')
LIMIT = 600


def line_counts(root=PLUGINS):
    """{path relative to plugins/: number of lines} of every .py file below ``root``."""
    counts = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                with open(path, encoding='utf-8') as handle:
                    counts[os.path.relpath(path, root)] = sum(1 for _line in handle)
    return counts


def test_no_file_in_plugins_is_above_600_lines():
    counts = line_counts()
    assert len(counts) > 100 and 'modules/vm.py' in counts  # the walk found the tree
    over = sorted('%s (%d)' % (path, lines) for path, lines in counts.items() if lines > LIMIT)
    assert not over, 'above %d lines: %s' % (LIMIT, ', '.join(over))
