"""Which live broker leads a partition, and which lists a group: rendezvous (highest
random weight) hashing.

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


def group_weight(node_id: int, group_id: str) -> int:
    digest = hashlib.blake2b(f"group\x00{node_id}\x00{group_id}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big")


def lister(brokers: Sequence[int], group_id: str, owner: str | None, expires_ms: int,
           now_ms: int) -> int:
    """The live broker whose ListGroups lists a group (several brokers on one Redis).

    Kafka's brokers each list the groups they coordinate, and the AdminClient asks every
    broker and merges the answers. Here that is the holder of the group's lease, when it
    is live and the lease has not expired in Redis' clock (``now_ms``); a group nobody
    coordinates (its owner died, or no client came back since) is listed by the broker
    rendezvous hashing picks among the live ones. Every broker computing this from the
    same registry and leases names the same one, so the merged listing has every group
    exactly once."""
    if not brokers:
        raise ValueError("no live broker")
    if owner is not None and expires_ms > now_ms:
        holder = next((b for b in brokers if str(b) == owner), None)
        if holder is not None:
            return holder
    return max(brokers, key=lambda b: (group_weight(b, group_id), -b))
