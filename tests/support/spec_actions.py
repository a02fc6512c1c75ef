"""State-graph replays keyed by spec action.

A replay compares, state by state, TLC's (action, successor) pairs with the code's. Split by
action label, that comparison gives every action of a model a test of its own,
``test_transition_replays[RenewRefused]`` (``[CoordinatorLease-replay-RenewRefused]`` where a
replay walks several models), which ``pytest -k RenewRefused`` runs: it passes
when the action fires in the model and every one of its transitions replays. The replay
itself still runs once per model (a module-scoped fixture); each action's test reads its
share of the ``ActionTally``, and the whole-model test keeps its own checks (every state
reached, every transition, the set of actions, the mutants).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import pytest

KEPT = 3  # divergences described per action; the rest are counted


@dataclass
class ActionTally:
    """What a replay of one model found, action by action."""

    total_states: int  # the states of TLC's graph
    states: int = 0  # the states the replay compared
    expected: Counter[str] = field(default_factory=Counter)  # TLC's transitions from them
    replayed: Counter[str] = field(default_factory=Counter)  # of those, the ones the code took
    diverged: Counter[str] = field(default_factory=Counter)  # divergences of each action
    divergences: dict[str, list[str]] = field(default_factory=dict)  # the first KEPT of them
    stopped: str = ""  # why the replay ended before the last state, if it did

    def compare(self, tlc: AbstractSet[tuple[str, Hashable]],
                code: AbstractSet[tuple[str, Hashable]], state: object,
                describe: Callable[[Any], str] = repr) -> bool:
        """Tally one state's successors per action: TLC's ``tlc``, the code's ``code``, as
        sets of (action, successor). ``describe`` writes ``state`` and a successor, only for
        a divergence. False when some action's successors differ."""
        if tlc == code:  # the common case, without splitting (successors are costly to hash)
            for action, _ in tlc:
                self.expected[action] += 1
                self.replayed[action] += 1
            return True
        by_tlc: dict[str, set[Hashable]] = {}
        by_code: dict[str, set[Hashable]] = {}
        for action, successor in tlc:
            by_tlc.setdefault(action, set()).add(successor)
        for action, successor in code:
            by_code.setdefault(action, set()).add(successor)
        for action in sorted(by_tlc.keys() | by_code.keys()):
            wanted, got = by_tlc.get(action, set()), by_code.get(action, set())
            if wanted:  # an action only the code takes stays out of what TLC expects
                self.expected[action] += len(wanted)
                self.replayed[action] += len(wanted & got)
            if wanted != got:
                self.diverged[action] += 1
                kept = self.divergences.setdefault(action, [])
                if len(kept) < KEPT:
                    only_tlc = sorted(map(describe, wanted - got))[:3]
                    only_code = sorted(map(describe, got - wanted))[:3]
                    kept.append(f"from {describe(state)}\n  only TLC: {only_tlc}\n  only the "
                                f"code: {only_code}")
        return False

    def note(self, action: str, problem: str) -> None:
        """A divergence found outside the successor sets (an effect, a state the code made
        that TLC never reached)."""
        self.diverged[action] += 1
        kept = self.divergences.setdefault(action, [])
        if len(kept) < KEPT:
            kept.append(problem)


def assert_action_replays(tally: ActionTally, action: str) -> None:
    """Every transition of ``action`` in the model replayed, and there was at least one."""
    if tally.diverged[action]:
        raise AssertionError(f"{action} diverges from the spec ({tally.diverged[action]} "
                             "divergences); the first:\n" + "\n".join(tally.divergences[action]))
    others = sorted(a for a, n in tally.diverged.items() if n)
    assert tally.states == tally.total_states, (
        f"the replay compared {tally.states:,} of the model's {tally.total_states:,} states "
        f"({tally.stopped or 'the code never reached the others'}; actions that diverged: "
        f"{others}), so not every "
        f"transition of {action} was replayed")
    assert tally.expected[action] > 0, (
        f"{action} never fires in the model: no transition of TLC's graph has its label, so "
        f"nothing of it was replayed (labels seen: {sorted(tally.expected)})")
    assert tally.replayed[action] == tally.expected[action], (
        f"{tally.replayed[action]:,} of {tally.expected[action]:,} transitions of {action} replayed")


def action_cases(spec: str, model: str, actions: Iterable[str], *, with_model: bool = False,
                 aliases: Mapping[str, Sequence[str]] | None = None) -> list[Any]:
    """One ``(model, action)`` case per action, its id the action (``model-action`` with
    ``with_model``), marked ``spec(spec, action, *aliases)``: the label TLC gives an action
    is the innermost operator that defines it (PartitionLog's ``AppendBatch`` is labelled
    ``AppendAt``), an alias names the ``Next`` disjunct too."""
    aliases = aliases or {}
    return [pytest.param(model, action, id=f"{model}-{action}" if with_model else action,
                         marks=pytest.mark.spec(spec, action, *aliases.get(action, ())))
            for action in actions]
