"""The conformance suite against Korvet, with the ``korvet`` profile.

Korvet's documented design differences (sparse offsets, no transactions, no
compaction, uncompressed storage; see korvet/conformance/profiles/korvet.yaml) are
excused with their reasons; every other check must pass, and every excused check must
still fail (an excuse Korvet no longer needs fails this test, which keeps Korvet's column
of the matrix in docs/conformance.md true). The broker runs with
``groups.max-size`` 8 (as the Apache Kafka run has ``group.max.size=8``) so that the
GROUP_MAX_SIZE_REACHED check runs too, and no check may be skipped. Its initial rebalance
delay is 1 s, the least ``join_group.initial_delay_gathers_members`` requires (the default 3 s
would make each of the ~60 group checks wait 2 s longer, for nothing a check asserts).
docs/conformance.md holds the result table of this run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from korvet.conformance.harness import report, runner
from korvet.conformance.harness.registry import load_checks, slow_first
from tests.conftest import KorvetProcess

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def korvet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KorvetProcess]:
    broker = KorvetProcess(tmp_path_factory.mktemp("korvet-conformance"),
                           extra_args=["--groups-max-size", "8",
                                       "--groups-initial-rebalance-delay-ms", "1000",
                                       # compaction.*: a cleaner round every second, not 15 s
                                       "--cleaner-backoff-ms", "1000"])
    broker.start()
    yield broker
    broker.stop()


def test_every_check_passes_on_korvet_or_is_excused(korvet: KorvetProcess, tmp_path: Path) -> None:
    # the security.* checks need a secured broker: tests/conformance/test_security_conformance.py
    checks = slow_first(c for c in load_checks().values() if c.family != "security")
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
    skipped = [r.name for r in result.results if r.status == "skip"]
    assert not skipped, f"checks skipped on Korvet: {skipped}"
    unneeded = [r.name for r in result.unneeded_excuses()]
    assert not unneeded, f"the korvet profile excuses checks that pass on Korvet: {unneeded}"
    assert not failed, (
        f"{len(failed)} of {len(result.results)} checks failed on Korvet (profile korvet; reports in "
        f"{tmp_path}):\n" + "\n".join(lines) + f"\nbroker log tail:\n{korvet.log_tail(20)}"
    )
