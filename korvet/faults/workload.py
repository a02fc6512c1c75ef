"""The clients of a fault run and what they record: producers with acks=all and a consumer group.

Every producer and every group member is a librdkafka client (confluent-kafka) in a thread
of its own, writing the events of ``korvet.faults.history`` as it sees them: a producer its
attempts and their delivery reports, a member its assignments (with the group generation
librdkafka holds), every record it read and every commit the coordinator accepted. At the
end ``read_back`` reads every partition from its first offset to its high watermark with a
fresh reader, and the group's committed offsets, for the checker's last word.

Members read one record per ``poll`` so that an assignment is recorded exactly where it
happened between two reads, commit what they read every ``commit_interval`` seconds and,
when a rebalance takes partitions away, first commit what they read of them (the usual
eager-rebalance pattern); they never commit a partition they no longer own.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from korvet.faults.history import (
    Acked,
    Assigned,
    Committed,
    CommittedRead,
    Consumed,
    Event,
    Rec,
    SendFailed,
    Sent,
    Stored,
)

VALUE = b"v" * 100
_CGMD_MAGIC = b"CGMDv2:"


class Recorder:
    """The run's history, appended to from every client thread."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def add(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    @staticmethod
    def now() -> float:
        return time.monotonic()


def group_generation(consumer: Any) -> int:
    """The generation librdkafka holds for its group, from the group metadata it serialises
    for transactional producers: the magic, then the generation as a native int32; -1 when
    the format is not the one known here."""
    blob = bytes(consumer.consumer_group_metadata())
    if not blob.startswith(_CGMD_MAGIC) or len(blob) < len(_CGMD_MAGIC) + 4:
        return -1
    raw = blob[len(_CGMD_MAGIC):len(_CGMD_MAGIC) + 4]
    return int.from_bytes(raw, sys.byteorder, signed=True)


def client_logger(path: Path) -> logging.Logger:
    """The logger librdkafka's log of a run's producers goes to (one file per run)."""
    logger = logging.getLogger("korvet.faults.clients")
    if not logger.handlers:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return logger


