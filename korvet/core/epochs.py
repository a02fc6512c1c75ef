"""A dense topic partition's leader epochs, as Kafka's clients see them (KIP-320;
spec/DenseLog.tla: `epochs`, `EpochOf`, `EndOffset`, the fetch's fence).

The append script keeps the history in the partition's meta hash, ``epochs``: "epoch:start"
pairs, the start being the epoch's first offset, epochs and starts growing
(korvet/storage/lua/append.lua). A time topic has one epoch, 0, from offset 0 (``FIXED``).

- ``epoch_of(offset)``: the epoch a record was written in (a fetched batch carries it as its
  partition leader epoch, and a consumer validates its position with it);
- ``end_offset(epoch, high_watermark)``: OffsetForLeaderEpoch's answer, as Kafka's leader
  epoch cache gives it: the current epoch ends at the high watermark; an older one at the
  start of the first epoch after it (an epoch the log lost lies between two it has, and ends
  where the next begins), with the largest epoch at or below the one asked; an epoch older
  than the first or newer than the current has none (-1, -1: the client resets);
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

    def end_offset(self, epoch: int, high_watermark: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers ``epoch``."""
        if not self.history:
            return (0, high_watermark) if epoch >= 0 else (NO_EPOCH, -1)
        if epoch < self.history[0][0] or epoch > self.current:
            return NO_EPOCH, -1
        if epoch == self.current:
            return epoch, high_watermark
        floor = self.history[0][0]
        for known, start in self.history:
            if known > epoch:
                return floor, start
            floor = known
        return floor, high_watermark  # unreachable: epoch < current has a later epoch

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
