"""One live run of the group protocol: simulated members on their own connections, every
reply checked against the machine (``oracle.GroupOracle``).

A step sends one request (or moves Korvet's test clock), steps the machine with the same
request, and then:

1. every reply the machine releases must arrive on its request's connection (a request
   the machine releases but the broker keeps fails the run after ``reply_timeout``);
2. a request the machine holds back must stay unanswered: after a barrier (a request on
   another connection that the broker's coordinator handles after it) and ``settle``
   seconds, its connection must have nothing to read;
3. the member ids the broker chose are bound to the machine's placeholders, the leader it
   named is checked against the set the rules allow (and the machine re-run with it);
4. each reply, as the request's version shows it, must equal the machine's.

A member whose connection holds a request the broker keeps sends its next request on a
new connection, as a client that gave up waiting does; the request left behind stays
held back (the machine knows it), and its reply, to a closed connection, is not checked.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from korvet.conformance.kafka.messages import build_request, error_name
from korvet.conformance.kafka.wire import ConnectionClosed, ResponseTimeout, WireClient, WireError
from korvet.core import coordinator as core
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.verification.live import actions as act
from korvet.verification.live import wire_groups as wg
from korvet.verification.live.env import (
    CLIENT_HOST,
    REBALANCE_MS,
    SESSION_MS,
    SHORT_SESSION_MS,
    Divergence,
    Environment,
)
from korvet.verification.live.oracle import GroupOracle, Prediction, is_placeholder

# The requests members send (each names one group).
GroupEvent = core.JoinGroup | core.SyncGroup | core.Heartbeat | core.LeaveGroup | core.OffsetCommit


@dataclass
class Sim:
    """A simulated member: its client id, its instance id if static, its connection, and
    what it was told (as a client remembers it)."""

    index: int
    static: bool
    conn: WireClient | None = None
    parked: int | None = None  # the request its connection waits for
    stuck: bool = False  # its connection may never be answered (Kafka's rule)
    member_id: str = ""
    old_ids: list[str] = field(default_factory=list)
    generation: int = -1
    synced: int = -1  # the generation its last successful SyncGroup was in
    rejoin: bool = False  # told REBALANCE_IN_PROGRESS: a client joins again
    protocol_name: str | None = None
    listing: list[str] = field(default_factory=list)  # member ids a leader was given

    @property
    def client_id(self) -> str:
        return f"live{self.index}"

    @property
    def instance_id(self) -> str:
        return f"inst{self.index}"

    def take_id(self, member_id: str) -> None:
        if member_id and member_id != self.member_id:
            if self.member_id:
                self.old_ids.append(self.member_id)
            self.member_id = member_id

    def forget_id(self) -> None:
        if self.member_id:
            self.old_ids.append(self.member_id)
        self.member_id = ""
        self.generation = -1


@dataclass
class Sent:
    request_id: int
    sim: Sim | None
    conn: WireClient
    api: int
    version: int
    event: GroupEvent
    live: bool = True  # False once its connection is closed

    def describe(self) -> str:
        who = f"member {self.sim.index}" if self.sim is not None else "the observer"
        return f"{ApiKey(self.api).kafka_name} v{self.version} from {who}"


class GroupRun:
    """One request sequence against the broker, on its own group ids."""

    def __init__(self, env: Environment, static: Sequence[bool]) -> None:
        self.env = env
        tag = uuid.uuid4().hex[:10]
        self.group_id = f"live-{tag}"
        self.absent_group = f"live-{tag}-none"
        self.barrier_group = f"live-{tag}-barrier"
        now = env.clock.now() if env.clock is not None else 0
        self.oracle = GroupOracle(env.config, env.flavour, now)
        self.sims = [Sim(i, bool(s)) for i, s in enumerate(static)]
        self.observer: WireClient | None = None
        self.sent: dict[int, Sent] = {}
        self.done: list[act.Action] = []
        self._fresh = itertools.count(1)
        env.stats.sequences += 1

    # -- connections --------------------------------------------------------------------

    def _open(self, client_id: str) -> WireClient:
        try:
            return WireClient(self.env.host, self.env.port, client_id=client_id,
                              timeout=self.env.reply_timeout)
        except OSError as exc:
            raise Divergence(f"cannot connect to the broker: {exc}") from exc

    def _connection(self, sim: Sim) -> WireClient:
        if sim.conn is None or sim.parked is not None or sim.stuck:
            self._drop_connection(sim)
            sim.conn = self._open(sim.client_id)
        return sim.conn

    def _drop_connection(self, sim: Sim) -> None:
        if sim.conn is not None:
            for sent in self.sent.values():
                if sent.conn is sim.conn:
                    sent.live = False
            sim.conn.close()
        sim.conn, sim.parked, sim.stuck = None, None, False

    def _observer(self) -> WireClient:
        if self.observer is None:
            self.observer = self._open("live-observer")
        return self.observer

    def close(self) -> None:
        for sim in self.sims:
            self._drop_connection(sim)
        if self.observer is not None:
            self.observer.close()
            self.observer = None

    # -- choices ------------------------------------------------------------------------

    def _sim(self, index: int) -> Sim:
        return self.sims[index % len(self.sims)]

    def _other(self, sim: Sim) -> Sim:
        return self.sims[(sim.index + 1) % len(self.sims)]

    def _group(self, choice: str) -> str:
        return {"main": self.group_id, "absent": self.absent_group, "blank": ""}.get(
            choice, self.group_id)

    def _member(self, sim: Sim, choice: str) -> str:
        if choice == "none":
            return ""
        if choice == "stale":
            return sim.old_ids[-1] if sim.old_ids else f"{sim.client_id}-stale"
        if choice == "other":
            return self._other(sim).member_id
        if choice == "bogus":
            return f"{sim.client_id}-bogus"
        return sim.member_id

    def _instance(self, sim: Sim, choice: str) -> str | None:
        if choice == "none":
            return None
        if choice == "other":
            return self._other(sim).instance_id
        if choice == "bogus":
            return f"ghost{sim.index}"
        return sim.instance_id if sim.static else None

    def _generation(self, sim: Sim, choice: str, group_id: str) -> int:
        group = self.oracle.state.groups.get(group_id)
        current = group.generation if group is not None else 0
        return {"mine": sim.generation, "group": current, "stale": current - 1,
                "next": current + 1, "none": -1}.get(choice, sim.generation)

    def _request_id(self) -> int:
        return next(self.oracle.request_ids)

    def next_step(self, index: int, join: int, sync: int, heartbeat: int) -> act.Action:
        """What a well-behaved client does next: join without an id, sync in a generation
        it has not synced in, else heartbeat (the rule ``follow``; keeps sequences deep)."""
        sim = self._sim(index)
        if not sim.member_id or sim.generation < 0 or sim.rejoin:
            return act.Join(index, join)
        if sim.synced != sim.generation:
            return act.Sync(index, sync)
        return act.Heartbeat(index, heartbeat)

    # -- actions ------------------------------------------------------------------------

    def perform(self, action: act.Action) -> bool:
        """Do one action; False if it does not apply now (nothing was sent)."""
        match action:
            case act.Join():
                done = self._join(action)
            case act.Sync():
                done = self._sync(action)
            case act.Heartbeat():
                done = self._heartbeat(action)
            case act.Leave():
                done = self._leave(action)
            case act.Commit():
                done = self._commit(action)
            case act.FetchOffsets():
                done = self._fetch(action)
            case act.Describe():
                done = self._describe(action)
            case act.Reconnect():
                self._drop_connection(self._sim(action.sim))
                done = True
            case act.Advance():
                done = self._advance(action)
        if done:
            self.done.append(action)
            self.env.stats.steps += 1
        else:
            self.env.stats.skipped += 1
        return done

    def _join(self, a: act.Join) -> bool:
        sim = self._sim(a.sim)
        version = self.env.version(ApiKey.JOIN_GROUP, a.version)
        instance = self._instance(sim, a.instance) if version >= 5 else None
        variant = act.PROTOCOL_VARIANTS[a.protocols % len(act.PROTOCOL_VARIANTS)]
        session = SESSION_MS if a.session == "ok" else SHORT_SESSION_MS
        event = core.JoinGroup(
            self._request_id(), self._group(a.group), self._member(sim, a.member), instance,
            a.protocol_type, tuple(core.Protocol(n, m) for n, m in variant), session,
            REBALANCE_MS if version >= 1 else session, sim.client_id, CLIENT_HOST,
            requires_known_member_id=version >= 4, supports_skip_assignment=version >= 9,
            new_member_id=self.oracle.placeholder(instance if instance is not None
                                                  else sim.client_id))
        self._exchange(sim, ApiKey.JOIN_GROUP, version, wg.join_request(version, event), event)
        return True

    def _sync(self, a: act.Sync) -> bool:
        sim = self._sim(a.sim)
        group_id = self._group(a.group)
        member_id = self._member(sim, a.member)
        if self._leader_unknown(group_id, member_id):
            return False  # which of several members leads is not known yet: see oracle
        version = self.env.version(ApiKey.SYNC_GROUP, a.version)
        listing = sorted(sim.listing) if a.assign == "all" else sorted(sim.listing)[:1] \
            if a.assign == "first" else []
        generation = self._generation(sim, a.generation, group_id)
        protocol_type, protocol_name = {
            "match": ("consumer", sim.protocol_name), "name": ("consumer", "unheard-of"),
            "type": ("connect", sim.protocol_name), "omit": (None, None)}[a.protocol]
        if version < 5:
            protocol_type = protocol_name = None
        if version >= 5 and (protocol_type is None or protocol_name is None):
            return self._refused_sync(sim, version, group_id, member_id, generation)
        event = core.SyncGroup(
            self._request_id(), group_id, member_id,
            self._instance(sim, a.instance) if version >= 3 else None, generation,
            protocol_type, protocol_name,
            tuple(core.MemberAssignment(m, f"g{generation}p{i}".encode())
                  for i, m in enumerate(listing)))
        self._exchange(sim, ApiKey.SYNC_GROUP, version, wg.sync_request(version, event), event)
        return True

    def _refused_sync(self, sim: Sim, version: int, group_id: str, member_id: str,
                      generation: int) -> bool:
        """From v5 SyncGroup must carry the protocol type and name: without them the
        broker refuses it before its coordinator sees it (Kafka: KafkaApis); the machine
        is not stepped."""
        conn = self._connection(sim)
        request = build_request(ApiKey.SYNC_GROUP, version, group_id=group_id,
                                generation_id=generation, member_id=member_id,
                                group_instance_id=None, protocol_type=None, protocol_name=None,
                                assignments=[])
        try:
            conn.send(request)
            response = conn.receive(self.env.reply_timeout)
        except WireError as exc:
            raise Divergence(f"SyncGroup v{version} without protocol fields: {exc}") from exc
        self.env.stats.requests += 1
        self._check(f"SyncGroup v{version} from member {sim.index} without protocol fields",
                    wg.sync_view(version, response),
                    {"error": int(core.ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
                     "assignment": "", "protocol_type": None, "protocol_name": None})
        self.env.stats.note_error("INCONSISTENT_GROUP_PROTOCOL (23)")
        return True

    def _leader_unknown(self, group_id: str, member_id: str) -> bool:
        group = self.oracle.state.groups.get(group_id)
        possible = self.oracle.leader_set(group_id)
        return (group is not None and group.state is core.GroupState.COMPLETING_REBALANCE
                and len(possible) > 1 and member_id in possible)

    def _heartbeat(self, a: act.Heartbeat) -> bool:
        sim = self._sim(a.sim)
        version = self.env.version(ApiKey.HEARTBEAT, a.version)
        group_id = self._group(a.group)
        event = core.Heartbeat(
            self._request_id(), group_id, self._member(sim, a.member),
            self._instance(sim, a.instance) if version >= 3 else None,
            self._generation(sim, a.generation, group_id))
        self._exchange(sim, ApiKey.HEARTBEAT, version, wg.heartbeat_request(version, event), event)
        return True

    def _leave(self, a: act.Leave) -> bool:
        sim = self._sim(a.sim)
        version = self.env.version(ApiKey.LEAVE_GROUP, a.version)
        other = self._other(sim)
        own = core.MemberIdentity(sim.member_id, self._instance(sim, "auto"))
        members = {
            "self": [own],
            "self+other": [own, core.MemberIdentity(other.member_id,
                                                    self._instance(other, "auto"))],
            "admin": [core.MemberIdentity("", sim.instance_id)],
            "admin-other": [core.MemberIdentity("", other.instance_id)],
            "other": [core.MemberIdentity(other.member_id, self._instance(other, "auto"))],
            "bogus": [core.MemberIdentity(f"{sim.client_id}-bogus", None)],
        }.get(a.who, [own])
        if version < 3:  # one member id, no instance id
            first = members[0]
            members = [core.MemberIdentity(first.member_id or sim.member_id, None)]
        event = core.LeaveGroup(self._request_id(), self._group(a.group), tuple(members))
        self._exchange(sim, ApiKey.LEAVE_GROUP, version, wg.leave_request(version, event), event)
        return True

    def _commit(self, a: act.Commit) -> bool:
        sim = self._sim(a.sim)
        version = self.env.version(ApiKey.OFFSET_COMMIT, a.version)
        group_id = self.group_id if a.group != "absent" else \
            f"{self.group_id}-c{next(self._fresh)}"
        partitions = [p for p in range(self.env.partitions) if a.partitions & (1 << p)] or [0]
        metadata = f"m{a.offset}" if a.metadata == "short" else "x" * 5000
        epoch = a.offset % 3 - 1 if version >= 6 else -1
        event = core.OffsetCommit(
            self._request_id(), group_id, self._member(sim, a.member),
            self._instance(sim, a.instance) if version >= 7 else None,
            self._generation(sim, a.generation, group_id),
            tuple(core.OffsetToCommit(self.env.topic, p, a.offset, metadata, epoch)
                  for p in partitions),
            unknown_group_is_not_found=version >= 9)
        self._exchange(sim, ApiKey.OFFSET_COMMIT, version, wg.commit_request(version, event), event)
        return True

    def _fetch(self, a: act.FetchOffsets) -> bool:
        version = self.env.version(ApiKey.OFFSET_FETCH, a.version)
        group_id = self._group(a.group) or self.group_id
        everything = a.everything and version >= 2
        wanted = None if everything else [core.TopicPartition(self.env.topic, p)
                                           for p in range(self.env.partitions)]
        response = self._query(ApiKey.OFFSET_FETCH, version,
                               wg.fetch_request(version, group_id, wanted))
        expected = wg.expected_fetch(version, core.offset_fetch(self.oracle.state, group_id,
                                                                 wanted))
        self._check(f"OffsetFetch v{version} of {group_id}", wg.fetch_view(version, response),
                    expected)
        return True

    def _describe(self, a: act.Describe) -> bool:
        version = self.env.version(ApiKey.DESCRIBE_GROUPS, a.version)
        ids = [self.group_id, self.absent_group]
        response = self._query(ApiKey.DESCRIBE_GROUPS, version, wg.describe_request(version, ids))
        got = wg.describe_view(version, response)
        for group_id, described in zip(ids, response.groups, strict=True):
            group = self.oracle.state.groups.get(group_id)
            if group is not None:
                self.oracle.bind_listed(group.members, [m.member_id for m in described.members])
        expected = [self._expected_description(version, g) for g in ids]
        self._check(f"DescribeGroups v{version}", got, expected)
        return True

    def _expected_description(self, version: int, group_id: str) -> wg.View:
        described = core.describe_group(self.oracle.state, group_id)
        group = self.oracle.state.groups.get(group_id)
        rows: list[list[Any]] = []
        if group is not None and described.members:
            stable = group.state is core.GroupState.STABLE
            rows = [[self.oracle.wire(m.member_id), m.group_instance_id, m.client_id,
                     m.client_host, (m.metadata_for(group.protocol_name) if stable else b"").hex(),
                     self.oracle.shown_assignment(group_id, m).hex()]
                    for m in group.members.values()]
        return wg.expected_describe(version, described, rows)

    def _advance(self, a: act.Advance) -> bool:
        clock = self.env.clock
        deadline = core.next_deadline(self.oracle.state)
        if clock is None or deadline is None:
            return False
        step = max(deadline - self.oracle.now, 0)
        if a.to == "half":
            step //= 2
        clock.advance(step)
        self.env.stats.clock_moves += 1
        self._resolve(self.oracle.predict(None, step), None)
        return True

    # -- one exchange -------------------------------------------------------------------

    def _query(self, api: int, version: int, request: Any) -> Any:
        conn = self._observer()
        try:
            conn.send(request)
            response = conn.receive(self.env.reply_timeout)
        except WireError as exc:
            raise Divergence(f"{ApiKey(api).kafka_name} v{version}: {exc}") from exc
        self.env.stats.queries += 1
        self.env.stats.requests += 1
        return response

    def _check(self, what: str, got: Any, expected: Any) -> None:
        if got != expected:
            raise Divergence(f"{what}: the broker answered\n    {got}\n  the machine says\n"
                             f"    {expected}")
        self.env.stats.replies_compared += 1

    def _exchange(self, sim: Sim, api: int, version: int, request: Any,
                  event: GroupEvent) -> None:
        conn = self._connection(sim)
        try:
            conn.send(request)
        except WireError as exc:
            raise Divergence(f"{ApiKey(api).kafka_name} v{version}: {exc}") from exc
        sent = Sent(event.request_id, sim, conn, api, version, event)
        self.sent[event.request_id] = sent
        self.env.stats.requests += 1
        self._resolve(self.oracle.predict(event), sent)

    def _resolve(self, prediction: Prediction, current: Sent | None) -> None:
        released = prediction.released()
        answers: dict[int, Any] = {}
        for request_id in released:
            sent = self.sent.get(request_id)
            if sent is None or not sent.live:
                continue
            if request_id in prediction.optional:
                self._maybe_receive(sent, answers)
                continue
            answers[request_id] = self._receive(sent, released[request_id])
        if current is not None and current.request_id not in released:
            self._confirm_held_back(current)
        prediction = self._bind(prediction, answers)
        released = prediction.released()
        for request_id, response in answers.items():
            sent = self.sent[request_id]
            got = wg.RESPONSE_VIEWS[sent.api](sent.version, response)
            want = wg.expected_reply(sent.version, released[request_id], self.oracle.wire)
            self._check(sent.describe(), got, want)
            if got.get("error"):
                self.env.stats.note_error(error_name(int(got["error"])))
        self.oracle.commit(prediction)
        for request_id, response in answers.items():
            self._client_learns(self.sent.pop(request_id), response)
        for request_id in released:
            self.sent.pop(request_id, None)
        if current is not None and current.request_id in self.sent and current.sim is not None:
            current.sim.parked = current.request_id

    def _receive(self, sent: Sent, reply: core.Reply) -> Any:
        try:
            return sent.conn.receive(self.env.reply_timeout)
        except ResponseTimeout:
            raise Divergence(
                f"{sent.describe()}: the machine answers "
                f"{wg.expected_reply(sent.version, reply, self.oracle.wire)}, the broker kept "
                f"it for {self.env.reply_timeout:.0f} s") from None
        except WireError as exc:
            raise Divergence(f"{sent.describe()}: {exc}") from exc

    def _maybe_receive(self, sent: Sent, answers: dict[int, Any]) -> None:
        """Kafka may leave this request unanswered for good (``Prediction.optional``)."""
        if sent.conn.response_ready(self.env.settle * 4):
            answers[sent.request_id] = self._receive(sent, core.HeartbeatReply(0, "", core.ErrorCode.NONE))
            return
        self.env.stats.note_rule("a removed member's held-back SyncGroup stays unanswered")
        sent.live = False
        if sent.sim is not None and sent.sim.conn is sent.conn:
            sent.sim.stuck = True

    def _confirm_held_back(self, sent: Sent) -> None:
        self._barrier()
        if sent.conn.response_ready(self.env.settle):
            try:
                response = sent.conn.receive(1.0)
                shown: Any = wg.RESPONSE_VIEWS[sent.api](sent.version, response)
            except (ConnectionClosed, WireError) as exc:
                shown = f"nothing but {exc}"
            raise Divergence(f"{sent.describe()}: the machine holds it back, the broker "
                             f"answered {shown}")
        self.env.stats.held_back_confirmed += 1

    def _barrier(self) -> None:
        """A request the broker's coordinator handles after everything sent before it."""
        version = self.env.version(ApiKey.HEARTBEAT, 3)
        self._query(ApiKey.HEARTBEAT, version, build_request(
            ApiKey.HEARTBEAT, version, group_id=self.barrier_group, generation_id=0,
            member_id="barrier", group_instance_id=None))
        self.env.stats.queries -= 1

    # -- ids and leaders ----------------------------------------------------------------

    def _bind(self, prediction: Prediction, answers: dict[int, Any]) -> Prediction:
        released = prediction.released()
        for request_id, response in answers.items():
            reply = released[request_id]
            if (isinstance(reply, core.JoinGroupReply) and is_placeholder(reply.member_id)
                    and int(response.error_code) == int(reply.error)):
                self.oracle.bind(reply.member_id, response.member_id)
        for request_id, response in answers.items():
            reply = released[request_id]
            if isinstance(reply, core.JoinGroupReply) and reply.members \
                    and int(response.error_code) == ErrorCode.NONE:
                self.oracle.bind_listed([m.member_id for m in reply.members],
                                        [m.member_id for m in response.members])
        for group_id in {r.event.group_id for r in self.sent.values()} | {self.group_id}:
            prediction = self._check_leader(prediction, group_id, answers)
        return prediction

    def _check_leader(self, prediction: Prediction, group_id: str,
                      answers: dict[int, Any]) -> Prediction:
        """The leader a join reply names, if the machine named another: allowed? Then the
        machine runs again with it."""
        released = prediction.released()
        observed = next((str(answers[r].leader) for r, reply in released.items()
                         if r in answers and isinstance(reply, core.JoinGroupReply)
                         and reply.error is core.ErrorCode.NONE
                         and self.sent[r].event.group_id == group_id
                         and int(answers[r].error_code) == ErrorCode.NONE), None)
        if observed is None:
            return prediction
        named = next(r.leader for r in released.values() if isinstance(r, core.JoinGroupReply)
                     and r.error is core.ErrorCode.NONE and r.request_id in answers
                     and self.sent[r.request_id].event.group_id == group_id)
        if is_placeholder(named) and not self.oracle.bound(named) and \
                self.oracle.model_id(observed) == observed and not self._seen(observed):
            self.oracle.bind(named, observed)
        if self.oracle.wire(named) == observed:
            prediction.observed[group_id] = named
            return prediction
        candidate = self.oracle.model_id(observed)
        allowed = self.oracle.allowed_leaders(prediction, group_id)
        if candidate not in allowed:
            return prediction  # the comparison reports the difference
        self.env.stats.leader_choices += 1
        return self.oracle.with_leader(prediction, group_id, candidate)

    def _seen(self, member_id: str) -> bool:
        return any(member_id in (s.member_id, *s.old_ids) for s in self.sims)

    def _client_learns(self, sent: Sent, response: Any) -> None:
        """What a client keeps from a reply: its member id, generation, protocol, and,
        as the leader, the members it must assign to."""
        sim = sent.sim
        if sim is None:
            return
        if sim.conn is sent.conn and sim.parked == sent.request_id:
            sim.parked = None
        error = int(getattr(response, "error_code", 0))
        if sent.api == ApiKey.JOIN_GROUP:
            if error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
                sim.take_id(response.member_id)
            if error == ErrorCode.NONE:
                sim.rejoin = False
                sim.generation = int(response.generation_id)
                sim.protocol_name = response.protocol_name
                sim.listing = [m.member_id for m in response.members]
        if sent.api == ApiKey.SYNC_GROUP and error == ErrorCode.NONE:
            sim.synced = sim.generation
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            sim.rejoin = True
        forgotten = error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID)
        if forgotten and sent.event.group_id == self.group_id and \
                getattr(sent.event, "member_id", None) == sim.member_id:
            sim.forget_id()
