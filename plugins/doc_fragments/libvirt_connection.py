# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options shared by the libvirt side of every module."""

from __future__ import annotations

# The option entries and requirements, also composed into the converge.virt.backend fragment's ACT and READ variants.
OPTIONS = r'''
  uri:
    description:
      - libvirt connection URI, for example V(qemu:///system), V(qemu+ssh://root@host/system),
        V(qemu+tcp://127.0.0.11:16511/system) or V(qemu+unix:///system?socket=/path/libvirt-sock).
      - A password in the URI is accepted and never shown; prefer O(password).
      - Defaults to the E(LIBVIRT_DEFAULT_URI) environment variable, then V(qemu:///system).
    type: str
  username:
    description:
      - User name for libvirt's SASL authentication, when the URI needs credentials.
    type: str
  password:
    description:
      - Password for libvirt's SASL authentication. Never logged nor returned.
    type: str
'''

REQUIREMENTS = r'''
  - libvirt-python for O(backend=libvirt)
'''


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment."""

    DOCUMENTATION = 'options:\n' + OPTIONS + 'requirements:\n' + REQUIREMENTS
