"""Shrinking a failing request script against the live broker, within a time budget.

Hypothesis' own shrinker replays the whole run hundreds of times; against a live broker
that takes minutes (it gives up after five). Live runs therefore generate with
Hypothesis and shrink here: drop chunks of actions (halves, quarters, ... single
actions), then set each action's optional fields back to their defaults, keeping every
change after which a replay still fails *the same way* (same request kind, same kind of
difference). Each replay runs against fresh group ids or a fresh topic. When the budget
is spent, the smallest script found so far is the answer.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from korvet.verification.live import actions as act

Replay = Callable[[act.Script], None]  # raises AssertionError on a difference

_KINDS = ("holds it back", "kept it", "answered", "does not start with", "handed out before")


def signature(message: str) -> tuple[str, str]:
    """What makes two failures the same one: the request named first, the kind of
    difference."""
    first = message.strip().split("\n", 1)[0]
    request = re.sub(r"\d+", "#", first.split(":", 1)[0])
    kind = next((k for k in _KINDS if k in message), "other")
    return request.split(" ", 1)[0], kind


@dataclass
class Shrunk:
    script: act.Script
    message: str
    replays: int
    seconds: float
    complete: bool  # False: the budget ran out first


class _Search:
    """The replays of one shrink: which candidates still fail the same way."""

    def __init__(self, script: act.Script, message: str, replay: Replay, budget: float) -> None:
        self.script, self.message, self.replay = script, message, replay
        self.wanted = signature(message)
        self.replays = 0
        self.started = time.monotonic()
        self.deadline = self.started + budget

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def try_actions(self, actions: list[act.Action]) -> bool:
        """Keep ``actions`` if a replay of them still fails the same way."""
        if not actions:
            return False
        candidate = dataclasses.replace(self.script, actions=tuple(actions))
        self.replays += 1
        try:
            self.replay(candidate)
        except AssertionError as exc:
            if signature(str(exc)) == self.wanted:
                self.script, self.message = candidate, str(exc)
                return True
        return False

    def drop_chunks(self) -> None:
        chunk = max(len(self.script.actions) // 2, 1)
        while chunk >= 1 and not self.out_of_time():
            start = 0
            while start < len(self.script.actions) and not self.out_of_time():
                actions = list(self.script.actions)
                if not self.try_actions(actions[:start] + actions[start + chunk:]):
                    start += chunk
            chunk //= 2

    def simplify_fields(self) -> None:
        for index in range(len(self.script.actions)):
            for name in _optional_fields(self.script.actions[index]):
                if self.out_of_time():
                    return
                actions = list(self.script.actions)
                simpler = _with_default(actions[index], name)
                if simpler is not None:
                    actions[index] = simpler
                    self.try_actions(actions)


def shrink(script: act.Script, message: str, replay: Replay, budget: float) -> Shrunk:
    """The smallest script that still fails like ``message`` within ``budget`` seconds."""
    search = _Search(script, message, replay, budget)
    search.drop_chunks()
    search.simplify_fields()
    return Shrunk(search.script, search.message, search.replays,
                  time.monotonic() - search.started, not search.out_of_time())


def _optional_fields(action: act.Action) -> list[str]:
    return [f.name for f in dataclasses.fields(action) if f.default is not dataclasses.MISSING]


def _with_default(action: act.Action, name: str) -> act.Action | None:
    """The action with the field ``name`` set back to its default (None: it has it)."""
    default = next(f.default for f in dataclasses.fields(action) if f.name == name)
    if getattr(action, name) == default:
        return None
    value: Any = default
    return dataclasses.replace(action, **{name: value})
