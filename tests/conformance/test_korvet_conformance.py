"""The conformance suite against Korvet, with the ``korvet`` profile.

Korvet's documented design differences (sparse offsets, no transactions, no
compaction, uncompressed storage; see korvet/conformance/differences.py) are
excused with their reasons; every other check must pass. A skipped check (one that
needs a broker setting Korvet does not have, such as group.max.size) is reported
but does not fail the test. docs/conformance.md holds the result table of this run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rich.console import Console

from korvet.conformance import report, runner
from korvet.conformance.registry import load_checks
from tests.conftest import KorvetProcess

pytestmark = [pytest.mark.slow]


def test_every_check_passes_on_korvet_or_is_excused(korvet: KorvetProcess, tmp_path: Path) -> None:
    checks = sorted(load_checks().values(), key=lambda c: c.name)
    result = runner.run(korvet.bootstrap, checks, profile="korvet", jobs=8)
    report.write_json(result, tmp_path / "korvet-conformance.json")
    report.write_html(result, tmp_path / "korvet-conformance.html")
    report.print_report(result, Console(file=sys.stderr, width=160), all_rows=False)
    print(f"reports: {tmp_path}", file=sys.stderr)
    failed = result.failures()
    lines = []
    for r in failed:
        lines.append(f"- {r.name}: {r.message}")
        for key, value in r.details.items():
            lines.append(f"    {key}: {str(value)[:400]}")
    assert not failed, (
        f"{len(failed)} of {len(result.results)} checks failed on Korvet (profile korvet; reports in "
        f"{tmp_path}):\n" + "\n".join(lines) + f"\nbroker log tail:\n{korvet.log_tail(20)}"
    )
