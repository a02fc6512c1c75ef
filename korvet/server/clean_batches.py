"""The log cleaner's steps on a ``batches`` topic (korvet.storage.format=batches; spec
Compaction.tla with Format = "batches": a batch rewritten with its surviving records, each at
its own offset).

A batches entry is a whole producer batch as it was sent, perhaps compressed, under a CRC-32C:
Redis' Lua can neither decompress it nor rebuild it. So the broker does that part between two
calls of clean.lua: it reads the pass and the chunk the call will work on, decodes the batches
(``protocol.records.stored_records``), decides with the spec's rules (``core.cleaner``
``map_batches``, ``judge_batch``), rebuilds each batch that loses records
(``protocol.records.rewrite_batch``: the base offset, every survivor's offset delta, the
producer's id, epoch and base sequence and the compression kept, the CRC computed anew), and
hands the call its decisions. The call still reads its chunk itself, atomically with its
writes and the swap: what changed since the broker's read is only entries retention or
DeleteRecords removed below the pass's bound (the call stops before an entry the broker did
not see) and appends past it (copied as they are), so a call stays bounded by the chunk.
Keys are indexed by the decode, not at append time: append.lua's batches path stays one XADD of
the producer's bytes, and the cost falls on the cleaner, off the produce path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from korvet.core.cleaner import (
    BatchFacts,
    EntryId,
    aborted_ranges,
    entry_id,
    judge_batch,
    map_batches,
)
from korvet.core.topics import TopicInfo
from korvet.protocol.records import rewrite_batch, stored_records
from korvet.storage import entries
from korvet.storage.cleaner import BatchReads, CleanerStore, PassView, StepResult

_NO_BATCH_TIMESTAMP = -1  # an entry that is no batch (written by something else): never young
# A copy call's bytes: a chunk of batch entries can be a chunk of megabyte batches, so a copy
# step reads in pages and its call takes only the entries that fit (at least one), the call's
# own read then bounded by that count too.
CALL_BYTES = 4 << 20
_PAGE = 32
_YIELD_EVERY = 8  # batches decoded or judged between two turns of the event loop


def _facts(at: str, fields: list[bytes]) -> BatchFacts | None:
    """The facts of a batch entry; None for an entry that is no batch or does not decode (it is
    kept as it is)."""
    stored = entries.batch_fields(fields)
    if stored is None:
        return None
    _, most, raw = stored
    try:
        batch = stored_records(raw)
    except Exception:  # a batch the codec refuses (codecs raise their own types): left as is
        return None
    horizon = fields[7].decode() if len(fields) == 8 else None
    return BatchFacts(entry_id(at), most, batch.producer_id, batch.transactional,
                      batch.control, batch.records, horizon)


async def _decoded(got: list[tuple[str, list[bytes]]]) -> list[BatchFacts | None]:
    """Each entry's facts, the event loop served every few batches: a chunk can hold tens of
    thousands of records to decode, and the broker's clients wait meanwhile."""
    facts: list[BatchFacts | None] = []
    for index, (at, fields) in enumerate(got):
        if index % _YIELD_EVERY == _YIELD_EVERY - 1:
            await asyncio.sleep(0)
        facts.append(_facts(at, fields))
    return facts


async def _untimed(call: Awaitable[StepResult]) -> StepResult:
    return await call


async def batches_step(calls: CleanerStore, topic: TopicInfo, partition: int, token: int,
                       now_ms: int, chunk: int,
                       timed: Callable[[Awaitable[StepResult]], Awaitable[StepResult]] = _untimed
                       ) -> StepResult:
    """One step of a pass on a batches topic: a map chunk, a copy chunk or the swap. ``timed``
    wraps the script's call alone (the cleaner's longest-call metric: how long Redis was held,
    not the broker's decoding)."""
    reads = BatchReads(calls)
    view = await reads.view(topic, partition, token)
    if view is None:  # not this pass's any more: the call says so (LOST)
        return await timed(calls.step(topic, partition, token, now_ms, chunk))
    if view.phase == "map":
        plan = await _map_plan(reads, topic, partition, view, chunk)
    else:
        got = await _copy_chunk(reads, topic, partition, view.cursor, chunk)
        chunk = min(chunk, len(got)) or chunk  # what fits in CALL_BYTES: the call reads as many
        plan = await _copy_plan(reads, topic, partition, view, now_ms, got)
    return await timed(calls.step(topic, partition, token, now_ms, chunk, plan))


