"""Topic metadata cache, invalidated across brokers through Redis pub/sub.

Produce and Fetch look topics up on every request; reading the topic hash each
time would double their Redis round trips. Entries live for ``ttl`` seconds and
are dropped at once when any broker publishes a change of that topic on
``{ks}:topic-changes`` (create, delete, partitions, configs). The append script
re-checks the topic's id and partition count atomically, so a stale entry can
never write into a deleted topic.

When Redis does not answer a lookup (on a cluster: the master of the ``{topics}`` slot
just died and its replica is not promoted yet), the last entry read is served, however
old, unless that topic's change was announced since: the request then goes on to its
partitions' masters (which may well be alive) instead of failing, and the broker does not
have to drop the client's connection. With no entry at all the error propagates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from redis.exceptions import RedisError

from korvet.core.topics import TopicInfo
from korvet.storage.redis_store import RedisStore

_ENTRIES_KEPT = 10_000  # above this, the cached "no such topic" answers are dropped


class TopicCache:
    def __init__(self, store: RedisStore, defaults: Callable[[str], Mapping[str, str]],
                 ttl: float = 5.0) -> None:
        self.store = store
        self.defaults_for = defaults  # topic name -> broker-level config defaults for it
        self.ttl = ttl
        self._by_name: dict[str, tuple[TopicInfo | None, float]] = {}
        self._id_to_name: dict[str, str] = {}
        # the last entries read, kept through expiry and a blanket invalidation (the
        # change notifications' reconnect), served only while Redis does not answer
        self._last: dict[str, TopicInfo] = {}
        self._last_ids: dict[str, str] = {}

    async def get(self, name: str) -> TopicInfo | None:
        cached = self._by_name.get(name)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.ttl:
            return cached[0]
        try:
            topic = await self.store.get_topic(name, self.defaults_for(name))
        except (RedisError, OSError):
            if name in self._last:
                return self._last[name]
            raise
        if len(self._by_name) >= _ENTRIES_KEPT:  # names any client may send stay bounded
            self._by_name = {n: e for n, e in self._by_name.items() if e[0] is not None}
        self._by_name[name] = (topic, now)
        if topic is not None:  # names that do not exist are not kept: any client can send them
            self._last[name] = topic
            self._id_to_name[topic.topic_id] = topic.name
            self._last_ids[topic.topic_id] = topic.name
        else:
            self._last.pop(name, None)
        return topic

    def peek(self, name: str) -> TopicInfo | None:
        """The cached entry, however old, without asking Redis (for synchronous callers)."""
        cached = self._by_name.get(name)
        return cached[0] if cached is not None else None

    async def by_id(self, topic_id: str) -> TopicInfo | None:
        name = self._id_to_name.get(topic_id)
        if name is None:
            try:
                name = await self.store.topic_name_for_id(topic_id)
            except (RedisError, OSError):
                name = self._last_ids.get(topic_id)
                if name is None:
                    raise
            if name is None:
                return None
        topic = await self.get(name)
        if topic is None or topic.topic_id != topic_id:
            self._id_to_name.pop(topic_id, None)
            return None
        return topic

    async def all(self) -> list[TopicInfo]:
        topics = await self.store.list_topics(self.defaults_for)
        now = time.monotonic()
        for topic in topics:
            self._by_name[topic.name] = (topic, now)
            self._id_to_name[topic.topic_id] = topic.name
            self._last[topic.name] = topic
            self._last_ids[topic.topic_id] = topic.name
        return topics

    def invalidate(self, name: str | None = None) -> None:
        if name is None:
            self._by_name.clear()
            self._id_to_name.clear()
            return
        self._by_name.pop(name, None)
        self._last.pop(name, None)
