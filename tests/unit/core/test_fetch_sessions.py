"""Fetch sessions (KIP-227) under random clients: korvet/core/fetch_session.py.

``FetchSessionMachine`` (Hypothesis) runs several consumers against one broker's session
table of a few slots. Each consumer follows the protocol as Kafka's Java client does
(full request with epoch 0 to open a session; then only changed partitions and the
forgotten ones, with the epoch the broker expects; start over after a session error),
while the partitions' logs grow, get records deleted and topics vanish, time passes and
sessions are evicted. Some steps misbehave on purpose: a stale or made-up epoch, an
unknown session id, a request from the wrong Fetch version range, a lost response, two
requests racing on one session. After every exchange it checks what a client would
notice:

- the broker reads exactly the partitions, offsets and byte limits the client believes
  are in its session;
- the client's picture of every partition it follows (high watermark, log start, error)
  equals the truth, although incremental responses leave partitions out: nothing that
  changed is ever omitted, and a partition with records to read is always answered;
- errors are exactly Kafka's (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
  FETCH_SESSION_TOPIC_ID_ERROR), answered with session id 0 and no partitions, and leave
  the table as it was;
- the table never holds more sessions than its slots, ids are unique and non-zero.

The example tests below check the rules one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from korvet.core import fetch_session as fs
from korvet.core.errors import ErrorCode
from tests.support.examples import examples

KEYS: tuple[fs.PartitionKey, ...] = tuple((t, p) for t in ("a", "b") for p in range(2))
MAX_BYTES = 1000


@dataclass
class Log:
    start: int = 0
    end: int = 0  # high watermark
    gone: bool = False  # the topic was deleted


@dataclass
class Broker:
    """The adapter's part, minus the network: the table, the logs, the clock."""

    config: fs.SessionConfig
    sessions: dict[int, fs.Session] = field(default_factory=dict)
    logs: dict[fs.PartitionKey, Log] = field(default_factory=lambda: {k: Log() for k in KEYS})
    now: int = 0
    next_id: int = 1

    def read(self, plan: fs.FetchPlan) -> list[fs.PartitionResult]:
        results = []
        for p in plan.partitions:
            log = self.logs.setdefault(p.key, Log())
            if log.gone:
                results.append(fs.PartitionResult(p.key, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  -1, -1, False))
            elif not log.start <= p.fetch_offset <= log.end:
                results.append(fs.PartitionResult(p.key, ErrorCode.OFFSET_OUT_OF_RANGE,
                                                  log.end, log.start, False))
            else:
                results.append(fs.PartitionResult(p.key, ErrorCode.NONE, log.end, log.start,
                                                  p.fetch_offset < log.end))
        return results

    def plan(self, request: fs.FetchRequested) -> fs.FetchPlan:
        edit, plan = fs.on_request(self.sessions, request, self.now)
        fs.apply_edit(self.sessions, edit)
        return plan

    def answer(self, plan: fs.FetchPlan,
               results: Sequence[fs.PartitionResult]) -> fs.FetchAnswer:
        edit, answer = fs.on_response(self.sessions, self.config, plan, results, self.now,
                                      self.next_id)
        self.next_id += 1
        fs.apply_edit(self.sessions, edit)
        return answer

    def exchange(self, request: fs.FetchRequested
                 ) -> tuple[fs.FetchPlan, list[fs.PartitionResult], fs.FetchAnswer]:
        plan = self.plan(request)
        results = self.read(plan)
        return plan, results, self.answer(plan, results)


@dataclass
class Seen:
    high_watermark: int
    log_start: int
    error: ErrorCode


