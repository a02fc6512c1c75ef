"""The topic cache when Redis stops answering (on a cluster: the master of the ``{topics}``
slot died and its replica is not promoted yet): the last entry read of a topic is served,
so requests go on to the partitions' masters instead of the broker dropping its clients;
a topic never read, or announced as changed since, gets the error; and names that do not
exist are not kept for such times (any client can send them)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from korvet.server.embedded_redis import EmbeddedRedis
from korvet.storage.redis_store import RedisStore
from korvet.storage.topic_cache import TopicCache


async def _scenario(url: str, server: EmbeddedRedis) -> None:
    client = aioredis.from_url(url)
    store = RedisStore(client, keyspace="cache")
    await store.create_topic("kept", 3, {}, 0)
    await store.create_topic("changed", 1, {}, 0)
    cache = TopicCache(store, lambda name: {}, ttl=0.0)  # every get asks Redis
    kept = await cache.get("kept")
    assert kept is not None and kept.partitions == 3
    assert await cache.get("changed") is not None
    assert await cache.get("missing") is None
    cache.invalidate("changed")  # a change announced on the topic-changes channel
    server.stop()
    try:
        assert await cache.get("kept") == kept  # served from the last read
        assert await cache.by_id(kept.topic_id) == kept
        for name in ("changed", "missing", "never-read"):
            with pytest.raises((RedisError, OSError)):
                await cache.get(name)
    finally:
        await client.aclose()


@pytest.mark.integration  # starts a redis-server
def test_a_topic_read_before_redis_stopped_answering_is_still_served() -> None:
    with tempfile.TemporaryDirectory() as folder:
        server = EmbeddedRedis(Path(folder), appendfsync="off")
        url = server.start()
        try:
            asyncio.run(_scenario(url, server))
        finally:
            server.stop()
