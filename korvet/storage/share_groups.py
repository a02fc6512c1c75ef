"""Share groups in Redis: what outlives a broker of a share group's membership.

    {ks}:{group:G}:share      hash: type ("share"), epoch (the group epoch; only rises)
    {ks}:share-group-ids      set of the share group ids

Membership itself (members, their epochs and assignments) lives in the memory of the
broker coordinating the group (korvet/server/share_groups.py): members of a group whose
broker restarted or whose lease moved are answered UNKNOWN_MEMBER_ID and join again. What
must survive is that the group exists, that it is a share group (its id is then refused to
classic groups, and listed by ``kafka-share-groups --list``) and its epoch, so that no epoch
is handed out twice. The record is in the slot of the group's other keys
(``GroupStore.group_key``); a new group enters the index before its record is written and
a deleted one leaves it after, so a listing never misses a stored group.
"""

from __future__ import annotations

from importlib import resources

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from korvet.storage.groups import GroupStore

SUFFIX = "share"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class ShareGroupStore:
    def __init__(self, client: aioredis.Redis, keyspace: str) -> None:
        self.redis = client
        self._groups = GroupStore(client, keyspace)
        self.ids_key = f"{keyspace}:share-group-ids"
        script = (resources.files("korvet.storage") / "lua" / "share_group_epoch.lua").read_text()
        self._epoch: AsyncScript = client.register_script(script)

    def record_key(self, group: str) -> str:
        return self._groups.group_key(group, SUFFIX)

    async def save_epoch(self, group: str, epoch: int) -> int:
        """Store the group (indexed first) with ``epoch`` unless a higher one is stored;
        the stored epoch afterwards."""
        await self.redis.sadd(self.ids_key, group)
        return int(await self._epoch(keys=[self.record_key(group)], args=[epoch]))

    async def epoch(self, group: str) -> int | None:
        """The stored epoch of the share group (None: no such share group)."""
        value = await self.redis.hget(self.record_key(group), "epoch")
        return None if value is None else int(value)

    async def group_ids(self) -> list[str]:
        return sorted(_text(g) for g in await self.redis.smembers(self.ids_key))

    async def delete(self, group: str) -> None:
        await self.redis.unlink(self.record_key(group))
        await self.redis.srem(self.ids_key, group)
