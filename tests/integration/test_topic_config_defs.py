"""Korvet's topic settings against Apache Kafka 4.3.1's own (its LogConfig's ConfigDef, run from
the pinned jars by tests/support/TopicConfigOracle.java): the same names, types and defaults,
and the same values accepted and refused, so that a tool or a Terraform plan written for Kafka
sets the same topics here. Korvet's own settings (korvet.*, log.append.timestamp.header) are
its own. Every cleanup.policy Kafka takes is taken (compact too: kept, never compacted).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from korvet.core import topics
from korvet.jvm.java_clients import KafkaJavaTools

pytestmark = [pytest.mark.kafka]

ORACLE = str(Path(__file__).resolve().parents[1] / "support" / "TopicConfigOracle.java")
KORVET_ONLY = {"korvet.sequence.bits", "korvet.offset.scheme", "korvet.storage.format",
               "korvet.retention.records", "korvet.trim.approximate", "log.append.timestamp.header"}
KAFKA_INTERNAL = {"internal.segment.bytes"}  # Kafka's own tests' setting, not for users

# Values near every bound, in every spelling Java and Python read differently.
COMMON = ["", " ", "abc", "1_000", "1 000", " 7 ", "\t5\n", "+5", "-0", "007", "0", "1", "-1",
          "-2", "-3", "2", "3", "4", "9", "10", "14", "17", "18", "22", "23", "-131072",
          "-131073", "1048575", "1048576", "2147483647", "2147483648", "-2147483648",
          "-2147483649", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
          "-9223372036854775809", "99999999999999999999", "\u0663", "\uff15", "1e3", "0.5",
          "1.5", ".5", "5.", "0.5d", "0.25f", "1e-1", "-0.0", "NaN", "Infinity", "-Infinity",
          "nan", "0x1p-1", "true", "false", "TRUE", " False ", "yes", "delete", "compact",
          "delete,compact", "compact, delete", "delete,delete", " delete ", "Delete", "delete,",
          ",", "*", " * ", "0:1", "0:1, 1:2", "0:1,x", "0:x", "*,0:1", "producer", "gzip",
          "GZIP", "zstd", "uncompressed", "none", "CreateTime", "LogAppendTime", "createtime",
          " CreateTime"]


def _oracle(args: list[str], input_text: str | None = None) -> list[str]:
    tools = KafkaJavaTools("127.0.0.1:1", timeout=180)
    return tools.run(ORACLE, args, input_text=input_text).stdout.splitlines()


def _kafka_settings() -> dict[str, tuple[str, str]]:
    rows = (line.split("\t") for line in _oracle(["names"]))
    return {name: (kind, default) for name, kind, default in rows if name not in KAFKA_INTERNAL}


def _korvet_accepts(name: str, value: str) -> bool:
    try:
        topics.validate_config(name, value)
    except topics.TopicConfigError:
        return False
    return True


def test_every_kafka_setting_is_known_with_its_type_and_default() -> None:
    kafka = _kafka_settings()
    korvet = {d.name: d for d in topics.CONFIG_DEFS if d.name not in KORVET_ONLY}
    assert sorted(set(kafka) - set(korvet)) == [], "Kafka settings Korvet refuses as unknown"
    assert sorted(set(korvet) - set(kafka)) == [], "settings Kafka 4.3.1 does not know"
    assert {n: (d.kind, d.default) for n, d in korvet.items()} == kafka


def test_values_are_accepted_and_refused_as_kafka_does() -> None:
    kafka = _kafka_settings()
    chosen = random.Random(16)
    cases: list[tuple[str, str]] = []
    for name in sorted(kafka):
        extra = [str(chosen.randint(-(1 << 64), 1 << 64)) for _ in range(5)]
        extra += [str(chosen.randint(-40, 40)) for _ in range(5)]
        cases += [(name, value) for value in (*COMMON, kafka[name][1], *extra)]
    lines = "".join(f"{name}\t{value.encode().hex()}\n" for name, value in cases)
    verdicts = _oracle(["check"], lines)
    assert len(verdicts) == len(cases)
    differ = []
    for (name, value), verdict in zip(cases, verdicts, strict=True):
        kafka_accepts = verdict == "ok"
        if kafka_accepts != _korvet_accepts(name, value):
            differ.append(f"{name}={value!r}: Kafka {verdict!r}, Korvet "
                          f"{'accepts' if not kafka_accepts else 'refuses'}")
    assert differ == [], f"{len(differ)} of {len(cases)} values:\n" + "\n".join(differ[:40])


def test_an_accepted_value_reads_as_kafka_reads_it() -> None:
    """Korvet keeps a number as its value (the sign, zeros and spaces gone) and a boolean in
    lower case, which is what Kafka's parse of the same text gives."""
    assert topics.validate_config("retention.ms", " +0060000 ") == "60000"
    assert topics.validate_config("max.message.bytes", "\u0663") == "3"
    assert topics.validate_config("preallocate", " TRUE ") == "true"
    assert topics.validate_config("cleanup.policy", " delete ") == "delete"
    assert topics.validate_config("cleanup.policy", "compact , delete") == "compact,delete"
    assert topics.validate_config("cleanup.policy", "") == ""
    assert topics.validate_config("leader.replication.throttled.replicas", "0:1 , 1:2") == "0:1,1:2"
