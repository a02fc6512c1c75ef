"""The two per-record hot loops, fused: Kafka batches to stream entries and back.

Both directions touch every record once, in one Python loop, without intermediate
objects: produce goes from aiokafka's decoded records straight into the append
script's argument list (storage/entries.py layout); fetch goes from Redis' raw
XRANGE reply straight into aiokafka's batch builder. They live in the server layer
because they join the storage layout (korvet.storage.entries) with the wire codec
(korvet.protocol.records); tests/unit/server/test_batching.py checks both against
the plain, unfused functions of those modules.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from aiokafka.record._crecords import DefaultRecordBatchBuilder
from crc32c import crc32c

from korvet.core.epochs import FIXED, Epochs
from korvet.core.fetch import batches_that_fit
from korvet.protocol.fetch_response import RecordSet
from korvet.protocol.records import BATCH_OVERHEAD, control_batch
from korvet.storage import entries

_INT32_MAX = 2**31 - 1
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_HEAD = struct.Struct(">qii")  # base offset, batch length, partition leader epoch
_LENGTH = struct.Struct(">i")
_TIMESTAMP, _KEY, _VALUE = entries.TIMESTAMP, entries.KEY, entries.VALUE
_PRODUCER, _CONTROL = entries.PRODUCER, entries.CONTROL
_TAGGED = (_PRODUCER, _CONTROL)
_NO_HEADERS: list[tuple[str, bytes | None]] = []  # shared: the builder only reads it


def entries_to_batches(raw: Sequence[Any], bits: int, max_bytes: int, *,  # noqa: C901, PLR0912, PLR0915 -- the fused per-record hot loop
                       force_first: bool, log_append_time: bool = False,
                       epochs: Epochs = FIXED) -> tuple[bytes, int, int]:
    """Record batches for raw XRANGE entries ``[id, [f1, v1, ...]]`` of one partition.

    Entries whose sequence is wider than ``bits`` (not written by the broker) are
    skipped. ``bits`` 0 is a dense topic: offset o is the id o-1 (the sequence less
    ``bias``, 1, is the offset's sequence part, 0). A batch is cut before an offset delta
    would pass int32; the response stops at ``max_bytes`` except that, with
    ``force_first``, the first record always comes (KIP-74). Returns the bytes, the number
    of records in them, and the offset after the last of them (-1 when none): where the
    consumer will fetch next.

    ``epochs``: a dense topic's leader epochs; a batch holds records of one epoch and carries
    it as its partition leader epoch (Kafka's consumers validate their position with it).

    ``log_append_time``: the topic's records carry the broker's append time. Each batch then
    holds records of one append time and says LogAppendTime in its attributes, so clients
    report that type and the batch's max timestamp, as Kafka does.
    """
    out = bytearray()
    taken = 0
    limit = 1 << bits
    bias = 1 if bits == 0 else 0
    decode = entries.decode_fields
    index, total = 0, len(raw)
    next_offset = -1
    # Consecutive entries mostly share their millisecond and often their timestamp: parse
    # each distinct one once.
    ms_text, ms_shifted = b"", 0
    stamp_text, stamp_value = b"", 0
    while index < total:
        budget = max_bytes - len(out)
        first_in_response = force_first and taken == 0
        if budget <= BATCH_OVERHEAD and not first_in_response:
            break
        builder: Any = None
        append: Any = None
        base = -1
        count = 0
        last = -1
        first_stamp = b""
        epoch, cut_at = 0, 0
        tag = b""  # a transaction's records: their producer (the entries' first field)
        while index < total:
            entry_id, fields = raw[index]
            ms, _, seq_text = entry_id.partition(b"-")
            seq = int(seq_text) - bias
            if not 0 <= seq < limit:
                index += 1
                continue
            if ms != ms_text:
                ms_text, ms_shifted = ms, int(ms) << bits
            offset = ms_shifted | seq
            if base < 0:
                head = fields[0]
                if head == _CONTROL:
                    break  # a marker: a batch of its own, below
                base = offset
                epoch, cut_at = epochs.epoch_of(offset), epochs.next_start(offset)
                if head == _PRODUCER:
                    tag = fields[1]
                    pid, _, producer_epoch = tag.partition(b" ")
                    builder = DefaultRecordBatchBuilder(2, 0, 1, int(pid), int(producer_epoch),
                                                        -1, max(budget, 0))
                    first_stamp = fields[3]
                else:
                    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, max(budget, 0))
                    first_stamp = fields[1]
                append = builder.append
            elif (offset - base > _INT32_MAX or offset >= cut_at
                  or (log_append_time and fields[3 if tag else 1] != first_stamp)):
                break
            if tag:  # a transaction's records: of this producer only (the entry's first field)
                if fields[0] != _PRODUCER or fields[1] != tag:
                    break
                stamp, key, value, headers = decode(fields)
                appended = append(offset - base, stamp, key, value, headers)
            else:
                width = len(fields)
                if width in (4, 6) and fields[0] == _TIMESTAMP and fields[1] != stamp_text:
                    stamp_text, stamp_value = fields[1], int(fields[1])
                if width == 6 and fields[0] == _TIMESTAMP and fields[2] == _KEY and \
                        fields[4] == _VALUE:
                    appended = append(offset - base, stamp_value, fields[3], fields[5],
                                      _NO_HEADERS)
                elif width == 4 and fields[0] == _TIMESTAMP and fields[2] == _VALUE:
                    appended = append(offset - base, stamp_value, None, fields[3], _NO_HEADERS)
                elif fields[0] in _TAGGED:
                    break  # a transaction's record or a marker: a batch of its own
                else:
                    stamp, key, value, headers = decode(fields)
                    appended = append(offset - base, stamp, key, value, headers)
            if appended is None:
                break
            count += 1
            index += 1
            last = offset
        if count == 0:
            if index < total and base < 0 and raw[index][1][0] == _CONTROL:
                marker = _marker_batch(raw[index], bits, bias, epochs)
                if len(out) + len(marker) > max_bytes and not first_in_response:
                    break
                out += marker
                taken += 1
                next_offset = _BASE_OFFSET.unpack_from(marker, 0)[0] + 1
                index += 1
                continue
            break
        batch = builder.build()
        if len(out) + len(batch) > max_bytes and not first_in_response:
            break
        _BASE_OFFSET.pack_into(batch, 0, base)
        _LEADER_EPOCH.pack_into(batch, 12, epoch)
        if log_append_time:
            _mark_log_append_time(batch)
        out += batch
        taken += count
        next_offset = last + 1
    return bytes(out), taken, next_offset


def _marker_batch(entry: Any, bits: int, bias: int, epochs: Epochs) -> bytes:
    """A transaction marker's entry (storage/entries.py) as the control batch Kafka writes."""
    entry_id, fields = entry
    ms, _, seq_text = entry_id.partition(b"-")
    offset = (int(ms) << bits) | (int(seq_text) - bias)
    found = dict(zip(fields[::2], fields[1::2], strict=False))
    pid, _, producer_epoch = found.get(_PRODUCER, b"-1 -1").partition(b" ")
    return control_batch(int(pid), int(producer_epoch), found.get(_CONTROL) == b"COMMIT",
                         int(found.get(entries.COORDINATOR_EPOCH, b"0")),
                         int(found.get(_TIMESTAMP, b"0")), offset, epochs.epoch_of(offset))


_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
_LOG_APPEND_TIME_FLAG = 0x08


def _mark_log_append_time(batch: bytearray) -> None:
    """Set the batch's timestamp type to LogAppendTime and recompute its CRC (the CRC-32C
    covers everything from the attributes at byte 21 to the end)."""
    (attributes,) = _ATTRIBUTES.unpack_from(batch, 21)
    _ATTRIBUTES.pack_into(batch, 21, attributes | _LOG_APPEND_TIME_FLAG)
    _CRC.pack_into(batch, 17, crc32c(memoryview(batch)[21:]))


def stored_batches(raw: Sequence[Any], bits: int, max_bytes: int, *,
                   force_first: bool, epochs: Epochs = FIXED) -> tuple[RecordSet, int, int, int]:
    """The response of a partition whose topic stores batches (``korvet.storage.format``):
    its raw XRANGE entries (the batch holding the fetch offset first, when one starts below it)
    as the stored batches, whole, each with its base offset set to its entry's offset and its
    leader epoch to the epoch of its first offset (0 for a time topic; neither is covered by the
    CRC). No record is looked at. Entries that are no batch entries (written by something
    else) and ids wider than ``bits`` are skipped.
    Returns the batches as a ``RecordSet`` of buffers (no copy: each batch's first 16 bytes,
    base offset, length and leader epoch, written anew, beside a view of the rest of its stored
    bytes), the records in them, the offset after the last (-1 when none) and the number of
    batches."""
    limit = 1 << bits
    bias = 1 if bits == 0 else 0  # a dense topic: offset o is the id o-1
    found: list[tuple[int, int, bytes]] = []  # (offset, records, batch)
    for entry_id, fields in raw:
        stored = entries.batch_fields(fields)
        if stored is None or len(stored[2]) < BATCH_OVERHEAD:
            continue
        ms, _, seq_text = entry_id.partition(b"-")
        seq = int(seq_text) - bias
        if 0 <= seq < limit:
            found.append(((int(ms) << bits) | seq, stored[0], stored[2]))
    taken = batches_that_fit([len(b) for _, _, b in found], max_bytes, force_first)
    if not taken:
        return RecordSet(), 0, -1, 0
    pieces: list[bytes | memoryview] = []
    records = size = 0
    for offset, count, batch in found[:taken]:
        pieces.append(_HEAD.pack(offset, _LENGTH.unpack_from(batch, 8)[0], epochs.epoch_of(offset)))
        pieces.append(memoryview(batch)[_HEAD.size:])
        records += count
        size += len(batch)
    offset, count, _ = found[taken - 1]
    return RecordSet(pieces, size), records, offset + count, taken
