"""Share sessions (KIP-932): which partitions a share member fetches from this broker, and
its epochs, as a pure machine over a session table.

A share session is keyed by (group id, member id), one per broker, and tied to the
connection that opened it: when that connection closes, the broker releases every record the
member acquired through it. The rules follow Kafka's SharePartitionManager (facts, not code):

- ShareFetch with epoch 0 opens a session, replacing one the member had (whose acquired
  records stay the member's: not released, as on Kafka); acknowledgements in it are
  INVALID_REQUEST (nothing was acquired in a session not yet open); its partitions are the
  ones the request names.
- Epoch -1 closes the session: acknowledgements in it are applied, nothing is fetched (a
  request that names partitions without acknowledging anything is INVALID_REQUEST), the
  member's acquired records are released. SHARE_SESSION_NOT_FOUND when there is none.
- Any other epoch must be the session's next (INVALID_SHARE_SESSION_EPOCH otherwise,
  SHARE_SESSION_NOT_FOUND without a session): the request adds the partitions it names,
  forgets the forgotten ones, and the session expects the next epoch (after 2^31-1 comes 1).
- ShareAcknowledge never opens one (epoch 0: INVALID_SHARE_SESSION_EPOCH); -1 closes it;
  another epoch is checked and advanced as for ShareFetch.
- The table holds at most ``slots`` sessions (Kafka's group.share.max.share.sessions, 2000):
  a new one beyond is SHARE_SESSION_LIMIT_REACHED.

``on_fetch`` and ``on_acknowledge`` never change the table: they return a ``Verdict`` whose
``store``/``drop`` the adapter applies (korvet/server/handlers/share.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from korvet.core.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
DEFAULT_SLOTS = 2000  # Kafka's group.share.max.share.sessions

SessionKey = tuple[str, str]  # (group id, member id)
SharePartitionKey = tuple[str, int]  # (topic id text, partition index)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class ShareSession:
    key: SessionKey
    epoch: int  # the epoch the next request must carry
    partitions: tuple[SharePartitionKey, ...]  # in the order they were added
    connection_id: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a request may do: its error (the whole request's), the partitions to fetch, the
    session to store (or None) and the one it ends: a closed one (``closing``), whose records
    the adapter releases, or one replaced by epoch 0, whose acquired records stay its member's
    until their locks run out (Kafka 4.3.1: conformance check
    share.fetch.new_session_keeps_the_members_records)."""

    error: ErrorCode = ErrorCode.NONE
    fetch: tuple[SharePartitionKey, ...] = ()
    store: ShareSession | None = None
    drop: ShareSession | None = None
    closing: bool = False

    @property
    def ok(self) -> bool:
        return self.error is ErrorCode.NONE


def on_fetch(table: Mapping[SessionKey, ShareSession], key: SessionKey, epoch: int,
             named: Sequence[SharePartitionKey], forgotten: Sequence[SharePartitionKey], *,
             acknowledging: bool, connection_id: str, slots: int = DEFAULT_SLOTS) -> Verdict:
    """A ShareFetch's session step: ``named`` the partitions its topics list, ``acknowledging``
    whether any of them carries acknowledgements."""
    current = table.get(key)
    if epoch == FINAL_EPOCH:
        if current is None:
            return Verdict(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if named and not acknowledging:
            return Verdict(ErrorCode.INVALID_REQUEST)
        return Verdict(drop=current, closing=True)
    if epoch == INITIAL_EPOCH:
        if acknowledging:
            return Verdict(ErrorCode.INVALID_REQUEST)
        if current is None and len(table) >= slots:
            return Verdict(ErrorCode.SHARE_SESSION_LIMIT_REACHED)
        partitions = _unique(p for p in named if p not in set(forgotten))
        return Verdict(fetch=partitions, drop=current,
                       store=ShareSession(key, 1, partitions, connection_id))
    if current is None:
        return Verdict(ErrorCode.SHARE_SESSION_NOT_FOUND)
    if epoch != current.epoch:
        return Verdict(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    gone = set(forgotten)
    partitions = _unique(p for p in (*current.partitions, *named) if p not in gone)
    return Verdict(fetch=partitions, store=ShareSession(
        key, next_epoch(epoch), partitions, connection_id))


def on_acknowledge(table: Mapping[SessionKey, ShareSession], key: SessionKey,
                   epoch: int) -> Verdict:
    """A ShareAcknowledge's session step."""
    if epoch == INITIAL_EPOCH:
        return Verdict(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    current = table.get(key)
    if current is None:
        return Verdict(ErrorCode.SHARE_SESSION_NOT_FOUND)
    if epoch == FINAL_EPOCH:
        return Verdict(drop=current, closing=True)
    if epoch != current.epoch:
        return Verdict(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    return Verdict(store=ShareSession(key, next_epoch(epoch), current.partitions,
                                      current.connection_id))


def forgotten_partitions(before: ShareSession | None,
                         after: ShareSession | None) -> tuple[SharePartitionKey, ...]:
    """The partitions a step took out of a session (their acquired records are released)."""
    if before is None:
        return ()
    kept = set(after.partitions) if after is not None else set()
    return tuple(p for p in before.partitions if p not in kept)


def of_connection(table: Mapping[SessionKey, ShareSession],
                  connection_id: str) -> list[ShareSession]:
    """The sessions a closing connection ends."""
    return [s for s in table.values() if s.connection_id == connection_id]


def _unique(partitions: Iterable[SharePartitionKey]) -> tuple[SharePartitionKey, ...]:
    return tuple(dict.fromkeys(partitions))
