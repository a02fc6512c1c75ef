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

A record of a transaction carries its producer first, so that a fetch gives it back in a
batch of that producer id and epoch, marked transactional (a read_committed consumer drops
the records of aborted transactions by producer id):

    producer           "<producer id> <producer epoch>"

A transaction marker (korvet/server/transactions.py) is an entry of its own at its offset:

    control            COMMIT or ABORT
    producer           "<producer id> <producer epoch>"
    coordinator-epoch  the coordinator epoch the marker carries
    timestamp          when it was written, in ms

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
PRODUCER = b"producer"
CONTROL = b"control"
COORDINATOR_EPOCH = b"coordinator-epoch"
KEY = b"key"
VALUE = b"value"
HEADER = b"header."
NULL_HEADER = b"header-null."
_HEADER_LEN = len(HEADER)
_NULL_HEADER_LEN = len(NULL_HEADER)


# The append script's arguments for a batch of the ``records`` format: a layout name, then each
# record's arguments in that layout. The layout changes only what travels to the script (fewer
# arguments, no field names, for the common records); the stored entries are the same in all
# three (``entry_fields``).
VALUES = b"values"  # per record: timestamp, value (every record has a value, no key, no header)
KEYED = b"keyed"  # per record: timestamp, key, value (every record has a key and a value, no header)
FIELDS = b"fields"  # per record: k, then the k field/value pairs of ``entry_fields`` (any record)


def entry_fields(record: Record, timestamp: int | None = None,
                 producer: bytes | None = None) -> list[bytes]:
    """The stored entry's field/value list of one record (the layout in this module's doc).
    ``timestamp`` replaces the record's own (LogAppendTime); ``producer`` tags a record of a
    transaction. The readable definition: the produce path sends ``pack_records``' RESP
    bytes, which tests hold to this."""
    stamp, key, value, headers = record
    fields = [PRODUCER, producer] if producer is not None else []
    fields += (TIMESTAMP, b"%d" % (stamp if timestamp is None else timestamp))
    if key is not None:
        fields += (KEY, key)
    if value is not None:
        fields += (VALUE, value)
    for name, header_value in headers:
        if header_value is None:
            fields += (NULL_HEADER + name.encode(), b"")
        else:
            fields += (HEADER + name.encode(), header_value)
    return fields


def _layout(records: Sequence[Record]) -> bytes:
    if all(key is None and value is not None and not headers for _, key, value, headers in records):
        return VALUES
    if all(key is not None and value is not None and not headers
           for _, key, value, headers in records):
        return KEYED
    return FIELDS


