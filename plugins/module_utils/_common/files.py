# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files named by the user, opened once and never through a symbolic link.

A module that checks a path and then opens it again reads whatever the path names by then; a module running as
root that follows a link reads or writes a file its user could not. :func:`open_regular` opens the path once, with
``O_NOFOLLOW``, and refuses anything but a regular file; every later check and read goes through that descriptor.
"""

from __future__ import annotations

import errno
import os
import stat


class UnsafeFile(Exception):
    """The path is a symbolic link or not a regular file; ``str()`` is the reason, to follow the path in a message."""


def open_regular(path, flags, mode=0o600):
    """A descriptor of the regular file ``path``, opened once without following a symbolic link in its last component.

    ``flags``: ``os.O_RDONLY`` or ``os.O_WRONLY | os.O_APPEND | os.O_CREAT`` ...; ``O_NOFOLLOW``, ``O_NOCTTY``,
    ``O_CLOEXEC`` and (for the open only: a FIFO never blocks it) ``O_NONBLOCK`` are added. ``mode`` applies to a file
    it creates. Raises :class:`UnsafeFile` for a link or anything but a regular file (a device or FIFO is not even
    opened when it is one already), ``OSError`` when the file cannot be opened.
    """
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        before = None
    if before is not None:
        _refuse_kind(before.st_mode)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO):  # a link (ELOOP; EMLINK on some BSDs), a FIFO with no reader
            try:
                _refuse_kind(os.lstat(path).st_mode)
            except OSError:
                pass
        raise
    try:
        _refuse_kind(os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_kind(mode):
    if stat.S_ISLNK(mode):
        raise UnsafeFile('is a symbolic link (not followed: give the path of the file itself)')
    if not stat.S_ISREG(mode):
        raise UnsafeFile('is not a regular file')


def read_at(fd, length, offset):
    """Exactly ``length`` bytes of ``fd`` from ``offset`` (fewer only at the end of the file); the file offset is not used."""
    chunks = []
    while length > 0:
        data = os.pread(fd, length, offset)
        if not data:
            break
        chunks.append(data)
        length -= len(data)
        offset += len(data)
    return b''.join(chunks)
