"""Kafka's Produce rules, as pure functions: which request, partition and batch is refused,
with which error code and message, and what a storage outcome means to the client.

The handler (korvet/server/handlers/produce.py) only adapts: it decodes the request into a
``ProduceCall`` (korvet/protocol/decoders/produce.py), looks each topic up, asks ``accept``
which refusal, if any, a partition gets (in Kafka's order, below; the batches are decoded
only when the partition passes the checks before them), sends the append, and maps the
append's status back through ``append_refusal``. Tests: tests/unit/core/test_produce_rules.py.

The rules, in the order a request meets them (Kafka's ``ReplicaManager.appendRecords``
and ``LogValidator``):

1. ``acks`` other than 0, 1 and -1: INVALID_REQUIRED_ACKS for every partition.
2. (A transactional id is checked by the authorizer: WRITE on it.)
3. An unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id).
4. Produce v3+ carries exactly one record batch per partition (INVALID_RECORD).
5. A control batch, or a transactional batch in a request with no transactional id:
   INVALID_RECORD (a transactional batch's partition is then added to, or checked against,
   its transaction by the handler: korvet/server/transactions.py). A batch over the topic's
   ``max.message.bytes``: MESSAGE_TOO_LARGE. With CreateTime, a record timestamp more
   than ``message.timestamp.after.max.ms`` ahead of the broker clock or
   ``message.timestamp.before.max.ms`` behind it: INVALID_TIMESTAMP, naming each record.
   A record without a key on a topic whose cleanup.policy has ``compact``: INVALID_RECORD,
   naming each record (Kafka's LogValidator: the cleaner could not keep it).
6. After the atomic append: the script's status (``AppendStatus``) becomes the error the
   client sees; DUP is a success carrying the original offsets.
7. An idempotent producer's batch that the script refuses as OUT_OF_ORDER_SEQUENCE_NUMBER
   while one of the producer's earlier batches to the same partition failed on its way to
   Redis (a storage error: not run, or outcome unknown), and no batch of it to that
   partition was stored since, is answered with that batch's retriable KAFKA_STORAGE_ERROR
   instead (``SequenceGaps``). On a Kafka connection the requests behind a failed one fail
   with it; here a later batch could reach Redis on a new connection (or after a Redis
   Cluster failover) and find the gap, and librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER
   after a failed request by bumping the producer epoch, which resets every partition's
   sequences: a batch of another partition that was stored but not confirmed
   (NOT_ENOUGH_REPLICAS_AFTER_APPEND) was then sent again under the new epoch and stored
   twice (found by `korvet faults run --topology cluster`). Only the script's refusal is
   changed, never a batch refused before it runs: the failed batch may be sent again
   through another broker, and this broker would not hear of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from korvet.core.bounded import put_newest
from korvet.core.errors import ErrorCode
from korvet.core.topics import TopicConfig, TopicInfo, compacted

VALID_ACKS = (0, 1, -1)
MIN_TIMESTAMP = -(2**63)


class AppendStatus(Enum):
    """What the atomic append script answered (korvet/storage/lua/append.lua)."""

    OK = "OK"
    DUPLICATE = "DUP"
    NO_TOPIC = "NO_TOPIC"
    NO_PARTITION = "NO_PARTITION"
    OUT_OF_ORDER = "OUT_OF_ORDER"
    BAD_EPOCH = "BAD_EPOCH"
    FULL = "FULL"  # the partition's offsets would pass 2^63 - 1
    FENCED = "FENCED"  # a transaction marker below the last marker's coordinator epoch
    # stored (or a duplicate of a stored batch) on the master, but fewer replicas than
    # redis.wait-replicas confirmed it within redis.wait-timeout-ms (set by the storage
    # layer from WAIT's answer, not by the script)
    NOT_REPLICATED = "NOT_REPLICATED"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A partition's produce is refused: nothing of it is stored."""

    code: ErrorCode
    message: str
    record_errors: tuple[tuple[int, str], ...] = ()  # (record index, why), Produce v8+


@dataclass(frozen=True, slots=True)
class ProducePartition:
    index: int
    records: bytes | None  # the partition's record batches as sent (Produce v3+: one)