async def _copy_chunk(reads: BatchReads, topic: TopicInfo, partition: int, cursor: str,
                      chunk: int) -> list[tuple[str, list[bytes]]]:
    """The entries a copy call will work on: up to ``chunk``, in pages, as many as fit in
    CALL_BYTES (at least one)."""
    got: list[tuple[str, list[bytes]]] = []
    size = 0
    low = cursor
    while len(got) < chunk:
        want = min(_PAGE, chunk - len(got))
        page = await reads.entries(topic, partition, low, "+", want)
        for entry in page:
            size += sum(len(field) for field in entry[1])
            if got and size > CALL_BYTES:
                return got
            got.append(entry)
        if len(page) < want:
            break
        low = "(" + page[-1][0]
    return got


async def _map_plan(reads: BatchReads, topic: TopicInfo, partition: int, view: PassView,
                    chunk: int) -> list[Any]:
    got = await reads.entries(topic, partition, view.cursor, "(" + view.upto, chunk)
    facts = [fact or BatchFacts(entry_id(at), _NO_BATCH_TIMESTAMP, -1, False, True, [])
             for (at, _), fact in zip(got, await _decoded(got), strict=True)]
    aborted = aborted_ranges(await reads.aborted(topic, partition, facts[0].at[0])
                             if facts else [])
    mapped = map_batches(facts, view.young, aborted)
    cursor = "(" + got[mapped.mapped - 1][0] if mapped.mapped else view.cursor
    head = _text_id(mapped.head) if mapped.head is not None else ""
    done = mapped.head is not None or len(got) < chunk
    plan: list[Any] = ["batches", view.cursor, cursor, head, mapped.mapped, 1 if done else 0]
    for key, (at, delta) in mapped.latest.items():
        plan += [key, f"{_text_id(at)} {delta}"]
    return plan


async def _copy_plan(reads: BatchReads, topic: TopicInfo, partition: int, view: PassView,
                     now_ms: int, got: list[tuple[str, list[bytes]]]) -> list[Any]:
    upto = entry_id(view.upto)
    below = [(at, fields) for at, fields in got if entry_id(at) < upto]
    facts = await _decoded(below)
    keys = sorted({key for f in facts if f is not None and not f.control
                   for _, key, _ in f.records if key is not None})
    latest: dict[bytes, tuple[EntryId, int]] = {}
    for key, value in zip(keys, await reads.mapped(topic, partition, keys), strict=True):
        if value is not None:
            at, _, delta = value.partition(" ")
            latest[key] = (entry_id(at), int(delta))
    aborted = aborted_ranges(await reads.aborted(topic, partition, entry_id(below[0][0])[0])
                             if below else [])
    dense = topic.config.dense
    plan: list[Any] = ["batches", view.cursor]
    for index, ((at, fields), batch) in enumerate(zip(below, facts, strict=True)):
        if index % _YIELD_EVERY == _YIELD_EVERY - 1:
            await asyncio.sleep(0)
        if batch is None:
            plan += [at, 0, 1, -1]
            continue
        verdict = judge_batch(batch, latest, aborted, now=now_ms, last_swap=view.last_swap,
                              retention_ms=view.retention_ms)
        units = len(verdict.keep) if dense else 1  # the clean section, as clean.lua counts it
        if not verdict.keep:
            plan += [at, verdict.removed, 0, 0]
        elif not verdict.removed and verdict.horizon == batch.horizon:
            plan += [at, 0, units, -1]
        else:
            new = _rewritten(fields, verdict.keep, verdict.removed > 0)
            if verdict.horizon is not None:
                new += [entries.BATCH_HORIZON, verdict.horizon]
            plan += [at, verdict.removed, units, len(new) // 2, *new]
    return plan


def _rewritten(fields: list[bytes], keep: frozenset[int], changed: bool) -> list[Any]:
    """A batch entry's first six fields, its batch rewritten when it lost records."""
    if not changed:
        return list(fields[:6])
    raw, span, most = rewrite_batch(fields[5], keep)
    return [entries.BATCH_COUNT, span, entries.BATCH_MAX_TIMESTAMP, most, entries.BATCH, raw]


def _text_id(at: EntryId) -> str:
    return f"{at[0]}-{at[1]}"
