"""The share partition's rules (korvet/core/share_partition.py) against Kafka's.

``RefinementMachine`` (Hypothesis) runs consumers against two share partitions side by side:
``Kafka``, a transcription of spec/SharePartition.tla's state (each record AVAILABLE,
ACQUIRED by an owner with the lock time it has left, ACKNOWLEDGED or ARCHIVED, its delivery
count), and ``RedisGroupModel``, the Redis consumer group that the broker's scripts drive
with the module's rules. After every step the Redis side, read through
SharePartitionRedis.tla's mapping (``k_state``), must be Kafka's: the same record states and
owners, the same delivery counts, and each fetch acquiring the same records, each
acknowledgement accepted or refused alike. This is the spec's ``Refines`` checked on the
rules the scripts implement, with fetches of many records and time in milliseconds.

The example tests check the rules one by one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from korvet.core.errors import ErrorCode
from korvet.core.share_partition import (
    PARK,
    AckBatch,
    AckType,
    Effect,
    EntryFate,
    Pending,
    RedisGroupModel,
    ShareLimits,
    acquired_runs,
    classify,
    expand_acks,
    plan_fetch,
)

LIMITS = ShareLimits(lock_ms=100, delivery_limit=3, max_locks=4)
CONSUMERS = ("m:a", "m:b", "m:c")


# --- the rules, one by one ---------------------------------------------------------------

@pytest.mark.spec("SharePartitionRedis", "Live", "Claimable", "ArchiveAtLimit", "DropTrimmed")
def test_classify_follows_the_specs_predicates() -> None:
    live = Pending(5, "m:a", 99, 1)
    assert classify(live, 0, LIMITS) is EntryFate.LIVE
    assert classify(Pending(5, "m:a", 100, 1), 0, LIMITS) is EntryFate.CLAIMABLE  # expired
    assert classify(Pending(5, PARK, 100, 2), 0, LIMITS) is EntryFate.CLAIMABLE  # released
    assert classify(Pending(5, "m:a", 100, 3), 0, LIMITS) is EntryFate.ARCHIVE_AT_LIMIT
    assert classify(live, 6, LIMITS) is EntryFate.DROP_TRIMMED


@pytest.mark.spec("SharePartitionRedis", "Claim", "ReadNew", "NextNew")
def test_a_fetch_claims_the_lowest_first_and_reads_new_only_when_none_is_left() -> None:
    pel = [Pending(9, PARK, 100, 1), Pending(3, "m:b", 100, 1), Pending(4, "m:b", 5, 1),
           Pending(7, "m:a", 100, 3)]
    plan = plan_fetch(pel, 0, LIMITS, 1)
    assert (plan.claim, plan.read_new, plan.archive, plan.live) == ((3,), 0, (7,), 1)
    plan = plan_fetch(pel, 0, LIMITS, 10)  # room: 4 locks less the live one
    assert (plan.claim, plan.read_new) == ((3, 9), 1)


@pytest.mark.spec("SharePartitionRedis", "RoomInFlight")
def test_the_in_flight_limit_counts_live_locks_only() -> None:
    pel = [Pending(o, "m:a", 0, 1) for o in range(4)]
    assert plan_fetch(pel, 0, LIMITS, 10).read_new == 0
    expired = [Pending(o, "m:a", 100, 1) for o in range(4)]
    assert plan_fetch(expired, 0, LIMITS, 10).claim == (0, 1, 2, 3)


def test_acknowledgement_batches_are_checked() -> None:
    ok = expand_acks([AckBatch(2, 4, (1,)), AckBatch(6, 7, (2, 3))], renew_allowed=False,
                     max_offsets=10)
    assert ok.acks == ((2, AckType.ACCEPT), (3, AckType.ACCEPT), (4, AckType.ACCEPT),
                       (6, AckType.RELEASE), (7, AckType.REJECT))
    for batches, renew in (([AckBatch(2, 4, (1,)), AckBatch(4, 5, (1,))], True),  # overlap
                           ([AckBatch(5, 4, (1,))], True),  # empty
                           ([AckBatch(1, 3, (1, 2))], True),  # two types for three offsets
                           ([AckBatch(1, 1, (9,))], True),  # no such type
                           ([AckBatch(1, 1, (4,))], False),  # RENEW before v2
                           ([AckBatch(0, 10, (1,))], True)):  # more than max_offsets
        assert expand_acks(batches, renew_allowed=renew,
                           max_offsets=10).error is ErrorCode.INVALID_REQUEST


@given(st.dictionaries(st.integers(0, 40), st.integers(1, 3)), st.integers(0, 5))
def test_acquired_runs_are_exact_runs_of_offsets(counts: dict[int, int], size: int) -> None:
    runs = acquired_runs(counts.items(), size)
    covered = [(o, c) for first, last, c in runs for o in range(first, last + 1)]
    assert covered == sorted(counts.items())  # every offset once, none that was not acquired
    assert all(size == 0 or last - first < size for first, last, _ in runs)  # BatchSize
    for (f1, last, c), (first, _, c2) in itertools.pairwise(runs):
        # maximal: no two runs could be one
        assert last + 1 < first or c != c2 or (size and last - f1 + 1 == size)


# --- Kafka's share partition, as spec/SharePartition.tla states it -------------------------

@dataclass
class Kafka:
    end: int = 0
    log_start: int = 0
    state: dict[int, str] = field(default_factory=dict)  # absent: AVAILABLE
    owner: dict[int, str] = field(default_factory=dict)
    left: dict[int, int] = field(default_factory=dict)
    count: dict[int, int] = field(default_factory=dict)

    def st(self, o: int) -> str:
        return self.state.get(o, "AVAILABLE")

    def released(self, o: int) -> str:
        return "ARCHIVED" if self.count.get(o, 0) >= LIMITS.delivery_limit else "AVAILABLE"

    def unlock(self, o: int, new: str) -> None:
        self.state[o] = new
        self.owner.pop(o, None)
        self.left.pop(o, None)

    def acquire(self, c: str, n: int) -> list[tuple[int, int]]:
        got = []
        for _ in range(n):
            acquired = sum(1 for o in range(self.end) if self.st(o) == "ACQUIRED")
            avail = [o for o in range(self.log_start, self.end) if self.st(o) == "AVAILABLE"]
            if not avail or acquired >= LIMITS.max_locks:
                break
            o = avail[0]
            self.state[o], self.owner[o], self.left[o] = "ACQUIRED", c, LIMITS.lock_ms
            self.count[o] = self.count.get(o, 0) + 1
            got.append((o, self.count[o]))
        return got

    def holds(self, c: str, o: int) -> bool:
        return self.st(o) == "ACQUIRED" and self.owner.get(o) == c and self.left.get(o, 0) > 0

    def acknowledge(self, c: str, acks: list[tuple[int, AckType]]) -> bool:
        if not all(self.holds(c, o) for o, _ in acks):
            return False  # INVALID_RECORD_STATE for the partition: nothing applied
        for o, kind in acks:
            if kind is AckType.RENEW:
                self.left[o] = LIMITS.lock_ms
            elif kind is AckType.ACCEPT:
                self.unlock(o, "ACKNOWLEDGED")
            elif kind is AckType.RELEASE:
                self.unlock(o, self.released(o))
            else:
                self.unlock(o, "ARCHIVED")
        return True

    def tick(self, ms: int) -> None:
        for o in list(self.left):
            self.left[o] -= ms
            if self.left[o] <= 0:
                self.unlock(o, self.released(o))

    def close(self, c: str) -> None:
        for o in [o for o, owner in self.owner.items() if owner == c]:
            self.unlock(o, self.released(o))

    def retention(self, s: int) -> None:
        for o in range(self.log_start, s):
            if self.st(o) not in ("ACKNOWLEDGED", "ARCHIVED"):
                self.unlock(o, "ARCHIVED")
        self.log_start = s


def k_state(redis: RedisGroupModel, fate: dict[int, str], o: int) -> tuple[str, str | None]:
    """SharePartitionRedis.tla's KState (and owner) of record o."""
    entry = redis.pel.get(o)
    if entry is not None:
        if o < redis.log_start:
            return "ARCHIVED", None
        if entry.owner != PARK and entry.idle_ms < LIMITS.lock_ms:
            return "ACQUIRED", entry.owner
        return ("ARCHIVED" if entry.count >= LIMITS.delivery_limit else "AVAILABLE"), None
    if o in fate:
        return fate[o], None
    if o < redis.log_start or o <= redis.last_id:
        return "ARCHIVED", None
    return "AVAILABLE", None


class RefinementMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kafka = Kafka()
        self.redis = RedisGroupModel()
        self.fate: dict[int, str] = {}  # what an XACK meant (the proof's history variable)
        self.counts: dict[int, int] = {}  # the delivery count an XACK left (history too)

    @rule(n=st.integers(1, 3))
    def append(self, n: int) -> None:
        self.kafka.end += n
        self.redis = self.redis.append(n)

    @rule(c=st.sampled_from(CONSUMERS), n=st.integers(1, 5))
    def fetch(self, c: str, n: int) -> None:
        counts = {o: e.count for o, e in self.redis.pel.items()}
        self.redis, got, archived = self.redis.fetch(c, LIMITS, n)
        for o in archived:
            self.fate[o], self.counts[o] = "ARCHIVED", counts[o]
        assert got == self.kafka.acquire(c, n)

    @rule(c=st.sampled_from(CONSUMERS), data=st.data())
    def acknowledge(self, c: str, data: st.DataObject) -> None:
        offsets = data.draw(st.lists(st.integers(0, max(self.kafka.end - 1, 0)), min_size=1,
                                     max_size=3, unique=True).map(sorted))
        kinds = data.draw(st.lists(st.sampled_from(list(AckType)), min_size=len(offsets),
                                   max_size=len(offsets)))
        acks = list(zip(offsets, kinds, strict=True))
        counts = {o: e.count for o, e in self.redis.pel.items()}
        self.redis, effects = self.redis.acknowledge(c, acks, LIMITS)
        for o, effect in effects:
            if effect in (Effect.XACK_ACCEPTED, Effect.XACK_ARCHIVED):
                self.fate[o] = "ACKNOWLEDGED" if effect is Effect.XACK_ACCEPTED else "ARCHIVED"
                self.counts[o] = counts[o]
        assert bool(effects) == self.kafka.acknowledge(c, acks)

    @rule(ms=st.sampled_from([1, 30, 99, 100, 250]))
    def tick(self, ms: int) -> None:
        self.kafka.tick(ms)
        self.redis = self.redis.tick(ms, LIMITS)

    @rule(c=st.sampled_from(CONSUMERS))
    def close(self, c: str) -> None:
        counts = {o: e.count for o, e in self.redis.pel.items()}
        self.redis, archived = self.redis.release(c, LIMITS)
        for o in archived:
            self.fate[o], self.counts[o] = "ARCHIVED", counts[o]
        self.kafka.close(c)

    @rule(data=st.data())
    def retention(self, data: st.DataObject) -> None:
        if self.kafka.log_start >= self.kafka.end:
            return
        s = data.draw(st.integers(self.kafka.log_start + 1, self.kafka.end))
        self.kafka.retention(s)
        self.redis = self.redis.trim(s)

    @invariant()
    def the_redis_state_maps_to_kafkas(self) -> None:
        for o in range(self.kafka.end):
            state, owner = k_state(self.redis, self.fate, o)
            assert (state, owner) == (self.kafka.st(o), self.kafka.owner.get(o)), o
            entry = self.redis.pel.get(o)
            count = entry.count if entry is not None else self.counts.get(o, 0)
            if state != "ARCHIVED" or o >= self.kafka.log_start:
                assert count == self.kafka.count.get(o, 0), o

    @invariant()
    def the_delivery_count_never_exceeds_the_limit(self) -> None:
        assert all(e.count <= LIMITS.delivery_limit for e in self.redis.pel.values())


RefinementMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40,
                                               deadline=None)
TestRefinement = pytest.mark.spec(
    "SharePartitionRedis", "Refines", "KState", "Guard", "Accept", "Reject", "Release", "Renew",
    "AckRefused", "CloseSession", "Tick", "XTrim", "PelConsistent",
    note="the rules' model against SharePartition.tla transcribed, through the mapping")(
    RefinementMachine.TestCase)
