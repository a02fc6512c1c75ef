"""The fault scheduler (korvet/faults/runner.py): every fault kind asked for is injected at
least once, even when one fault outlasts the run's time (a Kafka broker restarting on a
loaded machine did: a 30 s run met only its first kind and the suite's run failed)."""

from __future__ import annotations

import random
import time

from korvet.faults.runner import RunParams, _schedule
from korvet.faults.workload import Recorder


class SlowTarget:
    """A topology whose faults take longer to inject than the whole run lasts."""

    name = "slow"
    kinds = ("broker-kill", "broker-pause", "redis-restart")
    extra_kinds: tuple[str, ...] = ()

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.injected: list[str] = []

    def inject(self, kind: str, rng: random.Random) -> str:
        self.injected.append(kind)
        time.sleep(self.seconds)
        return "done"

    def heal(self) -> list[str]:
        return []


def test_every_kind_is_injected_once_even_when_a_fault_outlasts_the_run() -> None:
    target = SlowTarget(seconds=0.3)
    params = RunParams(topology="slow", seconds=0.2, seed=3, gap=(0.01, 0.02))
    windows, _ = _schedule(target, target.kinds, params, Recorder(), lambda line: None)  # type: ignore[arg-type]
    assert sorted(target.injected) == sorted(target.kinds)
    assert [kind for kind, _, _ in windows] == target.injected


def test_a_run_with_time_to_spare_deals_every_kind_before_any_twice() -> None:
    target = SlowTarget(seconds=0.0)
    params = RunParams(topology="slow", seconds=0.5, seed=1, gap=(0.01, 0.02))
    _schedule(target, target.kinds, params, Recorder(), lambda line: None)  # type: ignore[arg-type]
    first = target.injected[:len(target.kinds)]
    assert sorted(first) == sorted(target.kinds) and len(target.injected) > len(target.kinds)
