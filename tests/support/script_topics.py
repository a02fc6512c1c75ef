"""A store with one topic of one partition, for the tests that call the storage scripts
straight through ``RedisStore`` (tests/spec/OffsetCodec/test_append_script.py,
tests/unit/storage/test_delete_records_script.py)."""

from __future__ import annotations

import redis.asyncio as aioredis

from korvet.core.topics import TopicInfo
from korvet.storage.redis_store import RedisStore


async def one_partition_topic(client: aioredis.Redis, keyspace: str,
                              bits: int) -> tuple[RedisStore, TopicInfo]:
    """A store in ``keyspace`` holding topic "t": one partition, ``korvet.sequence.bits``
    = ``bits``."""
    store = RedisStore(client, keyspace=keyspace)
    await store.create_topic("t", 1, {"korvet.sequence.bits": str(bits)}, 0)
    topic = await store.get_topic("t", {})
    assert topic is not None
    return store, topic
