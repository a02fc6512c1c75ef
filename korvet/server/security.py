"""The broker's security adapter: credentials and ACLs in Redis, a live ACL snapshot, and the
step loop that drives each connection's authentication machine (korvet.core.security.sasl).

``Security`` is one per broker. Its ``AclCache`` holds the cluster's ACLs as an immutable
snapshot, reloaded when any broker publishes a change on ``{ks}:acl-changes`` (and every
30 s, in case a message was missed while the pub/sub connection was down). ``admit`` and
``authenticate`` step a connection's ``Session``: a step that asks for a credential gets
it from Redis (or a decoy, for a user that does not exist: same salt every time, and the
exchange fails at its end as a wrong password would), a PLAIN verification runs its
PBKDF2 in a thread so other connections keep being served, and a failure is delayed by
``broker.failed-authentication-delay-ms`` on that connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from korvet.core.security import sasl, scram
from korvet.core.security.access import OPEN, Access
from korvet.core.security.acl import AclSet
from korvet.protocol.registry import CloseConnection
from korvet.settings import SecuritySettings
from korvet.storage.security import AclStore, CredentialStore

log = logging.getLogger("korvet.security")

_REFRESH_SECONDS = 30.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class AclCache:
    """The cluster's ACLs as a snapshot that request handling reads without waiting."""

    def __init__(self, store: AclStore, client: aioredis.Redis) -> None:
        self.store = store
        self.client = client
        self.acls = AclSet()
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    async def start(self) -> None:
        await self.reload()
        self._task = asyncio.create_task(self._follow(), name="korvet-acl-cache")

    async def reload(self) -> AclSet:
        self.acls = await self.store.load()
        return self.acls

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _follow(self) -> None:
        while True:
            try:
                pubsub = self.client.pubsub()
                await pubsub.subscribe(self.store.channel)
                await self.reload()  # whatever changed before the subscription
                try:
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True,
                                                           timeout=_REFRESH_SECONDS)
                        await self.reload()
                        if message is None:
                            continue
                finally:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                log.warning("ACL change notifications lost (%s); retrying in 1 s", exc)
                await asyncio.sleep(1)


@dataclass(frozen=True, slots=True)
class StepResult:
    session: sasl.Session
    outcome: sasl.Outcome


class Security:
    def __init__(self, settings: SecuritySettings, client: aioredis.Redis, keyspace: str) -> None:
        self.settings = settings
        self.credentials = CredentialStore(client, keyspace)
        self.acl_store = AclStore(client, keyspace)
        self.cache = AclCache(self.acl_store, client)
        self._decoy_secret = secrets.token_bytes(32)

    @property
    def authorizer(self) -> bool:
        return self.settings.authorizer

    async def start(self) -> None:
        if self.authorizer:
            await self.cache.start()

    async def close(self) -> None:
        await self.cache.close()

    def access(self, principal: str, host: str) -> Access:
        if not self.authorizer:
            return OPEN if principal == OPEN.principal and not host else Access(principal, host)
        return Access(principal, host, self.cache.acls, self.settings.policy)

    def keyspace_of(self, principal: str | None, default: str) -> str:
        if principal is None:
            return default
        return self.settings.tenants.get(principal, default)

    # -- authentication ----------------------------------------------------------------

    def decoy(self, username: str, mechanism: str) -> scram.ScramCredential:
        """The same made-up credential for a user that does not exist, every time."""
        digest = hmac.new(self._decoy_secret, f"{mechanism}\0{username}".encode(),
                          hashlib.sha512).digest()
        size = scram.MECHANISMS[mechanism].digest_size
        return scram.ScramCredential(digest[:20], digest[20:20 + size],
                                     digest[-size:], scram.MIN_ITERATIONS)

    async def load_credential(self, request: sasl.CredentialRequest) -> sasl.CredentialLoaded:
        nonce = secrets.token_urlsafe(24)
        try:
            found = await self.credentials.get(request.username, request.mechanisms)
        except (RedisError, OSError) as exc:
            # Not "invalid credentials": Kafka's clients take that as final and stop. A
            # connection closed mid-authentication is retried, as with a broker that is down.
            log.warning("cannot read the credentials of %r (%s): closing the connection, the "
                        "client retries", request.username, exc)
            raise CloseConnection(f"credentials of {request.username!r} unreadable: {exc}"
                                  ) from exc
        if found is None:
            mechanism = request.mechanisms[0]
            return sasl.CredentialLoaded(mechanism, self.decoy(request.username, mechanism),
                                         known=False, server_nonce=nonce)
        mechanism, credential = found
        return sasl.CredentialLoaded(mechanism, credential, known=True, server_nonce=nonce)

    async def step(self, session: sasl.Session, event: sasl.Event) -> StepResult:
        """One event through the machine, with the credential lookup it may ask for."""
        settings = self.settings.sasl
        session, outcome = sasl.step(session, event, settings, now_ms())
        if outcome.action is sasl.Action.LOAD:
            assert outcome.load is not None
            loaded = await self.load_credential(outcome.load)
            if session.exchange is not None and session.exchange.mechanism == sasl.PLAIN:
                # PBKDF2 of the given password: seconds of CPU under a flood; not on the loop.
                session, outcome = await asyncio.to_thread(sasl.step, session, loaded, settings,
                                                           now_ms())
            else:
                session, outcome = sasl.step(session, loaded, settings, now_ms())
        return StepResult(session, outcome)


