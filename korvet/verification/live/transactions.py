"""Transactions live: generated sequences of transactional requests (transactions v2, as
Kafka 4.3.1's clients send them) checked against a model of Kafka's rules written here,
independent of ``korvet.core.transactions`` (the code it judges).

Three client slots: 0 and 1 share one transactional id (1 starting fences 0), 2 has its
own. A topic of two partitions and one group. Each sequence's ids, topic and group are new.
``TxnModel`` predicts every answer:

- InitProducerId: a new id gets a new producer id (unlike every other's) at epoch 0; an idle
  one the next epoch; an open transaction is fenced: the first answer is
  CONCURRENT_TRANSACTIONS, the coordinator aborts it (its epoch bumped, abort markers
  written) and the retry gets the epoch after that (+2);
- Produce v12 of a transactional batch: the current producer's batch is appended at the
  high watermark (offsets are dense) and its partition joins the transaction, which opens
  if it was idle; a fenced producer's batch is refused (INVALID_PRODUCER_EPOCH) and nothing
  is written;
- TxnOffsetCommit v5: the current producer's offset is pending in the transaction; a fenced
  producer is told INVALID_PRODUCER_EPOCH (Kafka adds the group through the verification a
  Produce v12 goes through, which answers PRODUCER_FENCED so);
- EndTxn v5: an open transaction is decided and the epoch bumped (the reply carries it);
  commit of nothing open: INVALID_TXN_STATE; abort of nothing open: allowed, epoch bumped
  (KAFKA-18401); the previous EndTxn again with the epoch before its bump (its reply lost):
  the same result is answered with the current epoch, the other one INVALID_TXN_STATE;
  anything older: PRODUCER_FENCED;
- after each decision the markers take one offset in each partition of the transaction
  (the run waits, at most 15 s, until ListOffsets shows them: Kafka writes them after it
  answers), committed offsets become visible, aborted ones never;
- read_committed Fetch returns nothing at or past the last stable offset (the first offset
  of the earliest open transaction, else the high watermark), lists every aborted
  transaction it overlaps, and what a client keeps after dropping those is exactly the
  committed records; read_uncommitted returns every data record and lists none;
- ListOffsets LATEST: the LSO read_committed, the high watermark read_uncommitted;
- OffsetFetch with RequireStable: UNSTABLE_OFFSET_COMMIT while a transaction holds a
  pending offset for the partition, else the committed offset (-1: none).

Retriable answers (CONCURRENT_TRANSACTIONS, coordinator moves or loads) are retried for up to
10 s, as clients retry, and counted; the answer after them is compared.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.ops import LATEST
from korvet.conformance.kafka.records import Rec, build_batch, decode_records
from korvet.conformance.kafka.wire import WireClient, WireError
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.verification.live import actions as act
from korvet.verification.live.env import (
    Divergence,
    Environment,
    LiveError,
    ModelChecks,
    create_topic,
    error_label,
)
from korvet.verification.live.oracle import Flavour

SLOTS = 3
PARTITIONS = 2
TIMEOUT_MS = 120_000  # no transaction times out during a run
SETTLE_S = 15.0  # how long markers and offsets may take to land after a decision
RETRY_S = 10.0
RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
# A Produce the partition leader could not add to the transaction yet (its coordinator
# answered CONCURRENT_TRANSACTIONS): Kafka answers NOT_ENOUGH_REPLICAS to older clients
PRODUCE_RETRIABLE = RETRIABLE | {ErrorCode.NOT_ENOUGH_REPLICAS}
VERSIONS: dict[int, int] = {ApiKey.INIT_PRODUCER_ID: 5, ApiKey.PRODUCE: 12, ApiKey.TXN_OFFSET_COMMIT: 5,
            ApiKey.END_TXN: 5, ApiKey.FETCH: 12, ApiKey.LIST_OFFSETS: 7, ApiKey.OFFSET_FETCH: 7}
EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT = "Empty", "Ongoing", "CompleteCommit", \
    "CompleteAbort"



# --- the model ----------------------------------------------------------------------------

@dataclass
class Txn:
    """The coordinator's record of one transactional id, as Kafka's rules move it."""

    pid: int
    epoch: int
    state: str = EMPTY
    parts: set[int] = field(default_factory=set)
    group: bool = False
    ended_by: int | None = None  # the epoch an EndTxn decided at (its retry is answered)


@dataclass
class Client:
    """A producer as its client knows itself."""

    tid: int
    pid: int = -1
    epoch: int = -1
    seq: dict[int, int] = field(default_factory=dict)
    last_end: tuple[int, bool] | None = None  # (epoch sent, commit) of its last EndTxn


@dataclass
class Entry:
    offset: int
    value: bytes | None  # None: a marker
    pid: int
    status: str  # "open" | "committed" | "aborted" (data); "marker"


@dataclass
class Part:
    hw: int = 0
    log: list[Entry] = field(default_factory=list)
    open_first: dict[int, int] = field(default_factory=dict)  # tid -> first offset
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # pid, first, marker

    def lso(self) -> int:
        return min(self.open_first.values(), default=self.hw)


class TxnModel:
    def __init__(self) -> None:
        self.txns: dict[int, Txn] = {}
        self.parts = [Part() for _ in range(PARTITIONS)]
        self.committed_offset = -1
        self.pending: dict[int, int] = {}  # tid -> offset pending in its open transaction
        self.pids: dict[int, int] = {}  # pid -> tid

    def current(self, client: Client) -> bool:
        txn = self.txns.get(client.tid)
        return txn is not None and (client.pid, client.epoch) == (txn.pid, txn.epoch)

    def decide(self, tid: int, commit: bool) -> set[int]:
        """The open transaction of ``tid`` decided: markers, offsets; the partitions it had."""
        txn = self.txns[tid]
        for index in txn.parts:
            part = self.parts[index]
            first = part.open_first.pop(tid)
            for entry in part.log:
                if entry.pid == txn.pid and entry.status == "open":
                    entry.status = "committed" if commit else "aborted"
            part.log.append(Entry(part.hw, None, txn.pid, "marker"))
            if not commit:
                part.aborted.append((txn.pid, first, part.hw))
            part.hw += 1
        if tid in self.pending:
            offset = self.pending.pop(tid)
            if commit:
                self.committed_offset = offset
        decided = set(txn.parts)
        txn.parts, txn.group = set(), False
        txn.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        return decided


# --- the run ------------------------------------------------------------------------------

class TxnRun(ModelChecks):
    def __init__(self, env: Environment) -> None:
        self.env = env
        missing = [ApiKey(api).name for api, version in VERSIONS.items()
                   if api not in env.versions or env.versions[api][1] < version]
        if missing:
            raise LiveError("the transactions part needs transactions v2 (Produce v12, "
                            "TxnOffsetCommit v5, EndTxn v5 and InitProducerId v5): the broker "
                            f"does not serve {', '.join(missing)}")
        tag = uuid.uuid4().hex[:10]
        self.topic, self.group = f"live-t-{tag}", f"live-t-{tag}"
        self.ids = (f"live-t-{tag}-a", f"live-t-{tag}-b")
        korvet = env.flavour is Flavour.KORVET
        create_topic(env.host, env.port, env.versions, self.topic, PARTITIONS,
                     {"korvet.offset.scheme": "dense"} if korvet else {})
        self.conn = WireClient(env.host, env.port, client_id="live-transactions",
                               timeout=env.reply_timeout)
        self.model = TxnModel()
        self.clients = [Client(0), Client(0), Client(1)]
        self.counter = 0
        self.done: list[act.Action] = []
        self._await_leaders()
        for transactional_id in self.ids:
            self._find_coordinator(transactional_id)
        env.stats.sequences += 1

    def close(self) -> None:
        self.conn.close()

    def _find_coordinator(self, transactional_id: str, timeout: float = 60.0) -> None:
        """FindCoordinator for the transactional id, as a client asks before InitProducerId
        (a fresh Kafka makes its transaction state topic on the first such request and
        answers NOT_COORDINATOR to an InitProducerId until then): retried while the
        coordinator is not available; it must be this broker."""
        version = min(self.env.versions[ApiKey.FIND_COORDINATOR][1], 3)
        deadline = time.monotonic() + timeout
        while True:
            entry = self.conn.call(build_request(ApiKey.FIND_COORDINATOR, version,
                                                 key=transactional_id, key_type=1),
                                   self.env.reply_timeout)
            self.env.stats.requests += 1
            code = int(entry.error_code)
            if code == ErrorCode.NONE:
                if int(entry.port) != self.env.port:
                    raise LiveError(f"the coordinator of {transactional_id} is another broker "
                                    f"({entry.host}:{entry.port}): the run needs one broker")
                return
            if code not in RETRIABLE or time.monotonic() > deadline:
                raise LiveError(f"FindCoordinator of {transactional_id}: {error_label(code)}")
            time.sleep(0.2)

    # -- calls ---------------------------------------------------------------------------

    def _call(self, api: int, **fields: Any) -> Any:
        try:
            response = self.conn.call(build_request(api, VERSIONS[api], **fields),
                                      self.env.reply_timeout)
        except WireError as exc:
            raise Divergence(f"{ApiKey(api).name}: {exc}") from exc
        self.env.stats.requests += 1
        return response

    def _retrying(self, call: Callable[[], Any], code: Callable[[Any], int],
                  retriable: frozenset[int]) -> tuple[Any, list[int]]:
        """A call retried while its answer is retriable; (last answer, codes retried)."""
        deadline = time.monotonic() + RETRY_S
        retried: list[int] = []
        while True:
            response = call()
            error = code(response)
            if error not in retriable or time.monotonic() > deadline:
                return response, retried
            retried.append(error)
            self.env.stats.note_error(f"{error_label(error)} (retried)")
            time.sleep(0.05)

    def perform(self, action: act.Action) -> bool:
        match action:
            case act.TxnInit():
                self._init(action.slot % SLOTS)
            case act.TxnProduce():
                if not self._produce(action):
                    return False
            case act.TxnOffsets():
                if not self._offsets(action):
                    return False
            case act.TxnEnd():
                if not self._end(action):
                    return False
            case act.TxnRead():
                self._read(action.partition % PARTITIONS, action.committed)
            case act.TxnLatest():
                self._latest(action.partition % PARTITIONS, action.committed)
            case act.TxnFetchOffsets():
                self._fetch_offsets()
            case _:
                return False
        self.done.append(action)
        self.env.stats.steps += 1
        return True

    def _skip(self) -> bool:
        self.env.stats.skipped += 1
        return False

    # -- the coordinator -----------------------------------------------------------------

    def _init(self, slot: int) -> None:
        client = self.clients[slot]
        model = self.model
        txn = model.txns.get(client.tid)
        response, retried = self._retrying(
            lambda: self._call(ApiKey.INIT_PRODUCER_ID, transactional_id=self.ids[client.tid],
                               transaction_timeout=TIMEOUT_MS, producer_id=-1,
                               producer_epoch=-1),
            lambda r: int(r.error_code), RETRIABLE)
        what = f"InitProducerId of slot {slot} (id {client.tid}"
        error, pid, epoch = int(response.error_code), int(response.producer_id), \
            int(response.producer_epoch)
        self._check(what + "): error", error_label(error), "NONE")
        fenced: set[int] | None = None  # the partitions of a transaction this fenced
        if txn is None:
            if pid in model.pids or pid < 0:
                raise Divergence(f"{what}, new): producer id {pid}, already another id's or "
                                 "invalid")
            self._check(what + ", new): epoch", epoch, 0)
            txn = model.txns[client.tid] = Txn(pid, 0)
            model.pids[pid] = client.tid
        elif txn.state == ONGOING:
            # fenced: the first answer is CONCURRENT_TRANSACTIONS, the transaction aborted at
            # the bumped epoch, the retry bumps again
            self._check(what + ", open transaction): first answer",
                        error_label(retried[0]) if retried else "NONE",
                        "CONCURRENT_TRANSACTIONS")
            self.env.stats.note_rule("open transaction fenced by InitProducerId")
            self._check(what + ", open transaction): producer id and epoch", (pid, epoch),
                        (txn.pid, txn.epoch + 2))
            fenced = model.decide(client.tid, commit=False)
            txn.epoch += 2
        else:
            self._check(what + f", {txn.state}): producer id and epoch", (pid, epoch),
                        (txn.pid, txn.epoch + 1))
            txn.epoch += 1
        txn.state, txn.parts, txn.group, txn.ended_by = EMPTY, set(), False, None
        client.pid, client.epoch, client.seq, client.last_end = pid, epoch, {}, None
        if fenced is not None:  # its markers (and the group's) land after the answer
            self._settle(fenced, what + ")")

    def _end(self, a: act.TxnEnd) -> bool:
        slot = a.slot % SLOTS
        client = self.clients[slot]
        if client.pid < 0 or (a.again and client.last_end is None):
            return self._skip()
        model = self.model
        txn = model.txns[client.tid]
        epoch = client.last_end[0] if a.again and client.last_end else client.epoch
        response, _ = self._retrying(
            lambda: self._call(ApiKey.END_TXN, transactional_id=self.ids[client.tid],
                               producer_id=client.pid, producer_epoch=epoch,
                               committed=a.commit),
            lambda r: int(r.error_code), RETRIABLE)
        result = "commit" if a.commit else "abort"
        what = (f"EndTxn {result} of slot {slot} at epoch {epoch}{' again' if a.again else ''} "
                f"({txn.state} at epoch {txn.epoch})")
        got = (error_label(int(response.error_code)), int(response.producer_id),
               int(response.producer_epoch))
        decided: set[int] = set()
        if epoch == txn.epoch and txn.pid == client.pid:
            if txn.state == ONGOING or not a.commit:
                self._check(what, got, ("NONE", txn.pid, txn.epoch + 1))
                if txn.state == ONGOING:
                    decided = model.decide(client.tid, a.commit)
                else:
                    self.env.stats.note_rule("abort with nothing open")
                    txn.state = COMPLETE_ABORT
                txn.ended_by = txn.epoch
                txn.epoch += 1
                client.last_end = (epoch, a.commit)
                client.epoch, client.seq = txn.epoch, {}
            else:
                self._check(what + ": error", got[0], "INVALID_TXN_STATE")
        elif (epoch + 1 == txn.epoch and txn.ended_by == epoch
              and txn.state in (COMPLETE_COMMIT, COMPLETE_ABORT)):
            same = (txn.state == COMPLETE_COMMIT) == a.commit
            self.env.stats.note_rule("EndTxn retried after its decision")
            if same:
                self._check(what, got, ("NONE", txn.pid, txn.epoch))
            else:
                self._check(what + ": error", got[0], "INVALID_TXN_STATE")
        else:
            self._check(what + ": error", got[0], "PRODUCER_FENCED")
        self._settle(decided, what)
        return True

    def _settle(self, partitions: set[int], what: str) -> None:
        """Wait until the markers of a decision are in its partitions and no offset of the
        group is left unstable that the model says is stable."""
        deadline = time.monotonic() + SETTLE_S
        stable_group = not self.model.pending
        while True:
            seen = {p: (self._list(p, committed=False), self._list(p, committed=True))
                    for p in partitions}
            wanted = {p: (self.model.parts[p].hw, self.model.parts[p].lso()) for p in partitions}
            group_ok = not stable_group or self._offset_fetch()[0] != "UNSTABLE_OFFSET_COMMIT"
            if seen == wanted and group_ok:
                return
            if time.monotonic() > deadline:
                raise Divergence(
                    f"{what}: {SETTLE_S:.0f} s later the partitions' (high watermark, LSO) are "
                    f"{seen}, the model says {wanted}"
                    + ("" if group_ok else "; the group's offset is still unstable"))
            time.sleep(0.05)

    # -- producers -----------------------------------------------------------------------

    def _produce(self, a: act.TxnProduce) -> bool:
        slot, partition = a.slot % SLOTS, a.partition % PARTITIONS
        client = self.clients[slot]
        if client.pid < 0:
            return self._skip()
        model = self.model
        part = model.parts[partition]
        values = []
        for _ in range(max(1, a.records)):
            self.counter += 1
            values.append(f"v{self.counter}".encode())
        sequence = client.seq.get(partition, 0)
        records = build_batch([Rec(v) for v in values], producer_id=client.pid,
                              producer_epoch=client.epoch, base_sequence=sequence,
                              transactional=True)

        def send() -> Any:
            return self._call(ApiKey.PRODUCE, transactional_id=self.ids[client.tid], acks=-1,
                              timeout=30_000, topic_data=[{"name": self.topic, "partition_data": [
                                  {"index": partition, "records": records}]}])

        response, _ = self._retrying(
            send, lambda r: int(r.responses[0].partition_responses[0].error_code),
            PRODUCE_RETRIABLE)
        answer = response.responses[0].partition_responses[0]
        error, base = error_label(int(answer.error_code)), int(answer.base_offset)
        what = f"Produce of {len(values)} records by slot {slot} to partition {partition}"
        if not model.current(client):
            self._check(what + " (fenced): error", error, "INVALID_PRODUCER_EPOCH")
            return True
        self._check(what + ": error and base offset", (error, base), ("NONE", part.hw))
        txn = model.txns[client.tid]
        txn.state = ONGOING
        txn.parts.add(partition)
        part.open_first.setdefault(client.tid, part.hw)
        for value in values:
            part.log.append(Entry(part.hw, value, client.pid, "open"))
            part.hw += 1
        client.seq[partition] = sequence + len(values)
        return True

    def _offsets(self, a: act.TxnOffsets) -> bool:
        slot = a.slot % SLOTS
        client = self.clients[slot]
        if client.pid < 0:
            return self._skip()
        response, _ = self._retrying(
            lambda: self._call(
                ApiKey.TXN_OFFSET_COMMIT, transactional_id=self.ids[client.tid],
                group_id=self.group, producer_id=client.pid, producer_epoch=client.epoch,
                generation_id=-1, member_id="", group_instance_id=None, topics=[{
                    "name": self.topic, "partitions": [{
                        "partition_index": 0, "committed_offset": a.offset,
                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]),
            lambda r: int(r.topics[0].partitions[0].error_code), RETRIABLE)
        error = error_label(int(response.topics[0].partitions[0].error_code))
        what = f"TxnOffsetCommit of {a.offset} by slot {slot}"
        model = self.model
        if not model.current(client):
            self._check(what + " (fenced): error", error, "INVALID_PRODUCER_EPOCH")
            return True
        self._check(what + ": error", error, "NONE")
        txn = model.txns[client.tid]
        txn.state, txn.group = ONGOING, True
        model.pending[client.tid] = a.offset
        return True

    # -- readers -------------------------------------------------------------------------

    def _await_leaders(self, timeout: float = 30.0) -> None:
        """A topic just created has no leader in Kafka's metadata cache for a moment; only
        here, before the run, is that waited out."""
        deadline = time.monotonic() + timeout
        for partition in range(PARTITIONS):
            while True:
                response = self._list_response(partition, committed=False)
                code = int(response.topics[0].partitions[0].error_code)
                if code == ErrorCode.NONE:
                    break
                if time.monotonic() > deadline:
                    raise LiveError(f"{self.topic}/{partition}: ListOffsets answers "
                                    f"{error_label(code)} after {timeout:.0f} s")
                time.sleep(0.1)

    def _list_response(self, partition: int, *, committed: bool) -> Any:
        return self._call(ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=int(committed),
                          timeout=30_000, topics=[{"name": self.topic, "partitions": [{
                              "partition_index": partition, "timestamp": LATEST,
                              "current_leader_epoch": -1, "max_num_offsets": 1}]}])

    def _list(self, partition: int, *, committed: bool) -> int:
        answer = self._list_response(partition, committed=committed).topics[0].partitions[0]
        if int(answer.error_code) != ErrorCode.NONE:
            raise Divergence(f"ListOffsets LATEST of partition {partition}: "
                             f"{error_label(int(answer.error_code))}")
        return int(answer.offset)

    def _latest(self, partition: int, committed: bool) -> None:
        part = self.model.parts[partition]
        self._check(f"ListOffsets LATEST of partition {partition} "
                    f"{'read_committed' if committed else 'read_uncommitted'}",
                    self._list(partition, committed=committed),
                    part.lso() if committed else part.hw)

    def _read(self, partition: int, committed: bool) -> None:
        response = self._call(
            ApiKey.FETCH, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20,
            isolation_level=int(committed), session_id=0, session_epoch=-1,
            forgotten_topics_data=[], rack_id="", topics=[{"topic": self.topic, "partitions": [{
                "partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                "current_leader_epoch": -1, "log_start_offset": -1,
                "last_fetched_epoch": -1}]}])
        answer = response.responses[0].partitions[0]
        part = self.model.parts[partition]
        what = f"Fetch of partition {partition} from 0 " \
               f"{'read_committed' if committed else 'read_uncommitted'}"
        self._check(what + ": error, high watermark, LSO",
                    (error_label(int(answer.error_code)), int(answer.high_watermark),
                     int(answer.last_stable_offset)), ("NONE", part.hw, part.lso()))
        batches, fetched, _ = decode_records(answer.records)
        listed = sorted((int(a.producer_id), int(a.first_offset))
                        for a in (answer.aborted_transactions or ()))
        if not committed:
            self._check(what + ": aborted transactions", listed, [])
            self._check(what + ": values", [(r.offset, r.value) for r in fetched],
                        [(e.offset, e.value) for e in part.log if e.value is not None])
            return
        lso = part.lso()
        self._check(what + ": aborted transactions", listed,
                    sorted((pid, first) for pid, first, _ in part.aborted if first < lso))
        beyond = [r.offset for r in fetched if r.offset >= lso]
        if beyond:
            raise Divergence(f"{what}: records at {beyond}, at or past the LSO {lso}")
        kept = [(r.offset, r.value) for r in fetched
                if not _dropped(r.offset, batches, listed)]
        self._check(what + ": the values a client keeps", kept,
                    [(e.offset, e.value) for e in part.log
                     if e.status == "committed" and e.offset < lso])

    def _offset_fetch(self) -> tuple[str, int]:
        response = self._call(ApiKey.OFFSET_FETCH, group_id=self.group, require_stable=True,
                              topics=[{"name": self.topic, "partition_indexes": [0]}])
        if int(response.error_code) != ErrorCode.NONE:
            return error_label(int(response.error_code)), -1
        answer = response.topics[0].partitions[0]
        return error_label(int(answer.error_code)), int(answer.committed_offset)

    def _fetch_offsets(self) -> None:
        expected = ("UNSTABLE_OFFSET_COMMIT", -1) if self.model.pending else \
            ("NONE", self.model.committed_offset)
        self._check("OffsetFetch (RequireStable) of partition 0", self._offset_fetch(), expected)


def _dropped(offset: int, batches: Sequence[Any], aborted: Sequence[tuple[int, int]]) -> bool:
    """What a read_committed client drops: a record of a producer listed as aborted from a
    first offset up to that producer's next control batch."""
    batch = next((b for b in batches if not b.control and b.base_offset <= offset
                  <= b.last_offset), None)
    if batch is None:
        return False
    for pid, first in aborted:
        if pid != batch.producer_id or offset < first:
            continue
        marker = next((b.base_offset for b in batches if b.control and b.producer_id == pid
                       and b.base_offset >= first), None)
        if marker is None or offset < marker:
            return True
    return False


