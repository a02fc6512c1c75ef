"""Walk a TLC state graph through the real storage scripts on a real redis-server.

The replays of spec/ProducerState.tla and spec/PartitionLog.tla share this walker.
For every TLC state it holds the Redis keys of that state, as the real scripts left
them: each initial state starts from an empty database (FLUSHDB, then the model's
set-up), and every other state's keys are the DUMP taken right after the script
call that first produced it, along a path of real script calls from an initial
state. For each state the model's replay function restores those keys, performs
every action the spec allows there (script actions through append.lua / bounds.lua,
the rest in Python), reads the keys back, and returns the successors it got; the
walker requires exactly TLC's set of (action, successor) pairs, every variable
compared.

The scripts run as they are in korvet/storage/lua, except for their two named
width constants (``OFFSET_BITS``, ``CACHED_BATCHES``), which are narrowed to the
model's, as korvet.core.offsets.OffsetCodec takes ``offset_bits`` for the codec's
replay: TLC's integers are 32-bit. ``mutate`` replaces one rule of the text, for
the test that a broken script is caught.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import redis

from korvet.verification import tlc
from korvet.verification.values import TlaValue, format_value
from tests.support.spec_actions import ActionTally

StateKey = tuple[tuple[str, TlaValue], ...]
Snapshot = tuple[bytes | None, ...]
Command = bytes | Sequence[str | int | bytes]  # packed RESP, or a command's arguments


def key(state: Mapping[str, TlaValue]) -> StateKey:
    return tuple(sorted(state.items()))


def script_text(name: str, *, offset_bits: int | None = None, cached_batches: int | None = None,
                mutate: tuple[str, str] | None = None) -> str:
    text = (resources.files("korvet.storage") / "lua" / name).read_text()
    if offset_bits is not None:
        text, count = re.subn(r"^local OFFSET_BITS = 63\b", f"local OFFSET_BITS = {offset_bits}",
                              text, flags=re.M)
        assert count == 1, f"{name}: no 'local OFFSET_BITS = 63' line to narrow"
    if cached_batches is not None:
        text, count = re.subn(r"^local CACHED_BATCHES = 5\b",
                              f"local CACHED_BATCHES = {cached_batches}", text, flags=re.M)
        assert count == 1, f"{name}: no 'local CACHED_BATCHES = 5' line to narrow"
    if mutate is not None:
        old, new = mutate
        assert text.count(old) == 1, f"{name}: the rule to mutate must occur once: {old!r}"
        text = text.replace(old, new)
    return text


class ScriptRedis:
    """One partition's keys on a real redis-server, with the scripts loaded."""

    def __init__(self, url: str, scripts: Mapping[str, str], keys: Sequence[str],
                 topic_key: str, topic_id: str, db_config: Mapping[str, str] | None = None) -> None:
        self.client = redis.Redis.from_url(url)
        self.client.flushdb()
        for name, value in (db_config or {}).items():
            self.client.config_set(name, value)
        self.sha = {name: self.client.script_load(text) for name, text in scripts.items()}
        self.keys = tuple(keys)  # the keys a state consists of (stream, meta hash)
        self.topic_key = topic_key
        self.topic_id = topic_id
        self.calls = 0
        self.loaded: Snapshot | None = None  # the snapshot Redis holds now, if known
        self._packed: dict[tuple[Any, ...], bytes] = {}  # commands of text alone, packed

    def reset(self) -> None:
        """A path starts here: an empty database and the topic the scripts check."""
        self.loaded = None
        self.client.flushdb()
        self.client.hset(self.topic_key, mapping={"id": self.topic_id, "name": "t",
                                                  "partitions": 1})

    def snapshot(self) -> Snapshot:
        pipe = self.client.pipeline(transaction=False)
        for k in self.keys:
            pipe.dump(k)
        self.loaded = tuple(pipe.execute())
        return self.loaded

    def restore(self, snapshot: Snapshot) -> None:
        """Put the keys back as ``snapshot`` has them (nothing to do if Redis holds it)."""
        if self.loaded is snapshot:
            return
        self.loaded = None
        for failed in self.raw([("DEL", *self.keys), *(
                ("RESTORE", k, 0, dumped, "REPLACE")
                for k, dumped in zip(self.keys, snapshot, strict=True) if dumped is not None)]):
            if isinstance(failed, Exception):
                raise failed
        self.loaded = snapshot

    def call(self, script: str, keys: Sequence[str], args: Sequence[str | int | bytes]) -> object:
        self.calls += 1
        self.loaded = None
        return self.client.evalsha(self.sha[script], len(keys), *keys, *args)

    def call_from(self, snapshot: Snapshot, script: str, keys: Sequence[str],
                  args: Sequence[str | int | bytes],
                  reads: Callable[[Any], None]) -> tuple[object, Snapshot, list[Any]]:
        """``restore(snapshot)``, ``call``, ``snapshot()`` and the reads ``reads`` queues on
        the pipeline it is given, in one round trip: the script's reply, the keys after
        it, and what the reads returned (a read that failed as its exception)."""
        self.calls += 1
        pipe = self.client.pipeline(transaction=False)
        restored = 0
        if self.loaded is not snapshot:
            pipe.delete(*self.keys)
            restored = 1
            for k, dumped in zip(self.keys, snapshot, strict=True):
                if dumped is not None:
                    pipe.restore(k, 0, dumped, replace=True)
                    restored += 1
        pipe.evalsha(self.sha[script], len(keys), *keys, *args)
        for k in self.keys:
            pipe.dump(k)
        reads(pipe)
        # The reads may fail as replies (XINFO of a stream the script deleted); a failed
        # restore or script raises, as the calls one by one did.
        results = pipe.execute(raise_on_error=False)
        for failed in results[:restored + 1]:
            if isinstance(failed, Exception):
                self.loaded = None
                raise failed
        results = results[restored:]
        after = tuple(results[1:1 + len(self.keys)])
        self.loaded = after
        return results[0], after, results[1 + len(self.keys):]

    def send_from(self, snapshot: Snapshot, commands: Sequence[Command],
                  reads: Sequence[Command]) -> tuple[list[Any], Snapshot, list[Any]]:
        """``call_from`` for commands of any kind: a command the broker packed itself (its
        RESP bytes, as ``RedisStore.append_command`` makes them: the real arguments in the
        real order) or a command's arguments; ``reads`` are plain commands. In one round
        trip: the commands' replies (an error reply raises), the keys after them, and the
        reads' replies as Redis sent them."""
        return self.send_all_from(snapshot, [(commands, reads)])[0]

    def send_all_from(self, snapshot: Snapshot,
                      groups: Sequence[tuple[Sequence[Command], Sequence[Command]]]
                      ) -> list[tuple[list[Any], Snapshot, list[Any]]]:
        """``send_from`` for several groups of (commands, reads), each from ``snapshot``,
        all in one round trip: the keys are restored before each group."""
        restores = [index > 0 or self.loaded is not snapshot for index in range(len(groups))]
        restore: list[Command] = [("DEL", *self.keys), *(
            ("RESTORE", k, 0, dumped, "REPLACE")
            for k, dumped in zip(self.keys, snapshot, strict=True) if dumped is not None)]
        sent: list[Command] = []
        for again, (commands, reads) in zip(restores, groups, strict=True):
            self.calls += 1
            sent.extend((*(restore if again else ()), *commands, *self.dumps(), *reads))
        replies = self.raw(sent)
        results = []
        at = 0
        for again, (commands, reads) in zip(restores, groups, strict=True):
            start, at = at, at + (len(restore) if again else 0)
            done = at + len(commands)
            for failed in replies[start:done]:  # a failed restore or command; a read's error
                if isinstance(failed, Exception):  # is its reply
                    self.loaded = None
                    raise failed
            after = tuple(replies[done:done + len(self.keys)])
            at = done + len(self.keys) + len(reads)
            results.append((replies[start + (len(restore) if again else 0):done], after,
                            replies[done + len(self.keys):at]))
        self.loaded = results[-1][1] if results else self.loaded
        return results

    def snapshot_and(self, reads: Sequence[Sequence[str | int | bytes]]) -> tuple[Snapshot, list[Any]]:
        """``snapshot()`` and the raw replies of ``reads``, in one round trip."""
        replies = self.raw([*self.dumps(), *reads])
        self.loaded = tuple(replies[:len(self.keys)])
        return self.loaded, replies[len(self.keys):]

    def dumps(self) -> list[tuple[str, str]]:
        return [("DUMP", k) for k in self.keys]

    def raw(self, commands: Sequence[bytes | Sequence[str | int | bytes]]) -> list[Any]:
        """Send ``commands`` (packed RESP bytes, or a command's arguments) in one round trip:
        their replies as Redis sent them (no client-side reshaping), an error reply as its
        exception."""
        connection = self.client.connection_pool.get_connection()
        try:
            chunks: list[bytes] = []
            for command in commands:
                if isinstance(command, bytes):
                    chunks.append(command)
                    continue
                # the same reads go with every call: each is packed once
                key = tuple(command) if all(isinstance(a, str) for a in command) else None
                packed = self._packed.get(key) if key else None
                if packed is None:
                    packed = b"".join(connection.pack_command(*command))  # type: ignore[no-untyped-call]
                    if key:
                        self._packed[key] = packed
                chunks.append(packed)
            connection.send_packed_command([b"".join(chunks)])  # type: ignore[no-untyped-call]  # one write, not one per chunk
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except redis.exceptions.ResponseError as exc:
                    replies.append(exc)  # every reply is read before one is raised
        finally:
            self.client.connection_pool.release(connection)
        return replies

    def close(self) -> None:
        self.client.flushdb()
        self.client.close()


