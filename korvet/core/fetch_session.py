"""Fetch sessions (KIP-227, incremental fetch), as a pure machine over a session table.

A consumer of many partitions would otherwise send every partition in every Fetch and get
every partition back. With a session the broker remembers the partitions, their fetch
offsets and what it last told the client about each; the client then sends only what
changed (and the partitions to forget), and the broker answers only the partitions with
news. The rules follow Kafka's FetchSession/FetchSessionCache (facts, not code):

- Request metadata ``(session_id, epoch)``: epoch 0 (INITIAL) or -1 (FINAL) is a *full*
  request. A full request closes the session it names; with epoch 0 it asks for a new
  session, with -1 it is sessionless. Any other epoch is *incremental*: the session must
  exist (else FETCH_SESSION_ID_NOT_FOUND) and expect exactly this epoch (else
  INVALID_FETCH_SESSION_EPOCH); a session created with topic ids (Fetch v13+) is only
  used from v13 on and one created by name only below (else FETCH_SESSION_TOPIC_ID_ERROR).
  An error answers no partitions and session id 0.
- An incremental request adds the partitions it names, updates the fetch offset and
  byte limit of those already there, then removes the forgotten ones. A session left
  empty is closed and the request answered sessionless. Otherwise the session expects
  the next epoch (after 2^31-1 comes 1) and the broker reads *every* partition of the
  session, in the session's order.
- A full request with epoch 0 gets a new session (a random non-zero id) once its response
  is known, if the table has a free slot or one can be evicted: first the least recently
  used session if it was unused for ``eviction_ms``; else the session with the fewest
  partitions among those created more than ``eviction_ms`` ago, if the new one has more.
  Otherwise the response carries session id 0 (sessionless). A full request naming no
  partition gets a session too, an empty one, as on Kafka (seen by the differential mode
  against Kafka 4.3.1): the client's next incremental request either adds partitions or,
  leaving it empty, closes it.
- Incremental responses carry a partition only when it has records, an error, or a high
  watermark or log start offset different from what this session last sent; a partition
  that answered an error is resent when the error clears. Partitions that returned records
  move to the end of the session's order, so a ``max_bytes`` budget rotates fairly.
- The response's epoch check is repeated when answering: a duplicate request that raced
  ahead of this one makes this one INVALID_FETCH_SESSION_EPOCH.

State is the table ``{session id: Session}`` of frozen values. ``on_request`` and
``on_response`` never change it: they return a ``CacheEdit`` (sessions to drop, one to
store) that the adapter applies, and the plan or answer for the wire. Time and the new
session's id are inputs. The Hypothesis machine in tests/unit/core/test_fetch_sessions.py
drives clients that follow the protocol (and some that do not) through it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from korvet.core.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
DEFAULT_SLOTS = 1000  # Kafka's max.incremental.fetch.session.cache.slots
EVICTION_MS = 120_000  # Kafka's minimum idle (and age) before a session may be evicted

PartitionKey = tuple[str, int]  # (topic name below Fetch v13, topic id text from v13; index)


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == MAX_EPOCH:
        return 1
    return epoch + 1


@dataclass(frozen=True, slots=True)
class SessionConfig:
    slots: int = DEFAULT_SLOTS
    eviction_ms: int = EVICTION_MS


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """One partition as a Fetch names it (or as the session remembers it)."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1
    last_fetched_epoch: int = -1  # v12+: the epoch of the last record fetched (-1: none)

    @property
    def key(self) -> PartitionKey:
        return self.topic, self.partition


@dataclass(frozen=True, slots=True)
class CachedPartition:
    request: PartitionRequest
    high_watermark: int = -1  # as last sent to the client; -1 after an error (resend)
    log_start_offset: int = -1


def _frozen(items: Mapping[PartitionKey, CachedPartition]) -> Mapping[PartitionKey, CachedPartition]:
    return MappingProxyType(dict(items))


@dataclass(frozen=True, slots=True)
class Session:
    session_id: int
    epoch: int  # the epoch the next incremental request must carry
    uses_topic_ids: bool
    partitions: Mapping[PartitionKey, CachedPartition]  # in fetch order
    created_ms: int
    last_used_ms: int

    @property
    def size(self) -> int:
        return len(self.partitions)


