"""The offset codec: Kafka offsets <-> Redis stream entry ids, and the append rule.

Spec: ``spec/OffsetCodec.tla`` (names in spec/README.md). A Kafka offset packs
a Redis entry id ``ms-seq`` as ``offset = ms * 2^bits + seq`` with
``0 <= seq < 2^bits``. ``bits`` (the topic's ``sequence.bits``, default 10)
is configurable per topic within ``1..22``: below 1 there is no sequence at
all, and above 22 the millisecond part of the current time (41 bits until
2039) would no longer leave room in a signed 64-bit offset.

``decode`` is defined for every offset in ``0 .. 2^63-1``, so ``last + 1``
simply carries into the next millisecond when ``seq`` is at its maximum.
``encode`` refuses a sequence wider than ``bits``: such an id (written by
something other than the broker, e.g. ``XADD *`` at more than 2^bits entries
in one millisecond, which Redis does: see spec/RedisStarIds.tla) has no offset.

The broker, not Redis' ``*``, chooses entry ids: each appended batch of ``n``
records gets the consecutive offsets starting at
``max(last + 1, encode(now_ms, 0))`` (``reserve``), where ``last`` is the
offset of the stream's last-generated id (``last_offset_of``; 0-0, i.e. 0, for
a new stream, so offset 0 is never handed out: Redis refuses the id 0-0). The
storage script (korvet/storage/lua/append.lua) performs the same computation
inside Redis, atomically, so several broker processes can append to one
partition.

Bad input raises ``OffsetError`` (the protocol layer answers
OFFSET_OUT_OF_RANGE); a bad sequence width raises ``SequenceBitsError``.

``offset_bits`` is the width of the offset space: 63 (a signed 64-bit Kafka
offset) in production. The TLA+ models shrink it, because TLC's integers are
32-bit; the replay test (tests/spec/OffsetCodec/test_offset_replay.py) builds the
codec at the model's width so the Python code meets the same boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SEQUENCE_BITS = 1
MAX_SEQUENCE_BITS = 22
DEFAULT_SEQUENCE_BITS = 10
OFFSET_BITS = 63
MAX_OFFSET = 2**OFFSET_BITS - 1  # Kafka offsets are signed 64-bit; negative values are sentinels


class OffsetError(ValueError):
    """An offset or entry id outside the codec's domain (maps to OFFSET_OUT_OF_RANGE)."""


class SequenceBitsError(ValueError):
    """A sequence width outside 1..22 (a topic configuration error)."""


@dataclass(frozen=True, slots=True, order=True)
class EntryId:
    """A Redis stream entry id ``ms-seq``."""

    ms: int
    seq: int

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    @classmethod
    def parse(cls, text: str | bytes) -> EntryId:
        raw = text.decode() if isinstance(text, bytes) else text
        ms_text, sep, seq_text = raw.partition("-")
        if not sep or not ms_text.isdigit() or not seq_text.isdigit():
            raise OffsetError(f"not a stream entry id: {raw!r}")
        return cls(int(ms_text), int(seq_text))


def validate_bits(bits: int) -> int:
    if not isinstance(bits, int) or isinstance(bits, bool):
        raise SequenceBitsError(f"sequence bits must be an integer, got {bits!r}")
    if not MIN_SEQUENCE_BITS <= bits <= MAX_SEQUENCE_BITS:
        raise SequenceBitsError(
            f"sequence bits must be within {MIN_SEQUENCE_BITS}..{MAX_SEQUENCE_BITS}, got {bits}"
        )
    return bits


