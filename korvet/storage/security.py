"""Users' SCRAM credentials and the cluster's ACLs, in Redis, shared by every broker.

Key layout (``ks`` is the broker's base keyspace; tenants do not change it: users and
ACLs belong to the cluster):

    {ks}:scram:{mechanism}   hash: user name -> ``salt=..,stored_key=..,server_key=..,iterations=..``
                             (base64; Kafka's own text form; never a password)
    {ks}:acls                set: one member per ACL binding, a JSON array
                             [resource type, name, pattern type, principal, host, operation, permission]
    {ks}:acl-changes         pub/sub channel: a broker that changed the ACLs publishes here, and
                             every broker reloads its ACL snapshot
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import redis.asyncio as aioredis

from korvet.core.security import acl as model
from korvet.core.security.scram import MECHANISMS, ScramCredential, ScramError


def encode_binding(binding: model.AclBinding) -> str:
    return json.dumps([int(binding.resource_type), binding.resource_name, int(binding.pattern_type),
                       binding.principal, binding.host, int(binding.operation),
                       int(binding.permission)], separators=(",", ":"), ensure_ascii=False)


def decode_binding(text: str | bytes) -> model.AclBinding:
    kind, name, pattern, principal, host, operation, permission = json.loads(text)
    return model.AclBinding(model.ResourceType(kind), str(name), model.PatternType(pattern),
                            str(principal), str(host), model.Operation(operation),
                            model.Permission(permission))


class CredentialStore:
    def __init__(self, client: aioredis.Redis, keyspace: str) -> None:
        self.redis = client
        self.ks = keyspace

    def key(self, mechanism: str) -> str:
        return f"{self.ks}:scram:{mechanism}"

    async def get(self, username: str, mechanisms: Sequence[str]) -> tuple[str, ScramCredential] | None:
        """The first of ``mechanisms`` the user has a credential for, with that credential."""
        pipe = self.redis.pipeline(transaction=False)
        for mechanism in mechanisms:
            pipe.hget(self.key(mechanism), username)
        for mechanism, raw in zip(mechanisms, await pipe.execute(), strict=True):
            if raw is None:
                continue
            try:
                return mechanism, ScramCredential.decode(raw.decode())
            except (ScramError, UnicodeDecodeError):
                continue  # a damaged entry authenticates nobody
        return None

    async def put(self, username: str, mechanism: str, credential: ScramCredential) -> None:
        await self.redis.hset(self.key(mechanism), username, credential.encode())

    async def delete(self, username: str, mechanism: str) -> bool:
        return bool(await self.redis.hdel(self.key(mechanism), username))

    async def users(self) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations}, for every user with a credential."""
        pipe = self.redis.pipeline(transaction=False)
        names = sorted(MECHANISMS)
        for mechanism in names:
            pipe.hgetall(self.key(mechanism))
        found: dict[str, dict[str, int]] = {}
        for mechanism, entries in zip(names, await pipe.execute(), strict=True):
            for user, raw in entries.items():
                try:
                    credential = ScramCredential.decode(raw.decode())
                except (ScramError, UnicodeDecodeError):
                    continue
                found.setdefault(user.decode(), {})[mechanism] = credential.iterations
        return found


class AclStore:
    def __init__(self, client: aioredis.Redis, keyspace: str) -> None:
        self.redis = client
        self.ks = keyspace
        self.key = f"{keyspace}:acls"
        self.channel = f"{keyspace}:acl-changes"

    async def load(self) -> model.AclSet:
        members = await self.redis.smembers(self.key)
        bindings = []
        for member in members:
            try:
                bindings.append(decode_binding(member))
            except (ValueError, TypeError):
                continue  # written by something else; ignored rather than fatal
        return model.AclSet.of(bindings)

    async def add(self, bindings: Iterable[model.AclBinding]) -> None:
        members = [encode_binding(b) for b in bindings]
        if members:
            await self.redis.sadd(self.key, *members)
            await self.redis.publish(self.channel, "add")

    async def remove(self, bindings: Sequence[model.AclBinding]) -> list[model.AclBinding]:
        """Remove the bindings; returns those that were there (another broker may have raced)."""
        if not bindings:
            return []
        pipe = self.redis.pipeline(transaction=True)
        for binding in bindings:
            pipe.srem(self.key, encode_binding(binding))
        removed = [b for b, count in zip(bindings, await pipe.execute(), strict=True) if count]
        if removed:
            await self.redis.publish(self.channel, "remove")
        return removed