def append_arguments(records: Sequence[Record], timestamp: int | None = None,
                     producer: bytes | None = None) -> tuple[list[bytes | int], int]:
    """The append script's arguments for these records (the layout first, then each record's
    arguments; see VALUES, KEYED, FIELDS) and their key, value and header bytes. The readable
    definition of what ``pack_records`` packs."""
    layout = FIELDS if producer is not None else _layout(records)
    arguments: list[bytes | int] = [layout]
    size = 0
    for record in records:
        fields = entry_fields(record, timestamp, producer)
        _, key, value, headers = record
        size += len(key or b"") + len(value or b"") + sum(len(v or b"") for _, v in headers)
        if layout == FIELDS:
            arguments += (len(fields) // 2, *fields)
        else:
            arguments += fields[1::2]  # the values only: the script names the fields
    return arguments, size


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


_TIMESTAMP_BULK = _bulk(TIMESTAMP)
_KEY_BULK = _bulk(KEY)
_VALUE_BULK = _bulk(VALUE)
_VALUES_BULK = _bulk(VALUES)
_KEYED_BULK = _bulk(KEYED)
_FIELDS_BULK = _bulk(FIELDS)


@dataclass(frozen=True, slots=True)
class PackedRecords:
    """A batch's append arguments (``append_arguments``) as RESP bulk strings, ready to
    follow the append command's other arguments on the wire."""

    body: bytes
    args: int  # bulk strings in ``body``
    size: int  # key, value and header bytes, as ``append_arguments`` counts them


def pack_records(records: Sequence[Record], timestamp: int | None = None,
                 producer: bytes | None = None) -> PackedRecords:
    """``append_arguments`` and the RESP packing of its output in one pass: byte for byte
    what ``hiredis.pack_command`` makes of those arguments (tests/unit/storage/test_entries.py),
    at a fraction of the cost, for this is the produce path's hottest loop."""
    if producer is not None:
        return (_pack_tagged(records, timestamp, producer)
                or _pack_fields(records, timestamp, producer))
    return (_pack_values(records, timestamp) or _pack_keyed(records, timestamp)
            or _pack_fields(records, timestamp))


# A record's arguments in the VALUES and KEYED layouts, for one %-format of the whole batch:
# the timestamp's bulk string (formatted once for a run of records that share it), then the
# lengths and bytes of the key and value.
_VALUE_RECORD = b"%s$%d\r\n%s\r\n"
_KEYED_RECORD = b"%s$%d\r\n%s\r\n$%d\r\n%s\r\n"


def _pack_values(records: Sequence[Record], timestamp: int | None) -> PackedRecords | None:
    """The VALUES layout; None as soon as a record does not fit it."""
    args: list[bytes | int] = []
    extend = args.extend
    fixed = timestamp is not None  # LogAppendTime: every record gets the broker's time
    last, stamp_bulk = timestamp, b"" if timestamp is None else _bulk(b"%d" % timestamp)
    for stamp, key, value, headers in records:
        if key is not None or value is None or headers:
            return None
        if stamp != last and not fixed:
            last, stamp_bulk = stamp, _bulk(b"%d" % stamp)
        extend((stamp_bulk, len(value), value))
    body = (_VALUES_BULK + _VALUE_RECORD * len(records)) % tuple(args)
    return PackedRecords(body, 1 + 2 * len(records), sum(args[1::3]))  # type: ignore[arg-type]


def _pack_keyed(records: Sequence[Record], timestamp: int | None) -> PackedRecords | None:
    """The KEYED layout; None as soon as a record does not fit it."""
    args: list[bytes | int] = []
    extend = args.extend
    fixed = timestamp is not None  # LogAppendTime: every record gets the broker's time
    last, stamp_bulk = timestamp, b"" if timestamp is None else _bulk(b"%d" % timestamp)
    for stamp, key, value, headers in records:
        if key is None or value is None or headers:
            return None
        if stamp != last and not fixed:
            last, stamp_bulk = stamp, _bulk(b"%d" % stamp)
        extend((stamp_bulk, len(key), key, len(value), value))
    body = (_KEYED_BULK + _KEYED_RECORD * len(records)) % tuple(args)
    size = sum(args[1::5]) + sum(args[3::5])  # type: ignore[arg-type]
    return PackedRecords(body, 1 + 3 * len(records), size)


# A transactional producer's record without headers in the FIELDS layout (_pack_fields'
# order: the pair count, the producer tag, the timestamp, the key if any, the value).
_TAGGED_RECORD = b"%s%s" + _VALUE_BULK + b"$%d\r\n%s\r\n"
_TAGGED_KEYED_RECORD = b"%s%s" + _KEY_BULK + b"$%d\r\n%s\r\n" + _VALUE_BULK \
    + b"$%d\r\n%s\r\n"


def _pack_tagged(records: Sequence[Record], timestamp: int | None,
                 producer: bytes) -> PackedRecords | None:
    """``_pack_fields`` of a producer's records in one %-format of the whole batch (a
    transactional batch's hot path); None as soon as a record has headers or no value."""
    tag = _bulk(PRODUCER) + _bulk(producer) + _TIMESTAMP_BULK
    unkeyed, keyed = _bulk(b"3") + tag, _bulk(b"4") + tag
    formats: list[bytes] = []
    args: list[bytes | int] = []
    extend = args.extend
    fixed = timestamp is not None  # LogAppendTime: every record gets the broker's time
    last, stamp_bulk = timestamp, b"" if timestamp is None else _bulk(b"%d" % timestamp)
    size = 0
    count = 1
    for stamp, key, value, headers in records:
        if value is None or headers:
            return None
        if stamp != last and not fixed:
            last, stamp_bulk = stamp, _bulk(b"%d" % stamp)
        if key is None:
            formats.append(_TAGGED_RECORD)
            extend((unkeyed, stamp_bulk, len(value), value))
            size += len(value)
            count += 7
        else:
            formats.append(_TAGGED_KEYED_RECORD)
            extend((keyed, stamp_bulk, len(key), key, len(value), value))
            size += len(key) + len(value)
            count += 9
    return PackedRecords(_FIELDS_BULK + b"".join(formats) % tuple(args), count, size)


def _pack_fields(records: Sequence[Record], timestamp: int | None,
                 producer: bytes | None = None) -> PackedRecords:
    parts: list[bytes] = [_FIELDS_BULK]
    add = parts.append
    args = 1
    size = 0
    tag = b"" if producer is None else _bulk(PRODUCER) + _bulk(producer)
    tagged = producer is not None
    for stamp, key, value, headers in records:
        stamp_text = b"%d" % (stamp if timestamp is None else timestamp)
        pairs = 1 + tagged + (key is not None) + (value is not None) + len(headers)
        add(_bulk(b"%d" % pairs) + tag + _TIMESTAMP_BULK + _bulk(stamp_text))
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


def marker_fields(commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                  timestamp: int) -> list[bytes]:
    """A transaction marker's entry in the ``records`` format (this module's doc)."""
    return [CONTROL, b"COMMIT" if commit else b"ABORT", PRODUCER,
            b"%d %d" % (producer_id, producer_epoch), COORDINATOR_EPOCH,
            b"%d" % coordinator_epoch, TIMESTAMP, b"%d" % timestamp]


def pack_entry(fields: Sequence[bytes]) -> PackedRecords:
    """The append script's arguments for one entry of these fields (the FIELDS layout)."""
    body = _FIELDS_BULK + _bulk(b"%d" % (len(fields) // 2)) + b"".join(map(_bulk, fields))
    return PackedRecords(body, 2 + len(fields), 0)


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


BATCH_HORIZON = b"delete-horizon"


def batch_fields(fields: Sequence[bytes]) -> tuple[int, int, bytes] | None:
    """(record count, max timestamp, batch bytes) of a batch entry's fields; None for an entry
    that is not one (written by something other than the broker). The count is the offsets
    the batch spans (its last offset delta + 1): a batch the log cleaner rewrote holds fewer
    records, and has a seventh field, its tombstones' ``delete-horizon``."""
    if len(fields) not in (6, 8) or fields[0] != BATCH_COUNT or fields[2] != BATCH_MAX_TIMESTAMP \
            or fields[4] != BATCH or (len(fields) == 8 and fields[6] != BATCH_HORIZON):
        return None
    try:
        return int(fields[1]), int(fields[3]), fields[5]
    except ValueError:
        return None
