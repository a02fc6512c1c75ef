"""Replay TLC's state graph of spec/Transactions.tla through the coordinator's rules and the scripts.

Every state of three CI models is rebuilt: ``Transactions`` (one transactional id, one
producer instance writing one partition and the group's offsets, a network that loses,
duplicates and delays), ``Transactions-replay`` (two instances of the id: the zombie's open
transaction fenced by its successor's InitProducerId; epochs exhausted; DeleteRecords) and
``Transactions-replay-takeover`` (the lease moves while markers are on their way: the
former holder's markers fenced by their coordinator epoch): the transactional id's record
as the ``TxnRecord`` korvet/core/transactions.py reads, the partition's keys and the group's
pending offsets in a real redis-server, built by real append.lua and txn_offsets.lua calls
(tests/support/script_replay.py walks the graph).
From each state every action the spec allows is performed, and the successors must be
exactly TLC's, every variable compared:

- the coordinator's transitions by the pure rules: ClientInit by ``init_producer_id``, the
  implicit add of ClientWrite by ``add``, EndTxnArrives by ``end_txn``, TimeoutAbort by
  ``time_out``, Expire by ``expire``, CompleteTxn by ``complete``; the record they write is
  the spec's ``coord'``, their error the spec's reply (EndVerdict's PREPARE, NONE,
  CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING;
  the add's and the fence's errors), the epoch they answer the client's new epoch, and the
  decision they write (``decision_of``) the content of the markers SendMarker sends;
- the participants' side by the scripts: DataArrives on the partition is a transactional
  append (append.lua), on the group a TxnOffsetCommit write (txn_offsets.lua);
  MarkerArrives a marker append or the group's marker, then (on the group) what the group's
  owner does with a decided entry (commits it or drops it, then ``applied``). The stream,
  the meta hash's ``p:``/``t:`` fields, the aborted index and the group's hash are read
  back as ``log``, ``ps``, ``aborted`` and ``committed``; the script's answer is the
  spec's verdict (OK: accepted or APPLY; DUP; FENCED; BAD_EPOCH) and its ``lso`` field the
  spec's LSO;
- DeleteRecords by delete_records.lua; the aborted index and the LSO as a reader sees them
  (an aborted transaction whose marker lies below the log start is dropped; the LSO is never
  below the log start: RedisStore's ``_stable``).

The rest (the clients' requests, the network's losses, the timers' ticks, the coordinator's
bookkeeping of acknowledgements, the lease's Takeover and Retire) is the spec's own, in
Python. Abstraction: the spec's
ghost transaction names travel in the records' values and the offsets' metadata; a
transactional id's ``age`` is its record's timestamps, ``age`` ticks before the replay's
clock; the partition is a dense topic (offset o is the id o-1); a data message is a batch
of one record with the producer's next sequence (the spec has no sequences: a duplicate
copy of a write is a write of its own); the marker's coordinator epoch is the spec's lease
token (korvet's is the record's version at the decision, which orders one producer id's
decisions as the tokens do: docs/spec/transactions.md); Kafka's epoch bound (``MAX_EPOCH``)
is narrowed to the model's ``MaxEpoch``, as the other replays narrow the scripts' widths.

The graph is walked once; each action's transitions are also a test of their own
(``test_transition_replays[Transactions-DeliverMarker]``, ``pytest -k DeliverMarker``), which
fails when the action never fires in the model. A broken rule of the machine or of a script
must diverge (``test_a_broken_machine_rule_is_caught``, ``test_a_broken_script_rule_is_caught``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from korvet.core import transactions as rules
from korvet.core.errors import ErrorCode
from korvet.core.transactions import Step, TxnRecord, TxnState
from korvet.storage import entries
from korvet.verification import tlc
from korvet.verification.values import Function, ModelValue, Record, TlaValue
from tests.support import tlc_runs
from tests.support.script_replay import (
    ScriptRedis,
    Snapshot,
    Successor,
    WalkReport,
    once_per_model,
    script_text,
    tla_int,
    walk,
)
from tests.support.spec_actions import action_cases, assert_action_replays

pytestmark = pytest.mark.tlc

# Next's disjuncts, as TLC labels them, that fire in each model (spec/models.yaml says why
# each model leaves an action out).
ACTIONS = ("ClientInit", "ClientWrite", "ClientEnd", "ClientRetryEnd", "DeliverData",
           "DeliverEnd", "DeliverMarker", "Lose", "TimeoutAbort", "Expire", "Tick",
           "CompleteTxn", "SendMarker", "Takeover", "Retire", "DeleteRecords")
ONE_COORDINATOR = ("Takeover", "Retire")
REPLAY, TAKEOVER = "Transactions-replay", "Transactions-replay-takeover"
MODEL_ACTIONS = {
    # one instance; a network that loses and duplicates
    "Transactions": tuple(a for a in ACTIONS if a not in (*ONE_COORDINATOR, "DeleteRecords")),
    # zombies: an InitProducerId fences the other instance's transaction; DeleteRecords; no loss
    REPLAY: tuple(a for a in ACTIONS if a not in (*ONE_COORDINATOR, "Lose")),
    # a takeover: the former holder's markers fenced; three client steps (no retry)
    TAKEOVER: tuple(a for a in ACTIONS if a not in ("ClientRetryEnd", "DeleteRecords")),
}
CI_MODELS = list(MODEL_ACTIONS)

TOPIC, TOPIC_ID, GROUP_NAME = "t", "topic-id-txn", "g"
STREAM, META, WAITING = "tx:{t:0}:stream", "tx:{t:0}:partition", "tx:{t:0}:waiting"
TIMES, OPEN, ABORTED = "tx:{t:0}:times", "tx:{t:0}:open", "tx:{t:0}:aborted"
GROUP_TXN = "tx:{group:g}:txn"
COMMITTED = "tx:{group:g}:committed"  # the group owner's committed offsets (their writer)
KEYS = [STREAM, META, TIMES, OPEN, ABORTED, GROUP_TXN, COMMITTED]
TICK_MS = 1000
NOW = 1_000_000  # the replay's clock; a record of age a was last touched a ticks before
NO_CLIENT = ("none", "none")
NO_TXN: TlaValue = (NO_CLIENT, 0)
COMMIT, ABORT = "COMMIT", "ABORT"
BOOLS = (False, True)

_int = tla_int


@dataclass(frozen=True, slots=True)
class Constants:
    txn_ids: tuple[ModelValue, ...]
    instances: tuple[ModelValue, ...]
    partition: ModelValue
    group: ModelValue
    max_epoch: int
    max_pid: int
    max_token: int
    timeout: int
    expire_after: int
    max_moves: int
    max_loss: int
    max_dup: int
    max_trims: int

    @classmethod
    def read(cls, cfg: Path) -> Constants:
        v = tlc.read_constants(cfg)
        parts = _names(v["Partitions"])
        assert len(parts) == 1, "the replay keeps one partition's keys"
        group = v["Group"]
        assert isinstance(group, ModelValue)
        return cls(_names(v["TxnIds"]), _names(v["Instances"]), parts[0], group,
                   _int(v["MaxEpoch"]), _int(v["MaxPid"]), _int(v["MaxToken"]), _int(v["Timeout"]),
                   _int(v["ExpireAfter"]), _int(v["MaxMoves"]), _int(v["MaxLoss"]),
                   _int(v["MaxDup"]), _int(v["MaxTrims"]))

    @property
    def clients(self) -> tuple[tuple[ModelValue, ModelValue], ...]:
        return tuple((t, i) for t in self.txn_ids for i in self.instances)

    @property
    def participants(self) -> tuple[ModelValue, ...]:
        return (self.partition, self.group)


def _names(value: TlaValue) -> tuple[ModelValue, ...]:
    assert isinstance(value, frozenset)
    return tuple(sorted((x for x in value if isinstance(x, ModelValue)), key=lambda x: x.name))


# --- TLA+ values ---------------------------------------------------------------------

def _with(value: Any, **changes: object) -> Record:
    items = dict(value.items())
    items.update(changes)
    return Record(items)


def _at(function: Any, key: object, new: object) -> Function:
    items = dict(function.items())
    items[key] = new
    return Function(items)


def _msg(kind: str, to: object, c: object, pid: int, epoch: int, ce: int, result: str,
         txn: object) -> Record:
    return Record({"type": kind, "to": to, "c": c, "pid": pid, "epoch": epoch, "ce": ce,
                   "result": result, "txn": txn})


NEW_CLIENT = Record({"st": "init", "pid": 0, "epoch": -1, "k": 1, "sent": frozenset(),
                     "acked": frozenset(), "bad": False, "want": COMMIT})
NO_RECORD = Record({"state": "None", "pid": 0, "epoch": -1, "parts": frozenset(),
                    "txn": NO_TXN, "age": 0})
NO_PRODUCER = Record({"epoch": -1, "mark": -1, "ce": 0, "first": -1, "open": NO_TXN})


def _restart(client: Any) -> Record:
    return _with(NEW_CLIENT, k=client["k"] + 1)


def _ghost(txn: Any) -> str:
    """A transaction's name as the records' values and the offsets' metadata carry it."""
    (t, i), k = txn
    return f"{t} {i} {k}"