# --- the Hypothesis machine ------------------------------------------------------------------

def transaction_machine(env: Environment, recorder: Any) -> type[Any]:  # noqa: C901 -- one flat method per Hypothesis rule
    from hypothesis import strategies as st
    from hypothesis.stateful import rule

    from korvet.verification.live.machine import part_machine

    slots = st.sampled_from([0, 0, 0, 2, 2, 1])
    partitions = st.integers(0, PARTITIONS - 1)

    class LiveTransactions(part_machine(env, recorder, "transactions", TxnRun)):  # type: ignore[misc]
        def begin(self) -> None:
            for slot in (0, 2):
                self.do(act.TxnInit(slot))

        @rule(slot=st.sampled_from([0, 2, 1, 1]))
        def init(self, slot: int) -> None:
            self.do(act.TxnInit(slot))

        @rule(slot=slots, partition=partitions, records=st.integers(1, 3))
        def produce(self, **kw: Any) -> None:
            self.do(act.TxnProduce(**kw))

        @rule(slot=slots, offset=st.integers(0, 50))
        def offsets(self, **kw: Any) -> None:
            self.do(act.TxnOffsets(**kw))

        @rule(slot=slots, commit=st.booleans(), again=st.sampled_from([False, False, True]))
        def end(self, **kw: Any) -> None:
            self.do(act.TxnEnd(**kw))

        @rule(slot=slots, to=st.sampled_from([(0,), (1,), (0, 1)]), offset=st.none()
              | st.integers(0, 50), commit=st.booleans(), again=st.none() | st.booleans())
        def transaction(self, slot: int, to: tuple[int, ...], offset: int | None, commit: bool,
                        again: bool | None) -> None:
            """A whole transaction as a client makes one: batches, perhaps offsets, the
            decision, perhaps that EndTxn again (its reply lost) asking for a result."""
            for partition in to:
                self.do(act.TxnProduce(slot, partition))
            if offset is not None:
                self.do(act.TxnOffsets(slot, offset))
            self.do(act.TxnEnd(slot, commit))
            if again is not None:
                self.do(act.TxnEnd(slot, again, again=True))

        @rule(partition=partitions, committed=st.sampled_from([True, True, False]))
        def read(self, **kw: Any) -> None:
            self.do(act.TxnRead(**kw))

        @rule(partition=partitions, committed=st.booleans())
        def latest(self, **kw: Any) -> None:
            self.do(act.TxnLatest(**kw))

        @rule()
        def fetch_offsets(self) -> None:
            self.do(act.TxnFetchOffsets())

    return LiveTransactions


def run_transactions(env: Environment, *, examples: int = 25, steps: int = 30,
                     seed: int | None = None, database: Any = None,
                     shrink_seconds: float = 60.0) -> None:
    from korvet.verification.live.machine import run_part

    run_part(env, transaction_machine, replay_transactions, part="transactions",
             examples=examples, steps=steps, seed=seed, database=database,
             shrink_seconds=shrink_seconds)


def replay_transactions(env: Environment, script: act.Script) -> TxnRun:
    from korvet.verification.live.machine import play

    return play(TxnRun(env), script)
