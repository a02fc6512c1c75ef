"""DeleteRecords' rule (korvet/core/admin.py) and its script (storage/lua/delete_records.lua)
together, on a real redis-server.

Hypothesis appends batches through the real append script and deletes records at offsets
drawn around the log (below the log start, inside, at and past the high watermark, -1),
deciding with ``admin.delete_records`` as the handler does and writing with the script.
After every step, read back from Redis: the log start the broker reports is the rule's low
watermark, it never moves back, no entry below it is left and none at or above it is gone,
and appends continue above the high watermark. The script, called with an offset below the
log start (a decision overtaken by another), leaves the log start where it is.
"""

from __future__ import annotations

import asyncio
import itertools

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from korvet.core import admin
from korvet.core.offsets import EntryId, OffsetCodec
from korvet.core.topics import TrimPolicy
from korvet.storage import entries
from korvet.storage.admin_store import AdminStore, LogStartOutcome
from korvet.storage.redis_store import AppendStatus, ProducerBatch
from tests.support.examples import examples
from tests.support.script_topics import one_partition_topic

NO_TRIM = TrimPolicy(-1, -1, False)
_keyspaces = itertools.count()


# A step: ("append", records, "", 0) or ("delete", 0, where, fraction): where is a position
# below; fraction picks a point inside the log.
Step = tuple[str, int, str, float]
steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(min_value=1, max_value=6), st.just(""),
              st.just(0.0)),
    st.tuples(st.just("delete"), st.just(0),
              st.sampled_from(["below", "inside", "end", "past", "minus1", "minus2"]),
              st.floats(min_value=0, max_value=1)),
), min_size=1, max_size=14)


async def _run(url: str, bits: int, plan: list[Step]) -> None:
    client = aioredis.from_url(url)
    store, topic = await one_partition_topic(client, f"del{next(_keyspaces)}", bits)
    admin_store = AdminStore(store)
    codec = OffsetCodec(bits)
    now = 1_000
    stored: list[int] = []  # offsets appended, in order
    try:
        for kind, count, where, fraction in plan:
            start, end = await store.offsets(topic, 0)
            if kind == "append":
                packed = entries.pack_records([(now, None, b"%d" % i, []) for i in range(count)])
                result = await store.append(topic, 0, packed, count, now, NO_TRIM, ProducerBatch())
                assert result.status is AppendStatus.OK
                assert result.base_offset >= end, "an append went below the high watermark"
                stored.extend(range(result.base_offset, result.last_offset + 1))
                now += 1 if count % 2 else 0  # the clock sometimes stands still
                continue
            requested = {"below": max(0, start - 1), "end": end, "past": end + 1, "minus1": -1,
                         "minus2": -2,
                         "inside": start + int((end - start) * fraction)}[where]
            outcome = admin.delete_records(requested, start, end)
            if where == "below" and start > 0:
                # A decision overtaken by a later one (another broker, retention): the script
                # must not move the log start back.
                done, low = await admin_store.raise_log_start(topic, 0, requested)
                assert (done, low) == (LogStartOutcome.OK, start)
            if outcome.ok and outcome.low_watermark > start:
                done, low = await admin_store.raise_log_start(topic, 0, outcome.low_watermark)
                assert done is LogStartOutcome.OK
                assert low == outcome.low_watermark
            new_start, new_end = await store.offsets(topic, 0)
            assert new_end == end, "DeleteRecords moved the high watermark"
            assert new_start == (outcome.low_watermark if outcome.ok else start)
            assert new_start >= start, "the log start moved back"
            raw: list[list[bytes]] = await client.xrange(  # type: ignore[assignment]
                store.stream_key("t", 0))  # raw [id, fields] replies: RedisStore sets that callback
            left = [codec.encode_id(EntryId.parse(entry[0])) for entry in raw]
            assert left == [o for o in stored if o >= new_start], (
                f"after deleting to {requested}: Redis holds {left}, expected the offsets from "
                f"{new_start} of {stored}")
    finally:
        await client.aclose()


@settings(max_examples=examples(0.3), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=1, max_value=10), steps)
def test_delete_records_rule_and_script_agree_with_what_redis_holds(
        redis_url: str, bits: int, plan: list[Step]) -> None:
    asyncio.run(_run(redis_url, bits, plan))
