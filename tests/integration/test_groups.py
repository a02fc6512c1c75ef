"""Consumer groups with real clients: rebalances, crashes, restarts, committed offsets.

For each of confluent-kafka, kafka-python, aiokafka and the Java consumer: three
consumers in one group on a 6-partition topic holding 30,000 records. Members
join one by one (a rebalance each), one leaves, one is killed with SIGKILL (a
rebalance after its session timeout), and two replacements join; every record is
consumed. From the broker's event log, no partition is owned by two members in one
generation. ``kafka-consumer-groups --describe`` shows the members and lag 0.
Then all consumers stop and start again, and separately the broker restarts: both
times the group resumes exactly at its committed offsets. The broker's event log
replays through the machine, and TLC finds it to be a behaviour of the spec
(``korvet spec validate``), while hand-edited copies of it are not.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from korvet.core.offsets import DENSE
from korvet.jvm.java_clients import (
    CONSOLE_CONSUMER_MAIN,
    RECORD_SEPARATOR,
    KafkaJavaTools,
    parse_console_records,
)
from korvet.process import stop_process
from korvet.verification.replay import replay
from korvet.verification.validate import summary, validate
from tests.conftest import ROOT, KorvetProcess
from tests.integration import clients
from tests.integration.test_clients import create_topic
from tests.support.event_logs import VALIDATED, tamper_persisted, tamper_sync_assignment

pytestmark = [pytest.mark.clients, pytest.mark.slow]

RECORDS = 30_000
PARTITIONS = 6
SESSION_MS = 6000
CLIENTS = ["confluent-kafka", "kafka-python", "aiokafka", "java"]


@dataclass
class Member:
    """One consumer process of the group."""

    client: str
    bootstrap: str
    topic: str
    group: str
    out: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Member:
        if self.client == "java":
            tools = KafkaJavaTools(self.bootstrap)
            args = tools.console_consumer_args(
                self.topic, group=self.group, idle_timeout_ms=None, properties={
                    "session.timeout.ms": str(SESSION_MS), "heartbeat.interval.ms": "500",
                    "enable.auto.commit": "true", "auto.commit.interval.ms": "200",
                    "auto.offset.reset": "earliest", "client.id": f"java-{self.group}",
                })
            command = tools.command(CONSOLE_CONSUMER_MAIN, args)
        else:
            command = [sys.executable, "-m", "tests.integration.group_worker", self.client,
                       self.bootstrap, self.topic, self.group, str(self.out), str(SESSION_MS)]
        log = self.out.with_suffix(".log").open("ab")
        stdout = self.out.open("ab") if self.client == "java" else log
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=stdout, stderr=log,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def consumed(self) -> list[tuple[int, int, str]]:
        """(partition, offset, key) of every record this member printed or wrote."""
        if not self.out.is_file():
            return []
        text = self.out.read_text(errors="replace")
        if self.client == "java":
            complete = text[:text.rfind(RECORD_SEPARATOR) + 1] if RECORD_SEPARATOR in text else ""
            return [(r.partition, r.offset, r.key or "") for r in parse_console_records(complete)]
        found = []
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short by SIGKILL
            if "p" in row:
                found.append((row["p"], row["o"], row["k"]))
        return found


@dataclass
class Scenario:
    broker: KorvetProcess
    client: str
    topic: str
    group: str
    work: Path
    members: list[Member] = field(default_factory=list)
    expected: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (partition, offset)

    def member(self) -> Member:
        index = len(self.members)
        member = Member(self.client, self.broker.bootstrap, self.topic, self.group,
                        self.work / f"member-{index}.out").start()
        self.members.append(member)
        return member

    def produce(self, count: int, prefix: str) -> None:
        records = [clients.Rec(i % PARTITIONS, f"{prefix}-{i}".encode(), b"v" * 40, (),
                               int(time.time() * 1000)) for i in range(count)]
        told = clients.confluent_produce(self.broker.bootstrap, self.topic, records)
        for record, position in zip(records, told, strict=True):
            assert record.key is not None
            self.expected[record.key.decode()] = position

    def produce_slowly(self, count: int, prefix: str, chunks: int = 20) -> None:
        """``count`` records in ``chunks`` steps, half a second apart."""
        size = count // chunks
        for chunk in range(chunks):
            records = [clients.Rec(i % PARTITIONS, f"{prefix}-{i}".encode(), b"v" * 40, (),
                                   int(time.time() * 1000))
                       for i in range(chunk * size, (chunk + 1) * size)]
            told = clients.confluent_produce(self.broker.bootstrap, self.topic, records)
            for record, position in zip(records, told, strict=True):
                assert record.key is not None
                self.expected[record.key.decode()] = position
            time.sleep(0.5)

    def wait_stable(self, members: int, timeout: float = 60) -> None:
        """Until DescribeGroups shows the group Stable with this many members."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})

        def stable() -> bool:
            described = admin.describe_consumer_groups([self.group])[self.group].result(10)
            return bool(described.state.name == "STABLE" and len(described.members) == members)
        self.wait_for(f"the group to be Stable with {members} members", stable, timeout)

    def consumed(self) -> dict[str, set[tuple[int, int]]]:
        seen: dict[str, set[tuple[int, int]]] = defaultdict(set)
        for member in self.members:
            for partition, offset, key in member.consumed():
                seen[key].add((partition, offset))
        return seen

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.5)
        logs = "\n".join(f"{m.out.name}: {m.out.with_suffix('.log').read_text()[-1500:]}"
                         for m in self.members if m.out.with_suffix(".log").is_file())
        raise AssertionError(f"timed out waiting for {what}\n{logs}\nbroker:\n"
                             f"{self.broker.log_tail()}")

    def all_consumed(self, keys: set[str]) -> bool:
        return keys <= self.consumed().keys()

    def stop_all(self) -> None:
        for member in self.members:
            member.stop()


def committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=20)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def decode_assignment(data: bytes) -> set[tuple[str, int]]:
    """Kafka's ConsumerProtocolAssignment: version, [topic, [partition]], user data."""
    if not data:
        return set()
    position = 2
    (topics,) = struct.unpack_from(">i", data, position)
    position += 4
    owned = set()
    for _ in range(max(topics, 0)):
        (length,) = struct.unpack_from(">h", data, position)
        topic = data[position + 2:position + 2 + length].decode()
        position += 2 + length
        (count,) = struct.unpack_from(">i", data, position)
        position += 4
        for _ in range(count):
            (partition,) = struct.unpack_from(">i", data, position)
            owned.add((topic, partition))
            position += 4
    return owned


def assignments_by_generation(event_log: Path, group: str) -> dict[int, dict[str, set[Any]]]:
    """For each generation, the partition set each member was given (SyncGroup replies sent).

    A member may be answered more than once in one generation (it re-sends SyncGroup, or
    rejoins a Stable group unchanged and syncs again, as Kafka allows); it must then be
    given the same partitions each time."""
    synced_by: dict[int, tuple[int, str]] = {}  # request id -> (generation, member id)
    found: dict[int, dict[str, set[Any]]] = defaultdict(dict)
    for line in event_log.read_text().splitlines():
        entry = json.loads(line)
        event = entry.get("event") or {}
        if event.get("type") == "SyncGroup" and event.get("group_id") == group:
            synced_by[event["request_id"]] = (event["generation_id"], event["member_id"])
        for effect in entry.get("sent", []):  # the replies the broker actually sent
            if effect.get("type") == "SyncGroupReply" and effect["error"] == 0 and \
                    effect["request_id"] in synced_by:
                generation, member = synced_by[effect["request_id"]]
                owned = decode_assignment(base64.b64decode(effect["assignment"]))
                earlier = found[generation].setdefault(member, owned)
                assert earlier == owned, (
                    f"generation {generation}: member {member} was given {sorted(earlier)} "
                    f"and then {sorted(owned)}")
    return found


@pytest.mark.spec("GroupCoordinatorTrace", *VALIDATED)
@pytest.mark.spec("GroupCoordinatorTrace", "MatchLoad", "MatchStop", note="the broker restart")
@pytest.mark.spec("GroupCoordinatorTrace", "EnvStep",
                  note="the embedded Redis restarts with the broker")
