"""redis-py connections whose torn-down writes and reads are redis-py's ``ConnectionError``.

redis-py 8.1 lets a command on a connection torn down under it escape as asyncio's internals
instead of a ``ConnectionError``: when another task disconnects the connection (a Redis
Cluster client resetting a node's connections after a failover, a peer's reset) between
redis-py's "is it connected" check and its write, the write meets ``None`` where its stream
writer was (``AttributeError: 'NoneType' object has no attribute 'writelines'``; on Python
3.12 and later asyncio's own ``TypeError: 'NoneType' object is not callable``). Such an
error is no ``RedisError``, so it passed every handler's Redis-failure path: a Fetch waiting
for appends during a cluster failover closed its client's connection "after an unexpected
error" instead of answering KAFKA_STORAGE_ERROR (found under load by
tests/integration/test_several_brokers_on_redis_cluster.py). redis-py has already
disconnected the connection when the error comes out; these classes only give it the type
redis-py means it to have, so the caller's retry and error paths apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.asyncio import RedisCluster
from redis.asyncio.connection import Connection, SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError

if TYPE_CHECKING:
    _Base = Connection
else:
    _Base = object


def torn_down(exc: BaseException) -> bool:
    """Whether ``exc`` is what a write or read on a torn-down redis-py connection raises: an
    attribute of ``None`` where a stream writer, reader or callback was."""
    return isinstance(exc, AttributeError | TypeError) and "'NoneType' object" in str(exc)


class _LossIsConnectionError(_Base):
    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)
        except (AttributeError, TypeError) as exc:
            if not torn_down(exc):
                raise
            raise RedisConnectionError(
                f"the connection to Redis was closed while writing to it ({exc})") from exc

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except (AttributeError, TypeError) as exc:
            if not torn_down(exc):
                raise
            raise RedisConnectionError(
                f"the connection to Redis was closed while reading from it ({exc})") from exc


class SafeConnection(_LossIsConnectionError, Connection):
    """redis-py's TCP connection, its torn-down writes and reads a ``ConnectionError``."""


class SafeSSLConnection(_LossIsConnectionError, SSLConnection):
    """redis-py's TLS connection, its torn-down writes and reads a ``ConnectionError``."""


def connection_class_for(url: str) -> type[Connection] | None:
    """The connection class for a ``redis://`` or ``rediss://`` URL (None for other schemes,
    such as ``unix://``, which keep redis-py's own)."""
    if url.startswith("rediss://"):
        return SafeSSLConnection
    if url.startswith("redis://"):
        return SafeConnection
    return None


def use_safe_connections(cluster: RedisCluster) -> None:
    """Make a Redis Cluster client, before its first command, open the connections above:
    redis-py's cluster client takes no connection class: its nodes manager creates every node
    it learns of from its connection keywords, and its seed nodes were made from copies of
    them already."""
    kwargs = cluster.nodes_manager.connection_kwargs  # the client's own dict, shared
    tls = kwargs.get("connection_class") is SSLConnection
    safe: type[Connection] = SafeSSLConnection if tls else SafeConnection
    kwargs["connection_class"] = safe
    for node in cluster.nodes_manager.startup_nodes.values():
        node.connection_class = safe
