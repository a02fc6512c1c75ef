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
    """Whether the cleaner runs on the topic: compacted, records format (a ``batches`` topic's
    entries are whole producer batches, which the cleaner does not rewrite yet)."""
    return compacted(config) and not config.stores_batches


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
