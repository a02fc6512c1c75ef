"""The transaction coordinator of one tenant: its steps, its markers, its checks.

Every request about a transactional id runs one step of the pure rules
(korvet/core/transactions.py) on the id's record as Redis holds it, and writes the record the
step makes with a compare-and-set on its version (storage/transactions.py). A step that lost a
race with another broker, or another request of this one, is decided again on the record as
it is now, so each step is one atomic transition whichever broker runs it, and a decision is
durable before anyone is answered (spec/Transactions.tla; docs/spec/transactions.md).

A written decision (PrepareCommit, PrepareAbort) goes out as markers: one append per
partition (append.lua: a control record at the next offset, the open transaction ended, an
abort entering the aborted index, all in one script), one script per consumer group
(lua/txn_offsets.lua: its pending offsets decided); each is idempotent, so a marker is sent
again after any failure, by this broker or another. Once every participant has its marker
the transaction is completed (CompleteCommit, CompleteAbort), again with a compare-and-set.
A group's decided offsets are applied by the broker coordinating the group: at once when it
is this one, else when its coordinator next reads them (OffsetFetch, TxnOffsetCommit) or in
its checks.

The checks (``transactions.check-interval-ms``) abort transactions past their timeout,
finish decisions whose markers a stopped broker left unwritten, and expire idle ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.exceptions import RedisError

from korvet.core import coordinator as core
from korvet.core import transactions as rules
from korvet.core.errors import ErrorCode
from korvet.core.produce import AppendStatus, append_refusal
from korvet.core.topics import trim_policy
from korvet.core.transactions import Decision, Step, TxnRecord
from korvet.protocol.records import control_batch
from korvet.server.coordinator import CoordinatorUnavailable, NotCoordinator
from korvet.server.services import Services
from korvet.storage import entries
from korvet.storage.redis_store import ProducerBatch
from korvet.storage.transactions import PendingOffsets, TxnOffsetStore, TxnStore

log = logging.getLogger("korvet.transactions")

Decide = Callable[[TxnRecord | None, int | None], Step]

_RACES = 20  # compare-and-set attempts before the client is told to retry
_DECIDED_WAIT_MS = 1000  # how long an implied add waits for the last decision to complete
_DECIDED_POLL_MS = 20
_MARKER_BACKOFF_MS = (50, 2000)


class TransactionCoordinator:
    """One per tenant (``services.part(TransactionCoordinator)``)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        settings = services.settings.transactions
        self.max_timeout_ms = settings.max_timeout_ms
        self.expiration_ms = settings.id_expiration_ms
        self.check_interval_ms = settings.check_interval_ms
        client, keyspace = services.store.redis, services.store.ks
        self.records = TxnStore(client, keyspace)
        self.offsets = TxnOffsetStore(client, keyspace)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # id -> lock, its users
        self._finishing: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._checks: asyncio.Task[None] | None = None

    # --- steps ---------------------------------------------------------------------------

    async def run(self, transactional_id: str, decide: Decide) -> Step:
        """Run a step until its record is written (or it writes none); a written decision's
        markers go out in the background. The step as written (its record's version set)."""
        self._start_checks()
        # One step at a time per id on this broker (fewer lost races); the lock goes with the
        # last request that waited for it.
        lock, users = self._locks.get(transactional_id, (asyncio.Lock(), 0))
        self._locks[transactional_id] = (lock, users + 1)
        try:
            async with lock:
                return await self._run(transactional_id, decide)
        finally:
            lock, users = self._locks[transactional_id]
            if users <= 1:
                del self._locks[transactional_id]
            else:
                self._locks[transactional_id] = (lock, users - 1)

    async def _run(self, transactional_id: str, decide: Decide) -> Step:
        for _ in range(_RACES):
            record = await self.records.read(transactional_id)
            step = decide(record, None)
            if step.needs_producer_id:
                step = decide(record, await self.services.store.next_producer_id())
            read_version = record.version if record is not None else 0
            if step.delete:
                if await self.records.delete(transactional_id, read_version):
                    return step
                continue
            if step.record is None:
                if record is not None and record.state.ending:
                    self._finish(record)  # a decision still unfinished: help it along
                return step
            written = await self.records.write(step.record, read_version)
            if written is None:
                continue  # another write came first: decide again on what it wrote
            if written.state.ending:
                self._finish(written)
            return Step(step.error, written, producer_id=step.producer_id,
                        producer_epoch=step.producer_epoch,
                        partition_errors=step.partition_errors)
        log.warning("transactional id %r: %d writes raced; the client retries",
                    transactional_id, _RACES)
        return Step(ErrorCode.CONCURRENT_TRANSACTIONS)

    async def run_when_decided(self, transactional_id: str, decide: Decide) -> Step:
        """``run``, waiting out a decision still being written (CONCURRENT_TRANSACTIONS) for
        up to ``_DECIDED_WAIT_MS``: a transactions v2 producer starts its next transaction as
        soon as EndTxn is answered, while the markers of the last are still being written,
        and its writes would otherwise go back to it to be retried after its backoff (Kafka's
        broker retries the implied add too: add.partitions.to.txn.retry.backoff.max.ms)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DECIDED_WAIT_MS / 1000
        while True:
            step = await self.run(transactional_id, decide)
            left = deadline - loop.time()
            if step.error is not ErrorCode.CONCURRENT_TRANSACTIONS or left <= 0:
                return step
            finishing = [t for (tid, _), t in self._finishing.items() if tid == transactional_id]
            if finishing:  # this broker writes the markers: wait for them
                await asyncio.wait(finishing, timeout=left)
            else:
                await asyncio.sleep(min(left, _DECIDED_POLL_MS / 1000))

    async def record(self, transactional_id: str) -> TxnRecord | None:
        return await self.records.read(transactional_id)

    # --- markers -------------------------------------------------------------------------

    def _finish(self, record: TxnRecord) -> None:
        """Send a decision's markers and complete it, once per decision on this broker."""
        key = (record.transactional_id, record.version)
        if key in self._finishing:
            return
        task = asyncio.create_task(self._send_markers(rules.decision_of(record)),
                                   name=f"korvet-txn-markers-{record.transactional_id}")
        self._finishing[key] = task
        task.add_done_callback(lambda _: self._finishing.pop(key, None))

    async def _send_markers(self, decision: Decision) -> None:
        pending: set[tuple[str, int] | str] = {*decision.partitions, *decision.groups}
        delay = _MARKER_BACKOFF_MS[0]
        while pending:
            for participant in sorted(pending, key=str):
                try:
                    done = (await self._group_marker(decision, participant)
                            if isinstance(participant, str)
                            else await self._partition_marker(decision, *participant))
                except (RedisError, OSError) as exc:
                    log.warning("marker of %r for %s: %s (sent again)",
                                decision.transactional_id, participant, exc)
                    done = False
                if done:
                    pending.discard(participant)
            if not pending:
                break
            await asyncio.sleep(delay / 1000)
            delay = min(delay * 2, _MARKER_BACKOFF_MS[1])
            try:
                record = await self.records.read(decision.transactional_id)
            except (RedisError, OSError):
                continue
            if record is None or record.version != decision.coordinator_epoch:
                return  # completed (or taken further) by another broker
        now = self.services.now_ms()
        await self.run(decision.transactional_id,
                       lambda record, _pid: rules.complete(record, decision, now))

    async def _partition_marker(self, decision: Decision, topic_name: str, index: int) -> bool:
        """The marker appended to one partition; True once it is there (or cannot be)."""
        status = await self._append_marker(decision, topic_name, index)
        if status in (AppendStatus.FENCED, AppendStatus.BAD_EPOCH):
            log.warning("marker of %r (producer %d epoch %d) refused by %s-%d: %s",
                        decision.transactional_id, decision.producer_id,
                        decision.producer_epoch, topic_name, index, status.value)
        # not replicated yet, or the partition is full: sent again
        return status not in (AppendStatus.NOT_REPLICATED, AppendStatus.FULL)

    async def write_marker(self, decision: Decision, topic_name: str, index: int) -> ErrorCode:
        """WriteTxnMarkers (Kafka's admin abort): one marker, and what it met."""
        try:
            status = await self._append_marker(decision, topic_name, index)
        except (RedisError, OSError) as exc:
            log.warning("WriteTxnMarkers to %s-%d: %s", topic_name, index, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        if status is None or status in (AppendStatus.NO_TOPIC, AppendStatus.NO_PARTITION):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if status in (AppendStatus.OK, AppendStatus.DUPLICATE):
            return ErrorCode.NONE
        refusal = append_refusal(status, topic_name, index, decision.producer_id,
                                 decision.producer_epoch, -1)
        return refusal.code if refusal is not None else ErrorCode.NONE

    async def _append_marker(self, decision: Decision, topic_name: str,
                             index: int) -> AppendStatus | None:
        """Append a marker to a partition; None when the partition is gone."""
        services = self.services
        topic = await services.topics.get(topic_name)
        if topic is None or not 0 <= index < topic.partitions:
            return None  # deleted since: nothing to end there
        now = services.now_ms()
        if topic.config.stores_batches:
            packed = entries.pack_batch(1, now, control_batch(
                decision.producer_id, decision.producer_epoch, decision.commit,
                decision.coordinator_epoch, now))
        else:
            packed = entries.pack_entry(entries.marker_fields(
                decision.commit, decision.producer_id, decision.producer_epoch,
                decision.coordinator_epoch, now))
        producer = ProducerBatch.of_marker(decision.producer_id, decision.producer_epoch,
                                           decision.commit, decision.coordinator_epoch,
                                           decision.tv2)
        stream = services.store.stream_key(topic.name, index)
        services.notifier.changed(stream)
        try:
            result = await services.store.append(
                topic, index, packed, 1, now, trim_policy(topic.config, now, packed.size, 1,
                                                          entries=1),
                producer, replicated=True)
        finally:
            services.notifier.changed(stream)
        return result.status

    async def _group_marker(self, decision: Decision, group: str) -> bool:
        verdict = await self.offsets.marker(group, decision.producer_id, decision.producer_epoch,
                                            decision.commit, decision.tv2,
                                            decision.coordinator_epoch)
        if verdict in ("FENCED", "BAD_EPOCH"):
            log.warning("marker of %r (producer %d epoch %d) refused by group %r",
                        decision.transactional_id, decision.producer_id,
                        decision.producer_epoch, group)
        with contextlib.suppress(RedisError, OSError, NotCoordinator, CoordinatorUnavailable):
            await self.apply_decided(group)  # else its coordinator does, when it next looks
        return True

    # --- a group's offsets of transactions -------------------------------------------------

    async def apply_decided(self, group: str) -> list[PendingOffsets]:
        """Apply the group's decided offsets, when this broker coordinates the group: a
        committed transaction's become the group's committed offsets (persisted as any
        commit), an aborted one's are dropped. Returns what stays pending."""
        coordinator = self.services.coordinator
        pending = await self.offsets.pending(group)
        if coordinator is None or not coordinator.owns(group):
            return pending
        left = []
        for entry in pending:
            if entry.decided is None:
                left.append(entry)
                continue
            if entry.decided == "COMMIT" and entry.offsets:
                reply = await coordinator.request(core.OffsetCommit(
                    coordinator.next_request_id(), group, "", None, -1,
                    tuple(core.OffsetToCommit(t, p, o, m, e) for t, p, o, m, e in entry.offsets),
                    transactional=True))
                if not isinstance(reply, core.OffsetCommitReply):
                    left.append(entry)
                    continue
            await self.offsets.applied(group, entry)
        return left

    # --- checks --------------------------------------------------------------------------

    def _start_checks(self) -> None:
        if self._checks is None and self.check_interval_ms > 0:
            self._checks = asyncio.create_task(self._check_loop(), name="korvet-txn-checks")

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            try:
                await self.check_once()
            except (RedisError, OSError) as exc:
                log.warning("transaction checks: %s", exc)

    async def check_once(self) -> None:
        """One round: time out, finish and expire (the checks' order for each id)."""
        for transactional_id in await self.records.ids():
            record = await self.records.read(transactional_id)
            if record is None:
                continue
            now = self.services.now_ms()
            if record.state.ending:
                if now - record.updated_ms >= self.check_interval_ms:
                    self._finish(record)
                continue
            timed_out = await self.run(transactional_id, _timing_out(now))
            if timed_out.record is not None:
                log.info("transactional id %r: transaction of producer %d open for %d ms, past "
                         "its timeout of %d ms: fenced (now epoch %d) and aborted",
                         transactional_id, timed_out.record.producer_id,
                         now - timed_out.record.started_ms, timed_out.record.timeout_ms,
                         timed_out.record.producer_epoch)
            await self.run(transactional_id, _expiring(now, self.expiration_ms))

    async def close(self) -> None:
        tasks = [t for t in (self._checks, *self._finishing.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _timing_out(now: int) -> Decide:
    return lambda record, _pid: rules.time_out(record, now)


def _expiring(now: int, expiration_ms: int) -> Decide:
    return lambda record, _pid: rules.expire(record, now, expiration_ms)
