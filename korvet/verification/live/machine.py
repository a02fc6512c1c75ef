"""The Hypothesis state machines that drive live runs, and the runner behind the CLI.

``run_groups`` runs the group protocol's machine ``examples`` times (request sequences
of up to ``steps`` actions each) against one broker; a failure is shrunk by Hypothesis,
and the shrunk sequence is written as a script (``actions.Script``) that
``replay_groups`` runs again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from korvet.core.api_keys import ApiKey
from korvet.verification.live import actions as act
from korvet.verification.live import shrink
from korvet.verification.live.env import HARNESS_MAX, Environment, Stats
from korvet.verification.live.groups import GroupRun


@dataclass
class Recorder:
    """The actions of the run in progress: after a failure, the shrunk one's."""

    static: tuple[bool, ...] = ()
    actions: list[act.Action] = field(default_factory=list)
    part: str = "groups"

    def script(self) -> act.Script:
        return act.Script(self.static, tuple(self.actions), self.part)


class LiveFailure(AssertionError):
    """A live run found a difference; ``script`` replays it."""

    def __init__(self, message: str, script: act.Script) -> None:
        super().__init__(message)
        self.script = script


def _weighted(*pairs: tuple[str, int]) -> list[str]:
    """Choices with weights for ``sampled_from`` (Hypothesis shrinks toward the first)."""
    return [name for name, weight in pairs for _ in range(weight)]


def group_machine(env: Environment, members: int, recorder: Recorder) -> type[Any]:  # noqa: C901 -- one flat method per Hypothesis rule
    """A RuleBasedStateMachine class over ``env`` with ``members`` simulated members."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

    def versions(api: int) -> Any:
        lo, hi = env.versions[api]
        return st.integers(lo, max(lo, min(hi, HARNESS_MAX.get(api, hi))))

    sims = st.integers(0, members - 1)
    member = st.sampled_from(_weighted(("own", 8), ("none", 1), ("stale", 1), ("other", 1),
                                       ("bogus", 1)))
    instance = st.sampled_from(_weighted(("auto", 10), ("none", 1), ("other", 1), ("bogus", 1)))
    generation = st.sampled_from(_weighted(("mine", 8), ("group", 2), ("stale", 1),
                                           ("next", 1), ("none", 1)))
    group = st.sampled_from(_weighted(("main", 12), ("absent", 1), ("blank", 1)))
    variant = st.sampled_from([0, 0, 0, 1, 2, 3, 4])
    has_clock = env.clock is not None

    class LiveGroups(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.run: GroupRun | None = None

        @initialize(static=st.lists(st.booleans(), min_size=members, max_size=members))
        def start(self, static: list[bool]) -> None:
            recorder.static = tuple(static)
            recorder.actions = []
            self.run = GroupRun(env, static)

        def do(self, action: act.Action) -> None:
            assert self.run is not None
            recorder.actions.append(action)
            if not self.run.perform(action):
                recorder.actions.pop()

        @rule(sim=sims, version=versions(ApiKey.JOIN_GROUP), member=member, instance=instance,
              protocols=variant,
              protocol_type=st.sampled_from(_weighted(("consumer", 12), ("connect", 1))),
              session=st.sampled_from(_weighted(("ok", 12), ("short", 1))), group=group)
        def join(self, **kw: Any) -> None:
            self.do(act.Join(**kw))

        # A well-behaved client's next step, three rules (three times as likely as any
        # other), so that sequences reach rebalances, held-back joins and several members.
        def follow_step(self, sim: int, join: int, sync: int, heartbeat: int) -> None:
            assert self.run is not None
            self.do(self.run.next_step(sim, join, sync, heartbeat))

        @rule(sim=sims, join=versions(ApiKey.JOIN_GROUP), sync=versions(ApiKey.SYNC_GROUP),
              heartbeat=versions(ApiKey.HEARTBEAT))
        def follow(self, **kw: Any) -> None:
            self.follow_step(**kw)

        @rule(sim=sims, join=versions(ApiKey.JOIN_GROUP), sync=versions(ApiKey.SYNC_GROUP),
              heartbeat=versions(ApiKey.HEARTBEAT))
        def follow_again(self, **kw: Any) -> None:
            self.follow_step(**kw)

        @rule(sim=sims, join=versions(ApiKey.JOIN_GROUP), sync=versions(ApiKey.SYNC_GROUP),
              heartbeat=versions(ApiKey.HEARTBEAT))
        def follow_once_more(self, **kw: Any) -> None:
            self.follow_step(**kw)

        @rule(sim=sims, version=versions(ApiKey.SYNC_GROUP), member=member, instance=instance,
              generation=generation, assign=st.sampled_from(_weighted(("all", 6), ("first", 1),
                                                                      ("none", 1))),
              protocol=st.sampled_from(_weighted(("match", 8), ("name", 1), ("type", 1),
                                                 ("omit", 2))), group=group)
        def sync(self, **kw: Any) -> None:
            self.do(act.Sync(**kw))

        @rule(sim=sims, version=versions(ApiKey.HEARTBEAT), member=member, instance=instance,
              generation=generation, group=group)
        def heartbeat(self, **kw: Any) -> None:
            self.do(act.Heartbeat(**kw))

        @rule(sim=sims, version=versions(ApiKey.LEAVE_GROUP),
              who=st.sampled_from(_weighted(("self", 6), ("self+other", 1), ("admin", 1),
                                            ("admin-other", 1), ("other", 1), ("bogus", 1))),
              group=st.sampled_from(_weighted(("main", 10), ("absent", 1))))
        def leave(self, **kw: Any) -> None:
            self.do(act.Leave(**kw))

        @rule(sim=sims, version=versions(ApiKey.OFFSET_COMMIT), member=member, instance=instance,
              generation=generation, partitions=st.integers(1, 3), offset=st.integers(0, 99),
              metadata=st.sampled_from(_weighted(("short", 10), ("long", 1))),
              group=st.sampled_from(_weighted(("main", 10), ("absent", 1))))
        def commit(self, **kw: Any) -> None:
            self.do(act.Commit(**kw))

        @rule(version=versions(ApiKey.OFFSET_FETCH), everything=st.booleans(),
              group=st.sampled_from(_weighted(("main", 6), ("absent", 1))))
        def fetch_offsets(self, **kw: Any) -> None:
            self.do(act.FetchOffsets(**kw))

        @rule(version=versions(ApiKey.DESCRIBE_GROUPS))
        def describe(self, **kw: Any) -> None:
            self.do(act.Describe(**kw))

        @rule(sim=sims)
        def reconnect(self, sim: int) -> None:
            self.do(act.Reconnect(sim))

        @precondition(lambda self: has_clock)
        @rule(to=st.sampled_from(_weighted(("next", 3), ("half", 1))))
        def advance(self, to: str) -> None:
            self.do(act.Advance(to))

        def teardown(self) -> None:
            if self.run is not None:
                self.run.close()

    return LiveGroups


SHRINK_SECONDS = 60.0


def run_machine(machine: type[Any], recorder: Recorder, replay: Callable[[act.Script], None],
                *, examples: int, steps: int, seed: int | None, database: Any = None,
                shrink_seconds: float = SHRINK_SECONDS) -> None:
    """Generate ``examples`` sequences with Hypothesis (no shrinking: against a live broker
    Hypothesis' shrinker takes minutes); on a difference, shrink the failing sequence by
    replaying it (``shrink.shrink``, within ``shrink_seconds``) and raise ``LiveFailure``."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as use_seed
    from hypothesis.errors import Flaky
    from hypothesis.stateful import get_state_machine_test

    chosen = settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                      database=database, suppress_health_check=list(HealthCheck),
                      phases=(Phase.explicit, Phase.reuse, Phase.generate), print_blob=False)
    test = get_state_machine_test(machine, settings=chosen)
    if seed is not None:
        test = use_seed(seed)(test)
    try:
        test()
    except (AssertionError, Flaky) as exc:
        # Flaky: the difference did not show again when Hypothesis re-ran the sequence (a
        # broker that answers differently each time is a finding too); its first failure
        # is the message
        first: BaseException = exc
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            first = exc.exceptions[0]
        found = recorder.script()
        result = shrink.shrink(found, str(first), replay, shrink_seconds)
        note = (f"\n\n(shrunk from {len(found.actions)} to {len(result.script.actions)} "
                f"actions by {result.replays} replays in {result.seconds:.1f} s"
                f"{'' if result.complete else '; the shrink budget ran out'})")
        raise LiveFailure(result.message + note, result.script) from exc


