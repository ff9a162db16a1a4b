# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strict size parsing and formatting (bytes, KiB/MiB/GiB/TiB, K/M/G/T, KB/MB/GB/TB).

Conventions (the same as libvirt and QEMU):

* ``B``, ``bytes``: bytes.
* ``KiB``/``MiB``/``GiB``/``TiB``/``PiB`` and the single-letter ``K``/``M``/``G``/``T``/``P``: binary (powers of 1024).
* ``KB``/``MB``/``GB``/``TB``/``PB``: decimal (powers of 1000).

Unit names are case-insensitive.  A bare number (an ``int`` or a string with no unit) is
counted in ``default_unit`` (bytes unless the caller says otherwise).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import re
from decimal import Decimal, InvalidOperation

KIB = 1024
MIB = KIB * 1024
GIB = MIB * 1024
TIB = GIB * 1024
PIB = TIB * 1024

UNITS = {
    'b': 1, 'byte': 1, 'bytes': 1,
    'k': KIB, 'kib': KIB, 'm': MIB, 'mib': MIB, 'g': GIB, 'gib': GIB, 't': TIB, 'tib': TIB, 'p': PIB, 'pib': PIB,
    'kb': 1000, 'mb': 1000 ** 2, 'gb': 1000 ** 3, 'tb': 1000 ** 4, 'pb': 1000 ** 5,
}

_SIZE_RE = re.compile(r'^\s*(?P<num>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[A-Za-z]*)\s*\Z')

_FORMAT_UNITS = (('PiB', PIB), ('TiB', TIB), ('GiB', GIB), ('MiB', MIB), ('KiB', KIB))


def unit_factor(unit, field='size'):
    """Return the number of bytes in one ``unit`` (case-insensitive); raise ValueError naming ``field`` if unknown."""
    if not isinstance(unit, str):
        raise ValueError('%s: unit must be a string, got %r' % (field, unit))
    try:
        return UNITS[unit.strip().lower()]
    except KeyError:
        raise ValueError('%s: unknown unit %r (use B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB or TB)' % (field, unit)) from None


def parse_size(value, field='size', default_unit='B', minimum=1, maximum=None, multiple_of=1):
    """Parse a size such as ``'512MiB'``, ``'1G'``, ``'1.5GiB'``, ``'10GB'`` or ``1024`` and return it in bytes.

    ``value`` may be an ``int`` (counted in ``default_unit``) or a string with an optional unit.
    Booleans, floats, negative numbers, unknown units, values that are not a whole number of bytes,
    values below ``minimum`` bytes, above ``maximum`` bytes or not a multiple of ``multiple_of`` bytes
    raise ``ValueError`` whose message names ``field`` and the reason.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError('%s: expected a size such as 512MiB or 1GiB, got %r' % (field, value))
    if isinstance(value, int):
        if value < 0:
            raise ValueError('%s: size must not be negative, got %r' % (field, value))
        num = Decimal(value)
        unit = default_unit
    elif isinstance(value, str):
        text = value.strip()
        if text.startswith('-'):
            raise ValueError('%s: size must not be negative, got %r' % (field, value))
        match = _SIZE_RE.match(text)
        if not match:
            raise ValueError('%s: cannot parse size %r (expected a number followed by an optional unit, e.g. 512MiB or 1GiB)' % (field, value))
        try:
            num = Decimal(match.group('num'))
        except InvalidOperation:
            raise ValueError('%s: cannot parse number in %r' % (field, value)) from None
        unit = match.group('unit') or default_unit
    else:
        raise ValueError('%s: expected a size as an integer or a string such as 512MiB, got %s' % (field, type(value).__name__))
    total = num * unit_factor(unit, field)
    if total != total.to_integral_value():
        raise ValueError('%s: %r is not a whole number of bytes' % (field, value))
    total = int(total)
    if total < minimum:
        if total == 0:
            raise ValueError('%s: size must be greater than zero, got %r' % (field, value))
        raise ValueError('%s: %r is too small (minimum is %s)' % (field, value, format_size(minimum)))
    if maximum is not None and total > maximum:
        raise ValueError('%s: %r is absurdly large (maximum is %s)' % (field, value, format_size(maximum)))
    if multiple_of > 1 and total % multiple_of:
        raise ValueError('%s: %r is not a multiple of %s' % (field, value, format_size(multiple_of)))
    return total


def to_unit(size_bytes, unit):
    """Convert ``size_bytes`` to a whole number of ``unit``; raise ValueError if it is not exact."""
    factor = unit_factor(unit)
    if size_bytes % factor:
        raise ValueError('%d bytes is not a whole number of %s' % (size_bytes, unit))
    return size_bytes // factor


def from_libvirt(value, unit=None):
    """Convert a libvirt XML scaled integer (text of ``<memory unit=...>``, ``<capacity unit=...>``) to bytes.

    libvirt's default unit for memory elements is KiB; pass ``unit=None`` to use it.
    """
    return int(str(value).strip()) * unit_factor(unit or 'KiB', 'libvirt value')


def format_size(size_bytes):
    """Format bytes with the largest binary unit that divides them exactly, e.g. ``536870912`` -> ``'512MiB'``."""
    if size_bytes is None:
        return None
    size_bytes = int(size_bytes)
    for name, factor in _FORMAT_UNITS:
        if size_bytes and size_bytes % factor == 0:
            return '%d%s' % (size_bytes // factor, name)
    return '%dB' % size_bytes


def human_size(size_bytes, precision=1):
    """Format bytes approximately for messages, e.g. ``1610612736`` -> ``'1.5GiB'``."""
    size_bytes = int(size_bytes)
    for name, factor in _FORMAT_UNITS:
        if abs(size_bytes) >= factor:
            return '%.*f%s' % (precision, size_bytes / factor, name)
    return '%dB' % size_bytes
