"""ansible-doc renders every plugin and every role of the collection without a warning.

The plugins and roles are enumerated from the tree (plugins/modules/*.py, plugins/inventory/*.py,
roles/*), not from ``ansible-doc --list``, so a plugin whose documentation does not load is not
silently left out. Each render must exit 0 with an empty stderr (no warning, no deprecation, no
error), and show every plugin's or role's header and every option it documents.
"""

# pylint: disable=missing-function-docstring

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.integration.ansible_run import ROOT

BIN = os.path.dirname(sys.executable)


def _names(subdir):
    folder = os.path.join(ROOT, 'plugins', subdir)
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith('.py') and not f.startswith('_'))


ROLES = sorted(r for r in os.listdir(os.path.join(ROOT, 'roles')) if os.path.isdir(os.path.join(ROOT, 'roles', r)))


def _doc_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith('ANSIBLE_')}
    env.update({'ANSIBLE_COLLECTIONS_PATH': os.path.join(ROOT, 'build', 'collections'), 'ANSIBLE_NOCOLOR': '1',
                'PATH': BIN + os.pathsep + env.get('PATH', '')})
    return env


def ansible_doc(plugin_type, names, as_json=False):
    cmd = [os.path.join(BIN, 'ansible-doc'), '-t', plugin_type] + (['--json'] if as_json else []) + ['converge.virt.' + n for n in names]
    proc = subprocess.run(cmd, env=_doc_env(), capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == '', 'ansible-doc -t %s printed on stderr:\n%s' % (plugin_type, proc.stderr)
    return proc.stdout


@pytest.mark.parametrize('plugin_type,subdir', [('module', 'modules'), ('inventory', 'inventory')])
def test_every_plugin_renders_without_warnings(plugin_type, subdir):
    names = _names(subdir)
    assert names, 'no %s found under plugins/%s' % (plugin_type, subdir)
    text = ansible_doc(plugin_type, names)
    for name in names:
        assert '> %s converge.virt.%s' % (plugin_type.upper(), name) in text, 'no rendered documentation for %s %s' % (plugin_type, name)
    docs = json.loads(ansible_doc(plugin_type, names, as_json=True))
    for name in names:
        doc = docs['converge.virt.' + name]['doc']
        assert doc['short_description'] and doc['author'], name
        for option in doc.get('options', {}):
            assert option in text, '%s option %s is not rendered' % (name, option)
        if plugin_type == 'module':
            assert docs['converge.virt.' + name]['examples'].strip(), '%s has no EXAMPLES' % name


def test_every_role_renders_without_warnings():
    assert set(ROLES) >= {'lifecycle', 'evacuate', 'reconcile'}
    text = ansible_doc('role', ROLES)
    for role in ROLES:
        spec_path = os.path.join(ROOT, 'roles', role, 'meta', 'argument_specs.yml')
        assert os.path.exists(spec_path), 'role %s has no meta/argument_specs.yml' % role
        with open(spec_path, encoding='utf-8') as handle:
            spec = yaml.safe_load(handle)['argument_specs']['main']
        assert '> ROLE: *converge.virt.%s*' % role in text, 'no rendered documentation for role %s' % role
        section = text.split('> ROLE: *converge.virt.%s*' % role, 1)[1].split('> ROLE: ', 1)[0]
        assert spec['short_description'].split()[0] in section
        for option in spec['options']:
            assert '- %s ' % option in section or '= %s ' % option in section, 'role %s option %s is not rendered' % (role, option)
        defaults_path = os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')
        with open(defaults_path, encoding='utf-8') as handle:
            defaults = yaml.safe_load(handle) or {}
        undocumented = sorted(set(defaults) - set(spec['options']))
        assert not undocumented, 'role %s defaults not in argument_specs: %s' % (role, undocumented)
