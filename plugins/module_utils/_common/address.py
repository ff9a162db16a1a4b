# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Addresses a guest reports (guest agent, DHCP lease, KubeVirt instance status) before one becomes ``ansible_host``.

The guest controls what its agent reports: a host name or an option-looking word would be
resolved or parsed by whatever connects, ``127.0.0.1`` would send the play's SSH
connection (and its credentials) to the controller itself, ``169.254.169.254`` to a
cloud metadata service. Only an address of another machine is taken.
"""

from __future__ import annotations

import ipaddress


def guest_ip(value):
    """``value`` as the text of a unicast IP address of another machine (IPv4 or IPv6, normalised), else None.

    Refused: anything that is not an IP address (names, prefixes ``10.0.0.1/24``, extra text), and the loopback,
    unspecified, link-local and multicast addresses.
    """
    if not isinstance(value, str):
        return None
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        return None
    if address.is_loopback or address.is_unspecified or address.is_link_local or address.is_multicast:
        return None
    return str(address)
