"""Every broker's claim on its keyspace: which brokers may serve from it, and how.

    {ks}:broker-claims     hash: broker id -> JSON {instance, host, port, single, expires,
                           token, granted}; '#claims' -> how many claims were ever granted
                           (broker_claim.lua; expires in Redis' clock, ms)

Every broker claims its broker id at start, whatever its settings, and renews the claim
while it runs. A broker without ``cluster.multi-broker`` claims as the single broker: it
coordinates every group without leases, so no other broker may serve the keyspace while
its claim lives, and it may not start while another broker's claim lives. Brokers with
``cluster.multi-broker`` share the keyspace (their groups are leased), but no two live
processes may hold one broker id. The rules run in one script, on Redis' clock, so two
brokers starting at the same moment cannot both pass (docs/implementers/several-brokers.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class Holder:
    """Another broker's claim, as the script names it: what a refusal tells the user."""

    node_id: str
    host: str
    port: int
    single: bool
    expires_ms: int  # its entry's end, Redis' clock: it moves while the holder renews
    why: str  # 'id': it holds this broker id; 'single': one of the two runs alone;
    #           'gone': this broker's own entry was removed

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}" if self.host else "(address not yet known)"


@dataclass(frozen=True, slots=True)
class ClaimAnswer:
    """Granted or renewed (``token``, and ``count``: the claims granted so far), or refused
    because of ``holder``."""

    granted: bool
    token: int = 0
    count: int = 0
    holder: Holder | None = None


class ClaimStore:
    def __init__(self, client: aioredis.Redis, keyspace: str) -> None:
        self.key = f"{keyspace}:broker-claims"
        lua = (resources.files("korvet.storage") / "lua" / "broker_claim.lua").read_text()
        self._script: AsyncScript = client.register_script(lua)

    async def claim(self, node_id: int, instance: str, host: str, port: int, *, single: bool,
                    ttl_ms: int, force: bool = False) -> ClaimAnswer:
        return await self._run("claim", node_id, instance, host, port, single, ttl_ms,
                               force=force)

    async def renew(self, node_id: int, instance: str, host: str, port: int, *, single: bool,
                    ttl_ms: int, granted_at: int) -> ClaimAnswer:
        return await self._run("renew", node_id, instance, host, port, single, ttl_ms,
                               granted_at=granted_at)

    async def release(self, node_id: int, instance: str) -> None:
        await self._run("release", node_id, instance, "", 0, False, 0)

    async def _run(self, op: str, node_id: int, instance: str, host: str, port: int,
                   single: bool, ttl_ms: int, *, force: bool = False,
                   granted_at: int = 0) -> ClaimAnswer:
        me = json.dumps({"host": host, "port": port, "single": single})
        answer: list[Any] = await self._script(
            keys=[self.key], args=[op, str(node_id), instance, me, ttl_ms,
                                   "1" if force else "0", granted_at])
        if int(answer[0]) == 1:
            return ClaimAnswer(True, token=int(answer[1]) if len(answer) > 1 else 0,
                               count=int(answer[2]) if len(answer) > 2 else 0)
        entry = json.loads(_text(answer[2]))
        return ClaimAnswer(False, holder=Holder(
            _text(answer[1]), str(entry.get("host") or ""), int(entry.get("port") or 0),
            bool(entry.get("single")), int(entry.get("expires") or 0), _text(answer[3])))
