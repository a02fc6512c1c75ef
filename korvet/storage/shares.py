"""Share partitions (KIP-932) on Redis consumer groups: the three scripts, called per partition.

One share group on one partition is the Redis consumer group ``share:<group id>`` on the
partition's stream; its consumers are the share members (``m:<member id>``) and the parking
consumer (``park``) released records wait on. Every key a script touches is the partition's
(stream and meta hash), so each call runs in the partition's slot on Redis Cluster. What the
scripts decide is korvet/core/share_partition.py's rules (docs/spec/share-groups.md,
spec/SharePartitionRedis.tla); this module turns offsets into entry ids and back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from korvet.core.epochs import FIXED, Epochs
from korvet.core.offsets import EntryId
from korvet.core.share_partition import PARK, AckType, ShareLimits, consumer_of, redis_group_of
from korvet.core.topics import TopicInfo
from korvet.storage.redis_store import RedisStore


def _lua(name: str) -> str:
    return (resources.files("korvet.storage") / "lua" / name).read_text()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Acquired:
    """One fetch's acquisition on one partition, in offset order."""

    raw: list[Any]  # [entry id, [f1, v1, ...]] per acquired entry, as XRANGE gives them
    counts: list[tuple[int, int]]  # (offset, delivery count) per entry
    archived: int  # PEL entries the fetch archived (at the delivery limit, or trimmed)
    epochs: Epochs = FIXED


@dataclass(frozen=True, slots=True)
class ShareState:
    """A share group's Redis consumer group on one partition, as XINFO GROUPS shows it."""

    last_delivered: EntryId  # 0-0: nothing delivered yet
    pending: int  # entries acquired or released and not yet acknowledged (the PEL)
    lowest_pending: EntryId | None
    lag: int  # entries not delivered yet; -1 when Redis cannot say


@dataclass(frozen=True, slots=True)
class AckOutcome:
    """``refused``: the offset the guard refused (nothing applied), else None."""

    refused: int | None
    accepted: int = 0
    archived: int = 0
    released: int = 0
    renewed: int = 0


class ShareStore:
    """The share scripts on the broker's Redis client (one Redis or a cluster)."""

    def __init__(self, client: Any, stream_key: Any, meta_key: Any) -> None:
        self._fetch = client.register_script(_lua("share_fetch.lua"))
        self._ack = client.register_script(_lua("share_ack.lua"))
        self._release = client.register_script(_lua("share_release.lua"))
        self._state = client.register_script(_lua("share_state.lua"))
        self._stream_key, self._meta_key = stream_key, meta_key

    def _keys(self, topic: TopicInfo, partition: int) -> list[str]:
        return [self._stream_key(topic.name, partition), self._meta_key(topic.name, partition)]

    async def acquire(self, topic: TopicInfo, partition: int, group: str, member: str,
                      limits: ShareLimits, max_records: int, *, start: str,
                      committed: bool = False, max_bytes: int | None = None) -> Acquired:
        """``start``: where the group starts on the partition if it has no Redis consumer
        group there yet (XGROUP CREATE's id: '0' earliest, '$' latest, or an entry id).
        ``committed``: share.isolation.level=read_committed (records below the last stable
        offset only; those of aborted transactions archived, never acquired).
        ``max_bytes``: the partition's share of the response; the records acquired, as
        record batches, stay within it, but for the first, which always comes (None: no
        limit)."""
        stream = self._stream_key(topic.name, partition)
        reply = await self._fetch(
            keys=[stream, self._meta_key(topic.name, partition), RedisStore.aborted_key(stream)],
            args=[redis_group_of(group), consumer_of(member), limits.lock_ms,
                  limits.delivery_limit, limits.max_locks, max_records, start, PARK,
                  "1" if committed else "0", *([] if max_bytes is None else [max_bytes])])
        epochs_text, archived, entries = reply
        codec = topic.config.codec
        raw: list[Any] = []
        counts: list[tuple[int, int]] = []
        for entry_id, count, fields in entries:
            raw.append([entry_id, fields])
            counts.append((codec.encode_id(EntryId.parse(entry_id)), int(count)))
        epochs = Epochs.parse(epochs_text or None) if topic.config.dense else FIXED
        return Acquired(raw, counts, int(archived), epochs)

    async def acknowledge(self, topic: TopicInfo, partition: int, group: str, member: str,
                          limits: ShareLimits,
                          acks: Sequence[tuple[int, AckType]]) -> AckOutcome:
        codec = topic.config.codec
        args: list[Any] = [redis_group_of(group), consumer_of(member), limits.lock_ms,
                           limits.delivery_limit, PARK]
        for offset, kind in acks:
            args += [str(codec.decode(offset)), int(kind)]
        reply = await self._ack(keys=self._keys(topic, partition), args=args)
        if _text(reply[0]) == "INVALID":
            return AckOutcome(codec.encode_id(EntryId.parse(reply[1])))
        return AckOutcome(None, *(int(x) for x in reply[1:5]))

    async def release(self, topic: TopicInfo, partition: int, group: str, member: str,
                      limits: ShareLimits) -> tuple[int, int]:
        """A closed session's records on one partition: (released, archived)."""
        reply = await self._release(keys=self._keys(topic, partition), args=[
            redis_group_of(group), consumer_of(member), limits.lock_ms, limits.delivery_limit,
            PARK])
        return int(reply[0]), int(reply[1])

    async def state(self, topic: TopicInfo, partition: int, group: str) -> ShareState | None:
        """The group's state on the partition; None when it never read there."""
        reply = await self._state(keys=self._keys(topic, partition),
                                  args=[redis_group_of(group), "state"])
        if not reply:
            return None
        lowest = _text(reply[2])
        return ShareState(EntryId.parse(_text(reply[0])), int(reply[1]),
                          EntryId.parse(lowest) if lowest else None, int(reply[3]))

    async def reset(self, topic: TopicInfo, partition: int, group: str, after: str) -> bool:
        """The group restarts on the partition after the entry id ``after`` ('0': from the
        first record), what it had in flight dropped (on a partition with no record yet, the
        group is created there when it first fetches)."""
        reply = await self._state(keys=self._keys(topic, partition),
                                  args=[redis_group_of(group), "reset", after])
        return bool(reply)

    async def delete(self, topic: TopicInfo, partition: int, group: str) -> bool:
        """The group's state on the partition removed; False when there was none."""
        reply = await self._state(keys=self._keys(topic, partition),
                                  args=[redis_group_of(group), "delete"])
        return bool(reply)
