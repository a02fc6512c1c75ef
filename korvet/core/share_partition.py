"""Kafka's share partition (KIP-932) as Korvet keeps it on a Redis consumer group: the rules.

One share group on one partition is one Redis consumer group on the partition's stream
(docs/spec/share-groups.md). Redis keeps the pending entries list (PEL): per delivered
entry its owner consumer, idle time and delivery counter. Redis' consumer group is not quite
Kafka's share partition, and the broker's Lua scripts (korvet/storage/lua/share_fetch.lua,
share_ack.lua, share_release.lua) close the gaps exactly as spec/SharePartitionRedis.tla
states them. This module is those decisions, pure and typed, so they are tested here and
the scripts are read against them:

- ``classify``: what the fetch script does with each PEL entry: a reference to a trimmed
  entry is dropped (XACK, ``DropTrimmed``); a session's entry idle below the lock duration
  is a live lock (it counts against ``share.partition.max.record.locks``); an entry idle
  for the lock duration (expired) or parked (released) is claimed again below the delivery
  limit and archived (XACK, ``ArchiveAtLimit``) at it.
- ``plan_fetch``: which entries one fetch acquires: claimable ones lowest offset first, then
  new entries (``XREADGROUP >``) only when none is left claimable, never past the in-flight
  limit, which counts records (live locks), not Kafka's offset width.
- ``guard`` and ``ack_effect``: an acknowledgement is applied only by the entry's owner under
  a live lock above the log start (else INVALID_RECORD_STATE, nothing changes); ACCEPT,
  REJECT and GAP are XACK, RELEASE parks the entry (claimable at once) or archives it at the
  limit, RENEW restarts the idle time.
- ``expand_acks``: the request's acknowledgement batches as (offset, type) pairs, refused
  when they overlap, go backwards or name a type the version does not have.
- ``acquired_runs``: AcquiredRecords as runs of existing consecutive offsets with one
  delivery count each (the Java share consumer expands every range offset by offset).
- ``RedisGroupModel``: the Redis side as a value (PEL, last-delivered id, log start) with the
  scripts' steps on it, which the Hypothesis tests drive against Kafka's rules.

Share sessions (epochs, the session table) are in korvet/core/share_session.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

from korvet.core.errors import ErrorCode

# Kafka's defaults (group.share.*): lock 30 s (Kafka allows 15..60 s), 5 deliveries (2..10),
# 2000 records in flight (100..4000).
DEFAULT_LOCK_MS = 30_000
DEFAULT_DELIVERY_LIMIT = 5
DEFAULT_MAX_LOCKS = 2000
# The Redis consumer that released records are parked on: no session's consumer is named
# so, because a session's is ``MEMBER_PREFIX`` and the member id.
PARK = "park"
MEMBER_PREFIX = "m:"
GROUP_PREFIX = "share:"  # the Redis group of share group g is "share:g": never a classic group's


def consumer_of(member_id: str) -> str:
    """The Redis consumer name of a share member."""
    return MEMBER_PREFIX + member_id


def redis_group_of(group_id: str) -> str:
    """The Redis consumer group that is share group ``group_id`` on each of its partitions."""
    return GROUP_PREFIX + group_id


class AckType(IntEnum):
    """ShareFetch/ShareAcknowledge's acknowledge types (RENEW from v2, KIP-1222)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """A share group's settings on one partition."""

    lock_ms: int = DEFAULT_LOCK_MS  # share.record.lock.duration.ms
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT  # share.delivery.count.limit
    max_locks: int = DEFAULT_MAX_LOCKS  # share.partition.max.record.locks

    def __post_init__(self) -> None:
        if self.lock_ms < 1 or self.delivery_limit < 1 or self.max_locks < 1:
            raise ValueError(f"share limits must be positive: {self}")


@dataclass(frozen=True, slots=True)
class Pending:
    """One PEL entry as XPENDING shows it: offset, owner consumer, idle ms, delivery counter."""

    offset: int
    owner: str
    idle_ms: int
    count: int


class EntryFate(Enum):
    """What the fetch script does with a PEL entry."""

    LIVE = "live"  # a session's lock that has not run out: counts in flight
    CLAIMABLE = "claimable"  # expired or parked, below the limit: the next fetch claims it
    ARCHIVE_AT_LIMIT = "archive-at-limit"  # expired or parked at the limit: XACK
    DROP_TRIMMED = "drop-trimmed"  # a reference to a trimmed entry: XACK


def classify(entry: Pending, log_start: int, limits: ShareLimits) -> EntryFate:
    """The fetch script's rule for one PEL entry (SharePartitionRedis.tla's ``Live``,
    ``Claimable``, ``ArchiveAtLimit`` and ``DropTrimmed``)."""
    if entry.offset < log_start:
        return EntryFate.DROP_TRIMMED
    if entry.owner != PARK and entry.idle_ms < limits.lock_ms:
        return EntryFate.LIVE
    if entry.count >= limits.delivery_limit:
        return EntryFate.ARCHIVE_AT_LIMIT
    return EntryFate.CLAIMABLE


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One fetch's decision: entries to XACK (archived), entries to claim, new entries to read."""

    archive: tuple[int, ...]
    claim: tuple[int, ...]
    read_new: int  # XREADGROUP > COUNT read_new (0: none)
    live: int  # live locks before this fetch


