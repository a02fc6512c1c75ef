"""The log cleaner's choices, as pure functions (spec/Compaction.tla, docs/spec/compaction.md).

A compacted topic (cleanup.policy has ``compact``) keeps the latest record of every key; the
broker's cleaner task (korvet/server/cleaner.py) runs the passes, one Lua call per chunk
(korvet/storage/lua/clean.lua). What is decided here, from the topic's settings under Kafka's
names and defaults, is which partitions a round of the cleaner looks at and in which order:
the filthiest first (Kafka's LogCleanerManager.grabFilthiestCompactedLog), a partition being
cleanable when its dirty section is more than ``min.cleanable.dirty.ratio`` of its cleanable
log, or holds a record older than ``max.compaction.lag.ms``. The script checks the same rule
again when a pass begins (spec ``Begin``), under the partition's lease.
"""

from __future__ import annotations

from dataclasses import dataclass

from korvet.core.topics import TopicConfig, compacted


@dataclass(frozen=True, slots=True)
class CleanSettings:
    """A compacted topic's cleaner settings (Kafka's topic configs; the defaults are Kafka's)."""

    min_dirty_ratio: float  # min.cleanable.dirty.ratio (0.5)
    min_lag_ms: int  # min.compaction.lag.ms (0): younger records are the head, never cleaned
    max_lag_ms: int  # max.compaction.lag.ms (2^63 - 1): a record dirty this long forces a pass
    segment_ms: int  # segment.ms (7 days): the active segment rolls at min(this, max lag)
    delete_retention_ms: int  # delete.retention.ms (1 day): a tombstone's life once visible

    @staticmethod
    def of(config: TopicConfig) -> CleanSettings:
        return CleanSettings(
            min_dirty_ratio=float(config.get("min.cleanable.dirty.ratio").rstrip("fFdD")),
            min_lag_ms=config.get_int("min.compaction.lag.ms"),
            max_lag_ms=config.get_int("max.compaction.lag.ms"),
            segment_ms=config.get_int("segment.ms"),
            delete_retention_ms=config.get_int("delete.retention.ms"))


def cleanable_topic(config: TopicConfig) -> bool:
    """Whether the cleaner runs on the topic: compacted, in either storage format."""
    return compacted(config)


@dataclass(frozen=True, slots=True)
class PartitionDirt:
    """What clean.lua's status says of one partition: the records of its dirty section
    (between the checkpoint and the head), the entries of its clean section, whether a dirty
    record is older than max.compaction.lag.ms, whether another broker's pass holds it."""

    topic: str
    partition: int
    dirty: int
    clean: int
    overdue: bool
    busy: bool
    min_dirty_ratio: float

    @property
    def ratio(self) -> float:
        """Kafka's cleanableRatio: dirty / (clean + dirty)."""
        total = self.dirty + self.clean
        return self.dirty / total if total else 0.0

    @property
    def cleanable(self) -> bool:
        return not self.busy and self.dirty > 0 and (
            self.ratio > self.min_dirty_ratio or self.overdue)


def round_order(partitions: list[PartitionDirt]) -> list[PartitionDirt]:
    """The order a cleaner round visits the partitions in: the cleanable ones, filthiest
    first (Kafka's order: the highest ratio, a partition forced by max.compaction.lag.ms
    included), then the rest, whose visit only rolls their active segment when it is due.
    Those another broker is cleaning are left out."""
    free = [p for p in partitions if not p.busy]
    return sorted(free, key=lambda p: (not p.cleanable, -p.ratio, p.topic, p.partition))


# --- the batches storage format ---------------------------------------------------------
# A `batches` entry is a whole producer batch, which Lua cannot decode (it may be compressed)
# nor rebuild (its CRC-32C): the broker decodes each chunk between two calls of clean.lua and
# decides here, from the spec's Keep and Mark, which records of each batch survive; the call
# that follows writes the rewritten batches (korvet/server/clean_batches.py).

EntryId = tuple[int, int]  # a stream entry id, (ms, seq): compares as Redis orders ids
Aborted = dict[int, list[tuple[EntryId, EntryId]]]  # producer id -> [(first, marker)]
PENDING = "pending"  # a tombstone's delete horizon before the pass after its first clean


def entry_id(text: str) -> EntryId:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq)


