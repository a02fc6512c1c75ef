"""One Redis stream entry per Kafka record: the field layout.

    timestamp          the record's timestamp in ms, decimal ASCII (always present)
    key                the key bytes, exactly as produced (absent when the key is null)
    value              the value bytes (absent when the value is null: a tombstone)
    header.<name>      one field per header, in the record's order; duplicates allowed
    header-null.<name> a header whose value is null (its field value is empty)

Redis keeps a stream entry's fields as an ordered list, so repeated header names
survive, and absent fields distinguish null from empty. ``redis-cli XRANGE`` on a
partition stream shows the records readably.
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
