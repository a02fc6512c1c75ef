"""Several brokers on one Redis: the broker registry and the groups' coordinator leases.

    {ks}:brokers                      hash: broker id -> JSON {host, port, rack, expires}
                                      (broker_heartbeat.lua; expires in Redis' clock, ms)
    {ks}:{group:G}:lease              hash: owner, token, expires (GroupStore.lease_key,
                                      in the slot of the group's other keys)

The rules are spec/CoordinatorLease.tla's, as korvet/core/lease.py states them; these
scripts run the Redis side of them atomically, reading Redis' own clock (TIME), so
brokers' clocks only matter for what a broker believes (a margin covers their drift).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from korvet.storage.groups import GroupStore, PartitionRef, touched_groups


def _lua(name: str) -> str:
    return (resources.files("korvet.storage") / "lua" / name).read_text()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class Grant:
    """The acquire script's answer: granted with ``token`` (and the group's durable
    snapshot, None for a new group), or held by ``owner`` for ``left_ms`` more."""

    granted: bool
    token: int = 0
    snapshot: str | None = None
    owner: str = ""
    left_ms: int = 0


@dataclass(frozen=True, slots=True)
class BrokerEntry:
    node_id: int
    host: str
    port: int
    rack: str | None


class LeaseStore:
    def __init__(self, groups: GroupStore) -> None:
        self.groups = groups
        client = groups.redis
        self._acquire: AsyncScript = client.register_script(_lua("lease_acquire.lua"))
        self._renew: AsyncScript = client.register_script(_lua("lease_renew.lua"))
        self._release: AsyncScript = client.register_script(_lua("lease_release.lua"))
        self._fenced: AsyncScript = client.register_script(_lua("fenced_write.lua"))

    async def acquire(self, group: str, broker: str, ttl_ms: int) -> Grant:
        answer: list[Any] = await self._acquire(
            keys=[self.groups.lease_key(group), self.groups.snapshot_key(group)],
            args=[broker, ttl_ms, group])
        if int(answer[0]) == 1:
            snapshot = answer[2] if len(answer) > 2 and answer[2] else None
            return Grant(True, token=int(answer[1]),
                         snapshot=_text(snapshot) if snapshot is not None else None)
        return Grant(False, owner=_text(answer[1]), left_ms=int(answer[2]))

    async def renew(self, group: str, token: int, ttl_ms: int) -> bool:
        return int(await self._renew(keys=[self.groups.lease_key(group)],
                                     args=[token, ttl_ms])) == 1

    async def release(self, group: str, token: int) -> None:
        await self._release(keys=[self.groups.lease_key(group)], args=[token])

    async def owner(self, group: str) -> tuple[str, int, int]:
        """(owner, token, expires) as Redis holds them: for tests and operators."""
        raw: dict[Any, Any] = await self.groups.redis.hgetall(self.groups.lease_key(group))
        fields = {_text(k): _text(v) for k, v in raw.items()}
        return (fields.get("owner", ""), int(fields.get("token", "0")),
                int(fields.get("expires", "0")))

    async def save_state(self, tokens: dict[str, int], snapshots: dict[str, str],
                         deleted: list[str],
                         commits: list[tuple[str, list[tuple[PartitionRef, int,
                                                               str | None, int]]]],
                         now_ms: int, removals: list[tuple[str, list[str]]]) -> list[str]:
        """``GroupStore.save_state`` fenced by the groups' tokens. Returns the groups
        whose token is stale (nothing of theirs was written).

        On one Redis the whole step is one script (``group-ids`` kept in it). On Redis
        Cluster each group's keys share one slot, not the step's: one script per group,
        with ``group-ids`` grown before (a load never misses a stored snapshot) and
        shrunk after, for the deleted groups whose write was applied."""
        groups = sorted(tokens)
        ops = self.groups.group_ops(snapshots, deleted, commits, now_ms, removals)
        order = touched_groups(snapshots, deleted, commits, removals)
        ids = self.groups.group_ids_key
        if not self.groups.cluster:
            flat: list[tuple[str, str, list[str]]] = []
            if snapshots:
                flat.append(("SADD", ids, list(snapshots)))
            for group in order:
                flat.extend(ops.get(group, ()))
            if deleted:
                flat.append(("SREM", ids, list(deleted)))
            stale = await self._fenced_write(groups, tokens, flat)
        else:
            if snapshots:
                await self.groups.redis.sadd(ids, *snapshots)
            answers = await asyncio.gather(*(
                self._fenced_write([g], tokens, ops.get(g, [])) for g in groups))
            stale = [g for answer in answers for g in answer]
            applied = [g for g in deleted if g not in stale]
            if applied:
                await self.groups.redis.srem(ids, *applied)
        if stale:
            return stale
        await self.groups.move_redis_groups(commits)
        return []

    async def _fenced_write(self, groups: list[str], tokens: dict[str, int],
                            ops: list[tuple[str, str, list[str]]]) -> list[str]:
        """fenced_write.lua: ``ops`` applied if every one of ``groups`` still has the
        token held; else nothing, and the stale groups are returned."""
        keys = [self.groups.lease_key(g) for g in groups]
        index: dict[str, int] = {}
        encoded: list[list[Any]] = []
        for command, key, args in ops:
            if key not in index:
                keys.append(key)
                index[key] = len(keys)
            encoded.append([command, index[key], *args])
        stale: list[Any] = await self._fenced(
            keys=keys, args=[len(groups), *(str(tokens[g]) for g in groups),
                             json.dumps(encoded)])
        return [groups[int(i) - 1] for i in stale]


class BrokerRegistry:
    """Each broker's entry, renewed by its heartbeat; the heartbeat's answer is the list
    of live brokers that Metadata and DescribeCluster report."""

    def __init__(self, client: aioredis.Redis, keyspace: str) -> None:
        self.key = f"{keyspace}:brokers"
        self._script: AsyncScript = client.register_script(_lua("broker_heartbeat.lua"))

    async def heartbeat(self, me: BrokerEntry, ttl_ms: int, leave: bool = False
                        ) -> list[BrokerEntry]:
        info = json.dumps({"host": me.host, "port": me.port, "rack": me.rack})
        flat: list[Any] = await self._script(
            keys=[self.key], args=[str(me.node_id), info, ttl_ms, "1" if leave else "0"])
        live: list[BrokerEntry] = []
        for i in range(0, len(flat), 2):
            try:
                entry = json.loads(_text(flat[i + 1]))
                live.append(BrokerEntry(int(_text(flat[i])), str(entry["host"]),
                                        int(entry["port"]), entry.get("rack") or None))
            except (ValueError, KeyError, TypeError):
                continue
        return sorted(live, key=lambda b: b.node_id)
