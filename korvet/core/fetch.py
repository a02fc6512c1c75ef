"""Kafka's Fetch rules, as pure functions and one small estimator.

The handler (korvet/server/handlers/fetch.py) decodes the request (a ``FetchCall``), asks these rules
which partitions may be read and how much of each, reads Redis, and asks again
whether what it read answers the request. Tests: tests/unit/core/test_fetch_rules.py.

- Limits: ``max_bytes`` absent or not positive means no limit (Fetch v0-v2 had none);
  a negative ``partition_max_bytes`` reads nothing for that partition.
- Sessions (KIP-227, incremental fetch) are korvet/core/fetch_session.py.
- A partition is readable when its topic and index exist and the client's
  ``current_leader_epoch`` is not newer than the broker's (every partition keeps leader
  epoch 0: UNKNOWN_LEADER_EPOCH otherwise).
- A fetch offset below the log start or above the high watermark is OFFSET_OUT_OF_RANGE
  (at the high watermark is fine: the consumer is caught up and waits).
- The response's byte budget is shared in request order; the first partition with data
  always returns at least one record (KIP-74), so a consumer can always progress.
- Storage format ``batches``: stored batches go whole (``batches_that_fit``), and a fetch
  from an offset inside a batch returns that batch (``batch_holds``), as Kafka does.
- The read-ahead (korvet/server/read_ahead.py): after a response that took records, the
  fetch predicted next (``predicted_offsets``) is read before it arrives; a request takes
  it when it asks exactly that (``read_ahead_key``: the fetch offsets are part of the key),
  and serves it only while it still answers (``serve_prepared``). These three are the
  decisions spec/PartitionLog.tla's Answer, Request and UsePrepared model; the spec's
  replay (tests/spec/PartitionLog/test_partition_log_replay.py) runs them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from korvet.core import fetch_session as sessions
from korvet.core.errors import ErrorCode

NO_LIMIT = 2**31 - 1
LEADER_EPOCH = 0  # one leader per partition, never replaced
MAX_ENTRIES_PER_READ = 10_000
INITIAL_ENTRY_BYTES = 256
INITIAL_BATCH_BYTES = 16_384


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int

    @classmethod
    def of(cls, max_wait_ms: int, min_bytes: int, max_bytes: int | None) -> FetchLimits:
        return cls(max(0, max_wait_ms), min_bytes,
                   NO_LIMIT if max_bytes is None or max_bytes <= 0 else max_bytes)


@dataclass(frozen=True, slots=True)
class FetchCall:
    """A Fetch request, whatever its version (korvet/protocol/decoders/fetch.py)."""

    limits: FetchLimits
    requested: sessions.FetchRequested  # its session fields and partitions


def partition_error(topic_known: bool, by_id: bool, partition: int, partitions: int,
                    current_leader_epoch: int) -> ErrorCode:
    """Whether a requested partition may be read (NONE) or the error it answers."""
    if not topic_known:
        return ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not 0 <= partition < partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if current_leader_epoch > LEADER_EPOCH:
        return ErrorCode.UNKNOWN_LEADER_EPOCH  # the client knows a newer leader than we do
    return ErrorCode.NONE


def offset_error(fetch_offset: int, log_start_offset: int, high_watermark: int) -> ErrorCode:
    if fetch_offset < log_start_offset or fetch_offset > high_watermark:
        return ErrorCode.OFFSET_OUT_OF_RANGE
    return ErrorCode.NONE


def partition_budget(partition_max_bytes: int, max_bytes: int, used: int) -> int:
    """Bytes this partition may add to a response that already holds ``used`` bytes."""
    return min(max(partition_max_bytes, 0), max_bytes - used)


def batches_that_fit(sizes: Sequence[int], max_bytes: int, force_first: bool) -> int:
    """Storage format ``batches``: how many of the stored batches of these sizes (in offset
    order) a partition's response carries. Batches go whole, as Kafka sends them; the
    response stops before the first that would pass ``max_bytes``, except that with
    ``force_first`` (the first partition with data, KIP-74) the first batch always goes."""
    used = 0
    taken = 0
    for size in sizes:
        if used + size > max_bytes and not (force_first and taken == 0):
            break
        used += size
        taken += 1
    return taken


def batch_holds(first_offset: int, count: int, offset: int) -> bool:
    """Whether a stored batch of ``count`` records from ``first_offset`` holds ``offset``:
    a fetch from there returns that whole batch (Kafka's rule), its records below the offset
    included; the client skips them."""
    return first_offset <= offset < first_offset + count


def answered(used: int, limits: FetchLimits, any_error: bool) -> bool:
    """Whether a response can go now (else it waits for appends, up to max_wait_ms)."""
    return any_error or used >= limits.min_bytes


# topic id, partition, fetch offset, max bytes, read_committed
PartitionKey = tuple[object, int, int, int, bool]


def read_ahead_key(partitions: Iterable[PartitionKey | None], max_bytes: int,
                   log_start_moves: int) -> Hashable | None:
    """What a request asks for, to match a prepared response (None: a partition that cannot
    be prepared). The fetch offsets are in it: a response prepared for one offset must not
    answer a fetch at another (after a seek back it would skip records: spec/PartitionLog.tla,
    ReadAheadSameOffset); a DeleteRecords in between (``log_start_moves``) makes it stale."""
    parts = []
    for part in partitions:
        if part is None:
            return None
        parts.append(part)
    return log_start_moves, max_bytes, tuple(parts)


def predicted_offsets(answered_parts: Sequence[tuple[int, int, int]]) -> list[int] | None:
    """The fetch offsets of the request predicted to follow a response, from each
    partition's ``(fetch offset, records taken, next offset or -1)``: the offset after the
    records taken, or the same one. None when no partition took a record: the consumer is
    caught up, and its next fetch waits for appends rather than reading ahead."""
    if not any(taken for _, taken, _ in answered_parts):
        return None
    return [following if following >= 0 else offset for offset, _, following in answered_parts]


def serve_prepared(offsets_and_log_starts: Iterable[tuple[int, int]], used: int,
                   min_bytes: int) -> bool:
    """Whether a prepared response answers the request that took it: it holds at least
    ``min_bytes`` of records (else the broker reads afresh, and may wait), and no partition
    it took records from has a fetch offset now below its log start, each ``(fetch offset,
    log start read now)``: an append's retention may have deleted what the read-ahead read
    before the request came (spec/PartitionLog.tla, UsePrepared with ReadAheadChecked)."""
    return used >= min_bytes and all(offset >= start for offset, start in offsets_and_log_starts)


@dataclass
class SizeEstimate:
    """Average stored bytes per entry, per stream: how many entries one read should ask
    for to fill a byte budget without reading far past it."""

    averages: dict[str, float] = field(default_factory=dict)

    def count_for(self, key: str, budget: int, batches: bool = False) -> int:
        """Entries to read for ``budget`` bytes; ``batches``: the stream holds one entry per
        batch, first guessed at a producer's default batch.size."""
        average = self.averages.get(key, INITIAL_BATCH_BYTES if batches else INITIAL_ENTRY_BYTES)
        return max(1, min(MAX_ENTRIES_PER_READ, int(budget / average) + 1))

    def observe(self, key: str, entries_read: int, total_bytes: int) -> None:
        if entries_read:
            sample = max(16.0, total_bytes / entries_read)
            previous = self.averages.get(key)
            self.averages[key] = sample if previous is None else 0.7 * previous + 0.3 * sample

    def forget(self, key: str) -> None:
        self.averages.pop(key, None)