def plan_fetch(pel: Sequence[Pending], log_start: int, limits: ShareLimits,
               max_records: int) -> FetchPlan:
    """What one fetch of up to ``max_records`` acquires (the spec's ``Claim`` then
    ``ReadNew``, n steps at once): every PEL entry is below the last-delivered id, so
    claiming the lowest claimable first and reading new ones only when none is left keeps
    Kafka's order, the lowest AVAILABLE record first."""
    archive: list[int] = []
    claimable: list[int] = []
    live = 0
    for entry in sorted(pel, key=lambda e: e.offset):
        fate = classify(entry, log_start, limits)
        if fate is EntryFate.LIVE:
            live += 1
        elif fate is EntryFate.CLAIMABLE:
            claimable.append(entry.offset)
        else:
            archive.append(entry.offset)
    room = max(0, min(max_records, limits.max_locks - live))
    claim = claimable[:room]
    read_new = room - len(claim) if len(claim) == len(claimable) else 0
    return FetchPlan(tuple(archive), tuple(claim), read_new, live)


def guard(entry: Pending | None, consumer: str, log_start: int, limits: ShareLimits) -> bool:
    """The acknowledgement script's guard (the spec's ``Guard``): the entry is pending, the
    caller's, its lock live, not trimmed."""
    return (entry is not None and entry.owner == consumer and entry.idle_ms < limits.lock_ms
            and entry.offset >= log_start)


class Effect(Enum):
    """What an acknowledgement that passed the guard does in Redis."""

    XACK_ACCEPTED = "xack-accepted"  # ACCEPT: XACK
    XACK_ARCHIVED = "xack-archived"  # REJECT, GAP, RELEASE at the limit: XACK
    PARK = "park"  # RELEASE below the limit: XCLAIM park 0 id IDLE <lock> JUSTID
    RENEW = "renew"  # RENEW: XCLAIM <owner> 0 id JUSTID (idle 0, counter kept)


