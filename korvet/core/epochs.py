"""A dense topic partition's leader epochs, as Kafka's clients see them (KIP-320;
spec/DenseLog.tla: `epochs`, `EpochOf`, `EndOffset`, the fetch's fence).

The append script keeps the history in the partition's meta hash, ``epochs``: "epoch:start"
pairs, the start being the epoch's first offset, epochs and starts growing
(korvet/storage/lua/append.lua). A time topic has one epoch, 0, from offset 0 (``FIXED``).

- ``epoch_of(offset)``: the epoch a record was written in (a fetched batch carries it as its
  partition leader epoch, and a consumer validates its position with it);
- ``end_offset(epoch, high_watermark, log_start)``: OffsetForLeaderEpoch's answer, as Kafka's
  leader epoch cache gives it (spec/DenseLog.tla `EndOffset`), the cache being the history
  trimmed at the log start as Kafka trims it (``cache``; `EndsInsideTheLog`: no end below
  the log start): the current epoch ends at the high
  watermark; an older one at the start of the first epoch after it (an epoch the log lost
  lies between two it has, and ends where the next begins), with the largest epoch at or
  below the one asked; one older than the first the cache holds, at the first's start,
  with the epoch asked; only an epoch newer than the current has none (-1, -1: the client
  falls back to its reset policy). A partition never written answers as Kafka's first
  epoch, 0 from offset 0: a consumer that positioned at its end then holds epoch 0, older
  than the first real epoch (seconds since 2024), and must be told its position is valid,
  not sent to ``latest`` past the first records (ValidationFindsAnEnd);
- ``diverging(last_fetched_epoch, offset, ...)``: Fetch v12's diverging epoch, where the
  fetcher's log and the partition's part (KIP-595's check, which Kafka's leader makes for
  any fetch naming the epoch it last fetched);
- ``fence(requested)``: a request's current_leader_epoch against the partition's:
  FENCED_LEADER_EPOCH when older (the client refreshes its metadata and validates), and
  UNKNOWN_LEADER_EPOCH when newer (the broker is behind: retriable); -1 is not checked.

Tests: tests/unit/core/test_epochs.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from korvet.core.errors import ErrorCode

NO_EPOCH = -1
_NO_LIMIT = 2**63
_KAFKAS_FIRST = ((0, 0),)  # a partition never written: Kafka's epoch 0 from offset 0


@dataclass(frozen=True, slots=True)
class Epochs:
    history: tuple[tuple[int, int], ...]  # (epoch, first offset), both growing

    @classmethod
    def parse(cls, text: str | bytes | None) -> Epochs:
        """The meta hash's ``epochs`` field (absent: a partition never written)."""
        if not text:
            return NEVER_WRITTEN
        raw = text.decode() if isinstance(text, bytes) else text
        pairs = []
        for item in raw.split():
            epoch, _, start = item.partition(":")
            pairs.append((int(epoch), int(start)))
        return cls(tuple(pairs))

    @property
    def current(self) -> int:
        """The partition's leader epoch now (0 for a partition never written)."""
        return self.history[-1][0] if self.history else 0

    def epoch_of(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in."""
        found = self.history[0][0] if self.history else 0
        for epoch, start in self.history:
            if start > offset:
                break
            found = epoch
        return found

    def cache(self, log_start: int) -> tuple[tuple[int, int], ...]:
        """The history as Kafka's leader epoch cache holds it once the log start moved there
        (truncateFromStart; spec `Cache`): the epochs starting after the log start, after
        the last one starting at or before it, which now starts at the log start."""
        history = self.history or _KAFKAS_FIRST
        below = [i for i, (_, start) in enumerate(history) if start <= log_start]
        if not below:
            return history
        kept = below[-1]
        return ((history[kept][0], log_start), *history[kept + 1:])

    def end_offset(self, epoch: int, high_watermark: int, log_start: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers ``epoch``."""
        history = self.cache(log_start)
        if epoch < 0 or epoch > history[-1][0]:
            return NO_EPOCH, -1
        if epoch == history[-1][0]:
            return epoch, high_watermark
        first_epoch, first_start = history[0]
        if epoch < first_epoch:
            return epoch, first_start
        floor = first_epoch
        for known, start in history:
            if known > epoch:
                return floor, start
            floor = known
        return floor, high_watermark  # unreachable: epoch < current has a later epoch

    def diverging(self, last_fetched_epoch: int, fetch_offset: int, log_start: int,
                  high_watermark: int) -> tuple[ErrorCode, tuple[int, int] | None]:
        """A fetch (v12+) that names the epoch of the last record it read: where the logs
        diverge, as Kafka's leader answers it (Partition.readRecords), once the request's
        current epoch passed ``fence``. The end of that epoch (``end_offset``) below the fetch
        offset, or an earlier epoch answered, is the divergence: (epoch, end offset) sent as
        ``diverging_epoch`` with no records; an epoch with no end, or a fetch offset below the
        log start, is OFFSET_OUT_OF_RANGE; otherwise the fetch reads on (None). A negative
        epoch is not given (clients' fetches send -1: only followers name one)."""
        if last_fetched_epoch < 0:
            return ErrorCode.NONE, None
        epoch, end = self.end_offset(last_fetched_epoch, high_watermark, log_start)
        if end < 0 or fetch_offset < log_start:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if epoch < last_fetched_epoch or end < fetch_offset:
            return ErrorCode.NONE, (epoch, end)
        return ErrorCode.NONE, None

    def fence(self, requested: int) -> ErrorCode:
        if requested < 0:
            return ErrorCode.NONE
        if requested < self.current:
            return ErrorCode.FENCED_LEADER_EPOCH
        if requested > self.current:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    def next_start(self, offset: int) -> int:
        """The first offset of the epoch after the one ``offset`` is in (a batch does not
        reach past it); a very large number when there is none."""
        for _epoch, start in self.history:
            if start > offset:
                return start
        return _NO_LIMIT

    def boundaries(self, first: int, last: int) -> tuple[tuple[int, int], ...]:
        """The (start, epoch) of each epoch that covers offsets ``first`` .. ``last``, in
        order: where a fetch's batches are cut and what epoch each carries."""
        cuts = [(first, self.epoch_of(first))]
        cuts.extend((start, epoch) for epoch, start in self.history if first < start <= last)
        return tuple(cuts)


NEVER_WRITTEN = Epochs(())
FIXED = Epochs(((0, 0),))  # a time topic: one epoch, 0, since offset 0
