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


# --- which broker lists a group (ListGroups with several brokers) -----------------------

owners = st.one_of(st.none(), st.integers(0, 1000).map(str), st.just("not-a-broker"))


@settings(max_examples=examples(1))
@given(brokers, topics, owners, st.integers(0, 100), st.integers(0, 100))
def test_one_live_broker_lists_a_group_and_its_live_holder_is_that_one(
        ids: list[int], group: str, owner: str | None, expires: int, now: int) -> None:
    chosen = placement.lister(ids, group, owner, expires, now)
    assert chosen in ids
    assert placement.lister(list(reversed(ids)), group, owner, expires, now) == chosen
    if owner is not None and expires > now and owner in {str(b) for b in ids}:
        assert chosen == int(owner), "a live holder of the lease lists its group"


@settings(max_examples=examples(1))
@given(brokers, st.lists(st.tuples(topics, owners, st.integers(0, 100)), max_size=12),
       st.integers(0, 100))
def test_the_merged_listing_has_every_group_exactly_once(
        ids: list[int], leases: list[tuple[str, str | None, int]], now: int) -> None:
    groups = {group: (owner, expires) for group, owner, expires in leases}
    by_broker = {b: [g for g, (owner, expires) in groups.items()
                     if placement.lister(ids, g, owner, expires, now) == b] for b in ids}
    merged = [g for listed in by_broker.values() for g in listed]
    assert sorted(merged) == sorted(groups)


@settings(max_examples=examples(1))
@given(brokers, topics, st.integers(0, 1000))
def test_an_uncoordinated_group_stays_with_its_lister_when_another_broker_leaves(
        ids: list[int], group: str, other: int) -> None:
    chosen = placement.lister(ids, group, None, 0, 0)
    rest = [b for b in ids if b != other or b == chosen]
    assert placement.lister(rest, group, None, 0, 0) == chosen
    # an expired lease counts as no lease
    assert placement.lister(ids, group, str(ids[0]), 5, 5) == chosen


def test_uncoordinated_groups_spread_over_the_brokers() -> None:
    listers = [placement.lister([1, 2, 3], f"g{i}", None, 0, 0) for i in range(300)]
    assert all(60 <= listers.count(b) <= 140 for b in (1, 2, 3))