@dataclass
class Workload:
    bootstrap: str
    topic: str
    group: str
    partitions: int
    recorder: Recorder
    producers: tuple[bool, ...] = (True, True, False)  # idempotent or not, one entry each
    members: int = 3
    rate: float = 100.0  # records per second per producer
    commit_interval: float = 0.5
    session_timeout_ms: int = 10_000
    client_log: Path | None = None  # librdkafka's log of the producers (with its `eos` debug)
    stop_producing: threading.Event = field(default_factory=threading.Event)
    stop_consuming: threading.Event = field(default_factory=threading.Event)
    progress: dict[int, int] = field(default_factory=dict)  # partition -> next offset read
    errors: list[str] = field(default_factory=list)  # client threads that died
    notes: list[str] = field(default_factory=list)  # what a client had to work around
    _producers: list[threading.Thread] = field(default_factory=list)
    _members: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for number, idempotent in enumerate(self.producers):
            name = f"{'idem' if idempotent else 'plain'}{number}"
            self._producers.append(self._spawn(name, functools.partial(self._produce, name,
                                                                       idempotent)))
        for number in range(self.members):
            name = f"member{number}"
            self._members.append(self._spawn(name, functools.partial(self._consume, name)))

    def _spawn(self, name: str, body: Callable[[], None]) -> threading.Thread:
        return spawn(name, body, self.errors)

    def stop_producers(self, timeout: float) -> bool:
        """Stop sending and wait for every record's delivery report; False on a timeout."""
        self.stop_producing.set()
        return join_all(self._producers, timeout)

    def stop_members(self, timeout: float) -> bool:
        self.stop_consuming.set()
        return join_all(self._members, timeout)

    # -- producers -------------------------------------------------------------------------

    def _producer_config(self, name: str, idempotent: bool) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "client.id": name, "acks": "all",
            "enable.idempotence": idempotent, "linger.ms": 5,
            "message.timeout.ms": 60_000, "request.timeout.ms": 10_000,
            "reconnect.backoff.max.ms": 1000, "log_level": 2,
        }
        if self.client_log is not None:
            # the idempotent producer's state changes (retries, epoch bumps) explain anomalies
            config.update({"debug": "eos,msg", "log_level": 7,
                           "logger": client_logger(self.client_log)})
        if not idempotent:
            # order over one connection (not across a partition's move: korvet.faults.history)
            config["max.in.flight.requests.per.connection"] = 1
        return config

    def _produce(self, name: str, idempotent: bool) -> None:
        from confluent_kafka import KafkaError, KafkaException, Producer

        fatal: list[str] = []

        def on_error(error: KafkaError) -> None:
            if error.fatal():
                fatal.append(str(error))

        def new_producer() -> Any:
            return Producer({**self._producer_config(name, idempotent), "error_cb": on_error})

        producer = new_producer()
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        seq = 0
        # Each producer (a new one after a fatal error: a new producer id) has a name of its
        # own: Kafka promises order within one producer, not from one to the next.
        incarnation = name
        while not self.stop_producing.is_set():
            rec = Rec(incarnation, seq)
            seq += 1
            self.recorder.add(Sent(rec, idempotent, idempotent, self.recorder.now()))
            if not self._send(producer, rec) or fatal:
                # A fatal error (idempotent producers: the broker's answers broke its sequence
                # rules): what it still holds fails, a new producer (a new id) goes on.
                with contextlib.suppress(KafkaException):  # a fatal producer raises here too
                    producer.poll(1.0)  # serves the error callback and the delivery reports
                    producer.flush(10)
                self.notes.append(f"{name}: fatal producer error at seq {rec.seq} "
                                  f"({'; '.join(fatal) or 'no reason given'}); a new producer "
                                  "continues")
                fatal.clear()
                producer = new_producer()
                incarnation = f"{name}.{len(self.notes)}"
            with contextlib.suppress(KafkaException):  # fatal: handled at the next send
                producer.poll(0)
            next_at += interval
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_at = time.monotonic()
        with contextlib.suppress(KafkaException):  # a fatal producer: its records failed
            if producer.flush(90):
                producer.purge()
                producer.flush(5)  # the purged records' delivery reports: failed, unknown outcome

    def _send(self, producer: Any, rec: Rec) -> bool:
        """Hand the record to the producer; False (and the record failed) if the producer
        is in a fatal state."""
        from confluent_kafka import KafkaException

        def delivered(error: Any, message: Any) -> None:
            now = self.recorder.now()
            if error is not None:
                self.recorder.add(SendFailed(rec, str(error), now))
            else:
                offset = message.offset()  # None when the broker did not say (a duplicate)
                self.recorder.add(Acked(rec, message.partition(),
                                        offset if offset is not None and offset >= 0 else -1, now))

        while True:
            try:
                producer.produce(self.topic, key=rec.key, value=VALUE, on_delivery=delivered)
                return True
            except BufferError:  # the local queue is full while the broker is away
                producer.poll(0.1)
            except KafkaException as exc:
                self.recorder.add(SendFailed(rec, str(exc), self.recorder.now()))
                return False

    # -- consumer group --------------------------------------------------------------------

    def _consume(self, name: str) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": name,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": self.session_timeout_ms, "heartbeat.interval.ms": 1000,
            "partition.assignment.strategy": "range", "log_level": 2,
        })
        member = _Member(name, self, consumer)
        consumer.subscribe([self.topic], on_assign=member.assigned, on_revoke=member.revoked,
                           on_lost=member.lost)
        try:
            while not self.stop_consuming.is_set():
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    member.read(message)
                member.maybe_commit()
            member.commit(list(member.pending))
        finally:
            consumer.close()


