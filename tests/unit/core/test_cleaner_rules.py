"""The log cleaner's choices (korvet/core/cleaner.py): Kafka's cleanable ratio and the order
of a round, the filthiest partition first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.core.cleaner import CleanSettings, PartitionDirt, cleanable_topic, round_order
from korvet.core.topics import TopicConfig

dirt = st.builds(PartitionDirt, topic=st.sampled_from(["a", "b"]),
                 partition=st.integers(0, 3), dirty=st.integers(0, 100),
                 clean=st.integers(0, 100), overdue=st.booleans(), busy=st.booleans(),
                 min_dirty_ratio=st.sampled_from([0.0, 0.5, 0.9]))


@given(st.lists(dirt, max_size=12))
@pytest.mark.spec("Compaction", "Begin")
def test_a_round_visits_the_filthiest_cleanable_partition_first(parts: list[PartitionDirt]
                                                                ) -> None:
    """Kafka's LogCleanerManager: a partition is cleanable when its dirty ratio is above
    min.cleanable.dirty.ratio or a dirty record is past max.compaction.lag.ms; of those the
    highest ratio goes first. Another broker's partition is not visited."""
    order = round_order(parts)
    assert all(not p.busy for p in order)
    assert len(order) == sum(not p.busy for p in parts)
    cleanable = [p for p in order if p.cleanable]
    assert order[:len(cleanable)] == cleanable  # the cleanable ones first
    ratios = [p.ratio for p in cleanable]
    assert ratios == sorted(ratios, reverse=True)
    for p in parts:
        expected = not p.busy and p.dirty > 0 and (
            p.dirty / (p.dirty + p.clean) > p.min_dirty_ratio or p.overdue)
        assert p.cleanable == expected


def test_kafkas_defaults_and_names() -> None:
    settings = CleanSettings.of(TopicConfig({"cleanup.policy": "compact"}))
    assert settings == CleanSettings(min_dirty_ratio=0.5, min_lag_ms=0,
                                     max_lag_ms=2**63 - 1, segment_ms=604_800_000,
                                     delete_retention_ms=86_400_000)
    assert CleanSettings.of(TopicConfig({"min.cleanable.dirty.ratio": "0.25d"})
                            ).min_dirty_ratio == 0.25


@pytest.mark.parametrize(("configs", "cleaned"), [
    ({"cleanup.policy": "compact"}, True),
    ({"cleanup.policy": "compact,delete"}, True),
    ({"cleanup.policy": "delete"}, False),
    ({"cleanup.policy": ""}, False),
    ({"cleanup.policy": "compact", "korvet.storage.format": "batches"}, False),
])
def test_the_cleaner_runs_on_compacted_records_topics(configs: dict[str, str],
                                                      cleaned: bool) -> None:
    assert cleanable_topic(TopicConfig(configs)) is cleaned
