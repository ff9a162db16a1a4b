# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every backend's connection does at its end, written once: close, ignoring errors; usable as a context manager."""

from __future__ import annotations


class ClosingConnection:
    """A backend connection: :meth:`close` closes :meth:`closable` and ignores its errors (the other end may be gone)."""

    def closable(self):
        """The handle to close (the libvirt connection, the Kubernetes API client's pool)."""
        raise NotImplementedError

    def close(self):
        """Close, ignoring errors."""
        try:
            self.closable().close()
        except Exception:  # pylint: disable=broad-except
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