@dataclass(frozen=True, slots=True)
class Successor:
    action: str
    state: dict[str, TlaValue]
    snapshot: Snapshot  # the Redis keys right after the action


ReplayFn = Callable[[dict[str, TlaValue], Snapshot], Iterable[Successor]]


@dataclass
class WalkReport:
    states: int = 0
    transitions: int = 0
    script_calls: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    divergences: list[str] = field(default_factory=list)
    seconds: float = 0.0
    tally: ActionTally = field(default_factory=lambda: ActionTally(0))  # action by action

    def summary(self, graph: tlc.StateGraph) -> str:
        return (f"replayed {self.transitions:,} transitions from {self.states:,} states through "
                f"{self.script_calls:,} script calls in {self.seconds:.1f}s (TLC: "
                f"{graph.result.generated:,} generated, {graph.result.distinct:,} distinct, depth "
                f"{graph.result.depth}); by action: {dict(sorted(self.actions.items()))}")


def once_per_model(replay: Callable[[str], WalkReport],
                   graph: Callable[[str], tlc.StateGraph]) -> Callable[[str], WalkReport]:
    """``replay`` of a model's whole graph, run once per model (a module-scoped fixture's
    value: each action's test reads the same walk), its summary printed."""
    reports: dict[str, WalkReport] = {}

    def of(name: str) -> WalkReport:
        if name not in reports:
            reports[name] = replay(name)
            print(f"\n{name}: " + reports[name].summary(graph(name)))
        return reports[name]
    return of


