"""korvet/core/bounded.py: a table keeps at most its limit, dropping the entry written
longest ago; writing a key again makes it the newest."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from korvet.core.bounded import put_newest


@given(st.lists(st.integers(0, 20), max_size=60), st.integers(1, 8))
def test_the_table_keeps_the_last_written_keys_up_to_its_limit(keys: list[int], limit: int) -> None:
    table: dict[int, int] = {}
    for step, key in enumerate(keys):
        put_newest(table, key, step, limit)
    newest_first: list[int] = []
    for key in reversed(keys):
        if key not in newest_first:
            newest_first.append(key)
    assert list(table) == list(reversed(newest_first[:limit]))
    assert all(table[key] == max(i for i, k in enumerate(keys) if k == key) for key in table)
