"""The conformance suite passes on Apache Kafka: the evidence that its checks assert Kafka's behaviour.

The module's one Kafka also serves as the oracle of the differential mode (Korvet as the subject)
and as the broker the suite checks from a fresh virtualenv with only ``korvet[conformance]``.

Starts Apache Kafka 4.3.1 (KRaft, one node, free loopback ports, pinned jars from Maven
Central), runs every check with profile ``kafka`` and requires every one to pass. The
broker gets two settings beyond Kafka's defaults: ``group.max.size=8``, so that the check
of GROUP_MAX_SIZE_REACHED runs instead of being skipped, and
group.initial.rebalance.delay.ms=1000 (the default is 3000), the least
``join_group.initial_delay_gathers_members`` requires: each of the ~60 group checks waits
1 s instead of 3 s for the first rebalance of its new group. The JSON and HTML reports are
written under the test's temporary directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from korvet.conformance.harness import report, runner
from korvet.conformance.harness.profile import load
from korvet.conformance.harness.registry import load_checks, select
from korvet.conformance.modes import differential
from korvet.jvm.kafka_server import KafkaServer
from tests.conftest import ROOT, KorvetProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    # compaction.*: Kafka's cleaner tuned to run promptly (a round every second, not 15 s)
    server = KafkaServer(tmp_path_factory.mktemp("kafka-conformance"),
                         properties={"group.max.size": "8", "log.cleaner.backoff.ms": "1000"},
                         group_initial_rebalance_delay_ms=1000)
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


# -- differential mode, with Apache Kafka as the oracle ---------------------------------------


def test_differential_mode_finds_nothing_unexplained_between_korvet_and_kafka(
        kafka: KafkaServer, korvet: KorvetProcess, tmp_path: Path) -> None:
    """`korvet conformance --bootstrap KORVET --oracle KAFKA`: the same generated request sequences
    (valid and malformed, every API and version both announce) to both; every difference in
    outcome, error codes or response shape is either normalised (ids, offsets, timestamps, broker
    ids, host/port) or explained by the differential section of Korvet's profile."""
    profile = load("korvet")
    subject, oracle = differential.sides(korvet.bootstrap, kafka.bootstrap)
    checks, left_out = differential.differential_checks(subject, oracle, profile, uuid.uuid4().hex[:6],
                                                        examples=30)
    print(f"\nnot compared: {left_out}", file=sys.stderr)
    assert len(checks) >= 15, [c.name for c in checks]
    result = runner.run(korvet.bootstrap, checks, profile=profile, jobs=1)
    report.write_json(result, tmp_path / "differential.json")
    report.print_report(result, Console(file=sys.stderr, width=160), all_rows=True)
    problems = []
    for r in result.failures():
        problems.append(f"- {r.name}: {r.message}\n  unexplained: {r.details.get('unexplained')}\n"
                        f"  replay file:\n{r.details.get('replay', '')}")
    assert not problems, ("differences from Kafka that the korvet profile does not explain:\n"
                          + "\n".join(problems))
    explained = {k: v for r in result.results for k, v in r.details.get("explained_by_profile", {}).items()}
    print(f"explained by the profile: {explained}", file=sys.stderr)
    assert sum(r.details.get("sequences", 0) for r in result.results) >= 15 * 30


# -- the suite for other projects' CI, from a fresh virtualenv ---------------------------------


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env(),
                          check=False)


def _start(command: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())


def _finish(process: subprocess.Popen[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_a_fresh_virtualenv_with_only_korvet_conformance_runs_the_suite(kafka: KafkaServer,
                                                                        tmp_path: Path) -> None:
    """`pip install 'korvet[conformance]'` (a wheel of this tree, its dependencies from the
    .wheelhouse that `make setup-test` fills) gives the suite without the broker's server
    dependencies: `korvet conformance --junit-xml` and `pytest --pyargs korvet.conformance` both
    report one test case per check against Apache Kafka."""
    wheelhouse = ROOT / ".wheelhouse"
    if not (wheelhouse / ".downloaded").is_file():
        pytest.fail(f"{wheelhouse} is missing: run `make setup-test` (it downloads the wheels once)")
    dist, venv = tmp_path / "dist", tmp_path / "venv"
    # The build backend is the setuptools [build-system] pins, installed in the suite's own
    # environment (no isolated build environment to fill first): no network.
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                  "--no-build-isolation", "-w", str(dist), str(ROOT)], cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    # A virtualenv without pip of its own: the suite's pip installs into it (--python), which
    # spares the bootstrap of a second pip; nothing in korvet[conformance] needs pip.
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    python, korvet_cli = str(venv / "bin" / "python"), str(venv / "bin" / "korvet")
    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile",
                      "--no-index", "--find-links", str(wheelhouse), "--find-links", str(dist),
                      "korvet[conformance]"], cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    # No server dependencies: no Redis client, and `korvet serve` says what to install.
    absent = _run([python, "-c", "import importlib.util as u; print([m for m in ('redis', 'hiredis') "
                   "if u.find_spec(m)])"], cwd=tmp_path)
    assert absent.stdout.strip() == "[]", absent.stdout + absent.stderr
    serve = _run([korvet_cli, "serve", "--port", "0"], cwd=tmp_path, timeout=60)
    assert serve.returncode == 2 and "korvet[server]" in serve.stderr, serve.stderr

    only = ["api_versions.*", "produce.acks_*", "offset_commit.simple_group_roundtrip"]
    # The command and the pytest plugin run side by side (each run names its own topics and
    # groups); --profile korvet: the shipped profiles are package data of the wheel.
    cli_run = _start([korvet_cli, "conformance", "--bootstrap", kafka.bootstrap, "--profile", "korvet",
                      "--junit-xml", "cli.xml",
                      *[a for glob in only for a in ("--only", glob)]], cwd=tmp_path)
    plugin_run = _start([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
                         "korvet.conformance", "--bootstrap", kafka.bootstrap, "--junitxml", "pytest.xml",
                         *[a for glob in only for a in ("--conformance-only", glob)]], cwd=tmp_path)
    cli, plugin = _finish(cli_run), _finish(plugin_run)
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]
    expected = sorted(c.name for c in select(load_checks().values(), only))
    cases = ET.parse(tmp_path / "cli.xml").getroot().iter("testcase")
    assert sorted(str(c.get("name")) for c in cases) == expected

    assert plugin.returncode == 0, plugin.stdout[-3000:] + plugin.stderr[-3000:]
    root = ET.parse(tmp_path / "pytest.xml").getroot()
    names = sorted(str(c.get("name")) for c in root.iter("testcase"))
    assert names == sorted(f"test_check[{n}]" for n in expected)
    assert not list(root.iter("failure")) and f"{len(expected)} passed" in plugin.stdout
