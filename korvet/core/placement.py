"""Which live broker leads a partition: rendezvous (highest random weight) hashing.

Every broker computes the same answer from the same list of live brokers, and a
partition moves only when the broker it had joins or leaves (the others keep theirs).
Any broker still serves any partition (the append script is atomic in Redis): the
leader only spreads clients' connections.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def weight(node_id: int, topic: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{node_id}\x00{topic}\x00{partition}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big")


def leader(brokers: Sequence[int], topic: str, partition: int) -> int:
    """The broker with the highest weight for the partition (ties: the smaller id)."""
    if not brokers:
        raise ValueError("no live broker")
    return max(brokers, key=lambda b: (weight(b, topic, partition), -b))