def _unghost(text: str | bytes) -> TlaValue:
    t, i, k = (text.decode() if isinstance(text, bytes) else text).split()
    return ((ModelValue(t), ModelValue(i)), int(k))


# --- the coordinator's record: spec <-> korvet/core/transactions.py ---------------------

class Coordinator:
    def __init__(self, c: Constants) -> None:
        self.c = c

    def record(self, t: ModelValue, cs: Any) -> TxnRecord | None:
        """The record ``coord[t]`` stands for (None: no record)."""
        if cs["state"] == "None":
            return None
        state = TxnState(cs["state"])
        touched = NOW - cs["age"] * TICK_MS
        parts = cs["parts"]
        return TxnRecord(
            str(t), cs["pid"], cs["epoch"], self.c.timeout * TICK_MS, state=state,
            partitions=frozenset({(TOPIC, 0)}) if self.c.partition in parts else frozenset(),
            groups=frozenset({GROUP_NAME}) if self.c.group in parts else frozenset(),
            started_ms=touched if state is TxnState.ONGOING else -1, updated_ms=touched,
            tv2=True, version=7)

    def spec(self, record: TxnRecord | None, txn: object) -> Record:
        """The spec's ``coord[t]`` of a record (``txn``: the ghost, which the record lacks)."""
        if record is None:
            return NO_RECORD
        since = record.started_ms if record.state is TxnState.ONGOING else record.updated_ms
        age, rest = divmod(NOW - since, TICK_MS)
        assert rest == 0, record
        parts = ({self.c.partition} if (TOPIC, 0) in record.partitions else set()) | (
            {self.c.group} if GROUP_NAME in record.groups else set())
        return Record({"state": record.state.value, "pid": record.producer_id,
                       "epoch": record.producer_epoch, "parts": frozenset(parts), "txn": txn,
                       "age": age})

    def participant(self, q: object) -> tuple[set[Any], set[Any]]:
        return ({(TOPIC, 0)}, set()) if q == self.c.partition else (set(), {GROUP_NAME})


def end_verdict(cs: Any, m: Any) -> str:
    """The spec's EndVerdict, to name the reply the rules must give."""
    if cs["state"] == "None" or cs["pid"] != m["pid"]:
        return "INVALID_PRODUCER_ID_MAPPING"
    if cs["state"] == "Ongoing" and cs["epoch"] == m["epoch"]:
        return "PREPARE"
    if cs["state"] in ("PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort") \
            and cs["epoch"] == m["epoch"] + 1:
        outcome = COMMIT if cs["state"] in ("PrepareCommit", "CompleteCommit") else ABORT
        if outcome != m["result"]:
            return "INVALID_TXN_STATE"
        return "CONCURRENT_TRANSACTIONS" if cs["state"].startswith("Prepare") else "NONE"
    return "PRODUCER_FENCED"


