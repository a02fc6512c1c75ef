"""Consumer groups in Redis: committed offsets, Redis consumer groups, coordinator snapshots.

    {ks}:commit:{streamKey}:{groupId}   hash: offset, metadata, leader-epoch, committed
                                        (the committed offset of one partition for one group)
    {ks}:group-commits:{groupId}        set of the stream keys the group has offsets for
    {ks}:groups                         hash: group id -> coordinator snapshot (JSON)

The committed offset is the Kafka offset a consumer resumes from (the next record to
read). Redis consumer groups are kept for observability only: created lazily at the
group's first fetch of a partition, at the fetch offset (seed 000), and moved to the
committed position at each commit (XGROUP SETID), so ``XINFO GROUPS`` shows each
group's progress. Fetching never reads through them: the client's fetch_offset decides
what it gets (docs/spec/stream-group.md explains why XREADGROUP ``>`` would skip records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from korvet.core.offsets import OffsetCodec


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """A topic partition as the group store needs it: the name and the stream key."""

    topic: str
    partition: int
    stream_key: str
    bits: int


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class GroupStore:
    def __init__(self, client: aioredis.Redis, keyspace: str = "korvet") -> None:
        self.redis = client
        self.ks = keyspace
        self.snapshots_key = f"{keyspace}:groups"

    def commit_key(self, stream_key: str, group: str) -> str:
        return f"{self.ks}:commit:{stream_key}:{group}"

    def index_key(self, group: str) -> str:
        return f"{self.ks}:group-commits:{group}"

    # --- committed offsets ---------------------------------------------------------------

    async def save_state(self, snapshots: dict[str, str], deleted: Sequence[str],
                         commits: Sequence[tuple[str, Sequence[tuple[PartitionRef, int,
                                                                       str | None, int]]]],
                         now_ms: int,
                         removals: Sequence[tuple[str, Sequence[str]]] = ()) -> None:
        """Durably store coordinator snapshots and committed offsets, and remove deleted
        offsets (``removals``: group, stream keys), in one MULTI/EXEC; then move the Redis
        consumer groups along.

        The transaction holds the snapshots, the committed offsets and each group's index
        of committed partitions; the XGROUP SETID calls after it are observability only,
        so their failures (no stream yet, no Redis group yet) are ignored.
        """
        pipe = self.redis.pipeline(transaction=True)
        if snapshots:
            pipe.hset(self.snapshots_key, mapping=snapshots)  # type: ignore[arg-type]
        if deleted:
            pipe.hdel(self.snapshots_key, *deleted)
        for group, offsets in commits:
            for ref, offset, metadata, epoch in offsets:
                key = self.commit_key(ref.stream_key, group)
                mapping: dict[str, str | int] = {"offset": offset, "leader-epoch": epoch,
                                                 "committed": now_ms}
                if metadata is None:
                    pipe.hdel(key, "metadata")
                else:
                    mapping["metadata"] = metadata
                pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
                pipe.sadd(self.index_key(group), ref.stream_key)
        for group, stream_keys in removals:
            if stream_keys:
                pipe.unlink(*[self.commit_key(k, group) for k in stream_keys])
                pipe.srem(self.index_key(group), *stream_keys)
        await pipe.execute()
        if not commits:
            return
        progress = self.redis.pipeline(transaction=False)
        for group, offsets in commits:
            for ref, offset, _metadata, _epoch in offsets:
                progress.execute_command("XGROUP", "SETID", ref.stream_key, group,
                                         _id_before(ref.bits, offset))
        await progress.execute(raise_on_error=False)

    # --- Redis consumer groups ----------------------------------------------------------------

    async def ensure_redis_group(self, stream_key: str, group: str, bits: int,
                                 fetch_offset: int) -> bool:
        """XGROUP CREATE at the position before ``fetch_offset`` (seed 000: lazily, at the
        first group fetch). An existing group (BUSYGROUP, e.g. after a broker restart)
        keeps its position. A partition without a stream yet is left for a later fetch.
        Returns True when the Redis group exists afterwards."""
        try:
            await self.redis.execute_command(  # type: ignore[no-untyped-call]
                "XGROUP", "CREATE", stream_key, group, _id_before(bits, fetch_offset))
        except ResponseError as exc:
            text = str(exc)
            if "BUSYGROUP" in text:
                return True
            if "requires the key to exist" in text:
                return False
            raise
        return True

    async def destroy_redis_groups(self, group: str) -> int:
        """XGROUP DESTROY the group on every partition stream (SCAN, pipelined: seed 001)."""
        pattern = f"{_escape(self.ks)}:stream:*"
        destroyed = 0
        batch: list[str] = []

        async def flush() -> int:
            pipe = self.redis.pipeline(transaction=False)
            for stream_key in batch:
                pipe.execute_command("XGROUP", "DESTROY", stream_key, group)
            results = await pipe.execute(raise_on_error=False)
            batch.clear()
            return sum(1 for r in results if r == 1)

        async for key in self.redis.scan_iter(match=pattern, count=500, _type="stream"):
            batch.append(_text(key))
            if len(batch) >= 200:
                destroyed += await flush()
        if batch:
            destroyed += await flush()
        return destroyed

    async def delete_group(self, group: str) -> None:
        """Everything Redis keeps for a group: offsets, index, snapshot, Redis groups."""
        keys = sorted(_text(k) for k in await self.redis.smembers(self.index_key(group)))
        pipe = self.redis.pipeline(transaction=True)
        if keys:
            pipe.unlink(*[self.commit_key(k, group) for k in keys])
        pipe.unlink(self.index_key(group))
        pipe.hdel(self.snapshots_key, group)
        await pipe.execute()
        await self.destroy_redis_groups(group)

    # --- coordinator snapshots -------------------------------------------------------------

    async def load_snapshots(self) -> dict[str, str]:
        raw: dict[Any, Any] = await self.redis.hgetall(self.snapshots_key)
        return {_text(k): _text(v) for k, v in raw.items()}


def _id_before(bits: int, offset: int) -> str:
    """The entry id just before ``offset``: a Redis group created or set there delivers the
    record at ``offset`` next (Redis groups deliver ids greater than their position)."""
    if offset <= 0:
        return "0-0"
    return str(OffsetCodec(bits).decode(offset - 1))


def _escape(pattern: str) -> str:
    """Escape glob characters for SCAN MATCH (keyspaces and group ids are user text)."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in pattern)


def id_before(bits: int, offset: int) -> str:
    """The Redis group position that delivers ``offset`` next (public for the metrics)."""
    return _id_before(bits, offset)
