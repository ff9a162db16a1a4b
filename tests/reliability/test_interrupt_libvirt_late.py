"""Interruption, second half: rounds FIRST_HALF + 1 .. ROUNDS of test_interrupt_libvirt.py's SIGKILL cycle (its module
doc says what each round does and checks), on a lab of its own, from the world the first half's rounds leave.

A file of its own so that the integration tier's two xdist workers (--dist loadfile: whole files per worker) run the
two halves of the longest test at the same time.
"""

import pytest

from tests.reliability import reliability_lab as rl
from tests.reliability.test_interrupt_libvirt import CYCLE, FIRST_HALF, ROUNDS, TRIGGERS, run_rounds


@pytest.fixture(scope='module')
def lab(tmp_path_factory, virtlab_layout):
    started = rl.start_lab(str(tmp_path_factory.mktemp('rilate')), virtlab_layout(3))
    try:
        yield started
    finally:
        rl.stop_lab(started)


def test_sigkill_at_the_last_ten_points_then_rerun_converges(lab, tmp_path):
    points = run_rounds(lab, tmp_path, FIRST_HALF + 1, ROUNDS)
    # together with the first half's kill points (the labels of its rounds' triggers), every round had a point of its own
    first_half = []
    seen = {}
    for number in range(1, FIRST_HALF + 1):
        op = CYCLE[(number - 1) % len(CYCLE)]
        trigger = TRIGGERS[op][seen.get(op, 0) % len(TRIGGERS[op])]()
        seen[op] = seen.get(op, 0) + 1
        first_half.append('%s: %s' % (op, trigger.label))
    assert len(set(first_half) | set(points)) >= 20, (first_half, points)
