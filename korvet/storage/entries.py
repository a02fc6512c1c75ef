"""The stream entries of both storage formats (topic config ``korvet.storage.format``).

``records`` (the default): one Redis stream entry per Kafka record, at the record's offset.

    timestamp          the record's timestamp in ms, decimal ASCII (always present)
    key                the key bytes, exactly as produced (absent when the key is null)
    value              the value bytes (absent when the value is null: a tombstone)
    header.<name>      one field per header, in the record's order; duplicates allowed
    header-null.<name> a header whose value is null (its field value is empty)

Redis keeps a stream entry's fields as an ordered list, so repeated header names
survive, and absent fields distinguish null from empty. ``redis-cli XRANGE`` on a
partition stream shows the records readably.

``batches``: one entry per produced record batch, at the batch's first offset; its n records
have the n consecutive offsets from there (the append script reserves them as for n entries):

    records            n, decimal ASCII (first: the append script reads it to find where a
                       batch it trims ends)
    max-timestamp      the largest record timestamp in ms, decimal ASCII (ListOffsets by time
                       looks inside only the batches that can hold the answer)
    batch              the record batch (magic 2) exactly as the producer sent it, compressed
                       or not; of a LogAppendTime topic with the broker's time in its header
                       (protocol/records.py, stamp_log_append_time). Its base offset and leader
                       epoch, which its CRC does not cover, are set when it is fetched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Header = tuple[str, bytes | None]
Record = tuple[int, bytes | None, bytes | None, Sequence[Header]]

TIMESTAMP = b"timestamp"
KEY = b"key"
VALUE = b"value"
HEADER = b"header."
NULL_HEADER = b"header-null."
_HEADER_LEN = len(HEADER)
_NULL_HEADER_LEN = len(NULL_HEADER)


def encode_records(records: Sequence[Record], out: list[bytes | int],
                   timestamp: int | None = None) -> int:
    """Append each record's ``k, f1, v1, ..., fk, vk`` (the append script's per-record
    layout) to ``out``. ``timestamp`` replaces the records' own (LogAppendTime). Returns
    the key, value and header bytes. The readable definition of the layout: the produce
    path sends ``pack_records``' RESP bytes, which tests hold equal to this."""
    size = 0
    append = out.append
    for stamp, key, value, headers in records:
        count_at = len(out)
        append(0)
        append(TIMESTAMP)
        append(b"%d" % (stamp if timestamp is None else timestamp))
        pairs = 1
        if key is not None:
            append(KEY)
            append(key)
            pairs += 1
            size += len(key)
        if value is not None:
            append(VALUE)
            append(value)
            pairs += 1
            size += len(value)
        for name, header_value in headers:
            if header_value is None:
                append(NULL_HEADER + name.encode())
                append(b"")
            else:
                append(HEADER + name.encode())
                append(header_value)
                size += len(header_value)
            pairs += 1
        out[count_at] = pairs
    return size


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


_TIMESTAMP_BULK = _bulk(TIMESTAMP)
_KEY_BULK = _bulk(KEY)
_VALUE_BULK = _bulk(VALUE)
# The common record: no key, no headers, a value (2 field pairs).
_VALUE_ONLY = _bulk(b"2") + _TIMESTAMP_BULK + b"$%d\r\n%s\r\n" + _VALUE_BULK + b"$%d\r\n%s\r\n"


@dataclass(frozen=True, slots=True)
class PackedRecords:
    """A batch's per-record layout (``encode_records``) as RESP bulk strings, ready to
    follow the append command's other arguments on the wire."""

    body: bytes
    args: int  # bulk strings in ``body``
    size: int  # key, value and header bytes, as ``encode_records`` counts them


def pack_records(records: Sequence[Record], timestamp: int | None = None) -> PackedRecords:
    """``encode_records`` and the RESP packing of its output in one pass: byte for byte
    what ``hiredis.pack_command`` makes of those fields (tests/properties/test_entries.py),
    at half the cost, for this is the produce path's hottest loop."""
    parts: list[bytes] = []
    add = parts.append
    args = 0
    size = 0
    for stamp, key, value, headers in records:
        stamp_text = b"%d" % (stamp if timestamp is None else timestamp)
        if key is None and value is not None and not headers:
            add(_VALUE_ONLY % (len(stamp_text), stamp_text, len(value), value))
            args += 5
            size += len(value)
            continue
        pairs = 1 + (key is not None) + (value is not None) + len(headers)
        add(_bulk(b"%d" % pairs) + _TIMESTAMP_BULK + _bulk(stamp_text))
        if key is not None:
            add(_KEY_BULK + _bulk(key))
            size += len(key)
        if value is not None:
            add(_VALUE_BULK + _bulk(value))
            size += len(value)
        for name, header_value in headers:
            if header_value is None:
                add(_bulk(NULL_HEADER + name.encode()) + b"$0\r\n\r\n")
            else:
                add(_bulk(HEADER + name.encode()) + _bulk(header_value))
                size += len(header_value)
        args += 1 + 2 * pairs
    return PackedRecords(b"".join(parts), args, size)


def decode_fields(fields: Sequence[bytes]) -> tuple[int, bytes | None, bytes | None, list[Header]]:
    """timestamp, key, value, headers from an entry's flat field/value list."""
    timestamp = -1
    key: bytes | None = None
    value: bytes | None = None
    headers: list[Header] = []
    for i in range(0, len(fields) - 1, 2):
        name = fields[i]
        if name == VALUE:
            value = fields[i + 1]
        elif name == KEY:
            key = fields[i + 1]
        elif name == TIMESTAMP:
            timestamp = int(fields[i + 1])
        elif name.startswith(HEADER):
            headers.append((name[_HEADER_LEN:].decode(errors="replace"), fields[i + 1]))
        elif name.startswith(NULL_HEADER):
            headers.append((name[_NULL_HEADER_LEN:].decode(errors="replace"), None))
    return timestamp, key, value, headers


BATCH_COUNT = b"records"
BATCH_MAX_TIMESTAMP = b"max-timestamp"
BATCH = b"batch"
_BATCH_HEAD = _bulk(b"batch") + _bulk(b"3") + _bulk(BATCH_COUNT)
_BATCH_MAX_TIMESTAMP_BULK = _bulk(BATCH_MAX_TIMESTAMP)
_BATCH_BULK = _bulk(BATCH)


def pack_batch(count: int, max_timestamp: int, batch: bytes) -> PackedRecords:
    """The append script's arguments for one batch entry (``batches`` format): the marker
    'batch', the number of field/value pairs, then the pairs; ``size`` is the batch's bytes."""
    body = b"".join((_BATCH_HEAD, _bulk(b"%d" % count), _BATCH_MAX_TIMESTAMP_BULK,
                     _bulk(b"%d" % max_timestamp), _BATCH_BULK,
                     b"$%d\r\n" % len(batch), batch, b"\r\n"))
    return PackedRecords(body, 8, len(batch))


def batch_fields(fields: Sequence[bytes]) -> tuple[int, int, bytes] | None:
    """(record count, max timestamp, batch bytes) of a batch entry's fields; None for an entry
    that is not one (written by something other than the broker)."""
    if len(fields) != 6 or fields[0] != BATCH_COUNT or fields[2] != BATCH_MAX_TIMESTAMP \
            or fields[4] != BATCH:
        return None
    try:
        return int(fields[1]), int(fields[3]), fields[5]
    except ValueError:
        return None
