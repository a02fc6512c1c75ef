"""Keyed records with headers, as the tests send them through Kafka's Java console producer."""

from __future__ import annotations

from korvet.jvm.java_clients import ProduceRecord

CONSOLE_RECORDS = 1000
# Producer settings of those runs: idempotent, every record acknowledged by the leader and its ISR.
CONSOLE_PRODUCER_PROPERTIES = {"enable.idempotence": "true", "acks": "all", "retries": "5", "linger.ms": "5"}


def console_records(count: int = CONSOLE_RECORDS) -> list[ProduceRecord]:
    """Values with a tab and a colon (the console producer's separators are set to others),
    37 distinct keys, three headers on every record (one of them empty)."""
    return [
        ProduceRecord(
            key=f"key-{i % 37}",
            value=f"value {i}, with a tab\there and a colon: {i * 7}",
            headers=(("seq", str(i)), ("source", "console-producer"), ("empty", "")),
        )
        for i in range(count)
    ]
