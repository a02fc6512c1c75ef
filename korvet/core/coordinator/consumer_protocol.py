"""What the coordinator reads of the "consumer" protocol's member metadata.

A consumer's JoinGroup metadata (ConsumerProtocolSubscription) starts with an int16
version and the array of subscribed topic names (int32 count, then int16-length UTF-8
strings); every version keeps that prefix. OffsetDelete needs it to refuse deleting the
offsets of a topic the group still subscribes to. Pure byte parsing.
"""

from __future__ import annotations

import struct


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics a consumer subscribes to, or None when the metadata does not parse."""
    try:
        position = 2  # version
        (count,) = struct.unpack_from(">i", metadata, position)
        position += 4
        if count < 0 or count > len(metadata):
            return None
        topics = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.append(metadata[position:position + length].decode("utf-8"))
            position += length
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None
