"""What a live run does, step by step, as data: the replayable request script.

An action names *choices* ("this member's own id", "the group's generation minus one"),
never the ids or generations of one run, so a script runs again against a fresh broker
(``korvet spec test-live --replay FILE``) and makes the same requests relative to what
that broker answers. A failing run prints its (shrunk) script as JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Which member id a request carries: the member's current one, none, one it had before,
# another member's, or one no broker ever gave.
MEMBER_CHOICES = ("own", "none", "stale", "other", "bogus")
# Which instance id: the member's own if it is static (and the version carries one), none,
# another member's, or one nobody uses.
INSTANCE_CHOICES = ("auto", "none", "other", "bogus")
# Which generation: the member's last, the group's, one behind, one ahead, or -1.
GENERATION_CHOICES = ("mine", "group", "stale", "next", "none")
GROUP_CHOICES = ("main", "absent", "blank")
# The leader's assignment: for every member it was told of, the first only, or none.
ASSIGN_CHOICES = ("all", "first", "none")
# SyncGroup v5+ protocol fields: the member's, a wrong name, a wrong type, or left out.
SYNC_PROTOCOL_CHOICES = ("match", "name", "type", "omit")
LEAVE_CHOICES = ("self", "self+other", "admin", "admin-other", "other", "bogus")
ADVANCE_CHOICES = ("next", "half")

# The protocols a member may offer (name, metadata). 2 and 3 tie in the vote when two
# members offer them (Korvet takes "range", Kafka "sticky"); 4 is inconsistent with 0/1.
PROTOCOL_VARIANTS: tuple[tuple[tuple[str, bytes], ...], ...] = (
    (("range", b"r0"),),
    (("range", b"r1"),),
    (("sticky", b"s0"), ("range", b"r0")),
    (("range", b"r0"), ("sticky", b"s0")),
    (("roundrobin", b"o0"),),
)
PROTOCOL_NAMES = ("range", "sticky", "roundrobin")


@dataclass(frozen=True, slots=True)
class Join:
    sim: int
    version: int
    member: str = "own"
    instance: str = "auto"
    protocols: int = 0
    protocol_type: str = "consumer"  # or "connect": not the group's type
    session: str = "ok"  # or "short": below group.min.session.timeout.ms
    group: str = "main"


@dataclass(frozen=True, slots=True)
class Sync:
    sim: int
    version: int
    member: str = "own"
    instance: str = "auto"
    generation: str = "mine"
    assign: str = "all"
    protocol: str = "match"
    group: str = "main"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    sim: int
    version: int
    member: str = "own"
    instance: str = "auto"
    generation: str = "mine"
    group: str = "main"


@dataclass(frozen=True, slots=True)
class Leave:
    sim: int
    version: int
    who: str = "self"
    group: str = "main"


@dataclass(frozen=True, slots=True)
class Commit:
    sim: int
    version: int
    member: str = "own"
    instance: str = "auto"
    generation: str = "mine"
    partitions: int = 1  # 1: partition 0, 2: partition 1, 3: both
    offset: int = 1
    metadata: str = "short"  # or "long": above offset.metadata.max.bytes
    group: str = "main"  # "absent" commits to a group never used before


@dataclass(frozen=True, slots=True)
class FetchOffsets:
    version: int
    everything: bool = False  # topics = null (v2+): every committed partition
    group: str = "main"


@dataclass(frozen=True, slots=True)
class Describe:
    version: int


@dataclass(frozen=True, slots=True)
class Reconnect:
    sim: int


@dataclass(frozen=True, slots=True)
class Advance:
    """Move Korvet's test clock: to the machine's next deadline, or half-way to it."""

    to: str = "next"


# --- the storage path ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Produce:
    """A batch from producer slot ``producer`` (the last slot is a plain, non-idempotent
    producer): its next sequence, a retry of its ``which``-th latest batch, a batch one
    past its next sequence, or a batch of its previous epoch."""

    producer: int
    version: int
    records: int = 1
    kind: str = "next"  # next | retry | gap | old-epoch
    which: int = 0


@dataclass(frozen=True, slots=True)
class Bump:
    """The idempotent producer bumps its epoch and starts again at sequence 0 (KIP-360)."""

    producer: int


@dataclass(frozen=True, slots=True)
class NewProducer:
    """InitProducerId: the slot gets a new producer id, epoch 0."""

    producer: int


@dataclass(frozen=True, slots=True)
class Fetch:
    """Fetch at: the consumer's position, the log start, the high watermark, one past it,
    one below the log start, the ``which``-th record still in the log, or one past a
    batch's last record (between two batches when offsets are sparse)."""

    version: int
    at: str = "next"  # next | start | end | beyond | below | record | gap
    which: int = 0


@dataclass(frozen=True, slots=True)
class ListOffsets:
    version: int
    which: str = "earliest"  # earliest | latest | time
    k: int = 0  # time: the timestamp of the k-th record produced, plus one for odd k


@dataclass(frozen=True, slots=True)
class DeleteRecords:
    version: int
    at: str = "record"  # record | end | beyond
    which: int = 0


