"""One fault run: start a topology, run the clients, inject faults, drain, read back, check.

The scheduler runs in the calling thread: it waits a random gap, takes the next fault
kind from a shuffled deck (every kind once before any twice, so a short run still meets
each), injects it and heals it, until the run's time is up, and past it until every kind
asked for was injected once (a slow restart must not leave a kind out). All randomness comes from
``--seed``: the same seed gives the same faults in the same order with the same durations
(not the same history: the clients and the brokers keep their own time).

After the last fault everything is healed, the producers stop and wait for every delivery
report, the group reads up to the end, and a fresh reader reads every partition back: the
checker (``korvet.faults.history.check``) judges the whole history.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from korvet.bench.brokers import create_topic
from korvet.faults.history import (
    COMMITTED,
    KIND_TITLES,
    KINDS,
    Acked,
    Cost,
    Report,
    TxnEnded,
    check,
    cost,
    to_json,
)
from korvet.faults.kafka_log import markers_skipped
from korvet.faults.targets import TOPOLOGIES, FaultError, KafkaTarget, Target
from korvet.faults.transactional import TransactionalWorkload
from korvet.faults.workload import Recorder, Workload, read_back

DETAILS_PER_KIND = 5


@dataclass(frozen=True)
class RunParams:
    topology: str
    seconds: float
    seed: int
    faults: tuple[str, ...] | None = None  # None: every fault the topology takes by default
    partitions: int = 4
    rate: float = 100.0  # records per second per producer
    gap: tuple[float, float] = (1.0, 4.0)  # seconds between two faults
    history: Path | None = None  # write the history here, one JSON event a line
    work_dir: Path | None = None
    keep: bool = False  # keep the work directory (brokers' logs) even when the run is clean
    client_log: bool = False  # the producers' librdkafka debug log in the work directory
    workload: str = "records"  # or "transactions": transactional producers, read_committed


@dataclass
class RunResult:
    topology: str
    seed: int
    seconds: float
    report: Report
    faults: Counter[str] = field(default_factory=Counter)
    costs: dict[str, list[Cost]] = field(default_factory=dict)  # per fault kind, one per fault
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the run itself failed (not the checker)
    work_dir: Path | None = None

    @property
    def passed(self) -> bool:
        return self.report.clean and not self.errors

    def summary(self) -> dict[str, object]:
        report = self.report
        return {
            "topology": self.topology, "seed": self.seed, "seconds": round(self.seconds, 1),
            "sent": report.sent, "acknowledged": report.acknowledged, "failed": report.failed,
            "stored": report.stored, "consumed": report.consumed, "commits": report.commits,
            "allowed_duplicates": report.allowed_duplicates,
            "allowed_reorders": report.allowed_reorders, "faults": dict(self.faults),
            "costs": {kind: _worst(costs) for kind, costs in sorted(self.costs.items())},
            "anomalies": dict(report.by_kind), "errors": self.errors,
            "transactions": dict(report.transactions),
            "records_in_transactions": report.in_transactions,
            "kafka_unmarked_transactions": report.unmarked,
            "allowed_unmarked": dict(Counter(a.kind for a in report.allowed_unmarked)),
        }


def _worst(costs: list[Cost]) -> dict[str, float]:
    return {"ack_wait_max_s": round(max(c.ack_wait for c in costs), 2),
            "read_gap_max_s": round(max(c.read_gap for c in costs), 2),
            "failed": sum(c.failed for c in costs)}


def run(params: RunParams, say: Callable[[str], None] = print) -> RunResult:
    work_dir = params.work_dir or Path(tempfile.mkdtemp(prefix="korvet-faults-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    target = TOPOLOGIES[params.topology](work_dir)
    kinds = params.faults if params.faults is not None else target.kinds
    unknown = [k for k in kinds if k not in (*target.kinds, *target.extra_kinds)]
    if unknown:
        raise FaultError(f"{params.topology} cannot take {', '.join(unknown)}; it takes "
                         f"{', '.join((*target.kinds, *target.extra_kinds))}")
    recorder = Recorder()
    started = time.monotonic()
    result: RunResult | None = None
    try:
        say(f"korvet faults: {params.topology}, seed {params.seed}, {params.seconds:.0f} s, "
            f"faults {', '.join(kinds) or 'none'}; work directory {work_dir}")
        target.start()
        topic = group = f"faults-{params.seed}"
        create_topic(target.bootstrap, topic, params.partitions)
        workload: Workload | TransactionalWorkload
        if params.workload == "transactions":
            workload = TransactionalWorkload(target.bootstrap, topic, params.partitions,
                                             recorder, seed=params.seed, rate=params.rate,
                                             client_log=work_dir / "producers.log"
                                             if params.client_log else None)
        else:
            workload = Workload(target.bootstrap, topic, group, params.partitions, recorder,
                                rate=params.rate, client_log=work_dir / "producers.log"
                                if params.client_log else None)
        workload.start()
        windows, notes = _schedule(target, kinds, params, recorder, say)
        notes += target.heal()
        say("drain: every fault healed; producers finish, the group reads to the end")
        if not workload.stop_producers(150):
            notes.append("producers still had records without delivery report after 150 s")
        _wait_for_group(workload, target.bootstrap, topic, params.partitions, 120)
        if not workload.stop_members(60):
            notes.append("group members did not stop within 60 s")
        notes += read_back(target.bootstrap, topic,
                           group if isinstance(workload, Workload) else None,
                           params.partitions, recorder)
        if isinstance(target, KafkaTarget) and isinstance(workload, TransactionalWorkload):
            notes += _kafka_skipped_markers(target, workload, recorder)
        report = check(recorder.events)
        costs: dict[str, list[Cost]] = {}
        for kind, begun, healed in windows:
            costs.setdefault(kind, []).append(cost(recorder.events, begun, healed))
        result = RunResult(params.topology, params.seed, time.monotonic() - started, report,
                           Counter(kind for kind, _, _ in windows), costs,
                           notes + workload.notes, list(workload.errors), work_dir)
        return result
    finally:
        if params.history is not None:
            params.history.write_text("".join(to_json(e) + "\n" for e in recorder.events))
        target.stop()
        if result is not None and result.passed and not params.keep and params.work_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)


def _kafka_skipped_markers(target: KafkaTarget, workload: TransactionalWorkload,
                           recorder: Recorder) -> list[str]:
    """The transactions Kafka completed without some of their markers, from its log, into
    the history; notes on those it did not name."""
    ids = {workload.transactional_id(name): name for name in workload.producer_names}
    with target.log_path.open(errors="replace") as lines:
        skips, notes = markers_skipped(lines, workload.topic, ids)
    for skip in skips:
        recorder.add(skip)
    return notes


def _schedule(target: Target, kinds: tuple[str, ...], params: RunParams, recorder: Recorder,
              say: Callable[[str], None]) -> tuple[list[tuple[str, float, float]], list[str]]:
    """Inject faults until the run's time is up; returns each fault's kind, start and the
    moment it was healed, and the notes of the brokers that ended by themselves."""
    rng = random.Random(params.seed)
    windows: list[tuple[str, float, float]] = []
    notes: list[str] = []
    start = time.monotonic()
    deadline = start + params.seconds
    deck: list[str] = []
    unmet = set(kinds)  # every kind asked for is injected at least once, however slow the
    while kinds:        # machine (a restart may outlast the run's time): then the run is longer
        gap = rng.uniform(*params.gap)
        if time.monotonic() + gap >= deadline:
            if not unmet:
                break
            gap = min(gap, params.gap[0])
        time.sleep(gap)
        if not deck:
            deck = list(kinds)
            rng.shuffle(deck)
        kind = deck.pop()
        unmet.discard(kind)
        begun = time.monotonic()
        what = target.inject(kind, rng)
        windows.append((kind, begun, time.monotonic()))
        at = begun - start
        say(f"  [{at:6.1f} s] {kind}: {what} ({_so_far(recorder)})")
        for note in target.heal():
            notes.append(note)
            say(f"  note: {note}")
    time.sleep(max(0.0, deadline - time.monotonic()))
    return windows, notes


def _so_far(recorder: Recorder) -> str:
    events = list(recorder.events)
    acked = sum(1 for e in events if isinstance(e, Acked))
    commits = sum(1 for e in events if isinstance(e, TxnEnded) and e.outcome == COMMITTED)
    return (f"transactions committed so far: {commits}" if commits
            else f"acknowledged so far: {acked}")


def _wait_for_group(workload: Workload | TransactionalWorkload, bootstrap: str, topic: str, partitions: int,
                    timeout: float) -> None:
    """Until the group has read every partition to its high watermark (or ``timeout``)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-probe",
                      "log_level": 2})
    try:
        ends = {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
    except KafkaException:
        return  # the read-back says what is missing
    finally:
        probe.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(workload.progress.get(p, 0) >= end for p, end in ends.items() if end > 0):
            return
        time.sleep(0.5)


def _unmarked_lines(report: Report) -> list[str]:
    if not report.unmarked:
        return []
    lines = [f"  Kafka completed {report.unmarked} transaction(s) without their markers on some "
             f"partitions (its log: no leader found just after a restart; a Kafka bug, "
             f"docs/users/fault-runs.md#the-kafka-baseline): {len(report.allowed_unmarked)} "
             "anomalies of theirs allowed"]
    lines += [f"    {a.kind}: {a.detail}" for a in report.allowed_unmarked[:DETAILS_PER_KIND]]
    return lines


def render(result: RunResult) -> str:
    report = result.report
    lines = [f"{result.topology}, seed {result.seed}: {result.seconds:.0f} s"]
    if report.transactions:
        lines += [
            f"  transactions: {sum(report.transactions.values()):,} ({report.in_transactions:,} "
            "records); the client was told: "
            + ", ".join(f"{fate} {n:,}" for fate, n in sorted(report.transactions.items())),
            f"  records: {report.stored:,} readable at the end (read_committed); "
            f"{report.consumed:,} read by the read_committed readers",
        ]
    else:
        lines.append(f"  records: {report.sent:,} sent, {report.acknowledged:,} acknowledged, "
                     f"{report.failed:,} failed (outcome unknown); {report.stored:,} stored at "
                     f"the end; {report.consumed:,} read by the group, {report.commits:,} "
                     "commits accepted")
    what, readers = (("transactions", "the readers") if report.transactions
                     else ("records", "the group"))
    lines += [
        "  faults: " + (", ".join(f"{k} {n}" for k, n in sorted(result.faults.items())) or "none"),
        *(f"    {kind}: {what} sent during one waited up to {worst['ack_wait_max_s']:.1f} s for "
          f"their acknowledgement ({worst['failed']:.0f} given up); {readers} read nothing for "
          f"up to {worst['read_gap_max_s']:.1f} s"
          for kind, worst in ((k, _worst(c)) for k, c in sorted(result.costs.items()))),
    ]
    if not report.transactions:
        lines.append(f"  non-idempotent producer (allowed): {report.allowed_duplicates:,} "
                     f"duplicates (at least once), {report.allowed_reorders:,} records stored "
                     "after later ones")
    lines += _unmarked_lines(report)
    lines += [f"  note: {note}" for note in result.notes]
    lines += [f"  error: {error}" for error in result.errors]
    if report.clean:
        lines.append("  anomalies: none")
    else:
        lines.append("  anomalies: " + ", ".join(f"{k} {report.by_kind[k]}" for k in KINDS
                                                 if k in report.by_kind))
        for kind in KINDS:
            found = [a for a in report.anomalies if a.kind == kind]
            if found:
                lines.append(f"  {kind} ({KIND_TITLES[kind]}):")
                lines += [f"    {a.detail}" for a in found[:DETAILS_PER_KIND]]
                if len(found) > DETAILS_PER_KIND:
                    lines.append(f"    ... and {len(found) - DETAILS_PER_KIND} more")
    if not result.passed and result.work_dir is not None:
        lines.append(f"  brokers' logs kept in {result.work_dir}")
    return "\n".join(lines)