def aborted_ranges(members: list[str]) -> Aborted:
    """The aborted index's members ("<producer> <first id> <marker id>", append.lua)."""
    out: Aborted = {}
    for member in members:
        parts = member.split()
        if len(parts) == 3:
            out.setdefault(int(parts[0]), []).append((entry_id(parts[1]), entry_id(parts[2])))
    return out


def is_aborted(aborted: Aborted, producer: int, at: EntryId) -> bool:
    return any(first <= at < marker for first, marker in aborted.get(producer, ()))


@dataclass(frozen=True, slots=True)
class BatchFacts:
    """What the cleaner reads of a stored batch: its entry id, max timestamp, producer,
    whether it is transactional or a marker, each record's (offset delta, key, has a value)
    and its tombstones' delete horizon (None, PENDING, or a time in ms as text)."""

    at: EntryId
    max_timestamp: int
    producer: int
    transactional: bool
    control: bool
    records: list[tuple[int, bytes | None, bool]]
    horizon: str | None = None


@dataclass(frozen=True, slots=True)
class MapChunk:
    """A map chunk of a batches topic: each key's latest (entry id, delta) in the chunk, the
    entries mapped, and the first entry of the head when one was found (spec Young)."""

    latest: dict[bytes, tuple[EntryId, int]]
    mapped: int
    head: EntryId | None


def map_batches(batches: list[BatchFacts], young: int, aborted: Aborted) -> MapChunk:
    """The spec's MapChunk over batches: a committed or plain keyed record sets its key's
    latest (aborted data and markers do not); the map stops at the first batch younger than
    min.compaction.lag.ms (its max timestamp after ``young``), the head's first entry."""
    latest: dict[bytes, tuple[EntryId, int]] = {}
    for mapped, batch in enumerate(batches):
        if batch.max_timestamp > young:
            return MapChunk(latest, mapped, batch.at)
        if batch.control or (batch.transactional
                             and is_aborted(aborted, batch.producer, batch.at)):
            continue
        for delta, key, _ in batch.records:
            if key is not None:
                latest[key] = (batch.at, delta)
    return MapChunk(latest, len(batches), None)


@dataclass(frozen=True, slots=True)
class BatchVerdict:
    """What the copy does with a batch below the head: the offset deltas it keeps (all of
    them: the entry as it is, with ``horizon`` set), and its tombstones' delete horizon after
    (None when none is left)."""

    keep: frozenset[int]
    horizon: str | None
    removed: int


def judge_batch(batch: BatchFacts, latest: dict[bytes, tuple[EntryId, int]], aborted: Aborted,
                *, now: int, last_swap: int, retention_ms: int) -> BatchVerdict:
    """The spec's Keep and Mark for each record of a batch below the head (clean.lua does the
    same for the records format): a record without a key goes (written before the topic
    became compacted; Kafka's cleaner drops it); aborted data goes; a record goes when a
    later one of its key was mapped; a tombstone, its key's latest, and a marker stay
    until their horizon (pending at their first clean, then the last swap's time plus
    delete.retention.ms) has passed. A batch is cleaned whole in one pass (an id bound never
    cuts it), so its tombstones share one horizon, as in a Kafka batch."""
    every = frozenset(delta for delta, _, _ in batch.records)
    if batch.transactional and not batch.control and is_aborted(aborted, batch.producer,
                                                                batch.at):
        return BatchVerdict(frozenset(), None, len(every))
    if batch.horizon is None:
        horizon = PENDING
    elif batch.horizon == PENDING:
        horizon = str(last_swap + retention_ms)
    else:
        horizon = batch.horizon
    expired = horizon != PENDING and now >= int(horizon)
    if batch.control:  # a marker: as a tombstone, until its horizon
        return (BatchVerdict(frozenset(), None, len(every)) if expired
                else BatchVerdict(every, horizon, 0))
    kept: set[int] = set()
    tombstones = False
    for delta, key, has_value in batch.records:
        if key is None:
            continue  # written before the topic became compacted: Kafka's cleaner drops it
        newer = latest.get(key)
        if newer is not None and (batch.at, delta) < newer:
            continue
        if not has_value:
            if expired:
                continue
            tombstones = True
        kept.add(delta)
    return BatchVerdict(frozenset(kept), horizon if tombstones else None,
                        len(every) - len(kept))
