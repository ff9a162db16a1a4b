# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layers of plugins/module_utils point one way (docs/architecture.md, "The layers").

Every import of every file under plugins/ (module level or inside a function) is read with ``ast``:

- ``_base`` imports nothing of the collection;
- ``_phase`` imports ``_phase`` and ``_base.errors`` only (no I/O: whether a run is gone it is told by its caller);
- a backend (``_libvirt``, ``_kubevirt``) imports ``_base``, ``_phase``, ``_common`` and itself, never the other backend;
- ``_common`` imports no backend; the registry (``_providers``, the layer above the backends) is the one place that
  maps a backend name to its code (the files of ``BACKEND_MAP``), and no layer below it imports it;
- module_utils imports no controller plugin (filter, inventory, plugin_utils, modules), and no plugin imports the
  build tools (``tools/``: docs/states.md is rendered there).

A planted upward import in a copy of a small tree is reported (the checker is proven to fail, not only to pass).
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PREFIX = 'ansible_collections.converge.virt.'
MU = 'plugins.module_utils.'
BACKENDS = ('_libvirt', '_kubevirt')
# The registry (issue 35): the map name -> provider and, per resource, the function that imports each backend's module
# (plugins/module_utils/_providers); the only files of module_utils that import a backend from above.
REGISTRY = '_providers'
BACKEND_MAP = frozenset('plugins/module_utils/_providers/%s.py' % name for name in (
    '__init__', 'migration', 'reconcile', 'snapshot', 'vm', 'vm_info', 'volume'))
# top-level names of the build tools (tools/ and the modules in it that tools/gen_docs.py puts on sys.path)
BUILD_TOOLS = frozenset(['tools', 'states_doc', 'gen_docs'])


def _imports(path, package):
    """(line, dotted target) of every import in the file at ``path`` (targets relative imports resolve to as well)."""
    with open(path, encoding='utf-8') as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                parts = package.split('.')
                parts = parts[:len(parts) - node.level + 1]
                base = '.'.join(parts + ([base] if base else []))
            found.extend((node.lineno, base + '.' + alias.name) for alias in node.names)
    return found


def _layer(dotted):
    """The collection-relative name of an import (``plugins.module_utils._phase.tasks.X``), or None outside it."""
    if dotted.startswith(PREFIX):
        return dotted[len(PREFIX):]
    return None


def _rule(rel_file, target):
    """Why importing ``target`` (collection-relative, dotted) from ``rel_file`` points the wrong way, or None."""
    parts = rel_file.split('/')
    if parts[0] != 'plugins':
        return None
    if parts[1] != 'module_utils':
        return None
    if not target.startswith(MU):
        return 'module_utils imports a controller plugin (%s)' % target
    layer, target_layer = parts[2], target[len(MU):].split('.')[0]
    if target_layer == REGISTRY and layer != REGISTRY:
        return '%s imports the registry %s (the layer above the backends)' % (layer, REGISTRY)
    if layer == REGISTRY:
        if target_layer in BACKENDS and rel_file not in BACKEND_MAP:
            return 'the registry imports backend %s outside the backend map' % target_layer
        return None
    if layer == '_base':
        return 'the bottom layer _base imports %s' % target_layer
    if layer == '_phase':
        if target_layer == '_phase' or target == MU + '_base.errors' or target.startswith(MU + '_base.errors.'):
            return None
        return '_phase (pure tables and planners) imports %s' % target[len(MU):].rsplit('.', 1)[0]
    if layer in BACKENDS:
        if target_layer in BACKENDS and target_layer != layer:
            return 'backend %s imports the other backend %s' % (layer, target_layer)
        return None
    if layer == '_common' and target_layer in BACKENDS:
        return '_common imports backend %s (only the registry %s maps a name to a backend)' % (target_layer, REGISTRY)
    return None


def violations(root):
    """Every import under ``root``/plugins that points the wrong way, as 'file:line: target (why)'."""
    found = []
    for folder, dirs, files in os.walk(os.path.join(root, 'plugins')):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, '/')
            package = (PREFIX + rel[:-len('.py')].replace('/', '.')).rsplit('.', 1)[0]
            for line, dotted in _imports(path, package):
                target = _layer(dotted)
                if target is None:
                    why = 'a plugin imports a build tool' if dotted.split('.')[0] in BUILD_TOOLS else None
                else:
                    why = _rule(rel, target)
                if why:
                    found.append('%s:%d: %s (%s)' % (rel, line, dotted, why))
    return found


