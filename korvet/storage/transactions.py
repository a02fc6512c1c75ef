"""The transaction coordinator's records in Redis (korvet/core/transactions.py's ``TxnRecord``).

    {ks}:{txn:T}:state   hash: record (the record's JSON), version (its writes so far)
    {ks}:txn-ids         set: every transactional id with a record (ListTransactions, and
                         the sweep that times transactions out and expires idle ids)

    {ks}:{group:G}:txn   hash: the group's offsets of open transactions (TxnOffsetStore)

A record is written with a compare-and-set on its version (lua/txn_write.lua): a step decided
on a version another broker has since replaced is not written, and is decided again from
the record as it is now. A transactional id with a ``}`` ends the hash tag early, but at the
same place in each of its keys: it has one slot all the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from redis import asyncio as aioredis

from korvet.core.transactions import TxnRecord
from korvet.storage.groups import TXN_OFFSETS

_LUA = Path(__file__).with_name("lua")


class TxnStore:
    def __init__(self, client: aioredis.Redis, keyspace: str) -> None:
        self.redis = client
        self.ids_key = f"{keyspace}:txn-ids"
        self.ks = keyspace
        self._write = client.register_script((_LUA / "txn_write.lua").read_text())

    def state_key(self, transactional_id: str) -> str:
        return f"{self.ks}:{{txn:{transactional_id}}}:state"

    async def read(self, transactional_id: str) -> TxnRecord | None:
        raw: list[Any] = await self.redis.hmget(self.state_key(transactional_id),
                                                ["record", "version"])
        if raw[0] is None:
            return None
        return TxnRecord.from_json(transactional_id, _text(raw[0]), int(raw[1] or 0))

    async def write(self, record: TxnRecord, read_version: int) -> TxnRecord | None:
        """Write ``record`` if the stored one is still ``read_version`` (0: none); the record
        as written (its version), or None when another write came first."""
        # listed before it exists (the sweep skips an id without a record), on every write:
        # a delete that raced this write may have taken it out
        await self.redis.sadd(self.ids_key, record.transactional_id)
        version = int(await self._write(keys=[self.state_key(record.transactional_id)],
                                        args=[read_version, record.to_json()]))
        if version < 0:
            return None
        return replace(record, version=version)

    async def delete(self, transactional_id: str, read_version: int) -> bool:
        done = int(await self._write(keys=[self.state_key(transactional_id)],
                                     args=[read_version, ""])) >= 0
        if done:
            await self.redis.srem(self.ids_key, transactional_id)
        return done

    async def ids(self) -> list[str]:
        members = await self.redis.smembers(self.ids_key)
        return sorted(map(_text, members))


@dataclass(frozen=True, slots=True)
class PendingOffsets:
    """A producer's transactional offsets for a group: not visible to OffsetFetch until its
    transaction commits (``decided``: the marker came, and said so)."""

    producer_id: int
    epoch: int
    offsets: tuple[tuple[str, int, int, str, int], ...]  # topic, partition, offset, metadata, epoch
    decided: str | None  # None (open), "COMMIT" or "ABORT"
    raw: str  # the entry as stored (``applied`` removes it only if unchanged)


class TxnOffsetStore:
    """The groups' offsets of transactions, ``{ks}:{group:G}:txn`` (lua/txn_offsets.lua has the
    rules), in the group's slot."""

    def __init__(self, client: aioredis.Redis, keyspace: str) -> None:
        self.redis = client
        self.ks = keyspace
        self._script = client.register_script((_LUA / "txn_offsets.lua").read_text())

    def key(self, group: str) -> str:
        return f"{self.ks}:{{group:{group}}}:{TXN_OFFSETS}"

    async def write(self, group: str, producer_id: int, epoch: int,
                    offsets: list[tuple[str, int, int, str, int]]) -> str:
        """TxnOffsetCommit: 'OK', 'BAD_EPOCH' or 'UNAPPLIED' (apply the decided ones first)."""
        # offsets travel as text: Lua's numbers are doubles
        encoded = json.dumps([[t, p, str(o), m, e] for t, p, o, m, e in offsets])
        return _text(await self._script(keys=[self.key(group)],
                                        args=["write", producer_id, epoch, encoded]))

    async def marker(self, group: str, producer_id: int, epoch: int, commit: bool,
                     tv2: bool, coordinator_epoch: int) -> str:
        """A transaction's marker for the group: 'OK', 'DUP', 'FENCED' or 'BAD_EPOCH'."""
        return _text(await self._script(keys=[self.key(group)], args=[
            "marker", producer_id, epoch, "COMMIT" if commit else "ABORT", 2 if tv2 else 1,
            coordinator_epoch]))

    async def pending(self, group: str) -> list[PendingOffsets]:
        raw: dict[Any, Any] = await self.redis.hgetall(self.key(group))
        found = []
        for field_name, value in raw.items():
            name, text = _text(field_name), _text(value)
            if name.startswith("e:"):
                continue
            entry = json.loads(text)
            found.append(PendingOffsets(
                int(name), int(entry["epoch"]),
                tuple((str(t), int(p), int(o), str(m or ""), int(e))
                      for t, p, o, m, e in entry["offsets"] or ()),
                entry.get("decided"), text))
        return found

    async def applied(self, group: str, entry: PendingOffsets) -> None:
        await self._script(keys=[self.key(group)], args=["applied", entry.producer_id, entry.raw])

    async def delete(self, group: str) -> None:
        await self.redis.delete(self.key(group))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
