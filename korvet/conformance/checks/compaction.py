"""Log compaction (``cleanup.policy=compact``): what a broker's cleaner must leave behind.

The check sets its topic's configs so that a cleaner may clean at once (a segment rolls
after 100 ms, any dirty ratio is enough, no compaction lag) and then waits, up to 35 s, for
the broker's own cadence: Apache Kafka's cleaner looks every ``log.cleaner.backoff.ms``
(15 s by default), Korvet's every ``cleaner.backoff-ms`` (the same); the project's suite
runs both with a second (tests/conformance/). A broker that never removes a superseded
record fails it.

No check assumes dense offsets: positions come from Produce and Fetch.
"""

from __future__ import annotations

import time

from korvet.conformance.harness.context import CheckContext, expect, expect_eq
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.ops import EARLIEST, LATEST, Ops
from korvet.conformance.kafka.records import Fetched, Rec

API = "Log compaction (cleanup.policy=compact)"
KEYS = [f"k{i}".encode() for i in range(4)]
ROUNDS = 4
PROMPT = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
          "min.compaction.lag.ms": "0"}
WAIT_S = 35.0


def _cleaned(records: list[Fetched], latest: dict[bytes, int]) -> bool:
    """Whether only the latest record of each of ``KEYS`` is left (the ticks aside)."""
    ours = [r for r in records if r.key in latest]
    return sorted((r.key or b"", r.offset) for r in ours) == sorted(latest.items())


@check("compaction.latest_value_of_each_key_kept", slow=True, timeout=WAIT_S + 45, api=API,
       asserts="On a compacted topic whose configs let a segment roll after 100 ms with no dirty-"
               "ratio or lag bar, the cleaner (within 35 s: two rounds at Kafka's and Korvet's "
               "default backoff of 15 s) removes every superseded record and keeps the latest "
               "record of each key at the offset it was written at, with its value; the log "
               "start and the high watermark stay where they were, and a fetch from a removed "
               "offset returns the next record kept.",
       source="Kafka broker docs 'Log Compaction' (guarantees: offsets never change, the last "
              "value of every key is retained); LogCleaner, LogConfig segment.ms, "
              "min.cleanable.dirty.ratio, min.compaction.lag.ms")
def latest_value_kept(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    topic = ops.create_topic(configs=PROMPT)
    latest: dict[bytes, int] = {}
    values: dict[int, bytes] = {}
    for round_ in range(ROUNDS):
        for key in KEYS:
            value = key + b"-v%d" % round_
            offset = ops.produce_ok(topic, 0, [Rec(value, key=key)])
            latest[key], values[offset] = offset, value
    start = ops.offset_of(topic, 0, EARLIEST)
    deadline = time.monotonic() + WAIT_S
    records: list[Fetched] = []
    while True:
        # a record now and then rolls the segment that holds the keys' records (a segment
        # rolls on an append once older than segment.ms), so the cleaner may take them
        ops.produce_ok(topic, 0, [Rec(b"tick", key=b"tick")])
        records = ops.read_all(topic, 0, start)
        if _cleaned(records, latest) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    kept = sorted((r.key or b"", r.offset) for r in records if r.key in latest)
    ctx.note("kept", [(k.decode(), o) for k, o in kept])
    expect(_cleaned(records, latest),
           f"after {WAIT_S:.0f} s the log still holds superseded records of the keys: "
           f"{len(kept)} records of {len(KEYS)} keys ({kept[:8]}), the latest being "
           f"{sorted(latest.items())}")
    for r in records:
        if r.key in latest:
            expect_eq(r.value, values[r.offset], f"value of the record kept at offset {r.offset}")
    expect_eq(ops.offset_of(topic, 0, EARLIEST), start, "the log start after cleaning")
    end = ops.offset_of(topic, 0, LATEST)
    expect(end > max(latest.values()), f"the high watermark {end} fell below the records kept")
    first_removed = min(values)
    if first_removed not in latest.values():
        fetched = ops.fetch(topic, 0, first_removed).records
        following = [r.offset for r in fetched if r.offset >= first_removed]
        expect(bool(following) and following[0] > first_removed,
               f"a fetch from the removed offset {first_removed} returned {following[:3]}, "
               "not the next record kept")
