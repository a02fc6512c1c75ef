"""Partition leaders by rendezvous hashing (korvet/core/placement.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.core import placement
from tests.support.examples import examples

brokers = st.lists(st.integers(0, 1000), min_size=1, max_size=6, unique=True)
topics = st.text(min_size=1, max_size=20)


@settings(max_examples=examples(1))
@given(brokers, topics, st.integers(0, 100))
def test_every_broker_computes_the_same_live_leader(ids: list[int], topic: str,
                                                    partition: int) -> None:
    chosen = placement.leader(ids, topic, partition)
    assert chosen in ids
    assert placement.leader(list(reversed(ids)), topic, partition) == chosen


@settings(max_examples=examples(1))
@given(brokers, topics, st.integers(0, 100), st.integers(0, 1000))
def test_a_partition_moves_only_when_its_leader_leaves(ids: list[int], topic: str,
                                                      partition: int, other: int) -> None:
    chosen = placement.leader(ids, topic, partition)
    # another broker joining takes the partition or leaves it where it was
    joined = placement.leader(sorted({*ids, other}), topic, partition)
    assert joined in (chosen, other)
    # a broker that is not the leader leaving does not move it
    rest = [b for b in ids if b != other or b == chosen]
    assert placement.leader(rest, topic, partition) == chosen


def test_partitions_spread_over_the_brokers() -> None:
    leaders = [placement.leader([1, 2, 3], "spread", p) for p in range(300)]
    assert all(60 <= leaders.count(b) <= 140 for b in (1, 2, 3)), \
        {b: leaders.count(b) for b in (1, 2, 3)}