class _Member:
    """One group member's bookkeeping: what it read and has not committed yet."""

    def __init__(self, name: str, workload: Workload, consumer: Any) -> None:
        self.name = name
        self.workload = workload
        self.recorder = workload.recorder
        self.consumer = consumer
        self.pending: dict[int, int] = {}  # partition -> next offset, read but not committed
        self.last_commit = time.monotonic()

    def assigned(self, consumer: Any, partitions: list[Any]) -> None:
        self.recorder.add(Assigned(self.name, group_generation(consumer),
                                   tuple(sorted(p.partition for p in partitions)),
                                   self.recorder.now()))

    def revoked(self, _consumer: Any, partitions: list[Any]) -> None:
        self.commit([p.partition for p in partitions if p.partition in self.pending])
        self._dropped()

    def lost(self, _consumer: Any, _partitions: list[Any]) -> None:
        self._dropped()

    def _dropped(self) -> None:
        self.pending.clear()
        self.recorder.add(Assigned(self.name, -1, (), self.recorder.now()))

    def read(self, message: Any) -> None:
        partition, offset = message.partition(), message.offset()
        self.recorder.add(Consumed(self.name, partition, offset, Rec.from_key(message.key()),
                                   self.recorder.now()))
        self.pending[partition] = offset + 1
        progress = self.workload.progress
        progress[partition] = max(progress.get(partition, 0), offset + 1)

    def maybe_commit(self) -> None:
        if self.pending and time.monotonic() - self.last_commit >= self.workload.commit_interval:
            self.commit(list(self.pending))

    def commit(self, partitions: list[int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        self.last_commit = time.monotonic()
        if not partitions:
            return
        offsets = [TopicPartition(self.workload.topic, p, self.pending[p]) for p in partitions]
        started = self.recorder.now()
        try:
            answers = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException:
            return  # refused or unanswered: not counted as accepted; read again later if so
        ended = self.recorder.now()
        for answer in answers or ():
            if answer.error is None:
                self.recorder.add(Committed(self.name, answer.partition, answer.offset,
                                            started, ended))
                if self.pending.get(answer.partition) == answer.offset:
                    del self.pending[answer.partition]


def read_back(bootstrap: str, topic: str, group: str | None, partitions: int,
              recorder: Recorder, timeout: float = 180.0) -> list[str]:
    """The group's committed offsets (when there is a group), then every partition from its
    first offset to its high watermark, read_committed; returns notes on what could not be
    read."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    notes: list[str] = []
    config = {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "log_level": 2,
              "isolation.level": "read_committed"}
    if group is not None:
        committer = Consumer({**config, "group.id": group})
        try:
            started = recorder.now()
            answers = committer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                          timeout=30)
            ended = recorder.now()
            for answer in answers:
                recorder.add(CommittedRead(answer.partition, max(answer.offset, -1), started,
                                           ended))
        except KafkaException as exc:
            notes.append(f"the group's committed offsets could not be read: {exc}")
        finally:
            committer.close()
    reader = Consumer({**config, "group.id": f"{group or topic}-reader"})
    try:
        notes += _read_all(reader, topic, partitions, recorder, timeout)
    finally:
        reader.close()
    return notes


def _read_all(reader: Any, topic: str, partitions: int, recorder: Recorder,
              timeout: float) -> list[str]:
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

    try:
        ends = {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    except KafkaException as exc:  # the checker reports what is then missing
        return [f"the topic could not be read back: {exc}"]
    reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    last = dict.fromkeys(range(partitions), -1)
    # The next offset to read: past a transaction's marker (a control record, never
    # returned), which may be a partition's last offset.
    reached = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + timeout
    while any(reached[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for message in reader.consume(num_messages=1000, timeout=1.0):
            if message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            if (partition is None or offset is None or offset >= ends[partition]
                    or offset <= last[partition]):
                continue
            last[partition] = offset
            reached[partition] = max(reached[partition], offset + 1)
            recorder.add(Stored(partition, offset, Rec.from_key(message.key())))
        with contextlib.suppress(KafkaException):
            for tp in reader.position([TopicPartition(topic, p) for p in range(partitions)]):
                reached[tp.partition] = max(reached[tp.partition], tp.offset)
    return [f"partition {p}: read up to {reached[p]}, high watermark {ends[p]}"
            for p in ends if reached[p] < ends[p]]


def spawn(name: str, body: Callable[[], None], errors: list[str]) -> threading.Thread:
    """A client's thread; its death goes to ``errors``: a run failure, not silence."""
    def run() -> None:
        try:
            body()
        except Exception as exc:
            errors.append(f"{name}: {type(exc).__name__}: {exc}")

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def join_all(threads: list[threading.Thread], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)

