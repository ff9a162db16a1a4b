"""The state_diagram_svg filter (a controller plugin: its tests run with the whole of ansible-core, not module_utils only)."""

from __future__ import annotations

import pytest

from ansible_collections.converge.virt.plugins.filter import state_diagram_svg
from ansible_collections.converge.virt.plugins.plugin_utils import _state_diagram_svg


def test_the_filter_draws_the_named_diagram():
    assert state_diagram_svg.FilterModule().filters()['state_diagram_svg']('snapshot') == _state_diagram_svg.render_svg_text('snapshot')


def test_the_filter_refuses_an_input_that_names_no_diagram():
    with pytest.raises(Exception, match='state_diagram_svg: the input must name a diagram'):
        state_diagram_svg.state_diagram_svg(['vm_state'])
