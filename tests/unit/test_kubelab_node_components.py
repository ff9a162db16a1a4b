"""tools/kubelab/node.py: what the real-node fault tests rely on when they stop and start one component of the node."""

import calendar
import time

import pytest

from tools.kubelab import node


def test_a_time_counts_as_since_a_start_only_from_that_second_on():
    started = calendar.timegm((2026, 11, 29, 4, 40, 0, 0, 0, 0)) + 0.7
    assert node._since('2026-11-29T04:40:00.123456Z', started)  # pylint: disable=protected-access
    assert node._since('2026-11-29T04:41:05Z', started)  # pylint: disable=protected-access
    assert not node._since('2026-11-29T04:39:59.999999Z', started)  # pylint: disable=protected-access
    assert not node._since('2026-11-28T04:40:00Z', started)  # pylint: disable=protected-access
    assert not node._since(None, started)  # pylint: disable=protected-access
    assert not node._since('', time.time())  # pylint: disable=protected-access


@pytest.mark.parametrize('action', [node.stop_component, node.start_component])
def test_only_the_node_components_can_be_stopped_or_started_alone(tmp_path, action):
    with pytest.raises(node.NodeError, match='kube-apiserver is not a component of the node'):
        action(str(tmp_path), 'kube-apiserver')
