"""Offline intersphinx inventories for `make docsite` (Sphinx's objects.inv format, version 2).

The conf.py that ``antsibull-docs sphinx-init`` writes maps ``python``, ``python3``, ``jinja2`` and
``ansible_devel`` to the published docs, each with a local fallback file (``../<name>.inv``) read when the URL
cannot be fetched. The build runs without network (sphinx-build -W: an unreachable inventory is an error), so this
writes those fallback files: the targets of the Ansible documentation that the generated pages refer to (the
links still point to docs.ansible.com), and empty inventories for the others. A page that starts referring to
another external target fails the build with ``undefined label`` naming it: add it to ANSIBLE_TARGETS.

    python tools/docsite_inventory.py build/docsite
"""

import os
import sys
import zlib

# (name, domain:role, uri relative to the inventory's base URL; '$' stands for the name, as in Sphinx's format)
ANSIBLE_TARGETS = (
    ('common_return_values', 'std:label', 'reference_appendices/common_return_values.html#common-return-values', 'Return Values'),
    ('ansible_configuration_settings', 'std:label', 'reference_appendices/config.html#ansible-configuration-settings', 'Ansible Configuration Settings'),
    ('ANSIBLE_CACHE_PLUGIN', 'std:envvar', 'reference_appendices/config.html#envvar-$', '-'),
    ('ANSIBLE_CACHE_PLUGIN_CONNECTION', 'std:envvar', 'reference_appendices/config.html#envvar-$', '-'),
    ('ANSIBLE_CACHE_PLUGIN_PREFIX', 'std:envvar', 'reference_appendices/config.html#envvar-$', '-'),
    ('ANSIBLE_CACHE_PLUGIN_TIMEOUT', 'std:envvar', 'reference_appendices/config.html#envvar-$', '-'),
)
INVENTORIES = {'ansible_devel.inv': ('Ansible', 'devel', ANSIBLE_TARGETS), 'python2.inv': ('Python', '2', ()),
               'python3.inv': ('Python', '3', ()), 'jinja2.inv': ('Jinja', '3', ())}


def inventory_bytes(project, version, targets):
    """One objects.inv file: a plain header, then the entries compressed with zlib."""
    header = '# Sphinx inventory version 2\n# Project: %s\n# Version: %s\n# The remainder of this file is compressed using zlib.\n' % (project, version)
    body = ''.join('%s %s %d %s %s\n' % (name, role, 1 if role.endswith('envvar') else -1, uri, title) for name, role, uri, title in targets)
    return header.encode('utf-8') + zlib.compress(body.encode('utf-8'))


def main(argv):
    if len(argv) != 1 or not os.path.isfile(os.path.join(argv[0], 'conf.py')):
        sys.exit('usage: docsite_inventory.py DOCSITE_DIR (the directory antsibull-docs sphinx-init wrote, with conf.py)')
    for name, (project, version, targets) in INVENTORIES.items():
        with open(os.path.join(argv[0], name), 'wb') as handle:
            handle.write(inventory_bytes(project, version, targets))


if __name__ == '__main__':
    main(sys.argv[1:])
