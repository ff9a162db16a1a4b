"""Regression tests named after the seeds of the campaigns that found each violation."""

from tests.chaos import campaign, checker


def test_seed_20261126_a_volume_attached_through_its_pool_counts_as_attached():
    """Seed 20261126 (bounded campaign, 3 hosts): lost-declaration on keep1.raw, attached='c1a' acknowledged, 'none' read at the end.

    The volume module attaches a pool volume as ``<source pool=... volume=...>``; the campaign read only ``file`` sources, so
    every attachment looked absent. The world held the declaration (the module's own result listed the attachment).
    """
    path, volume = '/pools/chaos/keep1.raw', 'keep1.raw'
    assert campaign.uses([{'pool': campaign.POOL, 'volume': volume}], path, volume)
    assert campaign.uses([{'file': path}], path, volume)
    assert not campaign.uses([{'pool': 'other', 'volume': volume}], path, volume)
    assert not campaign.uses([{'pool': campaign.POOL, 'volume': 'keep0.raw'}, {'file': '/pools/chaos/keep0.raw'}], path, volume)


def test_seed_2614_a_delete_that_preempts_a_stop_is_legal_a_success_after_it_is_not():
    """Seed 2614 (60-minute campaign, 3 hosts): 'overlap on c2a': worker 2's stop (task 76f3401c902fa498) began at 53368.58,
    worker 1's delete (3e721f237decbe10) at 53369.22 inside it; the delete removed the VM, the stop failed ("Domain not found").

    The phase model lets delete preempt any task (docs/states.md: "nova delete: preempts any task"; tasks.take_task), so the
    collection did what it documents; the checker counted it as two tasks acting at once. Now a delete that begins inside
    another task's interval is a preemption (counted), as long as the preempted task does not report success; any other
    overlap, and a preempted task that ends 'done', are still violations.
    """
    def span(task, action, begin_at, end_at, outcome):
        return {'kind': 'vm', 'object': 'c2a', 'task_id': task, 'action': action, 'begin': begin_at, 'end': end_at, 'outcome': outcome, 'pid': 1}

    stop = span('76f3401c902fa498-stop', 'stop', 53368.582, 53370.868, 'failed')
    delete = span('3e721f237decbe10-delete', 'delete', 53369.225, 53370.863, 'done')
    assert checker.check_overlaps([stop, delete]) == []
    assert checker.preemptions([stop, delete]) == [(stop, delete)]
    # the preempted stop claiming success, or a start instead of the delete, are overlaps
    assert [v['kind'] for v in checker.check_overlaps([dict(stop, outcome='done'), delete])] == ['overlap']
    assert [v['kind'] for v in checker.check_overlaps([stop, dict(delete, action='start')])] == ['overlap']
    # a task that begins inside a delete is an overlap (only delete preempts)
    assert [v['kind'] for v in checker.check_overlaps([dict(delete, begin=53368.0), dict(stop, begin=53369.0)])] == ['overlap']
