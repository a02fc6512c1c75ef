"""Who coordinates a group when several brokers share one Redis: the lease machine.

spec/CoordinatorLease.tla. A group's coordinator is the broker holding the group's
lease, a record in Redis: owner (a broker id), fencing token, expiry in Redis' own
clock. Redis decides (korvet/storage/lua/lease_*.lua run these rules inside Redis):

- ``may_acquire``/``grant`` (spec ``Acquire``): a free, expired or own lease (a
  restarted process of the same broker id) is granted with the next token;
- ``renewal`` (spec ``Renew``/``RenewRefused``): the holder of the current token
  extends the expiry; any other token is refused;
- ``accepts`` (spec ``Apply``): a write of the coordinator for the group (its snapshot,
  committed offsets, deletion, the clean-up of its data) is applied only if it carries the
  lease's current token;
- ``release`` (spec ``Release``): the holder of the current token gives the lease back, its
  expiry ends at once (the token stays: the next grant raises it).

The broker decides what it believes (spec ``held``): it holds the group until its own
clock reaches the grant or renewal time plus the lease time minus a margin that covers
the clocks' drift (``believed_until``, ``believes``); it forgets the group when a renewal
or a write is refused, when its clock says the lease is over, and when it cannot tell
whether a write landed (``after_write``): a new grant then brings a new token, so the
write that may still arrive is refused. Work it still has pending for the group (the
clean-up of a deleted group's data) goes on only while it holds the token that work was
decided with (``holds``).

Pure: times are arguments (milliseconds), nothing here reads a clock or talks to Redis.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The group's lease as Redis holds it (spec ``lease``); token 0: never granted."""

    owner: str | None = None
    token: int = 0
    expires_ms: int = 0


@dataclass(frozen=True, slots=True)
class Held:
    """What a broker believes it holds (spec ``held``); token 0: nothing."""

    token: int = 0
    until_ms: int = 0


NOT_HELD = Held()


class WriteOutcome:
    ACCEPTED = "accepted"
    REFUSED = "refused"        # the token is no longer the lease's
    UNKNOWN = "unknown"        # no answer (timeout, broken connection): it may still land


def may_acquire(record: LeaseRecord, broker: str, now_ms: int) -> bool:
    """Redis grants the lease if it is free, expired, or already this broker's."""
    return record.owner is None or record.expires_ms <= now_ms or record.owner == broker


def grant(record: LeaseRecord, broker: str, now_ms: int, ttl_ms: int) -> LeaseRecord:
    """The lease after a grant: the next token, expiring ``ttl_ms`` from Redis' now."""
    return LeaseRecord(owner=broker, token=record.token + 1, expires_ms=now_ms + ttl_ms)


def renewal(record: LeaseRecord, token: int, now_ms: int, ttl_ms: int) -> LeaseRecord | None:
    """The lease after the holder of ``token`` renews it, or None if the token is stale."""
    if token == 0 or token != record.token:
        return None
    return LeaseRecord(owner=record.owner, token=token, expires_ms=now_ms + ttl_ms)


def accepts(record: LeaseRecord, token: int) -> bool:
    """Redis applies a write carrying ``token`` only while it is the lease's token."""
    return token != 0 and token == record.token


def release(record: LeaseRecord, token: int) -> LeaseRecord:
    """The lease after the holder of ``token`` gives it back (a clean stop, a deleted group
    no longer needed): expired at once if ``token`` is its token, else as it was."""
    if token == 0 or token != record.token:
        return record
    return LeaseRecord(owner=record.owner, token=record.token, expires_ms=0)


def believed_until(local_ms: int, ttl_ms: int, margin_ms: int) -> int:
    """The broker's own deadline for a lease granted or renewed at its ``local_ms``:
    with ``margin_ms`` at least twice the drift between any broker's clock and Redis',
    no two brokers believe they hold the lease at once."""
    return local_ms + ttl_ms - margin_ms


def believes(held: Held, local_ms: int) -> bool:
    return held.token != 0 and local_ms < held.until_ms


def holds(held: Held, token: int, local_ms: int) -> bool:
    """Whether a broker still holds the group with ``token``, the token it decided pending
    work with: a new grant (even its own) or a lost lease cancels that work."""
    return token != 0 and held.token == token and believes(held, local_ms)


def expired_locally(held: Held, local_ms: int) -> bool:
    """The broker's clock says the lease is over (spec ``LocalExpiry``)."""
    return held.token != 0 and local_ms >= held.until_ms


def after_grant(token: int, local_ms: int, ttl_ms: int, margin_ms: int) -> Held:
    return Held(token=token, until_ms=believed_until(local_ms, ttl_ms, margin_ms))


def after_renewal(held: Held, renewed: bool, local_ms: int, ttl_ms: int,
                  margin_ms: int) -> Held:
    """Renewed: a new local deadline. Refused: the broker forgets the group."""
    if not renewed:
        return NOT_HELD
    return Held(token=held.token, until_ms=believed_until(local_ms, ttl_ms, margin_ms))


def after_write(held: Held, token: int, outcome: str) -> Held:
    """What a broker holds once its write carrying ``token`` is answered (spec ``Apply``,
    ``Lose``, ``GiveUp``): accepted keeps the lease; refused, or no answer at all, drops
    it if it is still that token's."""
    if outcome == WriteOutcome.ACCEPTED or held.token != token:
        return held
    return NOT_HELD