# --- transactions (transactions v2: Produce v12 and TxnOffsetCommit v5 add implicitly) ------
# Client slots 0 and 1 share one transactional id (1 fences 0 when it starts), slot 2 has
# its own.

@dataclass(frozen=True, slots=True)
class TxnInit:
    """InitProducerId with the slot's transactional id, retried as clients retry."""

    slot: int


@dataclass(frozen=True, slots=True)
class TxnProduce:
    """A transactional batch of ``records`` records from the slot to ``partition``."""

    slot: int
    partition: int
    records: int = 1


@dataclass(frozen=True, slots=True)
class TxnOffsets:
    """TxnOffsetCommit of ``offset`` for partition 0 in the run's group."""

    slot: int
    offset: int = 0


@dataclass(frozen=True, slots=True)
class TxnEnd:
    """EndTxn: commit or abort; ``again`` resends the slot's last EndTxn with the epoch it
    had then (its reply lost), with ``commit`` as this request's result."""

    slot: int
    commit: bool = True
    again: bool = False


@dataclass(frozen=True, slots=True)
class TxnRead:
    """Fetch the partition from its log start, read_committed or read_uncommitted."""

    partition: int
    committed: bool = True


@dataclass(frozen=True, slots=True)
class TxnLatest:
    """ListOffsets LATEST, read_committed (the LSO) or read_uncommitted (the HW)."""

    partition: int
    committed: bool = True


@dataclass(frozen=True, slots=True)
class TxnFetchOffsets:
    """OffsetFetch v7+ of the run's group with RequireStable."""


# --- share groups --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ShareAppend:
    """``records`` records appended, one batch each."""

    records: int = 1


@dataclass(frozen=True, slots=True)
class ShareFetch:
    """ShareFetch of share member ``member`` for ``most`` records, acknowledging (``ack``:
    none, accept, release, reject) a record chosen by ``whose`` (own: one it holds, other:
    one the other member holds, none: one nobody holds) and ``which``."""

    member: int
    most: int = 1
    ack: str = "none"
    whose: str = "own"
    which: int = 0


@dataclass(frozen=True, slots=True)
class ShareAck:
    """ShareAcknowledge of one record, chosen as ShareFetch's acknowledgement is."""

    member: int
    kind: str = "accept"  # accept | release | reject
    whose: str = "own"
    which: int = 0


@dataclass(frozen=True, slots=True)
class ShareStart:
    """DescribeShareGroupOffsets: the share-partition start offset."""


Action = (Join | Sync | Heartbeat | Leave | Commit | FetchOffsets | Describe | Reconnect | Advance
          | Produce | Bump | NewProducer | Fetch | ListOffsets | DeleteRecords
          | TxnInit | TxnProduce | TxnOffsets | TxnEnd | TxnRead | TxnLatest | TxnFetchOffsets
          | ShareAppend | ShareFetch | ShareAck | ShareStart)
KINDS: Mapping[str, type[Any]] = {cls.__name__.lower(): cls for cls in (
    Join, Sync, Heartbeat, Leave, Commit, FetchOffsets, Describe, Reconnect, Advance,
    Produce, Bump, NewProducer, Fetch, ListOffsets, DeleteRecords,
    TxnInit, TxnProduce, TxnOffsets, TxnEnd, TxnRead, TxnLatest, TxnFetchOffsets,
    ShareAppend, ShareFetch, ShareAck, ShareStart)}


def to_json(action: Action) -> dict[str, Any]:
    return {"do": type(action).__name__.lower(), **dataclasses.asdict(action)}


def from_json(data: Mapping[str, Any]) -> Action:
    kind = KINDS.get(str(data.get("do", "")))
    if kind is None:
        raise ValueError(f"unknown action {data.get('do')!r} (known: {', '.join(KINDS)})")
    fields = {f.name for f in dataclasses.fields(kind)}
    unknown = set(data) - fields - {"do"}
    if unknown:
        raise ValueError(f"{data.get('do')}: unknown fields {sorted(unknown)}")
    action: Action = kind(**{k: v for k, v in data.items() if k != "do"})
    return action


@dataclass(frozen=True, slots=True)
class Script:
    """A run: its members (static or not) and its actions, in order."""

    static: tuple[bool, ...]
    actions: tuple[Action, ...]
    part: str = "groups"

    def to_json(self) -> dict[str, Any]:
        return {"korvet-live-script": 1, "part": self.part, "static": list(self.static),
                "actions": [to_json(a) for a in self.actions]}

    def dumps(self) -> str:
        lines = ",\n  ".join(json.dumps(to_json(a)) for a in self.actions)
        return (f'{{"korvet-live-script": 1, "part": "{self.part}", '
                f'"static": {json.dumps(list(self.static))},\n "actions": [\n  {lines}\n]}}\n')

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Script:
        if data.get("korvet-live-script") != 1:
            raise ValueError("not a korvet live script (no \"korvet-live-script\": 1)")
        actions: Sequence[Mapping[str, Any]] = data.get("actions", [])
        return cls(tuple(bool(s) for s in data.get("static", [])),
                   tuple(from_json(a) for a in actions), str(data.get("part", "groups")))

    @classmethod
    def load(cls, path: str | Path) -> Script:
        return cls.from_json(json.loads(Path(path).read_text()))
