"""Group configs in Redis: the hash ``{ks}:group-configs``, one field per group id whose value
is the group's own configs as JSON (korvet/core/group_configs.py has their rules). Group
configs are few and written by tools, so one key serves every group; on Redis Cluster it
lives in one slot like ``{ks}:topics``."""

from __future__ import annotations

import json
from typing import Any


class GroupConfigStore:
    def __init__(self, client: Any, keyspace: str) -> None:
        self.redis = client
        self.key = f"{keyspace}:group-configs"

    async def get(self, group: str) -> dict[str, str]:
        raw = await self.redis.hget(self.key, group)
        if raw is None:
            return {}
        found = json.loads(raw)
        return {str(k): str(v) for k, v in found.items()}

    async def put(self, group: str, configs: dict[str, str]) -> None:
        if configs:
            await self.redis.hset(self.key, group, json.dumps(configs, sort_keys=True))
        else:
            await self.redis.hdel(self.key, group)
