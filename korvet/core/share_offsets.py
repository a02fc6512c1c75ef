"""A share group's position on a partition in Kafka's terms, from its Redis consumer group
(DescribeShareGroupOffsets, AlterShareGroupOffsets; KIP-932).

Kafka describes a share partition by its start offset (SPSO: every record below it is in a
terminal state, acknowledged or archived) and its lag (the records from there on that are
not terminal yet). On Redis (docs/implementers/share-groups.md) the records in flight, acquired
or released, are the pending entries list of the group ``share:<group>``, and those never
delivered lie after its last-delivered id; everything else below that id was acknowledged or
archived. So the SPSO is the lowest pending entry's offset, else the offset after the last
delivered one, and never below the log start (trimmed records are archived). Tests:
tests/unit/core/test_share_offsets.py.
"""

from __future__ import annotations

from korvet.core.offsets import Codec, EntryId

NOTHING_DELIVERED = EntryId(0, 0)
_MAX_SEQ = 2**64 - 1


def start_offset(codec: Codec, last_delivered: EntryId, lowest_pending: EntryId | None,
                 log_start: int) -> int:
    """The share-partition start offset."""
    if lowest_pending is not None:
        return max(codec.encode_id(lowest_pending), log_start)
    if last_delivered == NOTHING_DELIVERED:
        return log_start
    return max(next_after(codec, last_delivered), log_start)


def next_after(codec: Codec, entry: EntryId) -> int:
    """The offset after the entry ``entry`` (an id the broker wrote, or one XGROUP SETID set)."""
    try:
        return codec.encode_id(entry) + 1
    except ValueError:  # not an id of a record: the first offset above it
        return codec.last_offset_of(entry) + 1


def lag(start: int, end: int, pending: int, undelivered: int, *, dense: bool) -> int:
    """Records from the SPSO on not yet terminal: those in flight and those never delivered
    (Redis' count when it has one; else, on a dense topic, every offset up to the end, which
    counts too many where records were removed; else -1, unknown: a time-scheme topic's
    offsets are not a count)."""
    if undelivered >= 0:
        return pending + undelivered
    return max(end - start, 0) if dense else -1


def entry_before(codec: Codec, offset: int) -> str:
    """The id XGROUP CREATE takes for a group that is to start at ``offset``: the greatest
    id below the entry of that offset ('0' for the first one)."""
    entry = codec.decode(offset)
    if entry.seq > 0:
        return f"{entry.ms}-{entry.seq - 1}"
    return f"{entry.ms - 1}-{_MAX_SEQ}" if entry.ms > 0 else "0"
