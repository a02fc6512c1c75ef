"""The security checks of the conformance suite (korvet/conformance/checks/security.py) pass on
Apache Kafka started with SASL_SSL and its StandardAuthorizer (KRaft), and on Korvet set up
the same way: one SASL_SSL listener with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, ACLs with
allow.everyone.if.no.acl.found=false, an ``admin`` super user, connections.max.reauth.ms=8000.

The certificates are made here (a CA and the brokers' certificate, with openssl). Korvet's
admin user is created with ``korvet users add``, Kafka's with ``kafka-storage format
--add-scram``. Every check must pass on both: none is skipped or excused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from korvet.conformance.harness import report, runner
from korvet.conformance.harness.registry import Check, load_checks
from korvet.conformance.harness.security import SecurityTarget
from korvet.devtools.certs import CertificateAuthority, Issued
from korvet.jvm.kafka_server import KafkaSecurity, KafkaServer
from tests.conftest import KORVET, ROOT, KorvetProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ADMIN, PASSWORD = "admin", "admin-secret"
REAUTH_MS = 8000


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertificateAuthority, Issued]:
    ca = CertificateAuthority(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("broker", "localhost")


def security_checks() -> list[Check]:
    checks = sorted((c for c in load_checks().values() if c.family == "security"),
                    key=lambda c: c.name)
    assert len(checks) >= 25
    return checks


def run_and_require_all_pass(bootstrap: str, target: SecurityTarget, profile: str,
                             out: Path, label: str) -> None:
    result = runner.run(bootstrap, security_checks(), profile=profile, jobs=8, security=target)
    report.write_json(result, out / f"{label}-security.json")
    report.print_report(result, Console(file=sys.stderr, width=160), all_rows=False)
    not_passed = [f"- {r.name} [{r.status}]: {r.message}" for r in result.results if r.status != "pass"]
    assert not not_passed, f"security checks not passed on {label} (reports in {out}):\n" + "\n".join(
        not_passed)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory,
          pki: tuple[CertificateAuthority, Issued]) -> Iterator[KafkaServer]:
    ca, cert = pki
    security = KafkaSecurity(cert.bundle, ca.cert, admin_user=ADMIN, admin_password=PASSWORD,
                             max_reauth_ms=REAUTH_MS)
    with KafkaServer(tmp_path_factory.mktemp("kafka-secured"), security=security) as server:
        print(f"\nApache Kafka (SASL_SSL {server.sasl_bootstrap}) started in "
              f"{server.startup_seconds:.1f} s", file=sys.stderr)
        yield server


@pytest.fixture(scope="module")
def korvet(tmp_path_factory: pytest.TempPathFactory,
           pki: tuple[CertificateAuthority, Issued]) -> Iterator[tuple[KorvetProcess, dict[str, int]]]:
    _, cert = pki
    folder = tmp_path_factory.mktemp("korvet-secured")
    settings = {
        "listeners": [{"name": "INTERNAL", "port": 0, "protocol": "PLAINTEXT"},
                      {"name": "EXTERNAL", "port": 0, "protocol": "SASL_SSL"}],
        "broker": {"cert-file": str(cert.cert), "key-file": str(cert.key),
                   "sasl": {"mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]},
                   "listeners-file": str(folder / "listeners.json")},
        "authorizer": {"enabled": True},
        "super.users": f"User:{ADMIN}",
        "connections.max.reauth.ms": REAUTH_MS,
    }
    (folder / "korvet.yaml").write_text(yaml.safe_dump(settings))
    broker = KorvetProcess(folder / "broker", extra_args=["--config", str(folder / "korvet.yaml")])
    broker.start()
    try:
        subprocess.run([*KORVET, "users", "--data-dir", str(broker.data_dir), "add", ADMIN],
                       input=PASSWORD + "\n", text=True, cwd=ROOT, check=True, capture_output=True,
                       timeout=60)
        yield broker, json.loads((folder / "listeners.json").read_text())
    finally:
        broker.stop()


def test_security_checks_pass_on_apache_kafka(kafka: KafkaServer, pki: tuple[CertificateAuthority, Issued],
                                              tmp_path: Path) -> None:
    ca, _ = pki
    target = SecurityTarget(kafka.sasl_bootstrap, str(ca.cert), ADMIN, PASSWORD, kafka.bootstrap)
    run_and_require_all_pass(kafka.bootstrap, target, "kafka", tmp_path, "kafka")


def test_security_checks_pass_on_korvet(korvet: tuple[KorvetProcess, dict[str, int]],
                                        pki: tuple[CertificateAuthority, Issued], tmp_path: Path) -> None:
    broker, ports = korvet
    ca, _ = pki
    target = SecurityTarget(f"127.0.0.1:{ports['EXTERNAL']}", str(ca.cert), ADMIN, PASSWORD,
                            f"127.0.0.1:{ports['INTERNAL']}")
    run_and_require_all_pass(f"127.0.0.1:{ports['INTERNAL']}", target, "korvet", tmp_path, "korvet")
    assert broker.process is not None and broker.process.poll() is None, broker.log_tail()