@pytest.mark.parametrize("client", CLIENTS)
def test_three_consumers_rebalance_and_resume(client: str, tmp_path: Path, unique_name: str) -> None:  # noqa: PLR0915 -- one end-to-end scenario
    event_log = tmp_path / "coordinator.ndjson"
    broker = KorvetProcess(tmp_path / "korvet", extra_args=[
        "--groups-event-log", str(event_log), "--groups-initial-rebalance-delay-ms", "500"])
    broker.start()
    scenario = Scenario(broker, client, unique_name, f"group-{unique_name}", tmp_path)
    try:
        create_topic(broker.bootstrap, unique_name, partitions=PARTITIONS)
        # Records keep arriving for ~15 s while members come and go.
        producer = threading.Thread(target=scenario.produce_slowly, args=(RECORDS, "first"))
        producer.start()
        scenario.member()
        scenario.wait_stable(1)
        scenario.member()
        scenario.wait_stable(2)
        leaving = scenario.member()
        scenario.wait_stable(3)
        leaving.stop()  # LeaveGroup: a rebalance at once
        scenario.wait_stable(2, timeout=SESSION_MS / 1000 - 1)
        crashing = scenario.members[1]
        crashed_at = time.monotonic()
        crashing.kill()  # no LeaveGroup: the member is removed when its session times out
        scenario.wait_stable(1)
        noticed_after = time.monotonic() - crashed_at
        assert noticed_after >= SESSION_MS / 1000 * 0.8, (
            f"a crashed member was removed after {noticed_after:.1f}s, before its session "
            "timeout")
        scenario.member()
        scenario.member()
        scenario.wait_stable(3)
        producer.join()
        first_keys = {k for k in scenario.expected if k.startswith("first-")}
        assert len(first_keys) == RECORDS
        scenario.wait_for("every record to be consumed", lambda: scenario.all_consumed(first_keys),
                          timeout=180)
        seen = scenario.consumed()
        for key in first_keys:
            assert scenario.expected[key] in seen[key], f"{key} was read at another offset"

        generations = assignments_by_generation(event_log, scenario.group)
        assert len(generations) >= 6, f"only {len(generations)} generations: rebalances missing"
        for generation, owned in generations.items():
            flat = [tp for partitions in owned.values() for tp in partitions]
            assert len(flat) == len(set(flat)), f"generation {generation}: a partition twice"

        # kafka-consumer-groups --describe: the three live members and no lag once committed.
        tools = KafkaJavaTools(broker.bootstrap)

        def described_without_lag() -> bool:
            rows = tools.describe_group(scenario.group)
            members = {r.consumer_id for r in rows if r.consumer_id}
            return len(rows) == PARTITIONS and len(members) == 3 and all(
                r.lag == 0 for r in rows)
        scenario.wait_for("describe to show 3 members and lag 0", described_without_lag,
                          timeout=90)

        # All consumers stop, more records arrive, the group comes back: it resumes exactly.
        scenario.stop_all()
        before = committed(broker.bootstrap, unique_name, scenario.group)
        # Redis shows the group's progress: XINFO GROUPS on each partition stream names the
        # group, positioned just before its committed offset.
        codec = DENSE  # the topic has dense offsets, the default of new topics
        for partition in range(PARTITIONS):
            info = subprocess.run(["redis-cli", "-u", broker.redis_url, "--raw", "XINFO",
                                   "GROUPS", f"korvet:{{{unique_name}:{partition}}}:stream"],
                                  capture_output=True, text=True, check=True).stdout.split("\n")
            assert scenario.group in info, f"partition {partition}: no Redis group"
            last_delivered = info[info.index("last-delivered-id") + 1]
            assert str(codec.decode(before[partition] - 1)) == last_delivered
        scenario.produce(600, "second")
        _resume_and_check(scenario, before, "second")

        # The broker restarts between two runs of the group: the same again.
        scenario.stop_all()
        before = committed(broker.bootstrap, unique_name, scenario.group)
        broker.restart()
        assert committed(broker.bootstrap, unique_name, scenario.group) == before, (
            "committed offsets changed across the broker restart")
        scenario.produce(600, "third")
        _resume_and_check(scenario, before, "third")
        scenario.stop_all()

        # The broker's own record of every coordinator step replays through the machine with
        # the same effects, and every spec invariant held throughout (korvet spec replay).
        lines = event_log.read_text().splitlines()
        report = replay(lines)
        assert report.ok, "\n".join(report.problems)
        assert report.segments == 2 and report.steps > 50
        _validate_under_tlc(lines, scenario.group, tamper=client == "confluent-kafka")
    finally:
        scenario.stop_all()
        broker.stop()


def _validate_under_tlc(lines: list[str], group: str, *, tamper: bool) -> None:
    """TLC: the log is a behaviour of spec/GroupCoordinatorDurable.tla (korvet spec validate),
    and (with ``tamper``: for one client, each edit costs a TLC run) hand-edited copies are
    not: a member told another assignment than the leader gave it, and a commit
    acknowledged although its write failed."""
    started = time.monotonic()
    validation = validate(lines)
    checks = {g.group_id: g for g in validation.groups}
    assert group in checks, sorted(checks)
    for check in validation.groups:
        assert check.ok, "\n".join(summary(check))
    check = checks[group]
    print("\n" + "\n".join(summary(check)) + f"\n(validated in {time.monotonic() - started:.1f}s)")
    assert not check.uncovered, check.uncovered
    assert sum(s.kinds.get("load", 0) for s in check.segments) == 1  # the broker's restart
    if not tamper:
        return
    for edited, number in (tamper_sync_assignment(lines),
                           tamper_persisted(lines, "OffsetCommit")):
        refused = validate(edited, group, explain=False)
        assert refused.groups[0].failed_lines == [number], summary(refused.groups[0])


def _resume_and_check(scenario: Scenario, before: dict[int, int], prefix: str) -> None:
    new_keys = {k for k in scenario.expected if k.startswith(f"{prefix}-")}
    runs = [scenario.member() for _ in range(3)]
    scenario.wait_for(f"the {prefix} records after the restart",
                      lambda: scenario.all_consumed(new_keys), timeout=120)
    resumed: dict[int, int] = {}
    for member in runs:
        for partition, offset, _key in member.consumed():
            resumed[partition] = min(offset, resumed.get(partition, offset))
    for partition in range(PARTITIONS):
        # Offsets are not dense: resuming at the committed offset means reading, first, the
        # first record at or after it, and nothing before it again.
        due = min(o for p, o in scenario.expected.values()
                  if p == partition and o >= before[partition])
        assert resumed.get(partition) == due, (
            f"partition {partition} resumed at {resumed.get(partition)}; committed "
            f"{before[partition]}, first record after it {due}")