@dataclass
class Client:
    """A consumer that follows the protocol (Kafka's FetchSessionHandler, in spirit)."""

    uses_topic_ids: bool
    offsets: dict[fs.PartitionKey, int] = field(default_factory=dict)  # what it wants
    session_id: int = 0
    epoch: int = fs.INITIAL_EPOCH  # what it sends next
    sent: dict[fs.PartitionKey, int] = field(default_factory=dict)  # the session as it sees it
    seen: dict[fs.PartitionKey, Seen] = field(default_factory=dict)

    def request(self) -> fs.FetchRequested:
        if self.session_id == 0 or self.epoch == fs.INITIAL_EPOCH:
            return fs.FetchRequested(self.session_id, fs.INITIAL_EPOCH, self.uses_topic_ids,
                                     self.everything())
        changed = tuple(fs.PartitionRequest(k[0], k[1], o, MAX_BYTES)
                        for k, o in self.offsets.items() if self.sent.get(k) != o)
        forgotten = tuple(k for k in self.sent if k not in self.offsets)
        return fs.FetchRequested(self.session_id, self.epoch, self.uses_topic_ids, changed,
                                 forgotten)

    def everything(self) -> tuple[fs.PartitionRequest, ...]:
        return tuple(fs.PartitionRequest(k[0], k[1], o, MAX_BYTES) for k, o in self.offsets.items())

    def restart(self) -> None:
        """After a session error or a lost response: a full request that closes the old one."""
        self.epoch = fs.INITIAL_EPOCH
        self.sent = {}

    def receive(self, request: fs.FetchRequested, answer: fs.FetchAnswer,
                carried: Sequence[fs.PartitionResult]) -> None:
        if answer.error is not ErrorCode.NONE:
            if answer.error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = 0
            self.restart()
            return
        if request.epoch == fs.INITIAL_EPOCH:
            self.sent = {}
        self.sent.update({p.key: p.fetch_offset for p in request.partitions})
        for key in request.forgotten:
            self.sent.pop(key, None)
        if answer.session_id == 0:
            self.session_id, self.epoch, self.sent = 0, fs.INITIAL_EPOCH, {}
        else:
            self.session_id = answer.session_id
            self.epoch = fs.next_epoch(request.epoch if request.epoch > 0 else 0)
        for result in carried:
            self.seen[result.key] = Seen(result.high_watermark, result.log_start_offset,
                                         result.error)
            if result.has_records:
                self.offsets[result.key] = result.high_watermark  # consumed everything
            elif result.error is ErrorCode.OFFSET_OUT_OF_RANGE and result.key in self.offsets:
                self.offsets[result.key] = result.log_start_offset  # auto.offset.reset=earliest


keys = st.sampled_from(KEYS)


class FetchSessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.broker = Broker(fs.SessionConfig(slots=2, eviction_ms=100))
        self.clients: list[Client] = []

    @initialize(flags=st.lists(st.booleans(), min_size=1, max_size=4),
                slots=st.integers(min_value=1, max_value=3))
    def start(self, flags: list[bool], slots: int) -> None:
        self.broker.config = fs.SessionConfig(slots=slots, eviction_ms=100)
        for uses_ids in flags:
            client = Client(uses_ids)
            client.offsets = dict.fromkeys(KEYS, 0)
            self.clients.append(client)

    def _client(self, data: st.DataObject) -> Client:
        return data.draw(st.sampled_from(self.clients))

    # -- clients that follow the protocol ------------------------------------------------

    @rule(data=st.data())
    def fetch(self, data: st.DataObject) -> None:
        client = self._client(data)
        request = client.request()
        expected_reads = dict(client.sent) if request.epoch > 0 else {}
        expected_reads.update({p.key: p.fetch_offset for p in request.partitions})
        for key in request.forgotten:
            expected_reads.pop(key, None)
        session_before = self.broker.sessions.get(request.session_id)
        table_before = dict(self.broker.sessions)
        plan, results, answer = self.broker.exchange(request)
        event(f"fetch: {plan.context.value} {answer.error.name}")
        if answer.error is not ErrorCode.NONE:
            assert request.epoch > 0, "a full request never fails for session reasons"
            assert answer.session_id == 0 and answer.included == ()
            assert plan.partitions == ()
            assert self.broker.sessions == table_before, "an error changed the table"
            if session_before is None:
                assert answer.error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            else:
                assert answer.error is ErrorCode.INVALID_FETCH_SESSION_EPOCH
            client.receive(request, answer, ())
            return
        # The broker reads exactly what the client thinks its session holds.
        assert {p.key: p.fetch_offset for p in plan.partitions} == expected_reads
        assert all(p.max_bytes == MAX_BYTES for p in plan.partitions)
        carried = [r for r, keep in zip(results, answer.included, strict=True) if keep]
        for result in results:
            if result.has_records or result.error is not ErrorCode.NONE:
                assert result in carried, f"{result} left out of the response"
        if plan.context is not fs.Context.INCREMENTAL:
            assert carried == results, "a full or sessionless response carries everything"
        client.receive(request, answer, carried)
        self._client_sees_the_truth(client)

    def _client_sees_the_truth(self, client: Client) -> None:
        if client.session_id == 0:
            return
        for key in client.sent:
            log = self.broker.logs[key]
            seen = client.seen[key]
            if log.gone:
                assert seen.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            assert (seen.high_watermark, seen.log_start) == (log.end, log.start), (
                f"{key}: the client believes {seen}, the log is {log}")

    @rule(data=st.data(), key=keys, change=st.sampled_from(("follow", "drop", "seek")),
          where=st.sampled_from(("log start", "before it", "middle", "past the end")))
    def client_changes_its_mind(self, data: st.DataObject, key: fs.PartitionKey, change: str,
                                where: str) -> None:
        client = self._client(data)
        if change == "follow":
            client.offsets.setdefault(key, self.broker.logs[key].start)
        elif change == "drop":
            client.offsets.pop(key, None)
        elif key in client.offsets:
            log = self.broker.logs[key]
            client.offsets[key] = {"log start": log.start, "before it": max(0, log.start - 1),
                                   "middle": (log.start + log.end) // 2,
                                   "past the end": log.end + 1}[where]

    # -- the logs and the clock ----------------------------------------------------------

    @rule(key=keys, count=st.integers(min_value=1, max_value=4))
    def append(self, key: fs.PartitionKey, count: int) -> None:
        log = self.broker.logs[key]
        if not log.gone:
            log.end += count

    @rule(key=keys, by=st.integers(min_value=1, max_value=3))
    def delete_records(self, key: fs.PartitionKey, by: int) -> None:
        log = self.broker.logs[key]
        log.start = min(log.start + by, log.end)

    @rule(topic=st.sampled_from(("a", "b")), gone=st.booleans())
    def topic_deleted_or_recreated(self, topic: str, gone: bool) -> None:
        for key in KEYS:
            if key[0] == topic:
                self.broker.logs[key] = Log(gone=gone)

    @rule(ms=st.integers(min_value=1, max_value=150))
    def tick(self, ms: int) -> None:
        self.broker.now += ms

    # -- clients that do not ------------------------------------------------------------

    @rule(data=st.data(), kind=st.sampled_from(("wrong epoch", "unknown session",
                                                "other version range", "close", "lost response",
                                                "race")))
    def misbehave(self, data: st.DataObject, kind: str) -> None:
        in_session = [c for c in self.clients if c.session_id and c.epoch > 0]
        if kind == "unknown session":
            self._unknown_session(data.draw(st.integers(min_value=1, max_value=2**31 - 1)),
                                  data.draw(st.integers(min_value=1, max_value=2**31 - 1)))
        elif kind == "lost response":
            client = self._client(data)
            self.broker.exchange(client.request())
            client.restart()  # the connection dropped: the next request starts over
        elif in_session:
            client = data.draw(st.sampled_from(in_session))
            if kind == "wrong epoch":
                self._wrong_epoch(client, data.draw(st.sampled_from((-2, -1, 1, 2, 7))))
            elif kind == "other version range":
                self._other_version_range(client)
            elif kind == "close":
                self._close(client)
            else:
                self._race(client)

    def _wrong_epoch(self, client: Client, skew: int) -> None:
        session = self.broker.sessions.get(client.session_id)
        epoch = max(1, client.epoch + skew)
        if session is not None and epoch == session.epoch:
            return
        before = dict(self.broker.sessions)
        request = fs.FetchRequested(client.session_id, epoch, client.uses_topic_ids, ())
        _, _, answer = self.broker.exchange(request)
        expected = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND if session is None
                    else ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        assert (answer.error, answer.session_id, answer.included) == (expected, 0, ())
        assert self.broker.sessions == before

    def _unknown_session(self, session_id: int, epoch: int) -> None:
        if session_id in self.broker.sessions:
            return
        before = dict(self.broker.sessions)
        _, _, answer = self.broker.exchange(fs.FetchRequested(session_id, epoch, False, ()))
        assert answer.error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert self.broker.sessions == before

    def _other_version_range(self, client: Client) -> None:
        session = self.broker.sessions.get(client.session_id)
        if session is None or session.epoch != client.epoch:
            return
        before = dict(self.broker.sessions)
        request = fs.FetchRequested(client.session_id, client.epoch, not client.uses_topic_ids, ())
        _, _, answer = self.broker.exchange(request)
        assert answer.error is ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        assert self.broker.sessions == before
        client.receive(request, answer, ())

    def _close(self, client: Client) -> None:
        request = fs.FetchRequested(client.session_id, fs.FINAL_EPOCH, client.uses_topic_ids,
                                    client.everything())
        _, results, answer = self.broker.exchange(request)
        assert client.session_id not in self.broker.sessions
        assert answer.session_id == 0 and all(answer.included)
        assert len(answer.included) == len(results)
        client.session_id, client.epoch, client.sent = 0, fs.INITIAL_EPOCH, {}

    def _race(self, client: Client) -> None:
        session = self.broker.sessions.get(client.session_id)
        if session is None or session.epoch != client.epoch:
            return
        first = client.request()
        plan_first = self.broker.plan(first)
        if plan_first.context is not fs.Context.INCREMENTAL:
            client.restart()
            return
        second = fs.FetchRequested(client.session_id, fs.next_epoch(client.epoch),
                                   client.uses_topic_ids, ())
        plan_second = self.broker.plan(second)
        assert plan_second.context is fs.Context.INCREMENTAL
        late = self.broker.answer(plan_first, self.broker.read(plan_first))
        assert late.error is ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert late.included == ()
        self.broker.answer(plan_second, self.broker.read(plan_second))
        client.restart()

    # -- the table -------------------------------------------------------------------------

    @invariant()
    def table_is_bounded_and_keyed_by_id(self) -> None:
        sessions = self.broker.sessions
        assert len(sessions) <= self.broker.config.slots
        assert all(sid == s.session_id and sid != 0 for sid, s in sessions.items())
        assert all(s.epoch >= 1 for s in sessions.values())


