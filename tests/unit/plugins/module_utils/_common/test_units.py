# -*- coding: utf-8 -*-
# Copyright: converge.virt developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the strict size parser."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type  # pylint: disable=invalid-name

import pytest
from hypothesis import given, strategies as st

from ansible_collections.converge.virt.plugins.module_utils._common.units import (
    GIB, KIB, MIB, TIB, format_size, from_libvirt, human_size, parse_size, to_unit, unit_factor)


@pytest.mark.parametrize('value, default_unit, expected', [
    (1024, 'B', 1024),
    (1024, 'MiB', 1024 * MIB),
    ('1024', 'MiB', 1024 * MIB),
    ('512MiB', 'B', 512 * MIB),
    ('512 MiB', 'B', 512 * MIB),
    ('1GiB', 'B', GIB),
    ('1G', 'B', GIB),
    ('1g', 'B', GIB),
    ('1gib', 'B', GIB),
    ('2T', 'B', 2 * TIB),
    ('1TiB', 'B', TIB),
    ('4K', 'B', 4 * KIB),
    ('4KiB', 'B', 4 * KIB),
    ('1KB', 'B', 1000),
    ('1MB', 'B', 1000 ** 2),
    ('10GB', 'B', 10 * 1000 ** 3),
    ('1TB', 'B', 1000 ** 4),
    ('100B', 'MiB', 100),
    ('100 bytes', 'MiB', 100),
    ('1.5GiB', 'B', 3 * GIB // 2),
    ('  2M  ', 'B', 2 * MIB),
])
def test_parse_size_valid(value, default_unit, expected):
    assert parse_size(value, default_unit=default_unit) == expected


@pytest.mark.parametrize('value, kwargs, message', [
    ('-1GiB', {}, 'must not be negative'),
    (-5, {}, 'must not be negative'),
    (0, {}, 'greater than zero'),
    ('0MiB', {}, 'greater than zero'),
    ('12XB', {}, 'unknown unit'),
    ('1 GiBs', {}, 'unknown unit'),
    ('GiB', {}, 'cannot parse'),
    ('', {}, 'cannot parse'),
    ('1e3', {}, 'cannot parse'),
    ('0x10', {}, 'cannot parse'),
    ('1,5G', {}, 'cannot parse'),
    ('0.1B', {}, 'whole number of bytes'),
    (True, {}, 'expected a size'),
    (None, {}, 'expected a size'),
    (1.5, {}, 'expected a size'),
    ([1], {}, 'expected a size'),
    ('1KiB', {'minimum': MIB}, 'too small'),
    ('100PiB', {'maximum': TIB}, 'absurdly large'),
    ('1000B', {'multiple_of': KIB}, 'not a multiple'),
])
def test_parse_size_invalid(value, kwargs, message):
    with pytest.raises(ValueError) as exc:
        parse_size(value, field='memory', **kwargs)
    assert message in str(exc.value)
    assert str(exc.value).startswith('memory:')


def test_unit_factor_unknown():
    with pytest.raises(ValueError, match='disk.size: unknown unit'):
        unit_factor('furlongs', 'disk.size')


@pytest.mark.parametrize('size, expected', [
    (512 * MIB, '512MiB'), (GIB, '1GiB'), (3 * GIB // 2, '1536MiB'), (1000, '1000B'), (0, '0B'), (2 * TIB, '2TiB'), (KIB, '1KiB'),
])
def test_format_size(size, expected):
    assert format_size(size) == expected
    assert parse_size(expected, minimum=0) == size


def test_human_size_and_conversions():
    assert human_size(3 * GIB // 2) == '1.5GiB'
    assert human_size(12) == '12B'
    assert to_unit(2 * GIB, 'MiB') == 2048
    with pytest.raises(ValueError):
        to_unit(1000, 'KiB')
    assert from_libvirt('524288', 'KiB') == 512 * MIB
    assert from_libvirt('524288') == 512 * MIB
    assert from_libvirt('1', 'G') == GIB
    assert from_libvirt('1', 'GB') == 1000 ** 3


@given(st.integers(min_value=1, max_value=2 ** 50), st.sampled_from(['B', 'KiB', 'MiB', 'GiB', 'K', 'M', 'G', 'KB', 'MB', 'GB', 'kib', 'mb']))
def test_parse_size_property(number, unit):
    expected = number * unit_factor(unit)
    assert parse_size('%d%s' % (number, unit)) == expected
    assert parse_size(number, default_unit=unit) == expected
    assert parse_size(format_size(expected)) == expected
