"""The conformance suite passes on Apache Kafka: the evidence that its checks assert Kafka's behaviour.

Starts Apache Kafka 4.3.1 (KRaft, one node, free loopback ports, pinned jars from Maven
Central) with its default group.initial.rebalance.delay.ms of 3 s, runs every check
with profile ``kafka`` and requires every one to pass. The broker gets one setting
beyond Kafka's defaults: ``group.max.size=8``, so that the check of
GROUP_MAX_SIZE_REACHED runs instead of being skipped. The JSON and HTML reports are
written under the test's temporary directory.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from korvet.conformance import report, runner
from korvet.conformance.registry import load_checks
from korvet.tools.kafka_server import KafkaServer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    server = KafkaServer(tmp_path_factory.mktemp("kafka-conformance"), properties={"group.max.size": "8"})
    with server:
        print(f"\nApache Kafka on {server.bootstrap}: started in {server.startup_seconds:.1f} s",
              file=sys.stderr)
        yield server


def describe_failures(result: runner.RunReport) -> str:
    lines = []
    for r in result.results:
        if r.status != runner.PASS:
            lines.append(f"- {r.name} [{r.status}]: {r.message}")
            for key, value in r.details.items():
                lines.append(f"    {key}: {str(value)[:600]}")
    return "\n".join(lines)


def test_every_check_passes_on_apache_kafka(kafka: KafkaServer, tmp_path: Path) -> None:
    # the security.* checks need a secured broker: tests/conformance/test_security_conformance.py
    checks = sorted((c for c in load_checks().values() if c.family != "security"),
                    key=lambda c: c.name)
    assert len(checks) >= 120
    result = runner.run(kafka.bootstrap, checks, profile="kafka", jobs=8)
    report.write_json(result, tmp_path / "kafka-conformance.json")
    report.write_html(result, tmp_path / "kafka-conformance.html")
    report.print_report(result, Console(file=sys.stderr, width=160), all_rows=False)
    print(f"reports: {tmp_path}", file=sys.stderr)
    not_passed = [r for r in result.results if r.status != runner.PASS]
    assert not not_passed, (
        f"{len(not_passed)} of {len(result.results)} checks did not pass on Apache Kafka "
        f"(reports in {tmp_path}):\n{describe_failures(result)}"
    )
    assert len(result.results) == len(checks)