class Context(Enum):
    SESSIONLESS = "sessionless"  # a full request without a session (epoch -1, or v < 7)
    FULL = "full"  # a full request that asks for a new session (epoch 0)
    INCREMENTAL = "incremental"
    ERROR = "error"  # answered with a top-level error and nothing else


@dataclass(frozen=True, slots=True)
class FetchRequested:
    """What one Fetch says about sessions (v < 7 has no fields: session 0, epoch -1)."""

    session_id: int
    epoch: int
    uses_topic_ids: bool
    partitions: tuple[PartitionRequest, ...]
    forgotten: tuple[PartitionKey, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchPlan:
    context: Context
    error: ErrorCode
    session_id: int  # the incremental session; INVALID_SESSION_ID otherwise
    expected_epoch: int  # incremental: the epoch the session expects once this request is in
    partitions: tuple[PartitionRequest, ...]  # what to read, in order
    uses_topic_ids: bool = False  # a FULL plan's new session keys its topics by id


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What the broker read for one planned partition."""

    key: PartitionKey
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    has_records: bool


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    error: ErrorCode
    session_id: int
    included: tuple[bool, ...]  # per planned partition: whether the response carries it


@dataclass(frozen=True, slots=True)
class CacheEdit:
    """Sessions to drop from the table, then at most one to store (added or replaced)."""

    remove: tuple[int, ...] = ()
    store: Session | None = None


NO_EDIT = CacheEdit()


def apply_edit(sessions: MutableMapping[int, Session], edit: CacheEdit) -> None:
    for session_id in edit.remove:
        sessions.pop(session_id, None)
    if edit.store is not None:
        sessions[edit.store.session_id] = edit.store


def _unique(partitions: Sequence[PartitionRequest]) -> tuple[PartitionRequest, ...]:
    """A partition named twice counts once (the last one wins, at the first one's place)."""
    by_key: dict[PartitionKey, PartitionRequest] = {}
    for p in partitions:
        by_key[p.key] = p
    return tuple(by_key.values())


def _error_plan(error: ErrorCode) -> tuple[CacheEdit, FetchPlan]:
    return NO_EDIT, FetchPlan(Context.ERROR, error, INVALID_SESSION_ID, 0, ())


def on_request(sessions: Mapping[int, Session], request: FetchRequested,
               now_ms: int) -> tuple[CacheEdit, FetchPlan]:
    """Which context a Fetch runs in and which partitions it reads."""
    if request.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        closed = (request.session_id,) if request.session_id in sessions else ()
        context = Context.FULL if request.epoch == INITIAL_EPOCH else Context.SESSIONLESS
        return CacheEdit(remove=closed), FetchPlan(context, ErrorCode.NONE, INVALID_SESSION_ID,
                                                   0, _unique(request.partitions),
                                                   request.uses_topic_ids)
    session = sessions.get(request.session_id)
    if session is None:
        return _error_plan(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != request.epoch:
        return _error_plan(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != request.uses_topic_ids:
        return _error_plan(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    partitions = dict(session.partitions)
    for p in request.partitions:
        cached = partitions.get(p.key)
        partitions[p.key] = (CachedPartition(p) if cached is None else
                             CachedPartition(p, cached.high_watermark, cached.log_start_offset))
    for key in request.forgotten:
        partitions.pop(key, None)
    if not partitions:
        return (CacheEdit(remove=(session.session_id,)),
                FetchPlan(Context.SESSIONLESS, ErrorCode.NONE, INVALID_SESSION_ID, 0,
                          _unique(request.partitions)))
    epoch = next_epoch(session.epoch)
    updated = Session(session.session_id, epoch, session.uses_topic_ids, _frozen(partitions),
                      session.created_ms, now_ms)
    return CacheEdit(store=updated), FetchPlan(
        Context.INCREMENTAL, ErrorCode.NONE, session.session_id, epoch,
        tuple(c.request for c in partitions.values()))


def must_respond(cached: CachedPartition, result: PartitionResult) -> bool:
    """Whether an incremental response carries this partition (Kafka's rule)."""
    return (result.has_records or result.error is not ErrorCode.NONE
            or cached.high_watermark != result.high_watermark
            or cached.log_start_offset != result.log_start_offset)


def on_response(sessions: Mapping[int, Session], config: SessionConfig, plan: FetchPlan,
                results: Sequence[PartitionResult], now_ms: int,
                new_session_id: int) -> tuple[CacheEdit, FetchAnswer]:
    """Which partitions the response carries, and what the session remembers of it.

    ``results`` are in the plan's order; ``new_session_id`` is the id a new session gets
    (a random non-zero id not in the table; the adapter draws it)."""
    if plan.context is Context.ERROR:
        return NO_EDIT, FetchAnswer(plan.error, INVALID_SESSION_ID, ())
    everything = tuple(True for _ in results)
    if plan.context is Context.SESSIONLESS:
        return NO_EDIT, FetchAnswer(ErrorCode.NONE, INVALID_SESSION_ID, everything)
    if plan.context is Context.FULL:
        return _create(sessions, config, plan, results, now_ms, new_session_id)
    session = sessions.get(plan.session_id)
    if session is None:  # evicted meanwhile: answer everything, the next request learns it
        return NO_EDIT, FetchAnswer(ErrorCode.NONE, plan.session_id, everything)
    if session.epoch != plan.expected_epoch:
        return NO_EDIT, FetchAnswer(ErrorCode.INVALID_FETCH_SESSION_EPOCH, plan.session_id, ())
    partitions = dict(session.partitions)
    included: list[bool] = []
    rotated: list[PartitionKey] = []
    for result in results:
        cached = partitions.get(result.key)
        if cached is None:  # not in the session (cannot happen for a plan made from it)
            included.append(True)
            continue
        respond = must_respond(cached, result)
        included.append(respond)
        if respond:
            partitions[result.key] = CachedPartition(
                cached.request,
                -1 if result.error is not ErrorCode.NONE else result.high_watermark,
                result.log_start_offset)
            if result.has_records:
                rotated.append(result.key)
    for key in rotated:
        partitions[key] = partitions.pop(key)
    updated = Session(session.session_id, session.epoch, session.uses_topic_ids,
                      _frozen(partitions), session.created_ms, session.last_used_ms)
    return CacheEdit(store=updated), FetchAnswer(ErrorCode.NONE, session.session_id,
                                                 tuple(included))


def _create(sessions: Mapping[int, Session], config: SessionConfig, plan: FetchPlan,
            results: Sequence[PartitionResult], now_ms: int,
            new_session_id: int) -> tuple[CacheEdit, FetchAnswer]:
    everything = tuple(True for _ in results)
    if new_session_id == INVALID_SESSION_ID or new_session_id in sessions or config.slots <= 0:
        return NO_EDIT, FetchAnswer(ErrorCode.NONE, INVALID_SESSION_ID, everything)
    evicted: tuple[int, ...] = ()
    if len(sessions) >= config.slots:
        victim = eviction_victim(sessions, config, len(plan.partitions), now_ms)
        if victim is None:
            return NO_EDIT, FetchAnswer(ErrorCode.NONE, INVALID_SESSION_ID, everything)
        evicted = (victim,)
    cached = {
        p.key: CachedPartition(p, -1 if r.error is not ErrorCode.NONE else r.high_watermark,
                               r.log_start_offset)
        for p, r in zip(plan.partitions, results, strict=True)
    }
    session = Session(new_session_id, next_epoch(INITIAL_EPOCH),
                      plan.uses_topic_ids, _frozen(cached), now_ms, now_ms)
    return (CacheEdit(remove=evicted, store=session),
            FetchAnswer(ErrorCode.NONE, new_session_id, everything))


def eviction_victim(sessions: Mapping[int, Session], config: SessionConfig, new_size: int,
                    now_ms: int) -> int | None:
    """The session a new one of ``new_size`` partitions may replace in a full table."""
    if not sessions:
        return None
    stalest = min(sessions.values(), key=lambda s: (s.last_used_ms, s.session_id))
    if now_ms - stalest.last_used_ms > config.eviction_ms:
        return stalest.session_id
    evictable = [s for s in sessions.values() if now_ms - s.created_ms > config.eviction_ms]
    if not evictable:
        return None
    smallest = min(evictable, key=lambda s: (s.size, s.session_id))
    # Kafka compares (size, id) with the new entry's id taken as 0: a tie keeps the old one.
    return smallest.session_id if new_size > smallest.size else None
