"""Declared topics: ``korvet.topics[N]`` entries of the original product's configuration.

Each declaration names a topic exactly (``orders``) or by a pattern where ``*`` stands
for any run of characters (``*``, ``logs-*``), and gives some of: a partition count,
whether clients may auto-create the topic, and topic configs (Kafka names, already
validated by the configuration loader). For one topic name, ``resolve`` folds every
matching declaration, most specific first:

1. the declaration whose name equals the topic's;
2. patterns with more literal (non-``*``) characters before those with fewer;
3. on a tie, the lower index (earlier in the file or variables) first.

Each field comes from the first declaration in that order that sets it, so ``*`` gives
defaults that a more specific entry overrides field by field. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TopicDeclaration:
    index: int
    name: str
    partitions: int | None = None
    auto_create: bool | None = None
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_pattern(self) -> bool:
        return "*" in self.name

    @property
    def specificity(self) -> int:
        return len(self.name.replace("*", ""))

    def matches(self, topic: str) -> bool:
        if not self.is_pattern:
            return topic == self.name
        regex = ".*".join(re.escape(part) for part in self.name.split("*"))
        return re.fullmatch(regex, topic, flags=re.DOTALL) is not None


@dataclass(frozen=True, slots=True)
class Declared:
    """What the declarations say about one topic (None: not declared, use the broker's)."""

    partitions: int | None = None
    auto_create: bool | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


def _order(declaration: TopicDeclaration) -> tuple[int, int, int]:
    return (1 if declaration.is_pattern else 0, -declaration.specificity, declaration.index)


def resolve(declarations: Iterable[TopicDeclaration], topic: str) -> Declared:
    matching = sorted((d for d in declarations if d.matches(topic)), key=_order)
    partitions = next((d.partitions for d in matching if d.partitions is not None), None)
    auto_create = next((d.auto_create for d in matching if d.auto_create is not None), None)
    configs: dict[str, str] = {}
    for declaration in reversed(matching):  # the most specific written last, so it wins
        configs.update(declaration.configs)
    return Declared(partitions, auto_create, configs)


def exact_names(declarations: Iterable[TopicDeclaration]) -> list[str]:
    """Topics declared by name (no pattern): the broker creates them at start."""
    return sorted({d.name for d in declarations if not d.is_pattern})
