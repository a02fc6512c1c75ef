"""One pytest test per conformance check: ``pytest --pyargs korvet.conformance --bootstrap HOST:PORT``
(see ``harness/pytest_plugin.py``)."""

from __future__ import annotations

from typing import Any

from korvet.conformance.harness.pytest_plugin import outcome


def test_check(conformance_check: str, conformance_results: dict[str, Any]) -> None:
    outcome(conformance_results[conformance_check])