def run_groups(env: Environment, *, members: int = 3, examples: int = 25, steps: int = 30,
               seed: int | None = None, database: Any = None,
               shrink_seconds: float = SHRINK_SECONDS) -> None:
    """Run the group machine; raise ``LiveFailure`` (with the shrunk script) on a difference."""
    run_part(env, lambda e, recorder: group_machine(e, members, recorder), replay_groups,
             part="groups", examples=examples, steps=steps, seed=seed, database=database,
             shrink_seconds=shrink_seconds)


def run_part(env: Environment, machine: Callable[[Environment, Recorder], type[Any]],
             replay: Callable[[Environment, act.Script], object], *, part: str, examples: int,
             steps: int, seed: int | None, database: Any = None,
             shrink_seconds: float = SHRINK_SECONDS) -> None:
    """Run one part's machine (``run_machine``); a failure is shrunk by replaying scripts
    with ``replay``, whose figures are not the run's."""
    recorder = Recorder(part=part)

    def quietly(script: act.Script) -> None:
        stats = env.stats
        env.stats = Stats()
        try:
            replay(env, script)
        finally:
            env.stats = stats

    run_machine(machine(env, recorder), recorder, quietly, examples=examples, steps=steps,
                seed=seed, database=database, shrink_seconds=shrink_seconds)


class LiveRun(Protocol):
    """One sequence against the broker: its actions, then its connections closed."""

    def perform(self, action: act.Action) -> bool: ...

    def close(self) -> None: ...


RunT = TypeVar("RunT", bound=LiveRun)


def play(run: RunT, script: act.Script) -> RunT:
    """Run a script's actions in order; raises ``Divergence`` at the first difference."""
    try:
        for action in script.actions:
            run.perform(action)
    finally:
        run.close()
    return run


def replay_groups(env: Environment, script: act.Script) -> GroupRun:
    return play(GroupRun(env, script.static), script)


def part_machine(env: Environment, recorder: Recorder, part: str,
                 start: Callable[[Environment], LiveRun]) -> type[Any]:
    """The base of a part's RuleBasedStateMachine: each sequence starts a run with
    ``start`` (then ``begin``, the actions every sequence opens with), records each action
    for the script and performs it, and closes the run at the end. The part adds its
    rules."""
    from hypothesis.stateful import RuleBasedStateMachine, initialize

    class LivePart(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.run: LiveRun | None = None

        @initialize()
        def start(self) -> None:
            recorder.static, recorder.actions, recorder.part = (), [], part
            self.run = start(env)
            self.begin()

        def begin(self) -> None:
            """Actions every sequence opens with (none)."""

        def do(self, action: act.Action) -> None:
            assert self.run is not None
            recorder.actions.append(action)
            self.run.perform(action)

        def teardown(self) -> None:
            if self.run is not None:
                self.run.close()

    return LivePart