def ack_effect(kind: AckType, count: int, limits: ShareLimits) -> Effect:
    if kind is AckType.ACCEPT:
        return Effect.XACK_ACCEPTED
    if kind is AckType.RENEW:
        return Effect.RENEW
    if kind is AckType.RELEASE and count < limits.delivery_limit:
        return Effect.PARK
    return Effect.XACK_ARCHIVED


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One AcknowledgementBatch of a request: [first, last] and one type for all, or one a
    offset."""

    first: int
    last: int
    types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ExpandedAcks:
    acks: tuple[tuple[int, AckType], ...]
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def expand_acks(batches: Iterable[AckBatch], *, renew_allowed: bool,
                max_offsets: int) -> ExpandedAcks:
    """The (offset, type) pairs one partition's batches acknowledge, in offset order, or
    INVALID_REQUEST with the reason: batches must go up without overlapping (Kafka's rule),
    name one type or one per offset, and at most ``max_offsets`` offsets in all (no client
    holds more than the in-flight limit; a range of a billion offsets is not walked)."""
    acks: list[tuple[int, AckType]] = []
    after = -1
    for batch in batches:
        width = batch.last - batch.first + 1
        if batch.first < 0 or width < 1 or batch.first <= after:
            return _bad(f"acknowledgement batch [{batch.first}, {batch.last}] is empty, "
                        "negative or not after the one before")
        if len(acks) + width > max_offsets:
            return _bad(f"more than {max_offsets} offsets acknowledged in one partition")
        if len(batch.types) not in (1, width):
            return _bad(f"acknowledgement batch [{batch.first}, {batch.last}] has "
                        f"{len(batch.types)} types: one, or one an offset")
        try:
            kinds = [AckType(t) for t in batch.types]
        except ValueError:
            return _bad(f"unknown acknowledge type in {list(batch.types)}")
        if not renew_allowed and AckType.RENEW in kinds:
            return _bad("RENEW needs ShareAcknowledge/ShareFetch v2 with IsRenewAck")
        for i in range(width):
            acks.append((batch.first + i, kinds[0] if len(kinds) == 1 else kinds[i]))
        after = batch.last
    return ExpandedAcks(tuple(acks))


def _bad(message: str) -> ExpandedAcks:
    return ExpandedAcks((), ErrorCode.INVALID_REQUEST, message)


def acquired_runs(acquired: Iterable[tuple[int, int]],
                  batch_size: int = 0) -> list[tuple[int, int, int]]:
    """AcquiredRecords ``(first, last, delivery count)`` for (offset, count) pairs: runs of
    consecutive offsets with one count, each at most ``batch_size`` records (ShareFetch's
    BatchSize, the client's batches of acknowledgements; 0: no bound). A range never spans
    an offset that was not acquired: the Java share consumer expands each range offset by
    offset, and Korvet's time-scheme offsets are sparse."""
    runs: list[tuple[int, int, int]] = []
    for offset, count in sorted(acquired):
        if (runs and runs[-1][1] + 1 == offset and runs[-1][2] == count
                and (batch_size <= 0 or offset - runs[-1][0] < batch_size)):
            first, _, _ = runs[-1]
            runs[-1] = (first, offset, count)
        else:
            runs.append((offset, offset, count))
    return runs


# ---------------------------------------------------------------------------------------
# The Redis side as a value: what the scripts do, step by step, on a model consumer group.

@dataclass(frozen=True, slots=True)
class Entry:
    owner: str
    idle_ms: int
    count: int


@dataclass(frozen=True, slots=True)
class RedisGroupModel:
    """A Redis consumer group on a stream of offsets ``0..end-1`` (SharePartitionRedis.tla's
    variables): its PEL, last-delivered id, and the log start."""

    end: int = 0
    log_start: int = 0
    last_id: int = -1
    pel: dict[int, Entry] = field(default_factory=dict)

    def pending(self) -> list[Pending]:
        return [Pending(o, e.owner, e.idle_ms, e.count) for o, e in sorted(self.pel.items())]

    def append(self, n: int = 1) -> RedisGroupModel:
        return replace(self, end=self.end + n)

    def tick(self, ms: int, limits: ShareLimits) -> RedisGroupModel:
        """Redis' clock: every entry idle ``ms`` longer (kept up to the lock duration)."""
        return replace(self, pel={o: replace(e, idle_ms=min(e.idle_ms + ms, limits.lock_ms))
                                  for o, e in self.pel.items()})

    def trim(self, start: int) -> RedisGroupModel:
        """XTRIM MINID: the PEL keeps its references."""
        return replace(self, log_start=max(self.log_start, min(start, self.end)))

    def fetch(self, consumer: str, limits: ShareLimits,
              max_records: int) -> tuple[RedisGroupModel, list[tuple[int, int]], list[int]]:
        """share_fetch.lua: (new state, acquired (offset, count) pairs, archived offsets)."""
        plan = plan_fetch(self.pending(), self.log_start, limits, max_records)
        pel = dict(self.pel)
        for o in plan.archive:
            del pel[o]
        got: list[tuple[int, int]] = []
        for o in plan.claim:
            entry = pel[o]
            pel[o] = Entry(consumer, 0, entry.count + 1)
            got.append((o, entry.count + 1))
        last = self.last_id
        for _ in range(plan.read_new):
            nxt = max(last + 1, self.log_start)
            if nxt >= self.end:
                break
            pel[nxt] = Entry(consumer, 0, 1)
            got.append((nxt, 1))
            last = nxt
        return replace(self, pel=pel, last_id=last), got, list(plan.archive)

    def acknowledge(self, consumer: str, acks: Sequence[tuple[int, AckType]],
                    limits: ShareLimits) -> tuple[RedisGroupModel, list[tuple[int, Effect]]]:
        """share_ack.lua: all of one partition's acknowledgements or none (a refused one
        leaves Redis unchanged and answers INVALID_RECORD_STATE: empty effects)."""
        pending = {p.offset: p for p in self.pending()}
        if not all(guard(pending.get(o), consumer, self.log_start, limits) for o, _ in acks):
            return self, []
        pel = dict(self.pel)
        effects: list[tuple[int, Effect]] = []
        for o, kind in acks:  # offsets distinct: expand_acks refuses overlapping batches
            effect = ack_effect(kind, pel[o].count, limits)
            if effect is Effect.PARK:
                pel[o] = Entry(PARK, limits.lock_ms, pel[o].count)
            elif effect is Effect.RENEW:
                pel[o] = replace(pel[o], idle_ms=0)
            else:
                del pel[o]
            effects.append((o, effect))
        return replace(self, pel=pel), effects

    def release(self, consumer: str, limits: ShareLimits) -> tuple[RedisGroupModel, list[int]]:
        """share_release.lua (a session closed): the consumer's entries parked, those at the
        limit archived, trimmed ones left for a fetch to drop; returns the archived offsets."""
        pel = dict(self.pel)
        archived = []
        for o, entry in self.pel.items():
            if entry.owner != consumer or o < self.log_start:
                continue
            if entry.count >= limits.delivery_limit:
                del pel[o]
                archived.append(o)
            else:
                pel[o] = Entry(PARK, limits.lock_ms, entry.count)
        return replace(self, pel=pel), sorted(archived)
