"""The transactional workload of a fault run: transactional producers and read_committed readers.

Each producer is a confluent-kafka producer with a ``transactional.id`` of its own, writing
transactions of a few records spread over several partitions (keys ``producer:seq`` as in
the plain workload; the value names the transaction). Whether a transaction is to be
committed or aborted is drawn at random and recorded (``TxnSent``) before commit or abort is
asked for; what the client was then told is recorded too (``TxnEnded``): committed when
commit_transaction returned, aborted when abort_transaction returned, unknown when the
producer had to be given up. A retriable error repeats the call; an error that requires an
abort aborts; a fatal one (fenced, or the library gave up) makes a new producer with the
same ``transactional.id``, as an application would: its InitProducerId settles what the old
one left open, so its transactions end all or nothing whatever the client was told.

The readers assign every partition from its start with ``isolation.level=read_committed``
and record every record they get with its offset; the checker holds each read against the
transaction's fate and the read-back at the end (``read_back`` in ``workload``, also
read_committed).
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from korvet.faults.history import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Assigned,
    Consumed,
    Rec,
    TxnEnded,
    TxnSent,
)
from korvet.faults.workload import Recorder, client_logger, join_all, spawn

PADDING = b"t" * 80
ATTEMPTS = 5  # of one commit or abort call that fails with a retriable error
CALL_TIMEOUT = 30.0  # seconds for init_transactions, commit_transaction, abort_transaction


@dataclass
class TransactionalWorkload:
    bootstrap: str
    topic: str
    partitions: int
    recorder: Recorder
    seed: int = 1
    producers: int = 3
    readers: int = 2
    rate: float = 100.0  # records per second per producer, at most
    sizes: tuple[int, int] = (2, 5)  # records per transaction, from .. to
    abort_share: float = 0.2  # of transactions the producer asks to abort
    transaction_timeout_ms: int = 20_000
    client_log: Path | None = None  # librdkafka's log of the producers (with its `eos` debug)
    stop_producing: threading.Event = field(default_factory=threading.Event)
    stop_consuming: threading.Event = field(default_factory=threading.Event)
    positions: dict[str, dict[int, int]] = field(default_factory=dict)  # reader -> next offsets
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _producers: list[threading.Thread] = field(default_factory=list)
    _readers: list[threading.Thread] = field(default_factory=list)

    @property
    def progress(self) -> dict[int, int]:
        """Per partition, the next offset every reader has got past (control records too)."""
        if len(self.positions) < self.readers:
            return {}
        return {p: min(seen.get(p, 0) for seen in self.positions.values())
                for p in range(self.partitions)}

    @property
    def producer_names(self) -> list[str]:
        return [f"txn{number}" for number in range(self.producers)]

    def transactional_id(self, name: str) -> str:
        return f"{self.topic}-{name}"

    def start(self) -> None:
        for name in self.producer_names:
            self._producers.append(self._spawn(name, functools.partial(self._produce, name)))
        for number in range(self.readers):
            name = f"reader{number}"
            self._readers.append(self._spawn(name, functools.partial(self._read, name)))

    def _spawn(self, name: str, body: Callable[[], None]) -> threading.Thread:
        return spawn(name, body, self.errors)

    def stop_producers(self, timeout: float) -> bool:
        """Stop after the transaction each producer is in; False on a timeout."""
        self.stop_producing.set()
        return join_all(self._producers, timeout)

    def stop_members(self, timeout: float) -> bool:
        self.stop_consuming.set()
        return join_all(self._readers, timeout)

    # -- producers -------------------------------------------------------------------------

    def _new_producer(self, name: str) -> Any:
        """A producer for the id, its transactions initialised (retried while the broker is
        away); a fatal error on the way makes another."""
        from confluent_kafka import KafkaException, Producer

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "client.id": name,
            "transactional.id": self.transactional_id(name), "acks": "all", "linger.ms": 5,
            "transaction.timeout.ms": self.transaction_timeout_ms,
            "request.timeout.ms": 10_000, "reconnect.backoff.max.ms": 1000, "log_level": 2,
        }
        if self.client_log is not None:
            # what librdkafka did about a transaction's end (EndTxn, epoch bumps) is not in
            # the history: what it was told of each transaction is
            config.update({"debug": "eos", "log_level": 7,
                           "logger": client_logger(self.client_log)})
        while True:
            producer = Producer(config)
            for _ in range(20):
                try:
                    producer.init_transactions(CALL_TIMEOUT)
                    return producer
                except KafkaException as exc:
                    error = exc.args[0]
                    if not error.retriable() or error.fatal():
                        break
            if self.stop_producing.is_set():
                raise RuntimeError("init_transactions kept failing after the faults were healed")
            self.notes.append(f"{name}: init_transactions failed; a new producer tries again")

    def _produce(self, name: str) -> None:
        from confluent_kafka import KafkaException

        rng = random.Random(f"{self.seed}:{name}")
        producer = self._new_producer(name)
        seq = txn = 0
        next_at = time.monotonic()
        while not self.stop_producing.is_set():
            txn += 1
            count = rng.randint(*self.sizes)
            commit = rng.random() >= self.abort_share
            partitions = [rng.randrange(self.partitions) for _ in range(count)]
            try:
                producer.begin_transaction()
            except KafkaException as exc:  # the producer is unusable: fatal, or a bad state
                self.notes.append(f"{name}: begin_transaction: {exc}; a new producer continues")
                producer = self._new_producer(name)
                continue
            handed: list[tuple[Rec, int]] = []
            refused = ""
            for partition in partitions:
                rec = Rec(name, seq)
                seq += 1
                refused = self._hand(producer, rec, partition, txn)
                if refused:
                    break
                handed.append((rec, partition))
            commit = commit and not refused
            self.recorder.add(TxnSent(name, txn, tuple(handed), commit, self.recorder.now()))
            outcome, requested, error = self._end(producer, commit)
            self.recorder.add(TxnEnded(name, txn, outcome, requested, self.recorder.now(),
                                       "; ".join(e for e in (refused, error) if e)))
            if outcome == UNKNOWN:
                self.notes.append(f"{name}: transaction {txn} ended unknown ({error}); a new "
                                  "producer continues")
                producer = self._new_producer(name)
            next_at += len(partitions) / self.rate
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_at = time.monotonic()

    def _hand(self, producer: Any, rec: Rec, partition: int, txn: int) -> str:
        """Hand one record to the producer; the error's text when it refuses."""
        from confluent_kafka import KafkaException

        value = f"{rec.producer} transaction {txn} ".encode() + PADDING
        while True:
            try:
                producer.produce(self.topic, key=rec.key, value=value, partition=partition)
                return ""
            except BufferError:  # the local queue is full while the broker is away
                producer.poll(0.1)
            except KafkaException as exc:
                return f"produce: {exc}"

    def _end(self, producer: Any, commit: bool) -> tuple[str, float, str]:
        """Commit (or abort) the transaction: the fate the client was told, when it was
        first asked for, and the errors on the way."""
        from confluent_kafka import KafkaException

        requested = self.recorder.now()
        errors: list[str] = []
        if commit:
            for _ in range(ATTEMPTS):
                try:
                    producer.commit_transaction(CALL_TIMEOUT)
                    return COMMITTED, requested, "; ".join(errors)
                except KafkaException as exc:
                    error = exc.args[0]
                    errors.append(f"commit: {error}")
                    if error.txn_requires_abort():
                        break
                    if error.fatal() or not error.retriable():
                        return UNKNOWN, requested, "; ".join(errors)
            else:
                return UNKNOWN, requested, "; ".join(errors)
        # abort_transaction purges what is still queued: flushed first, the aborted records
        # reach the broker, and readers have something to not read.
        with contextlib.suppress(KafkaException):
            producer.flush(CALL_TIMEOUT)
        for _ in range(ATTEMPTS):
            try:
                producer.abort_transaction(CALL_TIMEOUT)
                return ABORTED, requested, "; ".join(errors)
            except KafkaException as exc:
                error = exc.args[0]
                errors.append(f"abort: {error}")
                if error.fatal() or not error.retriable():
                    break
        return UNKNOWN, requested, "; ".join(errors)

    # -- read_committed readers ------------------------------------------------------------

    def _read(self, name: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-{name}",
            "client.id": name, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 2,
        })
        everything = [TopicPartition(self.topic, p, OFFSET_BEGINNING)
                      for p in range(self.partitions)]
        consumer.assign(everything)
        # Not a group member: generation -1, so the two-owners check leaves it out.
        self.recorder.add(Assigned(name, -1, tuple(range(self.partitions)), self.recorder.now()))
        seen = self.positions.setdefault(name, {})
        try:
            while not self.stop_consuming.is_set():
                for message in consumer.consume(num_messages=500, timeout=0.2):
                    partition, offset = message.partition(), message.offset()
                    if message.error() is not None or partition is None or offset is None:
                        continue
                    self.recorder.add(Consumed(name, partition, offset,
                                               Rec.from_key(message.key()), self.recorder.now()))
                # The position passes control records (the markers), which are never read.
                with contextlib.suppress(KafkaException):
                    for tp in consumer.position([TopicPartition(self.topic, p)
                                                 for p in range(self.partitions)]):
                        if tp.offset >= 0:
                            seen[tp.partition] = tp.offset
        finally:
            consumer.close()
