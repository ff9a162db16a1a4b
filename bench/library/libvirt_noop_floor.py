# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark control (issue 16): the least any Ansible module can do to tell that a libvirt VM needs no change.

ansible.builtin.ping's work plus what every no-op check of a libvirt domain must do through libvirt-python: import
libvirt and xml.etree, open the connection, look the domain up by name, read its state and its XML definition and
parse it. No comparison, no task record, no result beyond ``changed: false``. bench/vm_vs_ping.py runs it as the
``libvirt_floor`` kind: its ratio to ping is what libvirt-python alone costs a task; converge.virt.vm's ratio to it
is what the collection adds on top. Not part of the collection; used only through ANSIBLE_LIBRARY by the bench.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={'uri': {'type': 'str', 'required': True}, 'name': {'type': 'str', 'required': True}},
                           supports_check_mode=True)
    import libvirt  # pylint: disable=import-outside-toplevel
    conn = libvirt.open(module.params['uri'])
    try:
        dom = conn.lookupByName(module.params['name'])
        state, _reason = dom.state()
        root = ET.fromstring(dom.XMLDesc(0))
    finally:
        conn.close()
    module.exit_json(changed=False, state=state, name=root.findtext('name'))


if __name__ == '__main__':
    main()