@dataclass(frozen=True, slots=True)
class ProduceTopic:
    """A topic of the request, named (v3-12) or by id (v13)."""

    name: str | None
    topic_id: str | None  # the id's text (v13), None when named
    partitions: tuple[ProducePartition, ...]

    @property
    def by_id(self) -> bool:
        return self.name is None and self.topic_id is not None


@dataclass(frozen=True, slots=True)
class ProduceCall:
    """A Produce request, whatever its version."""

    acks: int
    transactional_id: str | None
    topics: tuple[ProduceTopic, ...]


class BatchFacts(Protocol):
    """What the rules read of a decoded record batch (protocol.records.Batch has it)."""

    @property
    def size(self) -> int: ...

    @property
    def transactional(self) -> bool: ...

    @property
    def control(self) -> bool: ...

    @property
    def timestamps(self) -> Sequence[int]: ...

    @property
    def keyless(self) -> Sequence[int]: ...


DecodedBatch = TypeVar("DecodedBatch", bound=BatchFacts)


def accept(request_refusal: Refusal | None, lookup_refusal: Refusal | None, topic: TopicInfo | None,
           partition: int, *, by_id: bool, batches: Callable[[], Sequence[DecodedBatch] | Refusal],
           now_ms: int, in_transaction: bool = False) -> DecodedBatch | Refusal:
    """Rules 1 to 5 for one partition, in Kafka's order: the batch to append, or the refusal
    that wins. ``request_refusal`` is ``check_request``'s answer for the whole request,
    ``lookup_refusal`` says the topic could not be looked up (Redis did not answer), ``topic``
    is None when the broker does not know it; ``batches`` decodes the partition's records and is
    called only when everything before rule 4 passed (an unknown topic's bytes are not read)."""
    refusal = request_refusal or lookup_refusal or check_partition(
        topic.name if topic else None, partition, topic.partitions if topic else 0, by_id=by_id)
    if refusal is not None:
        return refusal
    assert topic is not None
    decoded = batches()
    if isinstance(decoded, Refusal):
        return decoded
    refusal = check_batch_count(len(decoded))
    if refusal is not None:
        return refusal
    (batch,) = decoded
    return check_batch(batch, topic.config, now_ms, in_transaction) or batch


def check_request(acks: int, transactional_id: str | None) -> Refusal | None:
    """Rule 1: what refuses every partition of a request."""
    if acks not in VALID_ACKS:
        return Refusal(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not 0, 1 or -1")
    return None


def check_partition(topic: str | None, partition: int, partitions: int, *,
                    by_id: bool = False) -> Refusal | None:
    """Rule 3: ``topic`` is None when the broker does not know it."""
    if topic is None:
        return Refusal(ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       "unknown topic")
    if not 0 <= partition < partitions:
        return Refusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       f"topic {topic} has no partition {partition}")
    return None


def check_batch_count(count: int) -> Refusal | None:
    """Rule 4."""
    if count != 1:
        return Refusal(ErrorCode.INVALID_RECORD,
                       f"{count} record batches for one partition; Produce v3+ allows exactly one")
    return None


def check_batch(batch: BatchFacts, config: TopicConfig, now_ms: int,
                in_transaction: bool = False) -> Refusal | None:
    """Rule 5, for a batch that decoded and passed its CRC (``in_transaction``: the request
    names a transactional id)."""
    if batch.control:
        return Refusal(ErrorCode.INVALID_RECORD,
                       "control batches are written by the transaction coordinator only")
    if batch.transactional and not in_transaction:
        return Refusal(ErrorCode.INVALID_RECORD,
                       "a transactional batch in a request with no transactional id")
    limit = config.get_int("max.message.bytes")
    if batch.size > limit:
        return Refusal(ErrorCode.MESSAGE_TOO_LARGE,
                       f"record batch of {batch.size} bytes exceeds max.message.bytes {limit}")
    if batch.keyless and compacted(config):
        return Refusal(ErrorCode.INVALID_RECORD,
                       "Compacted topic cannot accept message without key",
                       tuple((index, "Compacted topic cannot accept message without key")
                             for index in batch.keyless))
    if config.log_append_time:
        return None  # the broker stamps the records: their own timestamps do not matter
    after = config.get_int("message.timestamp.after.max.ms")
    before = config.get_int("message.timestamp.before.max.ms")
    latest = now_ms + after
    earliest = now_ms - before if before < now_ms else MIN_TIMESTAMP
    stamps = batch.timestamps
    if not stamps or (earliest <= min(stamps) and max(stamps) <= latest):
        return None
    bad = tuple(
        (index, f"timestamp {stamp} is out of range "
                f"(broker time {now_ms}, allowed -{before} / +{after} ms)")
        for index, stamp in enumerate(stamps)
        if not earliest <= stamp <= latest)
    if bad:
        return Refusal(ErrorCode.INVALID_TIMESTAMP,
                       "one or more records have a timestamp outside the topic's bounds", bad)
    return None


