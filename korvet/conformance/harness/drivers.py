"""Real Kafka clients, driven the way applications use them.

- confluent-kafka (librdkafka; the same engine as kcat and the Go/.NET clients)
- kafka-python (pure Python)
- aiokafka (asyncio)
- kcat (the command line tool, when it is on PATH)
- Kafka's Java tools (console producer/consumer, kafka-consumer-groups) through
  ``korvet.jvm.java_clients``, when Java and the pinned jars are present.

Every client a check opens is closed when the check ends (``ctx.on_close``).
Client logging is silenced: a check reports what it observes, not what the
client library logs.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from korvet.conformance.harness.context import CheckContext, skip
from korvet.conformance.harness.outcomes import CheckFailed

T = TypeVar("T")

_QUIET = logging.getLogger("korvet.conformance.clients")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
for _name in ("kafka", "aiokafka"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


CLIENT_MODULES = (
    "confluent_kafka", "confluent_kafka.admin", "kafka", "kafka.admin", "kafka.structs", "aiokafka",
    "aiokafka.structs", "korvet.jvm.java_clients",
)


def preload() -> None:
    """Import the client libraries once, before checks start in threads: several threads
    importing one module for the first time at once can hit the import lock's deadlock
    detection (``_DeadlockError``)."""
    import importlib

    for name in CLIENT_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # a check that needs it reports the missing client itself
            continue


# -- confluent-kafka ---------------------------------------------------------


def confluent_config(ctx: CheckContext, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": ctx.bootstrap,
        "client.id": f"korvet-conformance-{ctx.run_id}",
        "logger": _QUIET,
        "socket.timeout.ms": 20_000,
    }
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return conf


def confluent_producer(ctx: CheckContext, **extra: Any) -> Any:
    from confluent_kafka import Producer

    producer = Producer(confluent_config(ctx, **extra))

    def flush() -> None:
        producer.flush(5)

    ctx.on_close(flush)
    return producer


def confluent_consumer(ctx: CheckContext, **extra: Any) -> Any:
    from confluent_kafka import Consumer

    consumer = Consumer(confluent_config(ctx, **extra))
    ctx.on_close(consumer.close)
    return consumer


def confluent_produce(ctx: CheckContext, topic: str, items: Sequence[tuple[bytes | None, bytes | None]], *,
                      producer: Any = None, partition: int | None = None,
                      headers: list[tuple[str, bytes]] | None = None,
                      **extra: Any) -> list[tuple[int, int]]:
    """Send (key, value) pairs and wait for every delivery report; (partition, offset) each."""
    own = producer or confluent_producer(ctx, **extra)
    reports: list[tuple[int, int] | None] = [None] * len(items)
    errors: list[str] = []

    def on_delivery(index: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                reports[index] = (int(msg.partition()), int(msg.offset()))
        return report

    for index, (key, value) in enumerate(items):
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery(index)}
        if partition is not None:
            kwargs["partition"] = partition
        if headers is not None:
            kwargs["headers"] = headers
        own.produce(topic, **kwargs)
        own.poll(0)
    remaining = own.flush(30)
    if errors:
        raise CheckFailed(f"confluent-kafka delivery failed: {errors[0]}", errors=errors[:5])
    if remaining or any(r is None for r in reports):
        raise CheckFailed(f"confluent-kafka: {remaining} messages not delivered within 30 s")
    return [r for r in reports if r is not None]


def confluent_poll(consumer: Any, count: int, timeout: float = 30.0) -> list[Any]:
    """Poll until ``count`` messages (errors other than partition EOF fail the check)."""
    import time

    from confluent_kafka import KafkaError

    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(messages) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise CheckFailed(f"confluent-kafka consumer error: {msg.error()}")
        messages.append(msg)
    return messages


def confluent_transaction(ctx: CheckContext, topic: str, values: list[bytes], *, commit: bool) -> None:
    """One transaction of ``values`` on partition 0, committed or aborted."""
    from confluent_kafka import KafkaException

    producer = confluent_producer(ctx, transactional_id=ctx.name("txn"), enable_idempotence=True,
                                  acks="all", transaction_timeout_ms=30_000)
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    except KafkaException as exc:
        raise CheckFailed(f"transactional producer failed: {exc}") from exc


# -- kafka-python ------------------------------------------------------------


def kafka_python_producer(ctx: CheckContext, **extra: Any) -> Any:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=ctx.bootstrap, client_id=f"korvet-conformance-{ctx.run_id}",
                             **extra)
    ctx.on_close(lambda: producer.close(timeout=5))
    return producer


def kafka_python_consumer(ctx: CheckContext, *topics: str, **extra: Any) -> Any:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(*topics, bootstrap_servers=ctx.bootstrap,
                             client_id=f"korvet-conformance-{ctx.run_id}", **extra)
    ctx.on_close(consumer.close)
    # A subscribed consumer learns its topics' partitions before its first poll joins the group.
    # Otherwise a kafka-python 3.0 leader can join before the metadata arrives, assign nothing,
    # and rejoin when it does; and that rejoin can be lost: when a poll(timeout_ms=...) returns
    # while the JoinGroup is held, the assignor then makes the metadata snapshots equal again, so
    # need_rejoin() is False, the finished join is never applied and the member stops
    # heartbeating until the broker expels it. Seen on kfake, which answers a JoinGroup at once.
    for topic in topics:
        consumer.partitions_for_topic(topic)
    return consumer


def kafka_python_poll(consumer: Any, count: int, timeout: float = 30.0) -> list[Any]:
    import time

    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500)
        for tp_records in batch.values():
            records.extend(tp_records)
    return records


# -- aiokafka ----------------------------------------------------------------


def run_async(ctx: CheckContext, factory: Callable[[], Coroutine[Any, Any, T]], timeout: float = 60.0) -> T:
    """Run an aiokafka coroutine on a private event loop in the check's thread."""

    async def bounded() -> T:
        return await asyncio.wait_for(factory(), timeout)

    try:
        return asyncio.run(bounded())
    except TimeoutError as exc:
        raise CheckFailed(f"aiokafka scenario did not finish within {timeout:.0f} s") from exc


# -- command-line tools ------------------------------------------------------


def kcat(ctx: CheckContext, args: list[str], *, input_bytes: bytes | None = None,
         timeout: float = 30.0) -> subprocess.CompletedProcess[bytes]:
    binary = shutil.which("kcat") or shutil.which("kafkacat")
    if binary is None:
        skip("kcat is not installed")
    try:
        result = subprocess.run([binary, "-b", ctx.bootstrap, *args], input=input_bytes, capture_output=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"kcat {' '.join(args)} did not finish in {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise CheckFailed(f"kcat {' '.join(args)} exited with {result.returncode}: "
                          f"{result.stderr.decode(errors='replace')[-500:]}")
    return result


def java_tools(ctx: CheckContext) -> Any:
    """Kafka's Java tools for this broker, or a skip when Java or the pinned jars are missing."""
    from korvet.jvm import kafka_server
    from korvet.jvm.java_clients import KafkaJavaTools

    try:
        kafka_server.java_binary()
        kafka_server.jar_classpath()
    except kafka_server.KafkaToolsError as exc:
        skip(f"Kafka's Java tools are not available: {exc}")
    return KafkaJavaTools(ctx.bootstrap, timeout=90)