def end_reply(step: Step) -> str:
    """What an EndTxn step answered, in EndVerdict's words."""
    if step.error is not ErrorCode.NONE:
        return step.error.name
    if step.record is None:
        return "NONE"
    return "PREPARE" if step.record.state.ending else f"wrote {step.record.state.value}"


# --- the participants' side: the scripts on a real Redis -------------------------------

def _bulk(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _pairs(flat: Any) -> dict[bytes, bytes]:
    """A hash's or an entry's fields, whether the reply came as a map or a flat list."""
    if isinstance(flat, dict):
        return flat
    return {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}


class TxnReplay:
    def __init__(self, c: Constants, store: ScriptRedis) -> None:
        self.c = c
        self.store = store
        self.coordinator = Coordinator(c)
        self.problems: list[str] = []  # answers that are not the spec's (walk's ``found``)

    # reading Redis back as the spec's partVars

    @staticmethod
    def reads(pipe: Any) -> None:
        pipe.xrange(STREAM)
        pipe.hgetall(META)
        pipe.zrange(ABORTED, 0, -1)
        pipe.hgetall(GROUP_TXN)
        pipe.get(COMMITTED)

    def part_vars(self, read: list[Any], before: Any,
                  marker_txn: TlaValue = NO_TXN) -> dict[str, TlaValue]:
        """``log``, ``start``, ``ps``, ``aborted``, ``committed`` from the reads: ``before``
        is the log before the call (the spec's log keeps what DeleteRecords removed from the
        stream, and each marker's transaction, which the stream does not name; a marker the
        call wrote is ``marker_txn``'s)."""
        stream, meta, aborted, group, committed = read
        meta, group = _pairs(meta), _pairs(group)
        p = self.c.partition
        log: list[Record] = list(before[:_offset(stream[0][0])] if stream else before)
        for entry_id, flat in stream:
            offset = _offset(entry_id)
            assert offset == len(log), (entry_id, log)
            fields = _pairs(flat)
            pid, epoch = (int(x) for x in fields[entries.PRODUCER].split())
            if entries.CONTROL in fields:
                txn = before[offset]["txn"] if offset < len(before) else marker_txn
                log.append(Record({"kind": fields[entries.CONTROL].decode(), "pid": pid,
                                   "epoch": epoch, "txn": txn}))
            else:
                log.append(Record({"kind": "data", "pid": pid, "epoch": epoch,
                                   "txn": _unghost(fields[b"value"])}))
        ps_p, ps_g = [], []
        pending = {_bulk(k): _bulk(v) for k, v in group.items()}
        for x in range(1, self.c.max_pid + 1):
            data = meta.get(b"p:%d" % x)
            marks = meta.get(b"t:%d" % x)
            mark, ce, first_ms = ((int(w) for w in marks.split()[:3]) if marks
                                  else (-1, 0, -1))
            first = first_ms if first_ms >= 0 else -1
            ps_p.append(Record({
                "epoch": int(data.split()[0]) if data else -1, "mark": mark, "ce": ce,
                "first": first, "open": log[first]["txn"] if first >= 0 else NO_TXN}))
            last, ce = (int(w) for w in (pending.get(f"e:{x}", "-1") + " 0").split()[:2])
            entry: Any = json.loads(pending[str(x)]) if str(x) in pending else None
            open_ = entry is not None and not entry.get("decided")
            if entry is not None and entry.get("decided"):
                self.problems.append(f"group: a decided entry left unapplied: {entry}")
            ps_g.append(Record({
                "epoch": max(last, int(entry["epoch"]) if entry else -1), "mark": last,
                "ce": ce, "first": -1,
                "open": _unghost(entry["offsets"][0][3]) if open_ else NO_TXN}))
        start = _offset(meta[b"start"]) if b"start" in meta else 0
        # The aborted index as a reader sees it: an entry whose marker lies below the log start
        # is no reader's concern (the scripts drop it at the next transactional append; the
        # spec at DeleteRecords); the LSO as a reader computes it (RedisStore's _stable).
        index = frozenset(Record({"pid": int(w[0]), "first": _offset(w[1]), "last": _offset(w[2])})
                          for w in (member.split() for member in aborted)
                          if _offset(w[2]) >= start)
        lso = max(start, min(len(log), _offset(meta[b"lso"]))) if b"lso" in meta else len(log)
        state = {"log": Function({p: tuple(log)}), "start": Function({p: start}),
                 "ps": Function({p: tuple(ps_p), self.c.group: tuple(ps_g)}),
                 "aborted": Function({p: index}),
                 "committed": _unghost(committed) if committed else NO_TXN}
        if lso != spec_lso(state, p):
            self.problems.append(f"append.lua's lso {lso} is not the spec's LSO "
                                 f"{spec_lso(state, p)} in {state}")
        return state

    def initial(self, state: dict[str, TlaValue]) -> Snapshot:
        snapshot, read = self.store.snapshot_and([("XRANGE", STREAM, "-", "+"),
                                                  ("HGETALL", META), ("ZRANGE", ABORTED, 0, -1),
                                                  ("HGETALL", GROUP_TXN), ("GET", COMMITTED)])
        got = self.part_vars([read[0], _pairs(read[1]), read[2], _pairs(read[3]), read[4]], ())
        for name, value in got.items():
            assert value == state[name], (name, value, state[name])
        return snapshot

    # the scripts' calls

    def data(self, s: dict[str, Any], snapshot: Snapshot, m: Any) -> tuple[str, Snapshot,
                                                                             dict[str, TlaValue]]:
        """The write ``m`` arriving at its participant: (OK | BAD_EPOCH | ..., keys after,
        partVars after)."""
        log = s["log"][self.c.partition]
        if m["to"] == self.c.partition:
            # the producer's next sequence at that epoch: a write the script never saw before
            seq = sum(1 for r in log if r["kind"] == "data" and r["pid"] == m["pid"]
                      and r["epoch"] == m["epoch"])
            fields = [b"producer", b"%d %d" % (m["pid"], m["epoch"]), b"timestamp", b"%d" % NOW,
                      b"value", _ghost(m["txn"]).encode()]
            args: list[str | int | bytes] = [NOW, 0, 0, TOPIC_ID, -1, -1, 0, m["pid"], m["epoch"],
                                             seq, seq, 1, "", "fields", len(fields) // 2, *fields]
            reply, after, read = self.store.call_from(
                snapshot, "append", [STREAM, META, META, WAITING, TIMES, OPEN, ABORTED], args,
                self.reads)
            status = _bulk(reply[0])  # type: ignore[index]
        else:
            offsets = [[TOPIC, 0, "1", _ghost(m["txn"]), -1]]
            reply, after, read = self.store.call_from(
                snapshot, "offsets", [GROUP_TXN], ["write", m["pid"], m["epoch"],
                                                   json.dumps(offsets)], self.reads)
            status = _bulk(reply)
        return status, after, self.part_vars(read, log)

    def marker(self, s: dict[str, Any], snapshot: Snapshot, m: Any) -> tuple[str, Snapshot,
                                                                               dict[str, TlaValue]]:
        """The marker ``m`` arriving at its participant: (OK | DUP | FENCED | BAD_EPOCH,
        keys after, partVars after); on the group, the owner then applies a decided entry."""
        log = s["log"][self.c.partition]
        commit = m["result"] == COMMIT
        if m["to"] == self.c.partition:
            fields = entries.marker_fields(commit, m["pid"], m["epoch"], m["ce"], NOW)
            producer = f"{m['result']} {m['ce']} 2"
            args: list[str | int | bytes] = [NOW, 0, 0, TOPIC_ID, -1, -1, 0, m["pid"], m["epoch"],
                                             -2, producer, 1, "", "fields", len(fields) // 2,
                                             *fields]
            reply, after, read = self.store.call_from(
                snapshot, "append", [STREAM, META, META, WAITING, TIMES, OPEN, ABORTED], args,
                self.reads)
            return _bulk(reply[0]), after, self.part_vars(read, log, m["txn"])  # type: ignore[index]
        reply, after, read = self.store.call_from(
            snapshot, "offsets", [GROUP_TXN], ["marker", m["pid"], m["epoch"], m["result"], 2,
                                              m["ce"]],
            lambda pipe: pipe.hgetall(GROUP_TXN))
        status = _bulk(reply)
        entry_raw = read[0].get(b"%d" % m["pid"])
        if entry_raw is not None and json.loads(entry_raw).get("decided"):
            # the group's owner: a committed transaction's offsets become the group's, an
            # aborted one's are dropped; then the entry goes (TransactionCoordinator.apply_decided)
            entry = json.loads(entry_raw)
            commands: list[Any] = []
            if entry["decided"] == COMMIT:
                commands.append(("SET", COMMITTED, entry["offsets"][0][3]))
            commands.append(("EVALSHA", self.store.sha["offsets"], 1, GROUP_TXN, "applied",
                             m["pid"], entry_raw))
            replies, after, read = self.store.send_from(
                after, commands, [("XRANGE", STREAM, "-", "+"), ("HGETALL", META),
                                  ("ZRANGE", ABORTED, 0, -1), ("HGETALL", GROUP_TXN),
                                  ("GET", COMMITTED)])
            assert _bulk(replies[-1]) == "OK", replies
            read = [read[0], _pairs(read[1]), read[2], _pairs(read[3]), read[4]]
            return status, after, self.part_vars(read, log)
        _, more = self.store.snapshot_and([("XRANGE", STREAM, "-", "+"), ("HGETALL", META),
                                           ("ZRANGE", ABORTED, 0, -1), ("HGETALL", GROUP_TXN),
                                           ("GET", COMMITTED)])
        return status, after, self.part_vars(
            [more[0], _pairs(more[1]), more[2], _pairs(more[3]), more[4]], log)

    def delete_records(self, s: dict[str, Any], snapshot: Snapshot) -> Iterator[Successor]:
        """DeleteRecords to every offset above the log start up to the high watermark: one
        delete_records.lua call each, as AdminStore.raise_log_start makes it."""
        if s["trims"] >= self.c.max_trims:
            return
        log = s["log"][self.c.partition]
        for offset in range(s["start"][self.c.partition] + 1, len(log) + 1):
            reply, after, read = self.store.call_from(
                snapshot, "delete", [STREAM, META, META, TIMES], [TOPIC_ID, 0, offset, 1, 0, 0],
                self.reads)
            if _bulk(reply[0]) != "OK":  # type: ignore[index]
                self.problems.append(f"DeleteRecords to {offset} on {log}: {reply}")
                continue
            yield Successor("DeleteRecords", {**s, **self.part_vars(read, log),
                                              "trims": s["trims"] + 1}, after)

    # every successor the spec allows

    def successors(self, s: dict[str, Any], snapshot: Snapshot) -> Iterator[Successor]:
        yield from self.clients(s, snapshot)
        yield from self.deliveries(s, snapshot)
        yield from self.coordinators(s, snapshot)
        yield from self.delete_records(s, snapshot)

    def clients(self, s: dict[str, Any], snapshot: Snapshot) -> Iterator[Successor]:
        c = self.c
        can_move = s["moves"] < c.max_moves
        for client in c.clients:
            me = s["cli"][client]
            if not can_move:
                continue
            if me["st"] == "init" or (me["st"] == "ready" and me["epoch"] == c.max_epoch):
                yield from self.client_init(s, snapshot, client)
            if me["st"] in ("ready", "txn"):
                for q in c.participants:
                    if q not in me["sent"] | me["acked"]:
                        yield from self.client_write(s, snapshot, client, q)
            if me["st"] == "txn":
                for r in (COMMIT, ABORT):
                    if r == COMMIT and (me["sent"] or me["bad"]):
                        continue
                    m = _msg("end", c.group, client, me["pid"], me["epoch"], 0, r, (client, me["k"]))
                    yield Successor("ClientEnd", {
                        **s, "net": s["net"] | {m}, "moves": s["moves"] + 1,
                        "cli": _at(s["cli"], client, _with(me, st="ending", want=r)),
                        "asked": s["asked"] | {(client, me["k"])} if r == COMMIT else s["asked"]},
                        snapshot)
            if me["st"] == "ending":
                m = _msg("end", c.group, client, me["pid"], me["epoch"], 0, me["want"],
                         (client, me["k"]))
                if m not in s["net"]:
                    yield Successor("ClientRetryEnd", {**s, "net": s["net"] | {m},
                                                       "moves": s["moves"] + 1}, snapshot)

    def client_init(self, s: dict[str, Any], snapshot: Snapshot,
                    client: tuple[ModelValue, ModelValue]) -> Iterator[Successor]:
        t = client[0]
        cs = s["coord"][t]
        record = self.coordinator.record(t, cs)
        timeout = self.c.timeout * TICK_MS

        def init(fresh: int | None) -> Step:
            return rules.init_producer_id(record, str(t), timeout, max_timeout_ms=timeout,
                                          now_ms=NOW, fresh_pid=fresh)
        step, next_pid = init(None), s["nextPid"]
        if step.needs_producer_id:
            if next_pid > self.c.max_pid:
                return  # the model's producer ids are all handed out
            step, next_pid = init(next_pid), next_pid + 1
        moved = {**s, "moves": s["moves"] + 1}
        if step.error is ErrorCode.NONE and step.record is not None:
            new = step.record
            if (step.producer_id, step.producer_epoch) != (new.producer_id, new.producer_epoch):
                self.problems.append(f"InitProducerId answered {step} for the record {new}")
            grant = Record({"pid": step.producer_id, "epoch": step.producer_epoch, "c": client})
            for lost in BOOLS:
                if lost and s["faults"]["loss"] >= self.c.max_loss:
                    continue
                me = s["cli"][client]
                yield Successor("ClientInit", {
                    **moved, "nextPid": next_pid,
                    "coord": _at(s["coord"], t, self.coordinator.spec(new, NO_TXN)),
                    "grants": s["grants"] | {grant},
                    "faults": _with(s["faults"], loss=s["faults"]["loss"] + lost),
                    "cli": s["cli"] if lost else _at(s["cli"], client, _with(
                        me, st="ready", pid=step.producer_id, epoch=step.producer_epoch))},
                    snapshot)
        elif step.error is ErrorCode.CONCURRENT_TRANSACTIONS and step.record is not None:
            # the open transaction fenced: its epoch bumped and aborted, the client retries
            yield Successor("ClientInit", {
                **moved, "coord": _at(s["coord"], t, self.coordinator.spec(step.record, cs["txn"])),
                "decisions": s["decisions"] | {self.decision(cs, step)},
                "ackd": _at(s["ackd"], t, frozenset())}, snapshot)
        elif step.error is not ErrorCode.CONCURRENT_TRANSACTIONS or cs["state"] not in (
                "PrepareCommit", "PrepareAbort"):
            self.problems.append(f"InitProducerId on {cs}: {step}")

    def decision(self, cs: Any, step: Step) -> Record:
        """The spec's ghost of the decision ``step`` writes (``decisions``)."""
        d = step.decision()
        assert d is not None, step
        return Record({"txn": cs["txn"], "pid": d.producer_id, "epoch": d.producer_epoch,
                       "result": COMMIT if d.commit else ABORT})

    def client_write(self, s: dict[str, Any], snapshot: Snapshot,
                     client: tuple[ModelValue, ModelValue], q: ModelValue) -> Iterator[Successor]:
        t = client[0]
        cs, me = s["coord"][t], s["cli"][client]
        parts, groups = self.coordinator.participant(q)
        step = rules.add(self.coordinator.record(t, cs), me["pid"], me["epoch"], partitions=parts,
                         groups=groups, now_ms=NOW, tv2=True)
        moved = {**s, "moves": s["moves"] + 1}
        if step.error in (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.PRODUCER_FENCED):
            wanted = (ErrorCode.INVALID_PRODUCER_ID_MAPPING
                      if cs["state"] == "None" or cs["pid"] != me["pid"] else ErrorCode.PRODUCER_FENCED)
            if step.error is not wanted:
                self.problems.append(f"the add of {q} by {me} to {cs}: {step.error.name}, the "
                                     f"spec's {wanted.name}")
            yield Successor("ClientWrite", {**moved, "cli": _at(s["cli"], client, _restart(me))},
                            snapshot)
            return
        if step.error is ErrorCode.CONCURRENT_TRANSACTIONS:
            return  # the client waits for the decision to complete
        if step.error is not ErrorCode.NONE:
            self.problems.append(f"the add of {q} by {me} to {cs}: {step}")
            return
        if me["epoch"] >= self.c.max_epoch:
            return  # the model's bound: the client re-initialises
        record = step.record or self.coordinator.record(t, cs)
        x = (client, me["k"])
        txn = x if cs["state"] not in ("Ongoing", "PrepareCommit", "PrepareAbort") else cs["txn"]
        m = _msg("data", q, client, me["pid"], me["epoch"], 0, "", x)
        yield Successor("ClientWrite", {
            **moved, "coord": _at(s["coord"], t, self.coordinator.spec(record, txn)),
            "net": s["net"] | {m},
            "cli": _at(s["cli"], client, _with(me, st="txn", sent=me["sent"] | {q}))}, snapshot)

    def deliveries(self, s: dict[str, Any], snapshot: Snapshot) -> Iterator[Successor]:
        c = self.c
        faults = s["faults"]
        for m in sorted(s["net"], key=repr):
            if faults["loss"] < c.max_loss:
                yield Successor("Lose", {**s, "net": s["net"] - {m},
                                         "faults": _with(faults, loss=faults["loss"] + 1)}, snapshot)
            if m["type"] == "data":
                status, after, part = self.data(s, snapshot, m)
                if status not in ("OK", "BAD_EPOCH"):
                    self.problems.append(f"the write {m} answered {status}")
            elif m["type"] == "marker":
                status, after, part = self.marker(s, snapshot, m)
            else:
                status, after, part = "", snapshot, {}
            for keep in BOOLS:
                for lost in BOOLS:
                    if (keep and faults["dup"] >= c.max_dup) or (lost and faults["loss"] >= c.max_loss):
                        continue
                    delivered = {**s, "net": s["net"] if keep else s["net"] - {m},
                                 "faults": Record({"loss": faults["loss"] + lost,
                                                   "dup": faults["dup"] + keep})}
                    if m["type"] == "data":
                        yield Successor("DeliverData",
                                        self.data_arrived(delivered, m, status == "OK", lost, part),
                                        after)
                    elif m["type"] == "marker":
                        yield Successor("DeliverMarker",
                                        self.marker_arrived(delivered, s, m, status, lost, part),
                                        after)
                    else:
                        yield Successor("DeliverEnd", self.end_arrived(delivered, m, lost), snapshot)

    def data_arrived(self, s: dict[str, Any], m: Any, ok: bool, lost: bool,
                     part: dict[str, TlaValue]) -> dict[str, Any]:
        me = s["cli"][m["c"]]
        waiting = me["st"] == "txn" and me["k"] == m["txn"][1] and not lost
        cli = s["cli"]
        if waiting:
            cli = _at(cli, m["c"], _with(me, sent=me["sent"] - {m["to"]},
                                         acked=me["acked"] | {m["to"]} if ok else me["acked"],
                                         bad=me["bad"] or not ok))
        return {**s, **part, "cli": cli}

    def marker_arrived(self, s: dict[str, Any], before: dict[str, Any], m: Any, status: str,
                       lost: bool, part: dict[str, TlaValue]) -> dict[str, Any]:
        t = m["c"][0]
        cs = s["coord"][t]
        verdict = {"OK": "APPLY", "DUP": "DUPLICATE", "FENCED": "COORDINATOR_FENCED",
                   "BAD_EPOCH": "INVALID_PRODUCER_EPOCH"}.get(status, status)
        st = before["ps"][m["to"]][m["pid"] - 1]
        fate = s["fate"]
        if verdict == "APPLY" and st["open"] != NO_TXN:
            fate = fate | {Record({"txn": st["open"], "q": m["to"], "result": m["result"]})}
        ackd, live = s["ackd"], s["live"]
        if (not lost and verdict in ("APPLY", "DUPLICATE") and m["ce"] == s["lease"][t]
                and cs["state"] in ("PrepareCommit", "PrepareAbort") and cs["pid"] == m["pid"]
                and cs["epoch"] == m["epoch"]):
            ackd = _at(ackd, t, ackd[t] | {m["to"]})
        if not lost and verdict == "COORDINATOR_FENCED" and m["ce"] != s["lease"][t]:
            live = _at(live, t, live[t] - {m["ce"]})
        return {**s, **part, "fate": fate, "ackd": ackd, "live": live}

    def end_arrived(self, s: dict[str, Any], m: Any, lost: bool) -> dict[str, Any]:
        client = m["c"]
        t = client[0]
        cs = s["coord"][t]
        step = rules.end_txn(self.coordinator.record(t, cs), m["pid"], m["epoch"],
                             m["result"] == COMMIT, tv2=True, now_ms=NOW)
        v, wanted = end_reply(step), end_verdict(cs, m)
        if v != wanted:
            self.problems.append(f"EndTxn {m} on {cs}: {v}, the spec's {wanted}")
        out = dict(s)
        if v == "PREPARE":
            assert step.record is not None
            out["coord"] = _at(s["coord"], t, self.coordinator.spec(step.record, cs["txn"]))
            out["decisions"] = s["decisions"] | {self.decision(cs, step)}
            out["grants"] = s["grants"] | {Record({"pid": step.producer_id,
                                                   "epoch": step.producer_epoch, "c": client})}
            out["ackd"] = _at(s["ackd"], t, frozenset())
        me = s["cli"][client]
        if me["st"] == "ending" and me["k"] == m["txn"][1] and not lost:
            if v in ("PREPARE", "NONE"):
                out["cli"] = _at(s["cli"], client, _with(
                    NEW_CLIENT, st="ready", pid=me["pid"], epoch=step.producer_epoch,
                    k=me["k"] + 1))
            elif v != "CONCURRENT_TRANSACTIONS":
                out["cli"] = _at(s["cli"], client, _restart(me))
        return out

    def coordinators(self, s: dict[str, Any], snapshot: Snapshot) -> Iterator[Successor]:
        for t in self.c.txn_ids:
            yield from self.timers(s, snapshot, t)
            yield from self.lease(s, snapshot, t)
            yield from self.decided(s, snapshot, t)

    def timers(self, s: dict[str, Any], snapshot: Snapshot, t: ModelValue) -> Iterator[Successor]:
        """TimeoutAbort and Expire by the rules; Tick."""
        c = self.c
        cs = s["coord"][t]
        record = self.coordinator.record(t, cs)
        step = rules.time_out(record, NOW)
        if step.record is not None:
            yield Successor("TimeoutAbort", {
                **s, "coord": _at(s["coord"], t, self.coordinator.spec(step.record, cs["txn"])),
                "decisions": s["decisions"] | {self.decision(cs, step)},
                "ackd": _at(s["ackd"], t, frozenset())}, snapshot)
        if c.expire_after > 0 and rules.expire(record, NOW, c.expire_after * TICK_MS).delete:
            yield Successor("Expire", {**s, "coord": _at(s["coord"], t, NO_RECORD)}, snapshot)
        if (cs["state"] == "Ongoing" and cs["age"] < c.timeout) or (
                cs["state"] in ("Empty", "CompleteCommit", "CompleteAbort")
                and cs["age"] < c.expire_after):
            yield Successor("Tick", {**s, "coord": _at(s["coord"], t,
                                                       _with(cs, age=cs["age"] + 1))}, snapshot)

    def lease(self, s: dict[str, Any], snapshot: Snapshot, t: ModelValue) -> Iterator[Successor]:
        """Takeover and Retire (korvet has no lease: its records are written by
        compare-and-set; the tokens are the markers' coordinator epochs)."""
        if s["lease"][t] < self.c.max_token:  # the lease moves to another broker
            yield Successor("Takeover", {
                **s, "lease": _at(s["lease"], t, s["lease"][t] + 1),
                "live": _at(s["live"], t, s["live"][t] | {s["lease"][t] + 1}),
                "ackd": _at(s["ackd"], t, frozenset())}, snapshot)
        for tok in sorted(s["live"][t]):
            if tok < s["lease"][t]:  # a former holder learns it lost the lease
                yield Successor("Retire", {**s, "live": _at(s["live"], t, s["live"][t] - {tok})},
                                snapshot)

    def decided(self, s: dict[str, Any], snapshot: Snapshot, t: ModelValue) -> Iterator[Successor]:
        """CompleteTxn by the rules; SendMarker with the decision's content."""
        c = self.c
        cs = s["coord"][t]
        record = self.coordinator.record(t, cs)
        if record is None or not record.state.ending:
            return
        decision = rules.decision_of(record)
        if cs["parts"] <= s["ackd"][t]:
            step = rules.complete(record, decision, NOW)
            if step.record is None:
                self.problems.append(f"no completion of {record} by {decision}")
            else:
                yield Successor("CompleteTxn", {
                    **s, "coord": _at(s["coord"], t, self.coordinator.spec(step.record, cs["txn"])),
                    "ackd": _at(s["ackd"], t, frozenset())}, snapshot)
        # the markers of the decision as written: its participants, producer id, epoch and
        # result (the coordinator epoch is the lease token here)
        result = COMMIT if decision.commit else ABORT
        to = ([c.partition] if (TOPIC, 0) in decision.partitions else []) + (
            [c.group] if GROUP_NAME in decision.groups else [])
        for tok in sorted(s["live"][t]):
            for q in to:
                if tok == s["lease"][t] and q in s["ackd"][t]:
                    continue
                m = _msg("marker", q, (t, "coordinator"), decision.producer_id,
                         decision.producer_epoch, tok, result, cs["txn"])
                if m not in s["net"]:
                    yield Successor("SendMarker", {**s, "net": s["net"] | {m}}, snapshot)


def _offset(entry_id: bytes | str) -> int:
    """A dense topic's offset of an entry id (offset o is the id o-1)."""
    return int(_bulk(entry_id).partition("-")[0])


def spec_lso(state: dict[str, Any], p: object) -> int:
    """The spec's LSO(p) of ``state``'s partVars."""
    firsts = [st["first"] for st in state["ps"][p] if st["first"] != -1]
    hw = len(state["log"][p])
    if not firsts:
        return hw
    return int(max(min(firsts), state["start"][p]))


CONSTANTS = {name: Constants.read(tlc.spec_dir() / tlc_runs.model(name).config)
             for name in CI_MODELS}
_graph = tlc_runs.passing_graph


def _replay(redis_url: str, graph: tlc.StateGraph, c: Constants,
            mutate: tuple[str, str, str] | None = None,
            machine: bool = False) -> WalkReport:
    """Walk the graph; a mutated script (``mutate``: the script, a rule, its broken form)
    or mutated rules (``machine``) stop at the first divergence."""
    texts = {"append": script_text("append.lua", mutate=_for(mutate, "append.lua")),
             "delete": script_text("delete_records.lua", mutate=_for(mutate, "delete_records.lua")),
             "offsets": script_text("txn_offsets.lua", mutate=_for(mutate, "txn_offsets.lua"))}
    store = ScriptRedis(redis_url, texts, KEYS, META, TOPIC_ID)
    # The epochs narrowed to the model's, as the scripts' widths are: Kafka's bound
    # (Short.MAX_VALUE) is the model's MaxEpoch, so an epoch is exhausted where the spec's is.
    epochs = rules.MAX_EPOCH
    rules.MAX_EPOCH = c.max_epoch
    try:
        replay = TxnReplay(c, store)
        return walk(graph, store, replay.initial, replay.successors,
                    max_divergences=1 if mutate or machine else 10, found=replay.problems)
    finally:
        rules.MAX_EPOCH = epochs
        store.close()


def _for(mutate: tuple[str, str, str] | None, script: str) -> tuple[str, str] | None:
    return (mutate[1], mutate[2]) if mutate and mutate[0] == script else None


@pytest.fixture(scope="module")
def walked(redis_url: str) -> Callable[[str], WalkReport]:
    """The walk of a model's whole graph, once per model and module."""
    return once_per_model(lambda name: _replay(redis_url, _graph(name), CONSTANTS[name]), _graph)


@pytest.mark.spec("Transactions", "Spec", "TxnIds", "Instances", "Partitions", "Group",
                  "MaxEpoch", "MaxPid", "MaxToken", "Timeout", "ExpireAfter", "MaxMoves",
                  "MaxLoss", "MaxDup", "MaxTrims", "coord", "nextPid", "lease", "live", "ackd",
                  "cli", "net", "log", "start", "ps", "aborted", "committed", "decisions",
                  "asked", "fate", "grants", "moves", "faults", "trims", "EndVerdict",
                  "MarkerVerdict", "DataAccepted", "LSO")
@pytest.mark.parametrize("name", CI_MODELS)
def test_every_transition_replays(walked: Callable[[str], WalkReport], name: str) -> None:
    graph = _graph(name)
    report = walked(name)
    assert not report.divergences, "the rules or the scripts diverge from Transactions:\n" + \
        "\n".join(report.divergences)
    assert report.states == graph.result.distinct == len(graph.states)
    assert report.transitions == sum(len(set(v)) for v in graph.edges.values())
    assert set(report.actions) == set(MODEL_ACTIONS[name])


@pytest.mark.parametrize(("model_name", "action"), [
    case for name in CI_MODELS
    for case in action_cases("Transactions", name, MODEL_ACTIONS[name], with_model=True,
                             aliases={"DeliverData": ["DataArrives", "ApplyData"],
                                      "DeliverEnd": ["EndTxnArrives"],
                                      "DeliverMarker": ["MarkerArrives", "ApplyMarker"],
                                      "Lose": ["LoseMsg"], "SendMarker": ["SendMarkerTo"],
                                      "Retire": ["RetireToken"]})])
def test_transition_replays(walked: Callable[[str], WalkReport], model_name: str,
                            action: str) -> None:
    """Every transition of one action of a model, replayed."""
    assert_action_replays(walked(model_name).tally, action)


def _undo_bump(rule: Callable[..., Step]) -> Callable[..., Step]:
    """``rule`` with the epoch bump of the record it writes taken back."""
    def broken(*args: Any, **kwargs: Any) -> Step:
        step = rule(*args, **kwargs)
        if step.record is None or step.record.state is not TxnState.PREPARE_ABORT:
            return step
        return dataclasses.replace(step, record=dataclasses.replace(
            step.record, producer_epoch=step.record.producer_epoch - 1))
    return broken


def _keep_parts(rule: Callable[..., Step]) -> Callable[..., Step]:
    """``complete`` that leaves the participants in the completed record."""
    def broken(record: TxnRecord | None, *args: Any) -> Step:
        step = rule(record, *args)
        if step.record is None or record is None:
            return step
        return dataclasses.replace(step, record=dataclasses.replace(
            step.record, partitions=record.partitions, groups=record.groups))
    return broken


def _pid_only(record: TxnRecord | None, producer_id: int, epoch: int) -> ErrorCode:
    """The add's producer check without the epoch (a zombie's add accepted)."""
    if record is None or record.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    return ErrorCode.NONE


# Each a plausible bug of the rules: (the model that shows it, the module attribute, its
# broken form).
MACHINE_MUTANTS: dict[str, tuple[str, str, Callable[[], object]]] = {
    # EndTxn decides at the transaction's epoch (transactions v1's shape under v2)
    "end-txn-without-bump": (REPLAY, "DECISION_BUMP", lambda: 0),
    # the timeout aborts without fencing the producer
    "timeout-without-bump": (REPLAY, "time_out", lambda: _undo_bump(rules.time_out)),
    # InitProducerId aborts the other instance's open transaction without fencing it
    "fence-without-bump": (REPLAY, "init_producer_id",
                           lambda: _undo_bump(rules.init_producer_id)),
    # the completion forgets to clear the participants
    "complete-keeps-parts": (REPLAY, "complete", lambda: _keep_parts(rules.complete)),
    # the add checks the producer id only
    "add-without-epoch-check": (REPLAY, "_check_producer", lambda: _pid_only),
}


@pytest.mark.spec("Transactions", "EndTxnArrives", "TimeoutAbort", "ClientInit", "CompleteTxn",
                  "ClientWrite")
@pytest.mark.parametrize("mutant", sorted(MACHINE_MUTANTS))
def test_a_broken_machine_rule_is_caught(redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                         mutant: str) -> None:
    model, name, broken = MACHINE_MUTANTS[mutant]
    monkeypatch.setattr(rules, name, broken())
    report = _replay(redis_url, _graph(model), CONSTANTS[model], machine=True)
    assert report.divergences, f"the rules with {mutant} still replay {model}"


@pytest.mark.spec("Transactions", "DataArrives", "MarkerArrives", "MarkerVerdict", "ApplyMarker",
                  "DataAccepted", "LSO", "DeleteRecords")
@pytest.mark.parametrize("model,script,rule,broken", [
    # an ABORT marker leaves the transaction out of the aborted index
    pytest.param(REPLAY, "append.lua", "if mark_result == 'ABORT' then", "if false then",
                 id="abort-not-indexed"),
    # the last stable offset stays where the ended transaction held it
    pytest.param(REPLAY, "append.lua", "\n    oldest_open()\n", "\n", id="lso-not-moved"),
    # a write older than the producer's epoch there (a marker raised it) appended
    pytest.param(REPLAY, "append.lua", "    if epoch < stored_epoch then", "    if false then",
                 id="stale-write-accepted"),
    # a marker at the producer's epoch applied again (before KIP-1228)
    pytest.param("Transactions", "append.lua",
                 "  if epoch == data_epoch and not (open and not mark_v2) then", "  if false then",
                 id="marker-epoch-not-above"),
    # the group's offsets of a write older than the last marker kept
    pytest.param(REPLAY, "txn_offsets.lua",
                 "  if epoch < last then\n    return 'BAD_EPOCH'\n  end\n  if pending",
                 "  if pending", id="group-stale-write-accepted"),
    # DeleteRecords trims the stream but leaves the log start where it was
    pytest.param(REPLAY, "delete_records.lua", "redis.call('HSET', KEYS[2], 'start', new_id)", "",
                 id="delete-records-start-not-moved"),
    # an aborted transaction whose marker is at the log start dropped from the index
    pytest.param(REPLAY, "append.lua", "'(' .. string.format('%d', start_ms)",
                 "string.format('%d', start_ms)", id="aborted-at-start-dropped"),
    # a former coordinator's marker, below the last marker's coordinator epoch, taken
    pytest.param(TAKEOVER, "append.lua", "  if mark_ce < tstate[2] then", "  if false then",
                 id="marker-not-fenced"),
    pytest.param(TAKEOVER, "txn_offsets.lua", "if ce < last_ce then", "if false then",
                 id="group-marker-not-fenced"),
    # the same marker again applied to the group
    pytest.param("Transactions", "txn_offsets.lua",
                 "if epoch == last and not (open and not v2) then", "if false then",
                 id="group-marker-applied-twice"),
])
def test_a_broken_script_rule_is_caught(redis_url: str, model: str, script: str, rule: str,
                                        broken: str) -> None:
    report = _replay(redis_url, _graph(model), CONSTANTS[model], mutate=(script, rule, broken))
    assert report.divergences, f"{script} with {broken!r} for {rule!r} still replays {model}"
