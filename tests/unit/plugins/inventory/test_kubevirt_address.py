# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kubevirt inventory sets ansible_host only from an IP address of another machine (the guest agent reports them)."""

from __future__ import annotations

from ansible_collections.converge.virt.plugins.inventory.kubevirt import _address


def test_the_kubevirt_inventory_takes_only_an_ip_address_as_ansible_host():
    vmi = {'status': {'interfaces': [{'name': 'a', 'ipAddress': 'attacker.example'}, {'name': 'b', 'ipAddress': '127.0.0.1'},
                                     {'name': 'c', 'ipAddress': '10.244.0.7'}]}}
    assert _address(vmi) == '10.244.0.7'
    assert _address({'status': {'interfaces': [{'ipAddress': 'x; rm -rf /'}, {'ipAddress': '169.254.169.254'}]}}) is None
    assert _address(None) is None
