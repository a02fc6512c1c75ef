"""The log cleaner's choices (korvet/core/cleaner.py): Kafka's cleanable ratio and the order
of a round, the filthiest partition first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from korvet.core.cleaner import (
    PENDING,
    BatchFacts,
    CleanSettings,
    PartitionDirt,
    aborted_ranges,
    cleanable_topic,
    judge_batch,
    map_batches,
    round_order,
)
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
    ({"cleanup.policy": "compact", "korvet.storage.format": "batches"}, True),
    ({"cleanup.policy": "delete", "korvet.storage.format": "batches"}, False),
])
def test_the_cleaner_runs_on_compacted_topics(configs: dict[str, str],
                                                      cleaned: bool) -> None:
    assert cleanable_topic(TopicConfig(configs)) is cleaned


# --- the batches format: a batch's records judged one by one (spec Keep, Mark) -------------

def batch(at: tuple[int, int], records: list[tuple[int, bytes | None, bool]], *,
          producer: int = -1, transactional: bool = False, control: bool = False,
          horizon: str | None = None, max_timestamp: int = 0) -> BatchFacts:
    return BatchFacts(at, max_timestamp, producer, transactional, control, records, horizon)


@pytest.mark.spec("Compaction", "Keep", "Mark", note="Format batches")
def test_a_batch_keeps_its_keys_latest_records_and_its_tombstones_until_their_horizon() -> None:
    """Superseded records go, within the batch too; a record without a key goes (written
    before the topic became compacted: Kafka's cleaner drops it); a tombstone is marked
    pending at its first clean, gets the last swap's time plus delete.retention.ms at the next,
    and goes once that has passed."""
    b = batch((10, 0), [(0, b"a", True), (1, b"b", True), (2, b"a", True), (3, None, True),
                        (4, b"t", False)])
    later = {b"a": ((10, 0), 2), b"b": ((20, 0), 0), b"t": ((10, 0), 4)}
    first = judge_batch(b, later, {}, now=1000, last_swap=-1, retention_ms=50)
    assert (first.keep, first.horizon, first.removed) == (frozenset({2, 4}), PENDING, 3)
    marked = batch((10, 0), b.records, horizon=PENDING)
    second = judge_batch(marked, later, {}, now=1000, last_swap=990, retention_ms=50)
    assert (second.keep, second.horizon) == (frozenset({2, 4}), "1040")
    due = batch((10, 0), b.records, horizon="1040")
    assert judge_batch(due, later, {}, now=1040, last_swap=990, retention_ms=50).keep == \
        frozenset({2})


@pytest.mark.spec("Compaction", "AbortedData", "InMap", note="Format batches")
def test_aborted_batches_go_and_markers_stay_and_neither_is_mapped() -> None:
    aborted = aborted_ranges(["7 5-0 9-0", "bad member"])
    data = batch((6, 0), [(0, b"k", True)], producer=7, transactional=True)
    committed = batch((12, 0), [(0, b"k", True)], producer=7, transactional=True)
    marker = batch((9, 0), [(0, None, True)], producer=7, transactional=True, control=True)
    assert judge_batch(data, {}, aborted, now=0, last_swap=0, retention_ms=0).keep == frozenset()
    assert judge_batch(marker, {}, aborted, now=0, last_swap=0, retention_ms=0).keep == \
        frozenset({0})
    mapped = map_batches([data, marker, committed], young=100, aborted=aborted)
    assert mapped.latest == {b"k": ((12, 0), 0)} and mapped.mapped == 3


@pytest.mark.spec("Compaction", "Horizon", "Mark", note="Format batches: markers")
def test_a_marker_stays_until_its_delete_horizon_then_goes() -> None:
    """A transaction marker below the head is kept, its horizon pending, at its first clean;
    the next pass fixes the horizon at the last swap's time plus delete.retention.ms, and
    once that has passed the marker goes, as a tombstone does (spec Keep, Mark): a compacted
    topic written by transactions (Kafka Streams' and Connect's exactly-once) does not keep a
    marker per transaction for ever."""
    marker = batch((9, 0), [(0, None, True)], producer=7, transactional=True, control=True)
    first = judge_batch(marker, {}, {}, now=10, last_swap=0, retention_ms=50)
    assert (first.keep, first.horizon, first.removed) == (frozenset({0}), PENDING, 0)
    pending = batch((9, 0), [(0, None, True)], producer=7, transactional=True, control=True,
                    horizon=PENDING)
    fixed = judge_batch(pending, {}, {}, now=120, last_swap=100, retention_ms=50)
    assert (fixed.keep, fixed.horizon) == (frozenset({0}), "150")
    timed = batch((9, 0), [(0, None, True)], producer=7, transactional=True, control=True,
                  horizon="150")
    assert judge_batch(timed, {}, {}, now=149, last_swap=100, retention_ms=50).keep == {0}
    gone = judge_batch(timed, {}, {}, now=150, last_swap=100, retention_ms=50)
    assert (gone.keep, gone.removed) == (frozenset(), 1)


@pytest.mark.spec("Compaction", "Young", note="Format batches")
def test_the_map_stops_at_the_first_young_batch() -> None:
    old = batch((1, 0), [(0, b"k", True)], max_timestamp=10)
    young = batch((2, 0), [(0, b"k", True)], max_timestamp=11)
    mapped = map_batches([old, young, old], young=10, aborted={})
    assert (mapped.latest, mapped.mapped, mapped.head) == ({b"k": ((1, 0), 0)}, 1, (2, 0))
