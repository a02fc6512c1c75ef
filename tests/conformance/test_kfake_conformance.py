"""The conformance suite against a third implementation nobody here wrote: franz-go's kfake.

``scripts/setup.sh test`` builds ``.kfake/kfake-server`` (our small Go program around kfake,
at the versions ``scripts/kfake/go.mod`` pins). The harness starts it as ``korvet
conformance --start kfake`` does, runs every check with the shipped ``kfake`` profile, and
holds kfake to its column of the matrix in docs/conformance.md: every check passes or is
excused by the profile, and every excused check fails (an excuse kfake no longer needs fails
this test). One check, ``connection.unknown_api_key_closes_connection``, makes kfake crash:
the harness must name it as the check that killed the broker, restart kfake and go on.

The ``security.*`` checks run against a second kfake started with SASL (a super user for
PLAIN and both SCRAMs), ACLs, connections.max.reauth.ms and a TLS port in front of it
(``kfake-server --superuser/--acls/--tls-port``): the same rule holds for them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from korvet.conformance.harness import report, runner
from korvet.conformance.harness.brokers import BrokerError, ProcessBroker, kfake_binary, kfake_command
from korvet.conformance.harness.profile import load
from korvet.conformance.harness.registry import Check, load_checks
from korvet.conformance.harness.security import SecurityTarget
from korvet.devtools.certs import CertificateAuthority
from korvet.process import free_port

pytestmark = [pytest.mark.slow, pytest.mark.clients]  # starts kfake and drives real clients


@pytest.fixture(scope="module")
def kfake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessBroker]:
    try:
        binary = kfake_binary()
    except BrokerError as exc:
        pytest.fail(f"{exc} (the kfake run is part of the suite: run `make setup-test`)")
    broker = ProcessBroker(kfake_command(binary), tmp_path_factory.mktemp("kfake"), name="kfake")
    with broker:
        yield broker


def test_every_check_passes_on_kfake_or_is_excused_by_its_profile(kfake: ProcessBroker,
                                                                   tmp_path: Path) -> None:
    # the security.* checks need a secured kfake: test_security_checks_on_kfake... below.
    # The connection.* checks first: one of them crashes kfake, and the harness then waits for
    # every check in flight to end before it reruns the suspects. Raw-protocol checks end as
    # soon as their connections close; real clients (librdkafka, Java) in flight then would
    # retry against the restarted, empty kfake until their own timeouts (~30 s, for results
    # that are dropped anyway). Then the quick api_versions.* checks, so that the slow ones,
    # which drive real clients, start after the crash; the slow ones before the rest (see
    # registry.slow_first). (In this order a kafka-python group consumer sometimes never got its
    # partitions: a kafka-python 3.0 rejoin lost in a poll timeout, which the conformance
    # driver now avoids; see drivers.kafka_python_consumer.)
    checks = sorted((c for c in load_checks().values() if c.family != "security"),
                    key=lambda c: (c.family != "connection", c.family != "api_versions", not c.slow, c.name))
    profile = load("kfake")
    notes: list[str] = []
    result = runner.run(kfake.bootstrap, checks, profile=profile, jobs=8, broker=kfake, on_note=notes.append)
    report.write_json(result, tmp_path / "kfake-conformance.json")
    report.write_html(result, tmp_path / "kfake-conformance.html")
    report.print_report(result, Console(file=sys.stderr, width=160), all_rows=False)
    print(f"reports: {tmp_path}", file=sys.stderr)
    assert result.stopped is None, result.stopped
    assert len(result.results) == len(checks)
    failed = [f"- {r.name}: {r.message}" for r in result.failures()]
    assert not failed, f"{len(failed)} checks failed on kfake without an excuse:\n" + "\n".join(failed)
    unneeded = [r.name for r in result.unneeded_excuses()]
    assert not unneeded, ("the kfake profile (and so docs/conformance.md's matrix) excuses checks that "
                          f"pass: {unneeded}")
    skipped = [r.name for r in result.results if r.status == runner.SKIP]
    assert not skipped, f"checks skipped on kfake: {skipped}"
    # The harness noticed the crash, named the check that caused it and restarted kfake.
    killers = [name for incident in result.incidents for name in incident["killers"]]
    assert killers == ["connection.unknown_api_key_closes_connection"], (result.incidents, notes)
    killed = next(r for r in result.results if r.name == killers[0])
    assert killed.message.startswith("the broker died during this check")
    assert kfake.starts >= 2 and kfake.alive()


ADMIN, PASSWORD = "admin", "admin-secret"


@pytest.fixture(scope="module")
def secured_kfake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ProcessBroker, SecurityTarget]]:
    try:
        binary = kfake_binary()
    except BrokerError as exc:
        pytest.fail(f"{exc} (the kfake run is part of the suite: run `make setup-test`)")
    work = tmp_path_factory.mktemp("kfake-secured")
    ca = CertificateAuthority(work / "pki")
    cert = ca.issue("broker", "localhost")
    tls_port = free_port()
    users = [arg for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
             for arg in ("--superuser", f"{mechanism}:{ADMIN}:{PASSWORD}")]
    command = [*kfake_command(binary), *users, "--acls", "-c", "connections.max.reauth.ms=8000",
               "--tls-port", str(tls_port), "--tls-cert", str(cert.cert), "--tls-key", str(cert.key)]
    broker = ProcessBroker(command, work, name="kfake-secured")
    with broker:
        yield broker, SecurityTarget(f"127.0.0.1:{tls_port}", str(ca.cert), ADMIN, PASSWORD,
                                     broker.bootstrap)


def test_security_checks_pass_on_a_secured_kfake_or_are_excused_by_its_profile(
        secured_kfake: tuple[ProcessBroker, SecurityTarget], tmp_path: Path) -> None:
    broker, target = secured_kfake
    checks: list[Check] = sorted((c for c in load_checks().values() if c.family == "security"),
                                 key=lambda c: c.name)
    result = runner.run(broker.bootstrap, checks, profile=load("kfake"), jobs=8, broker=broker,
                        security=target)
    report.write_json(result, tmp_path / "kfake-security.json")
    report.print_report(result, Console(file=sys.stderr, width=160), all_rows=False)
    assert result.stopped is None, result.stopped
    assert len(result.results) == len(checks) >= 25
    failed = [f"- {r.name}: {r.message}" for r in result.failures()]
    assert not failed, (f"{len(failed)} security checks failed on kfake without an excuse:\n"
                        + "\n".join(failed))
    unneeded = [r.name for r in result.unneeded_excuses()]
    assert not unneeded, f"the kfake profile excuses security checks that pass: {unneeded}"
    skipped = [f"{r.name}: {r.message}" for r in result.results if r.status == runner.SKIP]
    assert not skipped, f"security checks skipped on kfake: {skipped}"
    assert broker.starts == 1 and broker.alive()
