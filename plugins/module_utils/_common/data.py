# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small helpers for the JSON objects the backends read."""

from __future__ import annotations


def dig(obj, *path):
    """``obj[path[0]][path[1]]...``, or None as soon as a step is missing or not a dict."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj
