"""Share groups live: generated sequences of ShareFetch and ShareAcknowledge from two share
consumers of one share group on one partition, checked against a model of Kafka's share
partition (spec/SharePartition.tla) written here, independent of the code it judges.

Each sequence has its own topic (one partition, a record per batch) and share group (starting
at the earliest record, ``share.delivery.count.limit`` 3, so the limit is reached within a
run). Two members join with ShareGroupHeartbeat; each has its own connection and share
session; ShareFetch v2 in the ``record_limit`` acquire mode (``max_records`` a hard limit).
``ShareModel`` predicts every answer:

- ShareFetch acquires the lowest AVAILABLE records at or above the share-partition start
  offset, in offset order, at most ``max_records`` of them, each delivered once more (its
  delivery count in the answer); a fetch with nothing available acquires nothing. Korvet
  acquires as many as asked when there are; Kafka 4.3.1's acquisition follows its in-flight
  batches (records delivered apart, a redelivery and new records, come back in separate
  fetches), so its answer may be a shorter run of the same records;
- acknowledgements (in ShareAcknowledge, or piggybacked on a ShareFetch and applied before
  it acquires; on Kafka a record they release may or may not be acquired by that same
  fetch) of the member's own acquired records succeed: ACCEPT makes a record
  ACKNOWLEDGED, REJECT ARCHIVED, RELEASE AVAILABLE again, or ARCHIVED once its delivery
  count reached the limit; an acknowledgement of a record the member does not hold (another
  member's, or one not acquired) is INVALID_RECORD_STATE and changes nothing;
- DescribeShareGroupOffsets answers the share-partition start offset: the first offset
  that is not ACKNOWLEDGED or ARCHIVED (Korvet); Kafka 4.3.1 answers the start offset it
  last persisted, which it writes with each acknowledgement as it was before that
  acknowledgement moved it, so its answer trails by the last acknowledgement's move.

No lock expires during a run (Kafka's locks last 30 s; a run takes seconds). Before the run
the share partition is made ready: Kafka initializes it on the first fetch, so one record is
acquired and released first (the model starts with it AVAILABLE, delivered once).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.records import Rec, build_batch
from korvet.conformance.kafka.wire import WireClient, WireError
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.verification.live import actions as act
from korvet.verification.live.env import (
    Divergence,
    Environment,
    LiveError,
    ModelChecks,
    create_topic,
    error_label,
)
from korvet.verification.live.oracle import Flavour

MEMBERS = 2
LIMIT = 3  # share.delivery.count.limit of the run's group
ACCEPT, RELEASE, REJECT = 1, 2, 3
KINDS = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
# ShareFetch v2's acquire mode (KIP-1206): max_records a hard limit, as the model has it
# (batch_optimized, v1's only mode, may hand out a whole batch acquired together before)
RECORD_LIMIT = 1
VERSIONS: dict[int, int] = {ApiKey.SHARE_GROUP_HEARTBEAT: 1, ApiKey.SHARE_FETCH: 2,
                            ApiKey.SHARE_ACKNOWLEDGE: 1,
                            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0}
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = "AVAILABLE", "ACQUIRED", "ACKNOWLEDGED", "ARCHIVED"



@dataclass
class Record:
    state: str = AVAILABLE
    count: int = 0
    owner: int = -1


class ShareModel:
    """Kafka's share partition, one record per offset (spec/SharePartition.tla)."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.limit_hits = 0  # releases that archived a record at the delivery limit
        # Kafka's persisted start offset (DescribeShareGroupOffsets reads it): the share
        # partition writes its state with each acknowledgement, the start offset it had
        # before that acknowledgement moved it
        self.persisted = 0
        self.fetched_to = 0  # one past the highest offset ever acquired

    def spso(self) -> int:
        return next((o for o, r in enumerate(self.records)
                     if r.state not in (ACKNOWLEDGED, ARCHIVED)), len(self.records))

    def acquire(self, member: int, most: int,
                skip: Set[int] = frozenset()) -> list[tuple[int, int]]:
        """Acquire: (offset, delivery count) of what a fetch of ``most`` records gets (none
        of ``skip``)."""
        taken: list[tuple[int, int]] = []
        for offset, record in enumerate(self.records):
            if len(taken) == most:
                break
            if record.state == AVAILABLE and offset not in skip:
                record.state, record.owner = ACQUIRED, member
                record.count += 1
                taken.append((offset, record.count))
                self.fetched_to = max(self.fetched_to, offset + 1)
        return taken

    def preview(self, most: int, skip: Set[int] = frozenset()) -> list[tuple[int, int]]:
        """What ``acquire`` would hand out, without acquiring."""
        return [(o, r.count + 1) for o, r in enumerate(self.records)
                if r.state == AVAILABLE and o not in skip][:most]

    def held(self, member: int) -> list[int]:
        return [o for o, r in enumerate(self.records) if r.state == ACQUIRED and r.owner == member]

    def acknowledge(self, member: int, offsets: Sequence[int], kind: int) -> str:
        """Accept, Release or Reject of ``offsets`` by ``member``: the error it answers."""
        if not offsets or any(o >= len(self.records) or self.records[o].state != ACQUIRED
                              or self.records[o].owner != member for o in offsets):
            return "INVALID_RECORD_STATE"
        self.persisted = self.spso()
        for o in offsets:
            record = self.records[o]
            record.owner = -1
            if kind == ACCEPT:
                record.state = ACKNOWLEDGED
            elif kind == REJECT:
                record.state = ARCHIVED
            elif record.count >= LIMIT:
                record.state = ARCHIVED
                self.limit_hits += 1
            else:
                record.state = AVAILABLE
        return "NONE"


@dataclass
class Member:
    conn: WireClient
    member_id: str
    epoch: int = 0  # the share session's next epoch (0 opens it)
    acquired: list[int] = field(default_factory=list)


class ShareRun(ModelChecks):
    def __init__(self, env: Environment) -> None:
        self.env = env
        missing = [ApiKey(api).name for api, version in VERSIONS.items()
                   if api not in env.versions or env.versions[api][1] < version]
        if missing:
            raise LiveError(f"the share part needs share groups: the broker does not serve "
                            f"{', '.join(missing)}")
        tag = uuid.uuid4().hex[:10]
        self.topic, self.group = f"live-sh-{tag}", f"live-sh-{tag}"
        create_topic(env.host, env.port, env.versions, self.topic, 1)
        self.admin = WireClient(env.host, env.port, client_id="live-share",
                                timeout=env.reply_timeout)
        self.topic_id = self._topic_id()
        self._configure()
        self.members = [Member(WireClient(env.host, env.port, client_id=f"live-share-{i}",
                                          timeout=env.reply_timeout), str(uuid.uuid4()))
                        for i in range(MEMBERS)]
        self.model = ShareModel()
        self.counter = 0
        self.done: list[act.Action] = []
        for member in self.members:
            self._join(member)
        self._ready()
        env.stats.sequences += 1

    def close(self) -> None:
        for member in self.members:
            member.conn.close()
        self.admin.close()

    # -- calls ---------------------------------------------------------------------------

    def _call(self, conn: WireClient, api: int, version: int, **fields: Any) -> Any:
        try:
            response = conn.call(build_request(api, version, **fields), self.env.reply_timeout)
        except WireError as exc:
            raise Divergence(f"{ApiKey(api).name}: {exc}") from exc
        self.env.stats.requests += 1
        return response

    def _topic_id(self) -> uuid.UUID:
        version = min(self.env.versions[ApiKey.METADATA][1], 12)
        meta = self._call(self.admin, ApiKey.METADATA, version, topics=[{
            "name": self.topic, "topic_id": uuid.UUID(int=0)}], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False)
        topic_id = meta.topics[0].topic_id
        if topic_id is None or topic_id == uuid.UUID(int=0):
            raise LiveError(f"Metadata v{version} gives {self.topic} no topic id")
        return uuid.UUID(str(topic_id))

    def _configure(self) -> None:
        version = min(self.env.versions[ApiKey.INCREMENTAL_ALTER_CONFIGS][1], 1)
        response = self._call(self.admin, ApiKey.INCREMENTAL_ALTER_CONFIGS, version,
                              validate_only=False, resources=[{
                                  "resource_type": GROUP_RESOURCE, "resource_name": self.group,
                                  "configs": [
                                      {"name": "share.auto.offset.reset",
                                       "config_operation": 0, "value": "earliest"},
                                      {"name": "share.delivery.count.limit",
                                       "config_operation": 0, "value": str(LIMIT)}]}])
        code = int(response.responses[0].error_code)
        if code != ErrorCode.NONE:
            raise LiveError(f"IncrementalAlterConfigs of share group {self.group}: "
                            f"{error_label(code)}")

    def _join(self, member: Member) -> None:
        beat = self._call(member.conn, ApiKey.SHARE_GROUP_HEARTBEAT, 1, group_id=self.group,
                          member_id=member.member_id, member_epoch=0, rack_id=None,
                          subscribed_topic_names=[self.topic])
        if int(beat.error_code) != ErrorCode.NONE or int(beat.member_epoch) <= 0:
            raise LiveError(f"ShareGroupHeartbeat joining {self.group}: "
                            f"{error_label(int(beat.error_code))}, epoch {beat.member_epoch}")

    def _append(self, count: int) -> None:
        """``count`` records, one batch each (a Produce v3+ carries one batch)."""
        version = min(self.env.versions[ApiKey.PRODUCE][1], 11)
        for _ in range(count):
            self.counter += 1
            response = self._call(
                self.admin, ApiKey.PRODUCE, version, transactional_id=None, acks=-1,
                timeout=30_000, topic_data=[{"name": self.topic, "partition_data": [{
                    "index": 0, "records": build_batch([Rec(f"s{self.counter}".encode())])}]}])
            answer = response.responses[0].partition_responses[0]
            self._check("Produce of a record: error and base offset",
                        (error_label(int(answer.error_code)), int(answer.base_offset)),
                        ("NONE", len(self.model.records)))
            self.model.records.append(Record())

    def _fetch(self, member: Member, *, most: int, acks: Sequence[tuple[int, int, int]] = (),
               wait_ms: int = 0) -> Any:
        response = self._call(
            member.conn, ApiKey.SHARE_FETCH, 2, group_id=self.group, member_id=member.member_id,
            share_session_epoch=member.epoch, max_wait=wait_ms, min_bytes=1, max_bytes=1 << 20,
            max_records=most, batch_size=most, share_acquire_mode=RECORD_LIMIT,
            is_renew_ack=False, topics=[{"topic_id": self.topic_id, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}
                    for first, last, kind in acks]}]}], forgotten_topics_data=[])
        if int(response.error_code) == ErrorCode.NONE:
            member.epoch += 1
        return response

    def _ready(self, timeout: float = 30.0) -> None:
        """One record appended, acquired by member 0 (Kafka initializes the share partition
        on the first fetches, which may come back empty) and released."""
        self._append(1)
        member = self.members[0]
        deadline = time.monotonic() + timeout
        while True:
            got = _acquired(self._fetch(member, most=1, wait_ms=200))
            if got:
                break
            if time.monotonic() > deadline:
                raise LiveError(f"share group {self.group} acquired nothing in {timeout:.0f} s")
        self._check("the first acquisition of a new share group", got, self.model.acquire(0, 1))
        self._share_ack(act.ShareAck(0, "release"))

    # -- actions -------------------------------------------------------------------------

    def perform(self, action: act.Action) -> bool:
        hits = self.model.limit_hits
        done = self._perform(action)
        for _ in range(self.model.limit_hits - hits):
            self.env.stats.note_rule("released at the delivery limit: archived")
        return done

    def _perform(self, action: act.Action) -> bool:
        match action:
            case act.ShareAppend():
                self._append(max(1, action.records))
            case act.ShareFetch():
                self._share_fetch(action)
            case act.ShareAck():
                if not self._share_ack(action):
                    self.env.stats.skipped += 1
                    return False
            case act.ShareStart():
                self._start(self._start_offset())
            case _:
                return False
        self.done.append(action)
        self.env.stats.steps += 1
        return True

    def _targets(self, index: int, whose: str, which: int) -> list[int]:
        """The offsets an acknowledgement names: one the member holds, one the other member
        holds, or one nobody holds."""
        model = self.model
        if whose == "own":
            held = model.held(index)
        elif whose == "other":
            held = model.held(1 - index)
        else:
            held = [o for o, r in enumerate(model.records) if r.state != ACQUIRED]
        return [held[which % len(held)]] if held else []

    def _share_fetch(self, a: act.ShareFetch) -> None:
        index = a.member % MEMBERS
        member = self.members[index]
        targets = self._targets(index, a.whose, a.which) if a.ack != "none" else []
        acks = [(o, o, KINDS[a.ack]) for o in targets]
        most = max(1, a.most)
        opening = member.epoch == 0
        response = self._fetch(member, most=most, acks=acks)
        what = f"ShareFetch of member {index} for {most}" + (
            f" acknowledging {a.ack} {targets} ({a.whose})" if acks else "")
        if opening and acks:
            # the fetch that opens a share session may not acknowledge (Kafka's
            # ShareFetchRequest rule): refused whole
            self._check(what + " opening its session: error",
                        error_label(int(response.error_code)), "INVALID_REQUEST")
            return
        self._check(what + ": error", error_label(int(response.error_code)), "NONE")
        kafka = self.env.flavour is Flavour.KAFKA
        held = set(self.model.held(index))
        if acks:
            answered = _ack_error(response)
            self._check(what + ": acknowledgement", answered,
                        self._acknowledge(index, targets, KINDS[a.ack], answered))
        # Kafka: a record the fetch's own acknowledgements released may or may not be
        # acquired by that fetch (it depends on where its log read started); and its
        # acquisition follows its in-flight batches (records delivered apart, or a
        # redelivery and new records, come back in separate fetches), so its answer may be a
        # shorter run of the same lowest records. Seen: [(0, 3)] of [(0, 3), (1, 2)], the two
        # acquired by different members and released apart. Korvet: the acknowledgements,
        # then as many of the lowest available records as asked.
        got = _acquired(response)
        skip: set[int] = set()
        if kafka:
            released = {o for o in targets
                        if o in held and self.model.records[o].state == AVAILABLE}
            for option in ([set(), released] if released else [set()]):
                full = self.model.preview(most, option)
                if got == full[: len(got)] and (got or not full):
                    skip = option
                    if len(got) < len(full):
                        self.env.stats.note_rule("a shorter run of the lowest records")
                        most = len(got)
                    break
            if skip:
                self.env.stats.note_rule("a record released by a fetch not acquired by it")
        self._check(what + ": acquired (offset, delivery count)", got,
                    self.model.acquire(index, most, skip))

    def _share_ack(self, a: act.ShareAck) -> bool:
        index = a.member % MEMBERS
        member = self.members[index]
        if member.epoch == 0:
            return False  # no session yet
        targets = self._targets(index, a.whose, a.which)
        if not targets:
            return False
        kind = KINDS[a.kind]
        response = self._call(
            member.conn, ApiKey.SHARE_ACKNOWLEDGE, 1, group_id=self.group,
            member_id=member.member_id, share_session_epoch=member.epoch,
            topics=[{"topic_id": self.topic_id, "partitions": [{
                "partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": o, "last_offset": o, "acknowledge_types": [kind]}
                    for o in targets]}]}])
        if int(response.error_code) == ErrorCode.NONE:
            member.epoch += 1
        what = f"ShareAcknowledge {a.kind} {targets} by member {index} ({a.whose})"
        self._check(what + ": error", error_label(int(response.error_code)), "NONE")
        answered = error_label(int(response.responses[0].partitions[0].error_code))
        self._check(what + ": partition error", answered,
                    self._acknowledge(index, targets, kind, answered))
        return True

    def _acknowledge(self, index: int, targets: Sequence[int], kind: int, got: str) -> str:
        """The model's answer to an acknowledgement (``got``: the broker's). On Kafka, one
        naming an offset past every record the share partition ever handed out is
        INVALID_REQUEST, or INVALID_RECORD_STATE when a fetch's read of the log already
        covered it (what the read covered the model does not know), and one naming only
        offsets below the start offset is ignored and answered NONE (Korvet:
        INVALID_RECORD_STATE for all, as for any record the member does not hold)."""
        if self.env.flavour is Flavour.KAFKA:
            if any(o >= self.model.fetched_to for o in targets):
                self.env.stats.note_rule("an offset never handed out: INVALID_REQUEST or "
                                         "INVALID_RECORD_STATE")
                return got if got in ("INVALID_REQUEST", "INVALID_RECORD_STATE") \
                    else "INVALID_REQUEST or INVALID_RECORD_STATE"
            if targets and all(o < self.model.spso() for o in targets):
                self.env.stats.note_rule("an offset below the start offset: ignored, NONE")
                return "NONE"
        return self.model.acknowledge(index, targets, kind)

    def _start(self, got: int) -> None:
        """Korvet answers the start offset the share partition has; Kafka the one it last
        persisted, which trails it by the last acknowledgement's move."""
        expected = self.model.spso()
        if self.env.flavour is Flavour.KAFKA and self.model.persisted != expected:
            expected = self.model.persisted
            self.env.stats.note_rule("start offset persisted before the acknowledgement moved it")
        self._check("DescribeShareGroupOffsets: start offset", got, expected)

    def _start_offset(self) -> int:
        response = self._call(self.admin, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, groups=[{
            "group_id": self.group, "topics": [{"topic_name": self.topic,
                                                "partitions": [0]}]}])
        group = response.groups[0]
        if int(group.error_code) != ErrorCode.NONE:
            raise Divergence(f"DescribeShareGroupOffsets: {error_label(int(group.error_code))}")
        return int(group.topics[0].partitions[0].start_offset)


def _acquired(response: Any) -> list[tuple[int, int]]:
    return sorted((offset, int(run.delivery_count)) for t in response.responses
                  for p in t.partitions for run in p.acquired_records
                  for offset in range(int(run.first_offset), int(run.last_offset) + 1))


def _ack_error(response: Any) -> str:
    codes = [int(p.acknowledge_error_code) for t in response.responses for p in t.partitions]
    return error_label(codes[0]) if codes else "NONE"


# --- the Hypothesis machine ------------------------------------------------------------------

def share_machine(env: Environment, recorder: Any) -> type[Any]:
    from hypothesis import strategies as st
    from hypothesis.stateful import rule

    from korvet.verification.live.machine import part_machine

    members = st.integers(0, MEMBERS - 1)
    whose = st.sampled_from(["own"] * 6 + ["other", "none"])

    class LiveShare(part_machine(env, recorder, "share", ShareRun)):  # type: ignore[misc]
        @rule(records=st.integers(1, 4))
        def append(self, records: int) -> None:
            self.do(act.ShareAppend(records))

        @rule(member=members, most=st.integers(1, 3),
              ack=st.sampled_from(["none", "none", "accept", "release", "reject"]),
              whose=whose, which=st.integers(0, 5))
        def fetch(self, **kw: Any) -> None:
            self.do(act.ShareFetch(**kw))

        @rule(member=members, kind=st.sampled_from(["accept", "release", "release", "reject"]),
              whose=whose, which=st.integers(0, 5))
        def acknowledge(self, **kw: Any) -> None:
            self.do(act.ShareAck(**kw))

        @rule(member=members)
        def redeliver(self, member: int) -> None:
            """A consumer that cannot process what it gets: fetch one, release it."""
            self.do(act.ShareFetch(member))
            self.do(act.ShareAck(member, "release"))

        @rule()
        def start_offset(self) -> None:
            self.do(act.ShareStart())

    return LiveShare


def run_share(env: Environment, *, examples: int = 25, steps: int = 30,
              seed: int | None = None, database: Any = None,
              shrink_seconds: float = 60.0) -> None:
    from korvet.verification.live.machine import run_part

    run_part(env, share_machine, replay_share, part="share", examples=examples, steps=steps,
             seed=seed, database=database, shrink_seconds=shrink_seconds)


def replay_share(env: Environment, script: act.Script) -> ShareRun:
    from korvet.verification.live.machine import play

    return play(ShareRun(env), script)
