"""Jepsen-style analysis of a history of sends and polls against a Kafka-like log.

A history is what producers and consumers observed, in the order it happened
(anchors §5.1, after jepsen.tests.kafka): each *send* of a unique value to a
partition, with the offset the broker acknowledged (or its failure), and each
*poll* of a consumer, with the (partition, offset, value) records it returned.
Consumers also record *assign* events (a new assignment, a seek, a restart):
order within a partition is only expected between two of those.

Offsets may be sparse (transaction markers in Kafka, ms-based ids in Korvet), so
nothing here assumes offset + 1 is the next record: the order of a partition is
the order of all offsets anyone observed in it, and "skipping" means passing over
one of those.

Anomalies (``analyse`` returns each with examples):

- ``inconsistent_offsets``: one (partition, offset) observed with two different values;
- ``duplicate``: one value stored at two different offsets (written twice);
- ``lost_write``: an acknowledged send at or below the highest offset any consumer
  read in its partition, that no consumer ever read;
- ``unseen``: an acknowledged send nobody read (only an anomaly once consumers have
  drained the partitions: ``drained=True``);
- ``nonmonotonic_send``: a producer's later acknowledged send to a partition got a
  lower offset than its earlier one;
- ``nonmonotonic_poll``: a consumer read an offset not above the one it read before
  in that partition (within one assignment);
- ``poll_skip``: a consumer went from offset a to offset b in a partition while some
  offset between a and b is known to hold a record (within one assignment).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Partition = tuple[str, int]

ANOMALIES = (
    "inconsistent_offsets",
    "duplicate",
    "lost_write",
    "unseen",
    "nonmonotonic_send",
    "nonmonotonic_poll",
    "poll_skip",
)


@dataclass(frozen=True, slots=True)
class Send:
    process: str
    partition: Partition
    value: str
    offset: int | None  # None: not acknowledged (failed or unknown)


@dataclass(frozen=True, slots=True)
class Poll:
    process: str
    records: tuple[tuple[Partition, int, str], ...]


@dataclass(frozen=True, slots=True)
class Assign:
    """A consumer's position may move freely from here on (new assignment, seek, restart)."""

    process: str
    partitions: tuple[Partition, ...] = ()  # empty: all


Op = Send | Poll | Assign


@dataclass
class History:
    """An append-only, thread-safe-enough (GIL: list.append is atomic) record of operations."""

    ops: list[Op] = field(default_factory=list)

    def send(self, process: str, partition: Partition, value: str, offset: int | None) -> None:
        self.ops.append(Send(process, partition, value, offset))

    def poll(self, process: str, records: Iterable[tuple[Partition, int, str]]) -> None:
        self.ops.append(Poll(process, tuple(records)))

    def assign(self, process: str, partitions: Iterable[Partition] = ()) -> None:
        self.ops.append(Assign(process, tuple(partitions)))


@dataclass
class Analysis:
    anomalies: dict[str, list[dict[str, Any]]]
    stats: dict[str, int]

    def found(self, allowed: Iterable[str] = ()) -> dict[str, list[dict[str, Any]]]:
        """The anomalies present, except ``allowed`` ones."""
        skip = set(allowed)
        return {name: cases for name, cases in self.anomalies.items() if cases and name not in skip}

    def summary(self, allowed: Iterable[str] = ()) -> str:
        found = self.found(allowed)
        if not found:
            return "no anomalies"
        return "; ".join(f"{name}: {self.stats.get(f'{name}_count', len(cases))} (e.g. {cases[0]})"
                         for name, cases in found.items())


def _fmt(partition: Partition) -> str:
    return f"{partition[0]}-{partition[1]}"


def analyse(history: History | Iterable[Op], *, drained: bool = False, examples: int = 5) -> Analysis:  # noqa: C901, PLR0912, PLR0915 -- one pass, one branch per Jepsen anomaly
    """Check a history for the anomalies listed in the module docstring."""
    ops = list(history.ops if isinstance(history, History) else history)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in ANOMALIES}

    def report(kind: str, **case: Any) -> None:
        if len(found[kind]) < examples:
            found[kind].append(case)
        counts[kind] += 1

    counts: dict[str, int] = defaultdict(int)
    sends = [op for op in ops if isinstance(op, Send)]
    polls = [op for op in ops if isinstance(op, Poll)]

    # What each (partition, offset) held, from acknowledgements and from reads.
    at: dict[tuple[Partition, int], set[str]] = defaultdict(set)
    where: dict[str, set[tuple[Partition, int]]] = defaultdict(set)
    for send in sends:
        if send.offset is not None:
            at[(send.partition, send.offset)].add(send.value)
            where[send.value].add((send.partition, send.offset))
    read_values: set[str] = set()
    max_read: dict[Partition, int] = {}
    for poll in polls:
        for partition, offset, value in poll.records:
            at[(partition, offset)].add(value)
            where[value].add((partition, offset))
            read_values.add(value)
            max_read[partition] = max(max_read.get(partition, offset), offset)

    for (partition, offset), values in sorted(at.items()):
        if len(values) > 1:
            report("inconsistent_offsets", partition=_fmt(partition), offset=offset, values=sorted(values))
    for value, places in sorted(where.items()):
        if len(places) > 1:
            report("duplicate", value=value, at=sorted(f"{_fmt(p)}@{o}" for p, o in places))

    for send in sends:
        if send.offset is None or send.value in read_values:
            continue
        highest = max_read.get(send.partition)
        if highest is not None and send.offset <= highest:
            report("lost_write", value=send.value, partition=_fmt(send.partition), offset=send.offset,
                   highest_read=highest)
        elif drained:
            report("unseen", value=send.value, partition=_fmt(send.partition), offset=send.offset)

    last_sent: dict[tuple[str, Partition], tuple[int, str]] = {}
    for send in sends:
        if send.offset is None:
            continue
        sender = (send.process, send.partition)
        earlier = last_sent.get(sender)
        if earlier is not None and send.offset <= earlier[0]:
            report("nonmonotonic_send", process=send.process, partition=_fmt(send.partition),
                   earlier=f"{earlier[1]}@{earlier[0]}", later=f"{send.value}@{send.offset}")
        last_sent[sender] = (send.offset, send.value)

    known: dict[Partition, list[int]] = defaultdict(list)
    for partition, offset in at:
        known[partition].append(offset)
    for offsets in known.values():
        offsets.sort()

    last_read: dict[tuple[str, Partition], int] = {}
    for op in ops:
        if isinstance(op, Assign):
            for key in [k for k in last_read if k[0] == op.process and
                        (not op.partitions or k[1] in op.partitions)]:
                del last_read[key]
            continue
        if not isinstance(op, Poll):
            continue
        for partition, offset, value in op.records:
            key = (op.process, partition)
            previous = last_read.get(key)
            if previous is not None:
                if offset <= previous:
                    report("nonmonotonic_poll", process=op.process, partition=_fmt(partition),
                           previous=previous, offset=offset, value=value)
                else:
                    offsets = known[partition]
                    index = bisect.bisect_right(offsets, previous)
                    if index < len(offsets) and offsets[index] < offset:
                        report("poll_skip", process=op.process, partition=_fmt(partition),
                               from_offset=previous, to_offset=offset, skipped=offsets[index])
            last_read[key] = offset

    acked = sum(1 for s in sends if s.offset is not None)
    stats = {
        "sends": len(sends), "acknowledged": acked, "polls": len(polls),
        "records_read": sum(len(p.records) for p in polls), "distinct_values_read": len(read_values),
        **{f"{k}_count": v for k, v in counts.items()},
    }
    return Analysis(found, stats)