def append_refusal(status: AppendStatus, topic: str, partition: int, producer_id: int,
                   producer_epoch: int, base_sequence: int) -> Refusal | None:
    """Rule 6: the append script's status as the client must see it (None: stored, or a
    duplicate of a stored batch, whose original offsets are the answer)."""
    if status in (AppendStatus.OK, AppendStatus.DUPLICATE):
        return None
    if status in (AppendStatus.NO_TOPIC, AppendStatus.NO_PARTITION):
        return Refusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       f"topic {topic} partition {partition} no longer exists")
    if status is AppendStatus.OUT_OF_ORDER:
        return Refusal(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                       f"producer {producer_id} sent sequence {base_sequence} out of order")
    if status is AppendStatus.NOT_REPLICATED:
        # Kafka's answer when the leader wrote a batch its in-sync replicas did not confirm:
        # retriable; an idempotent producer's retry is recognised as a duplicate.
        return Refusal(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                       f"partition {partition} of {topic}: the batch is on the Redis master "
                       "but not confirmed by enough of its replicas")
    if status is AppendStatus.BAD_EPOCH:
        return Refusal(ErrorCode.INVALID_PRODUCER_EPOCH,
                       f"producer {producer_id} epoch {producer_epoch} is older than the "
                       "partition's")
    if status is AppendStatus.FENCED:
        return Refusal(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                       f"a newer transaction coordinator wrote producer {producer_id}'s markers")
    # FULL
    return Refusal(ErrorCode.KAFKA_STORAGE_ERROR,
                   f"partition {partition} of {topic} has no offsets left below 2^63")


class SequenceGaps:
    """Rule 7: per partition and idempotent producer, the first sequence of its batch that
    failed on the way to Redis, until a batch of it to that partition is stored.

    At most ``limit`` of them are kept, the oldest failure forgotten first: a producer that
    failed and then went away (closed, crashed, fenced) never stores again and would be kept
    for ever. A forgotten gap only gives back the script's OUT_OF_ORDER_SEQUENCE_NUMBER for
    that producer, as before rule 7; it takes ``limit`` producers failing at once."""

    LIMIT = 10_000

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._failed: dict[tuple[str, int], tuple[int, int]] = {}  # -> (epoch, base sequence)

    def __len__(self) -> int:
        return len(self._failed)

    def failed(self, partition: str, producer_id: int, epoch: int, base_sequence: int) -> None:
        key = (partition, producer_id)
        known = self._failed.get(key)
        if known is None or known[0] != epoch or base_sequence < known[1]:
            put_newest(self._failed, key, (epoch, base_sequence), self._limit)

    def stored(self, partition: str, producer_id: int) -> None:
        """A batch of the producer was stored (or found stored): its sequence is whole."""
        self._failed.pop((partition, producer_id), None)

    def behind(self, partition: str, producer_id: int, epoch: int, base_sequence: int) -> bool:
        """Whether a batch refused as out of order comes after a failed one."""
        known = self._failed.get((partition, producer_id))
        return known is not None and known[0] == epoch and base_sequence > known[1]


def gap_refusal(producer_id: int, base_sequence: int) -> Refusal:
    return storage_refusal(f"a batch of producer {producer_id} before sequence {base_sequence} "
                           "failed on its way to Redis; send it again first")


def storage_refusal(reason: str) -> Refusal:
    """Redis did not take (or did not confirm) the append: retriable for the client."""
    return Refusal(ErrorCode.KAFKA_STORAGE_ERROR, f"Redis did not take the append: {reason}")
