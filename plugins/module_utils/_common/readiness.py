# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waiting for readiness (``wait_for``), the same on every backend: a backend gives a probe, this file the rest.

The phases and their order are in ``_phase/readiness.py``; the address a guest reports is taken only when it is an
address of another machine (``address.guest_ip``), IPv4 first; the port is tried from the host that runs the module.
"""

from __future__ import annotations

import socket
import time

from ansible_collections.converge.virt.plugins.module_utils._common.address import guest_ip
from ansible_collections.converge.virt.plugins.module_utils._base.errors import WaitTimeout
from ansible_collections.converge.virt.plugins.module_utils._common.wait import wait_for
from ansible_collections.converge.virt.plugins.module_utils._phase import readiness as phase

DEFAULT_PORT = 22


def pick_address(candidates):
    """The address to connect to among ``candidates`` (texts): the first IPv4 one of another machine, else the first IPv6 one."""
    usable = [address for address in (guest_ip(value) for value in candidates) if address]
    ipv4 = [address for address in usable if ':' not in address]
    return (ipv4 or usable or [None])[0]


def port_open(address, port, timeout=1.0):
    """True when a TCP connection to ``address``:``port`` is accepted (and closed at once)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_ready(probe, wanted, timeout, port=DEFAULT_PORT, name='vm', clock=time.monotonic, sleep=time.sleep):  # pylint: disable=too-many-arguments
    """Call ``probe()`` (a ``phase.Readiness`` with ``port_open`` None) until the guest reaches ``wanted``; return the last one.

    The port is tried only when ``wanted`` is ``port`` and an address is known. A timeout raises WaitTimeout naming what
    is missing, with the readiness reached so far as ``last_observed``.
    """
    def observe():
        seen = probe()
        if wanted == phase.PORT and seen.address and phase.reached(phase.readiness_word(seen), phase.ADDRESS):
            seen = seen._replace(port_open=port_open(seen.address, port))
        return seen

    try:
        return wait_for(observe, lambda seen: phase.reached(phase.readiness_word(seen), wanted), timeout, 'readiness %s' % wanted,
                        initial=0.5, cap=2.0, clock=clock, sleep=sleep, describe=lambda seen: seen)
    except WaitTimeout as exc:
        seen = exc.details['last_observed']
        raise WaitTimeout('%s: readiness %s not reached within %ss: %s (readiness reached: %s)'
                          % (name, wanted, timeout, phase.missing(seen, wanted, port), phase.readiness_word(seen) or 'none'),
                          last_observed=public(seen))


def public(seen):
    """The readiness part of a result: ``readiness`` (the word) and ``address``."""
    return {'readiness': phase.readiness_word(seen), 'address': seen.address}
