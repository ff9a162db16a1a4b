# -*- coding: utf-8 -*-
# Copyright: converge.virt contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state diagrams of the phase model as SVG (for the HTML report of playbooks/report.yml)."""

from __future__ import annotations

DOCUMENTATION = r'''
name: state_diagram_svg
short_description: A state diagram of the phase model as an SVG image
version_added: 0.1.0
description:
  - Draws one of the state diagrams of the collection's phase model (the same tables as the Mermaid diagrams of
    C(docs/states.md)) as an inline SVG image, laid out in pure Python on the controller; no JavaScript and no network.
  - Used by C(playbooks/report.yml) to draw the diagrams of its HTML report.
options:
  _input:
    description:
      - The diagram, one of V(vm_state), V(vmi_phase), V(migration) and V(snapshot).
    type: str
    required: true
'''

EXAMPLES = r'''
- name: Write the vm_state diagram to a file
  ansible.builtin.copy:
    content: "{{ 'vm_state' | converge.virt.state_diagram_svg }}"
    dest: /tmp/vm_state.svg
    mode: "0644"
'''

RETURN = r'''
_value:
  description: The diagram as SVG markup (an C(svg) element with its C(title), serialised by C(xml.etree)).
  type: str
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.converge.virt.plugins.module_utils._phase import diagrams
from ansible_collections.converge.virt.plugins.plugin_utils._state_diagram_svg import render_svg_text


def state_diagram_svg(name):
    """The diagram ``name`` as SVG markup."""
    if not isinstance(name, str) or name not in diagrams.DIAGRAMS:
        raise AnsibleFilterError('state_diagram_svg: the input must name a diagram, one of %s; got %r' % (', '.join(sorted(diagrams.DIAGRAMS)), name))
    return render_svg_text(name)


class FilterModule:  # pylint: disable=too-few-public-methods
    """The collection's filters."""

    def filters(self):
        """Filter name to function."""
        return {'state_diagram_svg': state_diagram_svg}