FetchSessionMachine.TestCase.settings = settings(max_examples=examples(1.5),
                                                 stateful_step_count=50, deadline=None)
test_fetch_session_machine = FetchSessionMachine.TestCase


# -- the rules, example by example ---------------------------------------------------------

def _p(topic: str, partition: int, offset: int) -> fs.PartitionRequest:
    return fs.PartitionRequest(topic, partition, offset, MAX_BYTES)


def _broker(slots: int = 10, eviction_ms: int = 1000) -> Broker:
    return Broker(fs.SessionConfig(slots=slots, eviction_ms=eviction_ms))


def _open(broker: Broker, *parts: fs.PartitionRequest) -> int:
    _, _, answer = broker.exchange(fs.FetchRequested(0, 0, False, parts))
    assert answer.error is ErrorCode.NONE and answer.session_id
    return answer.session_id


def test_full_request_with_epoch_zero_opens_a_session_that_expects_epoch_one() -> None:
    broker = _broker()
    session_id = _open(broker, _p("a", 0, 0), _p("a", 1, 0))
    session = broker.sessions[session_id]
    assert session.epoch == 1 and list(session.partitions) == [("a", 0), ("a", 1)]


def test_epoch_minus_one_is_sessionless_and_closes_the_named_session() -> None:
    broker = _broker()
    session_id = _open(broker, _p("a", 0, 0))
    _, _, answer = broker.exchange(fs.FetchRequested(session_id, -1, False, (_p("a", 0, 0),)))
    assert answer.session_id == 0 and answer.included == (True,)
    assert broker.sessions == {}


def test_incremental_response_omits_unchanged_partitions_and_sends_changed_ones() -> None:
    broker = _broker()
    session_id = _open(broker, _p("a", 0, 0), _p("a", 1, 0), _p("b", 0, 0))
    broker.logs[("a", 1)].end = 3
    plan, _, answer = broker.exchange(fs.FetchRequested(session_id, 1, False, ()))
    assert [p.key for p in plan.partitions] == [("a", 0), ("a", 1), ("b", 0)]
    assert answer.included == (False, True, False)
    # a1 returned records: it moves to the end of the session's order.
    assert list(broker.sessions[session_id].partitions) == [("a", 0), ("b", 0), ("a", 1)]
    broker.logs[("b", 0)].start = broker.logs[("b", 0)].end = 0  # nothing changed
    _, _, answer = broker.exchange(fs.FetchRequested(session_id, 2, False, (_p("a", 1, 3),)))
    assert answer.included == (False, False, False)


