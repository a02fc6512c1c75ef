"""The group configs a broker reads (``services.part(GroupConfigs)``): a group's own configs
(set with IncrementalAlterConfigs on a GROUP resource) over the broker's settings, as
korvet/core/group_configs.py ``effective`` reads them.

The share groups' code asks for a group's configs at every fetch; a config set through
another broker reaches this one within ``CACHE_SECONDS`` (what Kafka promises is no more:
a config change reaches its coordinator through the metadata log, some time later)."""

from __future__ import annotations

import time

from korvet.core import group_configs as rules
from korvet.core.bounded import put_newest
from korvet.server.services import Services
from korvet.storage.group_configs import GroupConfigStore

CACHE_SECONDS = 1.0
# Group ids asked about are the clients' to choose: the cache keeps at most this many, the
# entry read longest ago dropped first (it is read again from Redis when asked for).
CACHE_ENTRIES = 10_000


class GroupConfigs:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.store = GroupConfigStore(services.store.redis, services.store.ks)
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}

    def broker(self) -> dict[str, str]:
        """The broker's settings under Kafka's names (group.share.record.lock.duration.ms ...),
        and where share groups start, which Kafka's brokers leave to the group config alone
        and Korvet's setting `share.auto-offset-reset` sets for every group."""
        found = {config.name: config.value for config in self.services.settings.kafka_configs()}
        found["group.share.auto.offset.reset"] = self.services.settings.share.auto_offset_reset
        return found

    async def explicit(self, group: str) -> dict[str, str]:
        """The group's own configs, read from Redis (no cache: for DescribeConfigs and
        alterations)."""
        found = await self.store.get(group)
        self._remember(group, found)
        return found

    async def own(self, group: str) -> dict[str, str]:
        """The group's own configs, read from Redis at most once every CACHE_SECONDS."""
        cached = self._cache.get(group)
        if cached is None or time.monotonic() - cached[0] > CACHE_SECONDS:
            return await self.explicit(group)
        return cached[1]

    async def values(self, group: str) -> dict[str, str]:
        """Every group config's value for ``group`` (its own over the broker's), read from
        Redis at most once every CACHE_SECONDS."""
        return rules.effective(await self.own(group), self.broker())

    async def put(self, group: str, configs: dict[str, str]) -> None:
        await self.store.put(group, configs)
        self._remember(group, dict(configs))

    def _remember(self, group: str, configs: dict[str, str]) -> None:
        put_newest(self._cache, group, (time.monotonic(), configs), CACHE_ENTRIES)
