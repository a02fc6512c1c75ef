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

Header = tuple[str, bytes | None]

TIMESTAMP = b"timestamp"
KEY = b"key"
VALUE = b"value"
HEADER = b"header."
NULL_HEADER = b"header-null."
_HEADER_LEN = len(HEADER)
_NULL_HEADER_LEN = len(NULL_HEADER)


def encode_records(records: Sequence[tuple[int, bytes | None, bytes | None, Sequence[Header]]],
                   out: list[bytes | int], timestamp: int | None = None) -> int:
    """Append each record's ``k, f1, v1, ..., fk, vk`` (the append script's per-record
    layout) to ``out``; one call per batch, since this is a hot loop. ``timestamp``
    replaces the records' own (LogAppendTime). Returns the key, value and header bytes."""
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
