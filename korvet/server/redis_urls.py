"""Redis URLs with several seed nodes (Redis Cluster), read and written back."""

from __future__ import annotations

import re

_URL_PARTS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)(.*)$", re.DOTALL)


def split_seeds(url: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    """A Redis Cluster URL may name several seed nodes, as Kafka's bootstrap.servers does:
    ``redis://[user:password@]host1:port1,host2:port2[/0]``. Returns the URL of the first
    node (its credentials, TLS and options apply to every node) and the (host, port) of the
    others (port 6379 when not given; ``[::1]:7000`` for an IPv6 address)."""
    match = _URL_PARTS.match(url)
    if match is None or "," not in match.group(2):
        return url, ()
    scheme, netloc, tail = match.groups()
    userinfo, at, hosts = netloc.rpartition("@")
    first, *others = [h.strip() for h in hosts.split(",")]
    seeds = []
    for other in others:
        host, colon, port = other.rpartition(":") if not other.endswith("]") else ("", "", "")
        if not colon:
            host, port = other, "6379"
        host = host.strip("[]")
        if not host or not port.isdigit():
            raise ValueError(f"a seed node must be host:port, got {other!r}")
        seeds.append((host, int(port)))
    return f"{scheme}{userinfo}{at}{first}{tail}", tuple(seeds)


def join_seeds(url: str, seeds: tuple[tuple[str, int], ...]) -> str:
    """``split_seeds`` undone: the other seed nodes written back after the first."""
    if not seeds:
        return url
    match = _URL_PARTS.match(url)
    assert match is not None
    scheme, netloc, tail = match.groups()
    extra = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in seeds)
    return f"{scheme}{netloc},{extra}{tail}"