def test_an_error_is_sent_every_time_and_the_partition_again_when_it_clears() -> None:
    broker = _broker()
    session_id = _open(broker, _p("a", 0, 0))
    broker.logs[("a", 0)].gone = True
    _, _, answer = broker.exchange(fs.FetchRequested(session_id, 1, False, ()))
    assert answer.included == (True,)
    _, _, answer = broker.exchange(fs.FetchRequested(session_id, 2, False, ()))
    assert answer.included == (True,)
    broker.logs[("a", 0)] = Log()
    _, results, answer = broker.exchange(fs.FetchRequested(session_id, 3, False, ()))
    assert results[0].error is ErrorCode.NONE and answer.included == (True,)


def test_a_full_request_naming_no_partition_opens_an_empty_session_as_kafka_does() -> None:
    """Seen by the differential mode: Kafka 4.3.1 answers a full Fetch (epoch 0) naming no
    partition with a new session id, and the next incremental request to it answers NONE. An
    incremental request that leaves the session empty closes it (sessionless answer)."""
    broker = _broker()
    _, _, answer = broker.exchange(fs.FetchRequested(0, 0, False, ()))
    session_id = answer.session_id
    assert session_id != fs.INVALID_SESSION_ID and broker.sessions[session_id].size == 0
    _, _, again = broker.exchange(fs.FetchRequested(session_id, 1, False, ()))
    assert again.error is ErrorCode.NONE and again.session_id == fs.INVALID_SESSION_ID
    assert not broker.sessions


def test_forgetting_every_partition_closes_the_session() -> None:
    broker = _broker()
    session_id = _open(broker, _p("a", 0, 0))
    _, _, answer = broker.exchange(fs.FetchRequested(session_id, 1, False, (), (("a", 0),)))
    assert answer.session_id == 0 and session_id not in broker.sessions


def test_added_then_forgotten_in_one_request_is_forgotten() -> None:
    broker = _broker()
    session_id = _open(broker, _p("a", 0, 0))
    plan, _, _ = broker.exchange(fs.FetchRequested(session_id, 1, False, (_p("b", 2, 0),),
                                                   (("b", 2),)))
    assert [p.key for p in plan.partitions] == [("a", 0)]


def test_epoch_wraps_from_the_largest_int32_to_one() -> None:
    assert fs.next_epoch(2**31 - 1) == 1
    assert fs.next_epoch(7) == 8
    assert fs.next_epoch(-1) == -1


def test_a_full_table_refuses_new_sessions_until_one_is_stale_or_smaller_and_old() -> None:
    broker = _broker(slots=1, eviction_ms=100)
    first = _open(broker, _p("a", 0, 0), _p("a", 1, 0))
    _, _, answer = broker.exchange(fs.FetchRequested(0, 0, False, (_p("b", 0, 0),) * 1))
    assert answer.session_id == 0, "a full table with a fresh session gives no session"
    broker.now += 101
    # older than eviction_ms but used just now: only a bigger session may evict it
    broker.exchange(fs.FetchRequested(first, 1, False, ()))
    _, _, answer = broker.exchange(fs.FetchRequested(0, 0, False, (_p("b", 0, 0), _p("b", 1, 0))))
    assert answer.session_id == 0, "a tie in size keeps the old session"
    _, _, answer = broker.exchange(fs.FetchRequested(
        0, 0, False, (_p("b", 0, 0), _p("b", 1, 0), _p("b", 2, 0))))
    assert answer.session_id not in (0, first) and list(broker.sessions) == [answer.session_id]
    broker.now += 500  # unused for longer than eviction_ms: anyone may take the slot
    _, _, answer = broker.exchange(fs.FetchRequested(0, 0, False, (_p("a", 2, 0),)))
    assert answer.session_id != 0 and len(broker.sessions) == 1


def test_topic_ids_and_names_do_not_mix_in_one_session() -> None:
    broker = _broker()
    _, _, answer = broker.exchange(fs.FetchRequested(0, 0, True, (_p("a", 0, 0),)))
    _, _, wrong = broker.exchange(fs.FetchRequested(answer.session_id, 1, False, ()))
    assert wrong.error is ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR and wrong.session_id == 0


def test_a_partition_named_twice_is_read_once_with_the_last_offset() -> None:
    broker = _broker()
    plan, _, answer = broker.exchange(fs.FetchRequested(0, -1, False, (_p("a", 0, 1), _p("a", 0, 2))))
    assert [(p.key, p.fetch_offset) for p in plan.partitions] == [(("a", 0), 2)]
    assert answer.included == (True,)
