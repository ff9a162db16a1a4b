"""Regression tests named after the seeds of the campaigns that found each violation."""

from tests.chaos import campaign


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