def test_no_import_points_upward():
    assert violations(ROOT) == []


def test_the_backend_map_exists():
    for rel in BACKEND_MAP:
        assert os.path.isfile(os.path.join(ROOT, rel)), '%s is named as the backend map but is gone: update BACKEND_MAP' % rel


def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding='utf-8')
    return str(tmp_path)


FROM = 'from ansible_collections.converge.virt.plugins.module_utils.'


@pytest.mark.parametrize('rel,text,why', [
    ('plugins/module_utils/_phase/x.py', FROM + '_common.wait import wait_until\n', '_phase (pure tables and planners) imports _common.wait'),
    ('plugins/module_utils/_phase/x.py', FROM + '_base.owner import owner_gone\n', '_phase (pure tables and planners) imports _base.owner'),
    ('plugins/module_utils/_phase/x.py', 'def f():\n    ' + FROM + '_libvirt import views\n', '_phase (pure tables and planners) imports _libvirt'),
    ('plugins/module_utils/_base/x.py', FROM + '_phase import tasks\n', 'the bottom layer _base imports _phase'),
    ('plugins/module_utils/_common/x.py', FROM + '_kubevirt.client import Client\n', '_common imports backend _kubevirt'),
    ('plugins/module_utils/_common/runners/vm_runs.py', 'def load():\n    ' + FROM + '_libvirt import vm_runs\n', '_common imports backend _libvirt'),
    ('plugins/module_utils/_libvirt/x.py', FROM + '_providers import PROVIDERS\n', '_libvirt imports the registry _providers'),
    ('plugins/module_utils/_common/x.py', FROM + '_providers.vm import LOADERS\n', '_common imports the registry _providers'),
    ('plugins/module_utils/_providers/x.py', FROM + '_libvirt import vm_runs\n', 'the registry imports backend _libvirt outside the backend map'),
    ('plugins/module_utils/_libvirt/x.py', FROM + '_kubevirt import observe\n', 'backend _libvirt imports the other backend _kubevirt'),
    ('plugins/module_utils/_common/x.py', 'from ansible_collections.converge.virt.plugins.plugin_utils import _state_inventory\n',
     'module_utils imports a controller plugin'),
    ('plugins/filter/x.py', 'import states_doc\n', 'a plugin imports a build tool'),
    ('plugins/module_utils/_phase/x.py', 'from .._common import wait\n', '_phase (pure tables and planners) imports _common'),
    ('plugins/module_utils/_common/x.py', 'from tools.states_doc import render_states_markdown\n', 'a plugin imports a build tool'),
])
def test_an_upward_import_is_reported(tmp_path, rel, text, why):
    root = _tree(tmp_path, {rel: text, 'plugins/module_utils/_phase/ok.py': FROM + '_base.errors import InvalidDeclaration\n' + FROM + '_phase import tasks\n'})
    found = violations(root)
    assert len(found) == 1 and found[0].startswith(rel + ':') and why in found[0], found


def test_allowed_imports_are_not_reported(tmp_path):
    root = _tree(tmp_path, {
        'plugins/module_utils/_phase/a.py': (FROM + '_base.errors import InvalidDeclaration\n' + FROM + '_phase import tasks\nimport os\n'
                                             + FROM + '_base import errors\n'),
        'plugins/module_utils/_libvirt/a.py': FROM + '_common import driver\n' + FROM + '_phase import tasks\n' + FROM + '_base.owner import owner_id\n',
        'plugins/module_utils/_providers/vm.py': 'def load():\n    ' + FROM + '_libvirt import vm_converge\n',
        'plugins/module_utils/_providers/__init__.py': FROM + '_libvirt.provider import PROVIDER\n' + FROM + '_common import registry\n',
        'plugins/modules/x.py': FROM + '_providers import PROVIDERS\n',
        'plugins/modules/vm.py': FROM + '_libvirt import vm_backend\n',
        'plugins/filter/f.py': 'from ansible_collections.converge.virt.plugins.plugin_utils import _state_diagram_svg\n',
    })
    assert violations(root) == []