def describe(state: Mapping[str, TlaValue]) -> str:
    return ", ".join(f"{name} = {format_value(value)}" for name, value in sorted(state.items()))


def walk(graph: tlc.StateGraph, store: ScriptRedis,
         initial: Callable[[dict[str, TlaValue]], Snapshot], replay: ReplayFn,
         *, max_divergences: int = 10, found: list[str] | None = None) -> WalkReport:
    """Breadth-first over TLC's graph; ``initial`` sets Redis up for an initial state (after
    ``store.reset()``) and returns its snapshot. ``found``: where the replay function notes
    divergences of its own (an answer in a state that is not the spec's), counted with the
    walker's and added to the report's."""
    found = [] if found is None else found
    started = time.monotonic()
    report = WalkReport(tally=ActionTally(len(graph.states)))
    node_of = {key(state): node for node, state in graph.states.items()}
    snapshots: dict[str, Snapshot] = {}
    queue: list[str] = []
    for node in sorted(graph.initial):
        store.reset()
        snapshots[node] = initial(graph.states[node])
        queue.append(node)
    index = 0
    while index < len(queue) and len(report.divergences) + len(found) < max_divergences:
        node = queue[index]
        index += 1
        state = graph.states[node]
        report.states += 1
        expected = {(action, target) for action, target in graph.successors(node)}
        got: set[tuple[str, str]] = set()
        for successor in replay(state, snapshots[node]):
            target = node_of.get(key(successor.state))
            if target is None:
                problem = (f"from {describe(state)}\n  {successor.action} gave a state TLC never "
                           f"reached: {describe(successor.state)}")
                report.divergences.append(problem)
                report.tally.note(successor.action, problem)
                continue
            got.add((successor.action, target))
            if target not in snapshots:
                snapshots[target] = successor.snapshot
                queue.append(target)
        report.tally.states += 1
        if not report.tally.compare(expected, got, node, lambda n: describe(graph.states[n])):
            missing = sorted((a, describe(graph.states[t])) for a, t in expected - got)
            extra = sorted((a, describe(graph.states[t])) for a, t in got - expected)
            report.divergences.append(
                f"from {describe(state)}\n  only TLC: {missing[:3]}\n  only the scripts: "
                f"{extra[:3]}")
        for action, _ in expected:
            report.actions[action] = report.actions.get(action, 0) + 1
        report.transitions += len(expected)
    report.divergences.extend(found)
    if index < len(queue):
        report.tally.stopped = f"stopped after {len(report.divergences)} divergences"
    report.script_calls = store.calls
    report.seconds = time.monotonic() - started
    return report


def tla_int(value: object) -> int:
    """A TLA+ integer read from a config or a state (never a boolean)."""
    assert isinstance(value, int) and not isinstance(value, bool), value
    return value


def tla_ints(constants: Mapping[str, TlaValue], name: str) -> tuple[int, ...]:
    """A config's set of integers, in order."""
    found = constants[name]
    assert isinstance(found, frozenset)
    return tuple(sorted(tla_int(x) for x in found))
