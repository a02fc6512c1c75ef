"""The broker: owns the Redis client and the API handlers, and registers them."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from korvet.config import Config
from korvet.protocol import api_versions
from korvet.protocol.registry import ApiRegistry, RequestContext


class Broker:
    def __init__(self, config: Config, client: aioredis.Redis, *, redis_url: str) -> None:
        self.config = config
        self.redis = client
        self.redis_url = redis_url
        self.bound_port = config.get_int("broker.port")
        self.registry = ApiRegistry()
        self.registry.register(api_versions.API_KEY, "ApiVersions", api_versions.VERSIONS,
                               self.handle_api_versions)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        await self.redis.aclose()

    async def handle_api_versions(self, ctx: RequestContext, request: Any) -> Any:
        return api_versions.build_response(self.registry, ctx.api_version)
