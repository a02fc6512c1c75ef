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


def encode_fields(timestamp: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[Header], out: list[bytes | int]) -> None:
    """Append ``k, f1, v1, ..., fk, vk`` (the append script's per-record layout) to ``out``."""
    count_at = len(out)
    out.append(0)
    out.append(TIMESTAMP)
    out.append(b"%d" % timestamp)
    pairs = 1
    if key is not None:
        out.append(KEY)
        out.append(key)
        pairs += 1
    if value is not None:
        out.append(VALUE)
        out.append(value)
        pairs += 1
    for name, header_value in headers:
        if header_value is None:
            out.append(NULL_HEADER + name.encode())
            out.append(b"")
        else:
            out.append(HEADER + name.encode())
            out.append(header_value)
        pairs += 1
    out[count_at] = pairs


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


def stored_size(fields: Sequence[bytes]) -> int:
    return sum(len(f) for f in fields)
