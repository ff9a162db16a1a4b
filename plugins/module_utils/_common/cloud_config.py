# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a seed's user data cloud-config that cloud-init accepts? Checked before anything changes.

cloud-init (22.4, Debian bookworm) only logs a warning for cloud-config that fails its schema and goes on, skipping or
half-applying the modules whose keys are wrong: nothing a user sees fails. So :func:`check_user_data` refuses it at
the module, naming the field, by the same rules:

* dict user data (written as ``#cloud-config``) is validated against cloud-init's own cloud-config schema
  (:mod:`cloud_config_schema`, cloud-init 22.4's ``schema-cloud-config-v1.json`` as data) with the small draft-4
  validator below (the keywords that schema uses: type, enum, properties, patternProperties, additionalProperties,
  required, minProperties, items, additionalItems, minItems, maxItems, uniqueItems, minimum, maximum, pattern, allOf,
  anyOf, oneOf, not, $ref; ``format`` is an annotation in draft 4, as in cloud-init);
* text user data starting with ``#cloud-config`` is parsed as YAML (when PyYAML is importable where the module runs;
  else it is left to cloud-init) and must be a mapping, then validated as above;
* other text user data (scripts, ``#include``, MIME multipart, boot hooks) and the network config are left to
  cloud-init in the guest: ``cloud-init status --long`` reports what it could not apply.
"""

from __future__ import annotations

import json
import re

from ansible_collections.converge.virt.plugins.module_utils._base.errors import InvalidDeclaration
from ansible_collections.converge.virt.plugins.module_utils._common import cloud_config_schema

_SCHEMA = []


def schema():
    """cloud-init's cloud-config schema (parsed once per process)."""
    if not _SCHEMA:
        _SCHEMA.append(json.loads(cloud_config_schema.SCHEMA_JSON))
    return _SCHEMA[0]


_TYPES = {
    'object': lambda v: isinstance(v, dict),
    'array': lambda v: isinstance(v, list),
    'string': lambda v: isinstance(v, str),
    'integer': lambda v: isinstance(v, int) and not isinstance(v, bool),
    'number': lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    'boolean': lambda v: isinstance(v, bool),
    'null': lambda v: v is None,
}


def _path(parts):
    out = ''
    for part in parts:
        out += '[%d]' % part if isinstance(part, int) else ('.' + part if re.match(r'^[A-Za-z_][A-Za-z0-9_-]*$', part) else '[%s]' % json.dumps(part))
    return out


def _equal(a, b):
    # JSON equality: True is not 1
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


class _Validator:
    """Draft-4 validation of the keywords cloud-init's schema uses; errors as (path parts, reason)."""

    def __init__(self, root):
        self.root = root

    def resolve(self, ref):
        if not ref.startswith('#/'):
            raise ValueError('unsupported $ref %s' % ref)
        node = self.root
        for part in ref[2:].split('/'):
            node = node[part.replace('~1', '/').replace('~0', '~')]
        return node

    def errors(self, value, node, path):  # pylint: disable=too-many-branches,too-many-statements
        """Every reason ``value`` fails ``node``: a list of (path, reason)."""
        if '$ref' in node:  # draft 4: $ref replaces its siblings
            return self.errors(value, self.resolve(node['$ref']), path)
        out = []
        kind = node.get('type')
        if kind is not None:
            kinds = kind if isinstance(kind, list) else [kind]
            if not any(_TYPES[k](value) for k in kinds):
                return [(path, 'must be %s, got %s' % (' or '.join(kinds), _json_type(value)))]
        if 'enum' in node and not any(_equal(value, choice) for choice in node['enum']):
            out.append((path, 'must be one of %s' % ', '.join(json.dumps(c) for c in node['enum'])))
        if isinstance(value, dict):
            out += self._object(value, node, path)
        if isinstance(value, list):
            out += self._array(value, node, path)
        if isinstance(value, str) and 'pattern' in node and not re.search(node['pattern'], value):
            out.append((path, 'does not match %s' % node['pattern']))
        if _TYPES['number'](value):
            if 'minimum' in node and (value < node['minimum'] or (node.get('exclusiveMinimum') and value == node['minimum'])):
                out.append((path, 'must be at least %s' % node['minimum']))
            if 'maximum' in node and (value > node['maximum'] or (node.get('exclusiveMaximum') and value == node['maximum'])):
                out.append((path, 'must be at most %s' % node['maximum']))
        for sub in node.get('allOf', ()):
            out += self.errors(value, sub, path)
        if 'anyOf' in node:
            branches = [self.errors(value, sub, path) for sub in node['anyOf']]
            if all(branches):
                out.append(_best(path, branches, 'does not match any of the accepted forms'))
        if 'oneOf' in node:
            branches = [self.errors(value, sub, path) for sub in node['oneOf']]
            matched = sum(1 for branch in branches if not branch)
            if matched == 0:
                out.append(_best(path, branches, 'does not match any of the accepted forms'))
            elif matched > 1:
                out.append((path, 'matches more than one of the accepted forms (oneOf)'))
        if 'not' in node and not self.errors(value, node['not'], path):
            out.append((path, 'must not match %s' % json.dumps(node['not'], sort_keys=True)))
        return out

    def _object(self, value, node, path):
        out = []
        for name in node.get('required', ()):
            if name not in value:
                out.append((path, 'misses the required key %s' % name))
        if len(value) < node.get('minProperties', 0):
            out.append((path, 'needs at least %d key(s)' % node['minProperties']))
        properties = node.get('properties', {})
        patterns = node.get('patternProperties', {})
        additional = node.get('additionalProperties', True)
        for key, item in value.items():
            if not isinstance(key, str):
                out.append((path, 'has a key that is not a string (a %s)' % type(key).__name__))
                continue
            matched = False
            if key in properties:
                matched = True
                out += self.errors(item, properties[key], path + [key])
            for pattern, sub in patterns.items():
                if re.search(pattern, key):
                    matched = True
                    out += self.errors(item, sub, path + [key])
            if not matched:
                if additional is False:
                    out.append((path + [key], 'is not a key cloud-init accepts here'))
                elif isinstance(additional, dict):
                    out += self.errors(item, additional, path + [key])
        return out

    def _array(self, value, node, path):
        out = []
        if len(value) < node.get('minItems', 0):
            out.append((path, 'needs at least %d item(s)' % node['minItems']))
        if 'maxItems' in node and len(value) > node['maxItems']:
            out.append((path, 'takes at most %d item(s)' % node['maxItems']))
        if node.get('uniqueItems'):
            seen = []
            for index, item in enumerate(value):
                canonical = json.dumps(item, sort_keys=True)
                if canonical in seen:  # the item itself is not shown: user data may hold secrets
                    out.append((path + [index], 'repeats item %d (items must be unique)' % seen.index(canonical)))
                    break
                seen.append(canonical)
        items = node.get('items')
        if isinstance(items, dict):
            for index, item in enumerate(value):
                out += self.errors(item, items, path + [index])
        elif isinstance(items, list):
            for index, item in enumerate(value):
                if index < len(items):
                    out += self.errors(item, items[index], path + [index])
                elif node.get('additionalItems', True) is False:
                    out.append((path + [index], 'is one item too many (at most %d)' % len(items)))
                elif isinstance(node.get('additionalItems'), dict):
                    out += self.errors(item, node['additionalItems'], path + [index])
        return out


def _json_type(value):
    for name in ('null', 'boolean', 'integer', 'number', 'string', 'array', 'object'):
        if _TYPES[name](value):
            return name
    return type(value).__name__


def _best(path, branches, fallback):
    """For anyOf/oneOf: the reason of the branch that got furthest (deepest error), else a general one."""
    deepest = max((error for branch in branches for error in branch), key=lambda error: len(error[0]), default=None)
    if deepest is not None and len(deepest[0]) > len(path):
        return deepest
    return (path, fallback)


def schema_errors(config):
    """Every way ``config`` (a dict) fails cloud-init's cloud-config schema: a list of (path, reason), path like ``.users[0].name``."""
    errors = _Validator(schema()).errors(config, schema(), [])
    seen, out = set(), []
    for path, reason in errors:
        item = (_path(path), reason)
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _load_yaml(text):
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None, False
    try:
        return yaml.safe_load(text), True
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = ' (line %d, column %d)' % (mark.line + 1, mark.column + 1) if mark is not None else ''
        problem = getattr(exc, 'problem', None) or 'not valid YAML'
        raise InvalidDeclaration('user_data', 'is not valid YAML%s: %s' % (where, problem)) from None


def check_user_data(user_data, field):
    """Refuse (:class:`InvalidDeclaration` naming ``field`` and the path) user data cloud-init would not accept as cloud-config.

    ``user_data`` is the final document: a dict (cloud-config) or text. Returns what was checked: ``schema`` (dict or
    parsed ``#cloud-config`` text checked against the schema), ``text`` (other user-data formats: left to cloud-init) or
    ``unparsed`` (``#cloud-config`` text where PyYAML is not importable).
    """
    if isinstance(user_data, str):
        if not user_data.lstrip().startswith('#cloud-config'):
            return 'text'
        try:
            config, parsed = _load_yaml(user_data)
        except InvalidDeclaration as exc:
            raise InvalidDeclaration(field, exc.reason) from None
        if not parsed:
            return 'unparsed'
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise InvalidDeclaration(field, 'is #cloud-config whose YAML is not a mapping (it is a %s): cloud-init would ignore it'
                                     % _json_type(config))
    else:
        config = user_data
    errors = schema_errors(config)
    if errors:
        path, reason = errors[0]
        more = ' (and %d more problem(s))' % (len(errors) - 1) if len(errors) > 1 else ''
        raise InvalidDeclaration(field + path, '%s - cloud-init %s would not apply it (its cloud-config schema)%s'
                                 % (reason, cloud_config_schema.CLOUD_INIT_VERSION.split('-', maxsplit=1)[0], more))
    return 'schema'