@dataclass(frozen=True, slots=True)
class OffsetCodec:
    """Encode/decode for one sequence width. Immutable and cheap to share.

    ``offset_bits`` (default 63) is for model checking only; see the module doc.
    """

    bits: int = DEFAULT_SEQUENCE_BITS
    offset_bits: int = OFFSET_BITS

    def __post_init__(self) -> None:
        validate_bits(self.bits)
        if (not isinstance(self.offset_bits, int) or isinstance(self.offset_bits, bool)
                or not self.bits < self.offset_bits <= OFFSET_BITS):
            raise SequenceBitsError(
                f"offset bits must be within {self.bits + 1}..{OFFSET_BITS}, got {self.offset_bits!r}"
            )

    @property
    def seq_limit(self) -> int:
        """Entries per millisecond: seq ranges over 0 .. seq_limit - 1."""
        return 1 << self.bits

    @property
    def max_offset(self) -> int:
        """The largest offset: 2^63 - 1 in production."""
        return (1 << self.offset_bits) - 1

    @property
    def max_ms(self) -> int:
        """The largest millisecond whose offsets all fit ``max_offset`` (signed 64-bit)."""
        return self.max_offset >> self.bits

    def encode(self, ms: int, seq: int) -> int:
        if not 0 <= ms <= self.max_ms:
            raise OffsetError(f"millisecond {ms} outside 0..{self.max_ms} for {self.bits} bits")
        if not 0 <= seq < self.seq_limit:
            raise OffsetError(
                f"sequence {seq} is wider than {self.bits} bits (max {self.seq_limit - 1})"
            )
        return (ms << self.bits) | seq

    def encode_id(self, entry: EntryId) -> int:
        return self.encode(entry.ms, entry.seq)

    def decode(self, offset: int) -> EntryId:
        if not 0 <= offset <= self.max_offset:
            raise OffsetError(f"offset {offset} outside 0..{self.max_offset}")
        return EntryId(offset >> self.bits, offset & (self.seq_limit - 1))

    def reserve(self, last_offset: int, now_ms: int, count: int) -> range:
        """Offsets for a batch of ``count`` records appended after ``last_offset``.

        ``last_offset`` is ``last_offset_of`` the stream's last-generated id (0 for
        a new stream, whose last-generated id is 0-0). The batch starts at
        ``max(last_offset + 1, encode(now_ms, 0))``: never before the previous
        batch (so offsets strictly increase even when the clock stands still or
        steps back) and never before the current millisecond (so an offset tells
        roughly when it was appended). A clock past ``max_ms`` counts as
        ``max_ms``. Spec: OffsetCodec.tla, FirstOffset / AppendBatch; a batch that
        would pass ``max_offset`` raises OffsetError (RejectBatch).
        """
        if count < 1:
            raise ValueError(f"a batch has at least one record, got {count}")
        if last_offset < 0:
            raise OffsetError(f"last offset {last_offset} is negative (a new stream's is 0)")
        floor = self.encode(max(0, min(now_ms, self.max_ms)), 0)
        first = max(last_offset + 1, floor)
        last = first + count - 1
        if last > self.max_offset:
            raise OffsetError(
                f"a batch of {count} after offset {last_offset} passes {self.max_offset}"
            )
        return range(first, last + 1)

    def from_script(self, ms: int, seq: int) -> int:
        """An offset as the storage scripts give it: the pair ``ms * 2^bits + seq``."""
        return self.encode(ms, seq)

    def has_offset(self, entry: EntryId) -> bool:
        """Whether an id is one of this codec's offsets (``XADD *`` may write wider ones)."""
        return 0 <= entry.seq < self.seq_limit and 0 <= entry.ms <= self.max_ms

    def last_offset_of(self, entry: EntryId | None) -> int:
        """The offset of a stream's last-generated id, as an append floor.

        ``None`` (no stream yet) is a new stream: last-generated id 0-0, offset 0.
        An id whose sequence is wider than ``bits`` (not written by the broker)
        has no offset; appending after it must still produce larger ids, so it
        counts as the last offset of its millisecond. An id past ``max_ms`` leaves
        no offset to append at: OffsetError.
        """
        if entry is None:
            return 0
        if entry.ms < 0 or entry.seq < 0:
            raise OffsetError(f"not a stream entry id: {entry}")
        if entry.ms > self.max_ms:
            raise OffsetError(
                f"last id {entry} is past millisecond {self.max_ms}, the last one {self.bits} "
                f"sequence bits can encode"
            )
        if entry.seq >= self.seq_limit:
            return self.encode(entry.ms, self.seq_limit - 1)
        return self.encode(entry.ms, entry.seq)


@dataclass(frozen=True, slots=True)
class DenseCodec:
    """Offsets that count records (the ``dense`` offset scheme, spec/DenseLog.tla): offset
    ``o`` is the entry id ``o-1``. Redis refuses the id 0-0, so the sequence part is 1, not 0;
    ``XRANGE key 5 +`` still reads from offset 5. An id with another sequence was not
    written by the broker (an ``XADD *`` into the stream) and has no offset.

    The same surface as ``OffsetCodec`` where the storage layer reads ids; ``bits`` is 0,
    which is how the scripts tell a dense stream from a time one.
    """

    offset_bits: int = OFFSET_BITS

    bits = 0  # the scripts' sign of a dense stream (a time stream has 1..22)
    seq_limit = 1  # one offset per "millisecond" part
    SEQ = 1  # the sequence part of every id the broker writes

    @property
    def max_offset(self) -> int:
        return (1 << self.offset_bits) - 1

    @property
    def max_ms(self) -> int:
        return self.max_offset

    def has_offset(self, entry: EntryId) -> bool:
        return entry.seq == self.SEQ and 0 <= entry.ms <= self.max_offset

    def from_script(self, ms: int, seq: int) -> int:
        """An offset as the storage scripts give it: their pairs carry the sequence less the
        ids' 1, so (o, 0) is offset o."""
        if seq != 0 or not 0 <= ms <= self.max_offset:
            raise OffsetError(f"({ms}, {seq}) is not an offset of a dense stream")
        return ms

    def encode(self, ms: int, seq: int) -> int:
        if seq != self.SEQ or not 0 <= ms <= self.max_offset:
            raise OffsetError(f"the id {ms}-{seq} is not one a dense stream's offsets have")
        return ms

    def encode_id(self, entry: EntryId) -> int:
        return self.encode(entry.ms, entry.seq)

    def decode(self, offset: int) -> EntryId:
        if not 0 <= offset <= self.max_offset:
            raise OffsetError(f"offset {offset} outside 0..{self.max_offset}")
        return EntryId(offset, self.SEQ)

    def last_offset_of(self, entry: EntryId | None) -> int:
        """The offset of a stream's last-generated id; -1 for a stream never written (so
        the first record is offset 0). An id the broker did not write counts as the last
        offset below the next it could write."""
        if entry is None or entry == EntryId(0, 0):
            return -1
        if entry.ms < 0 or entry.seq < 0 or entry.ms > self.max_offset:
            raise OffsetError(f"not an id of a dense stream: {entry}")
        return entry.ms if entry.seq >= self.SEQ else entry.ms - 1


Codec = OffsetCodec | DenseCodec
DENSE = DenseCodec()


def codec_for(bits: int) -> Codec:
    """The codec of a stream whose scripts are told ``bits``: 0 for a dense stream."""
    return DENSE if bits == 0 else OffsetCodec(bits)
