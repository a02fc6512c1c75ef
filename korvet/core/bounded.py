"""A table of at most so many entries, the oldest written dropped first: for what a broker
remembers about things its clients name (group ids, producer ids), which would otherwise
grow with every name ever used. Dicts keep insertion order, so the first key is the oldest.

Used by rule 7's failed sequences (korvet/core/produce.py ``SequenceGaps``) and the group
configs' cache (korvet/server/group_configs.py). Tests: tests/unit/core/test_bounded.py.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def put_newest(table: dict[K, V], key: K, value: V, limit: int) -> None:
    """``table[key] = value`` as its newest entry; past ``limit`` entries the oldest goes."""
    table.pop(key, None)
    table[key] = value
    if len(table) > limit:
        del table[next(iter(table))]
