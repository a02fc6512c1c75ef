"""Several brokers on one Redis: the broker registry and the groups' coordinator leases.

    {ks}:brokers                      hash: broker id -> JSON {host, port, rack, listeners,
                                      expires} (broker_heartbeat.lua; expires in Redis'
                                      clock, ms; listeners: name -> [host, port], each
                                      listener's advertised address; host and port: the
                                      first listener's, what brokers without listeners read)
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

from korvet.core import lease
from korvet.storage.groups import GroupStore, PartitionRef, touched_groups


def _lua(name: str) -> str:
    return (resources.files("korvet.storage") / "lua" / name).read_text()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _time(answer: Any) -> tuple[int, int]:
    """TIME's answer; a cluster client may give it per node (any node's will do)."""
    if isinstance(answer, dict):
        answer = next(iter(answer.values()))
    return int(answer[0]), int(answer[1])


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
    """A broker as the registry knows it: its first listener's address (``host``,
    ``port``) and every listener's (``listeners``: name, advertised host, port)."""

    node_id: int
    host: str
    port: int
    rack: str | None
    listeners: tuple[tuple[str, str, int], ...] = ()

    def at(self, listener: str) -> BrokerEntry | None:
        """The broker as a client of ``listener`` reaches it (Kafka's rule: the endpoint
        of the listener with the same name), None if it has no such listener. An entry
        registered without listeners (an older broker) answers with its one address."""
        if not self.listeners:
            return self
        for name, host, port in self.listeners:
            if name == listener:
                return BrokerEntry(self.node_id, host, port, self.rack, self.listeners)
        return None

    def to_json(self) -> str:
        return json.dumps({"host": self.host, "port": self.port, "rack": self.rack,
                           "listeners": {name: [host, port]
                                         for name, host, port in self.listeners}})

    @staticmethod
    def from_json(node_id: int, text: str) -> BrokerEntry:
        """An entry as the heartbeat script returns it; ValueError if it is not one."""
        try:
            entry = json.loads(text)
            listeners = tuple((str(name), str(address[0]), int(address[1]))
                              for name, address in (entry.get("listeners") or {}).items())
            return BrokerEntry(node_id, str(entry["host"]), int(entry["port"]),
                               entry.get("rack") or None, listeners)
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"broker {node_id}: unreadable registry entry") from exc


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

    async def every_lease(self, of: list[str] | None = None
                          ) -> tuple[dict[str, lease.LeaseRecord], int]:
        """Every stored group's lease, or those of the groups ``of`` (a never-leased group:
        the empty record) and Redis' clock (ms): what ListGroups decides from, with several
        brokers."""
        ids = self.groups.group_ids_key
        groups = (sorted(_text(g) for g in await self.groups.redis.smembers(ids))
                  if of is None else of)
        seconds, micros = _time(await self.groups.redis.time())
        now_ms = seconds * 1000 + micros // 1000
        if not groups:
            return {}, now_ms
        pipe = self.groups.redis.pipeline(transaction=False)
        for group in groups:
            pipe.hmget(self.groups.lease_key(group), ["owner", "token", "expires"])
        rows = await pipe.execute()
        records: dict[str, lease.LeaseRecord] = {}
        for group, (owner, token, expires) in zip(groups, rows, strict=True):
            records[group] = lease.LeaseRecord(
                owner=_text(owner) if owner else None, token=int(token or 0),
                expires_ms=int(expires or 0))
        return records, now_ms

    async def snapshots(self, groups: list[str]) -> dict[str, str]:
        """The durable snapshots of ``groups`` (those that have one)."""
        if not groups:
            return {}
        pipe = self.groups.redis.pipeline(transaction=False)
        for group in groups:
            pipe.get(self.groups.snapshot_key(group))
        texts = await pipe.execute()
        return {g: _text(t) for g, t in zip(groups, texts, strict=True) if t is not None}

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

    async def delete_group(self, group: str, token: int, committed: list[str]) -> bool:
        """``GroupStore.delete_group``'s keys (the offsets on ``committed``, the indexes, the
        snapshot; ``group-ids``) removed in one fenced script, only if ``token`` is still
        the group's lease token. True if applied; False if the token is stale (nothing
        written: another broker took the group, and may have written it anew). The Redis
        consumer groups are the caller's to destroy (observability only, on the streams'
        slots, not the group's). On Redis Cluster ``group-ids`` is shrunk after the script,
        as ``save_state`` does for a deleted group."""
        ops = self.groups.delete_group_ops(group, committed)
        ids = self.groups.group_ids_key
        if not self.groups.cluster:
            ops.append(("SREM", ids, [group]))
        if await self._fenced_write([group], {group: token}, ops):
            return False
        if self.groups.cluster:
            await self.groups.redis.srem(ids, group)
        return True

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
        flat: list[Any] = await self._script(
            keys=[self.key], args=[str(me.node_id), me.to_json(), ttl_ms,
                                   "1" if leave else "0"])
        live: list[BrokerEntry] = []
        for i in range(0, len(flat), 2):
            try:
                live.append(BrokerEntry.from_json(int(_text(flat[i])), _text(flat[i + 1])))
            except ValueError:
                continue
        return sorted(live, key=lambda b: b.node_id)
