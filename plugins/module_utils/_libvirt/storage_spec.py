# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""libvirt volume declarations (pure): a declared volume and its attachments checked and normalised (refusals name the
field), turned into the planner's :class:`DesiredVolume` / :class:`Attachment`. Volume keys are ``<pool>/<volume>``;
a disk that is not a pool volume is keyed by its path.
"""

from __future__ import annotations

import re

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common.units import parse_size
from ansible_collections.converge.virt.plugins.module_utils._libvirt import domain_spec
from ansible_collections.converge.virt.plugins.module_utils._phase.volumes import Attachment, DesiredVolume

FORMATS = ('raw', 'qcow2')
PREALLOCATIONS = ('off', 'metadata', 'full')
STATES = ('present', 'absent')
CAPACITY_MAX = 64 * 1024 ** 5
_NAME_RE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.+@-]*\Z')
_VM_RE = re.compile(r'^[^/\x00-\x1f]+\Z')
_CONTROL_RE = re.compile(r'[\x00-\x1f\x7f]')
# an empty volume <name><PARTIAL_SUFFIX> next to a volume marks an import into it that has not finished
PARTIAL_SUFFIX = '.converge-partial'


def volume_key(pool, name):
    """The planner's key of a pool volume."""
    return '%s/%s' % (pool, name)


def split_key(key):
    """``(pool, name)`` of a pool volume key."""
    pool, _sep, name = key.partition('/')
    return pool, name


def _name(value, field):
    if not isinstance(value, str) or not value:
        raise InvalidDeclaration(field, 'a non-empty name is required')
    if not _NAME_RE.fullmatch(value) or value in ('.', '..'):
        raise InvalidDeclaration(field, '%r is not a valid name (letters, digits and _.+@- ; no slash)' % value)
    if value.endswith(PARTIAL_SUFFIX):
        raise InvalidDeclaration(field, '%r: names ending in %s are reserved for unfinished imports' % (value, PARTIAL_SUFFIX))
    return value


def _ref(value, field, pool):
    """A reference to another volume: ``name`` (same pool) or ``pool/name``."""
    if not isinstance(value, str) or not value:
        raise InvalidDeclaration(field, 'a volume name or pool/name is required')
    if '/' in value:
        other_pool, name = value.split('/', 1)
        return volume_key(_name(other_pool, field), _name(name, field))
    return volume_key(pool, _name(value, field))


def normalize_attachment(item, field, pool, name):
    """Validate one attachment ``{vm, dev, bus, readonly, serial}``; return the canonical dict."""
    if not isinstance(item, dict):
        raise InvalidDeclaration(field, 'expected a dict, got %s' % type(item).__name__)
    unknown = sorted(set(item) - {'vm', 'dev', 'target', 'bus', 'readonly', 'serial'})
    if unknown:
        raise InvalidDeclaration(field, 'unknown keys %s' % ', '.join(unknown))
    vm = item.get('vm')
    if not isinstance(vm, str) or not vm or not _VM_RE.fullmatch(vm):
        raise InvalidDeclaration(field + '.vm', 'the name of the VM is required')
    disk = {'dev': item.get('dev') if item.get('dev') is not None else item.get('target'), 'bus': item.get('bus'),
            'readonly': item.get('readonly'), 'serial': item.get('serial'), 'pool': pool, 'volume': name}
    try:
        norm = domain_spec.normalize_disk(disk, field)
    except ValueError as exc:
        text = str(exc)
        sub, _sep, reason = text.partition(': ')
        raise InvalidDeclaration(sub, reason or text) from None
    return {'vm': vm, 'dev': norm['dev'], 'bus': norm['bus'], 'readonly': bool(norm['readonly']), 'serial': norm['serial']}


