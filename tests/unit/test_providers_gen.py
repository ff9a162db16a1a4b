# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/providers_gen.py (issue 35 item 2): the loader maps of plugins/module_utils/_providers are the render of the
registry (this test fails while they are stale), a third backend gets a loader for each module its folder has, and
AnsiballZ's own dependency finder sees in each map only its group's module of each backend (the payload stays per resource)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import shutil

from ansible.executor.module_common import ModuleDepFinder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _gen():
    spec = importlib.util.spec_from_file_location('converge_virt_providers_gen', os.path.join(ROOT, 'tools', 'providers_gen.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _gen()


def test_the_loader_maps_are_the_render_of_the_registry():
    stale = GEN.stale(ROOT)
    assert not stale, 'stale loader maps (run python tools/providers_gen.py): %s' % ', '.join(sorted(os.path.relpath(p, ROOT) for p in stale))


def test_the_registry_names_are_read_from_providers():
    assert GEN.backend_names(ROOT) == ['libvirt', 'kubevirt']


def _copy(tmp_path):
    """A repository copy with _providers and both backends' folder listings (empty module files)."""
    root = tmp_path / 'repo'
    shutil.copytree(os.path.join(ROOT, 'plugins', 'module_utils', '_providers'), str(root / 'plugins' / 'module_utils' / '_providers'))
    for name in ('libvirt', 'kubevirt'):
        folder = root / 'plugins' / 'module_utils' / ('_' + name)
        folder.mkdir(parents=True)
        for module, _resources in GEN.GROUPS.values():
            (folder / (module + '.py')).write_text('')
    return root


def _loaders(text):
    """(LOADERS keys, the module they load, the modules the map's import statements name) of a rendered map."""
    tree = ast.parse(text)
    call = [node.value for node in tree.body if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ['LOADERS']][0]
    assert isinstance(call, ast.Call) and call.func.id == 'loaders'
    words = [arg.value for arg in call.args]
    imports = sorted(alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names)
    return words[1:], words[0], imports


def test_a_third_backend_gets_a_loader_for_each_module_of_its_folder(tmp_path):
    root = _copy(tmp_path)
    init = root / 'plugins' / 'module_utils' / '_providers' / '__init__.py'
    init.write_text(init.read_text().replace("    'kubevirt': KUBEVIRT,\n", "    'kubevirt': KUBEVIRT,\n    'proxmox': PROXMOX,\n"))
    folder = root / 'plugins' / 'module_utils' / '_proxmox'
    folder.mkdir()
    (folder / 'vm_converge.py').write_text('')
    (folder / 'snapshot_runs.py').write_text('')
    assert GEN.backend_names(str(root)) == ['libvirt', 'kubevirt', 'proxmox']
    assert sorted(os.path.basename(path) for path in GEN.stale(str(root))) == ['snapshot.py', 'vm.py']
    assert GEN.main(['--check', '--root', str(root)]) == 1
    assert GEN.stale(str(root)), '--check wrote files'
    assert GEN.main(['--root', str(root)]) == 0 and GEN.stale(str(root)) == {}
    keys, module, imports = _loaders((root / 'plugins' / 'module_utils' / '_providers' / 'vm.py').read_text())
    assert keys == ['libvirt', 'kubevirt', 'proxmox'] and module == 'vm_converge'
    assert imports == ['%s._%s.vm_converge' % (GEN.PACKAGE, name) for name in ('kubevirt', 'libvirt', 'proxmox')]
    keys, _module, imports = _loaders((root / 'plugins' / 'module_utils' / '_providers' / 'volume.py').read_text())
    assert keys == ['libvirt', 'kubevirt'], 'a backend without a volume module got a volume loader'
    assert imports == ['%s._%s.volume_runs' % (GEN.PACKAGE, name) for name in ('kubevirt', 'libvirt')]


def test_ansiballz_sees_only_the_groups_module_of_each_backend_in_each_map():
    for group, (module, _resources) in GEN.GROUPS.items():
        path = os.path.join(ROOT, GEN.PROVIDERS_DIR, group + '.py')
        with open(path, encoding='utf-8') as handle:
            tree = ast.parse(handle.read())
        finder = ModuleDepFinder('%s._providers.%s' % (GEN.PACKAGE, group), tree)
        found = sorted('.'.join(mod) for mod in finder.submodules)
        # the map's own package (loaders) and the group's module of each backend: nothing of another group
        assert found == sorted(['%s._%s.%s' % (GEN.PACKAGE, name, module) for name in GEN.backend_names(ROOT)]
                               + ['%s._providers.loaders' % GEN.PACKAGE]), group


def test_each_loader_imports_the_module_its_map_names_for_ansiballz():
    """What AnsiballZ ships (the import statements) and what the loader imports at run time are the same files."""
    for group, (module, _resources) in GEN.GROUPS.items():
        path = os.path.join(ROOT, GEN.PROVIDERS_DIR, group + '.py')
        with open(path, encoding='utf-8') as handle:
            keys, loaded, imports = _loaders(handle.read())
        maps = importlib.import_module('%s._providers.%s' % (GEN.PACKAGE, group))
        assert list(maps.LOADERS) == keys == GEN.backend_names(ROOT) and loaded == module, group
        for name, loader in maps.LOADERS.items():
            assert loader().__name__ == '%s._%s.%s' % (GEN.PACKAGE, name, module)
            assert loader().__name__ in imports, (group, name)