def normalize_volume(item, field='volume', defaults=None):
    """Validate one volume declaration; return the canonical dict (raises :class:`InvalidDeclaration`).

    Keys: ``name``, ``pool``, ``pool_path``, ``state``, ``capacity``, ``format``,
    ``preallocation``, ``clone_from``, ``import_from``, ``import_format``,
    ``backing_volume``, ``wipe``, ``attachments`` (None: attachments left alone).
    ``defaults`` fills keys the item does not set (the fleet form).
    """
    merged = dict(defaults or {})
    merged.update(dict((k, v) for k, v in item.items() if v is not None))
    name = _name(merged.get('name'), field + '.name')
    pool = _name(merged.get('pool'), field + '.pool')
    out = {'name': name, 'pool': pool, 'key': volume_key(pool, name)}
    pool_path = merged.get('pool_path')
    if pool_path is not None and (not isinstance(pool_path, str) or not pool_path.startswith('/')):
        raise InvalidDeclaration(field + '.pool_path', 'must be an absolute path, got %r' % (pool_path,))
    if pool_path is not None and (_CONTROL_RE.search(pool_path) or '..' in pool_path.split('/')):
        raise InvalidDeclaration(field + '.pool_path', 'must be a plain absolute path (no .. component, no control character), got %r' % (pool_path,))
    out['pool_path'] = pool_path.rstrip('/') or '/' if pool_path else None
    state = merged.get('state') or 'present'
    if state not in STATES:
        raise InvalidDeclaration(field + '.state', '%r is not one of present, absent' % (state,))
    out['state'] = state
    capacity = merged.get('capacity')
    if capacity is not None:
        try:
            capacity = parse_size(capacity, field=field + '.capacity', maximum=CAPACITY_MAX)
        except ValueError as exc:
            sub, _sep, reason = str(exc).partition(': ')
            raise InvalidDeclaration(sub, reason) from None
    out['capacity'] = capacity
    for key, choices in (('format', FORMATS), ('import_format', FORMATS), ('preallocation', PREALLOCATIONS)):
        value = merged.get(key)
        if value is not None and value not in choices:
            raise InvalidDeclaration('%s.%s' % (field, key), '%r is not one of %s' % (value, ', '.join(choices)))
        out[key] = value
    out['preallocation'] = out['preallocation'] or 'off'
    sources = [k for k in ('clone_from', 'import_from', 'backing_volume') if merged.get(k) is not None]
    if len(sources) > 1:
        raise InvalidDeclaration(field, '%s are mutually exclusive' % ', '.join(sources))
    out['clone_from'] = _ref(merged['clone_from'], field + '.clone_from', pool) if merged.get('clone_from') is not None else None
    out['backing_volume'] = _ref(merged['backing_volume'], field + '.backing_volume', pool) \
        if merged.get('backing_volume') is not None else None
    imp = merged.get('import_from')
    if imp is not None and (not isinstance(imp, str) or not imp.startswith('/') or _CONTROL_RE.search(imp)):
        raise InvalidDeclaration(field + '.import_from', 'must be an absolute path of a local image file, got %r' % (imp,))
    out['import_from'] = imp
    if out['import_format'] and not imp:
        raise InvalidDeclaration(field + '.import_format', 'only applies with import_from')
    for key in ('clone_from', 'backing_volume'):
        if out[key] == out['key']:
            raise InvalidDeclaration(field, 'a volume cannot be made from itself (%s: %s)' % (key, out['key']))
    if out['backing_volume'] and out['format'] not in (None, 'qcow2'):
        raise InvalidDeclaration(field + '.format', 'an overlay on a backing volume must be qcow2')
    if out['backing_volume']:
        out['format'] = 'qcow2'
    if out['preallocation'] == 'metadata' and (out['format'] or 'raw') == 'raw':
        raise InvalidDeclaration(field + '.preallocation', 'metadata preallocation needs format qcow2')
    wipe = merged.get('wipe', False)
    if not isinstance(wipe, bool):
        raise InvalidDeclaration(field + '.wipe', 'expected a boolean')
    out['wipe'] = wipe
    atts = merged.get('attachments')
    if atts is not None:
        if not isinstance(atts, list):
            raise InvalidDeclaration(field + '.attachments', 'expected a list')
        atts = [normalize_attachment(a, '%s.attachments[%d]' % (field, i), pool, name) for i, a in enumerate(atts)]
        seen = set()
        for i, att in enumerate(atts):
            if (att['vm'], att['dev']) in seen:
                raise InvalidDeclaration('%s.attachments[%d]' % (field, i), 'VM %s has %s declared twice' % (att['vm'], att['dev']))
            seen.add((att['vm'], att['dev']))
        if state == 'absent' and atts:
            raise InvalidDeclaration(field + '.attachments', 'a volume declared absent cannot be attached')
    out['attachments'] = atts
    return out


def desired_source(spec):
    """The planner's ``source`` word of a normalized declaration."""
    if spec['clone_from']:
        return 'clone:' + spec['clone_from']
    if spec['import_from']:
        return 'import:' + spec['import_from']
    if spec['backing_volume']:
        return 'backing:' + spec['backing_volume']
    return None


def desired_world(specs):
    """``(desired_volumes, desired_attachments)`` for the planner from normalized declarations."""
    volumes, attachments = [], []
    for spec in specs:
        volumes.append(DesiredVolume(spec['key'], present=spec['state'] == 'present', capacity=spec['capacity'],
                                     fmt=spec['format'], source=desired_source(spec)))
        for att in spec['attachments'] or ():
            attachments.append(Attachment(att['vm'], att['dev'], spec['key'], att['readonly'], att['bus'], att['serial']))
    return volumes, attachments
