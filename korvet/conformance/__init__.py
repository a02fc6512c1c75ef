"""``korvet conformance``: a conformance suite for Kafka-compatible brokers.

Point it at any broker (``korvet conformance --bootstrap HOST:PORT``). Every check
is named, says which Kafka behaviour it asserts and where Kafka documents it, and
passes on Apache Kafka; the ``korvet`` profile excuses Korvet's documented design
differences. See docs/conformance.md.

The suite stands in floors, each importing only the floors below it (import-linter
holds them to it, pyproject.toml):

- ``kafka``: a raw Kafka client (wire, messages, records, schemas, operations, group
  members). It knows nothing of checks, so ``korvet.verification.live`` stands on it too;
- ``harness``: the registry, a check's context, the runner, reports, profiles, the
  brokers it watches, the real clients it drives, the pytest plugin;
- ``modes``: what else the suite does with a broker: the differential comparison with
  Apache Kafka, generated requests, the analysis of Jepsen-style histories;
- ``checks``: the checks, one module per API family, found by ``harness.registry``;
- ``cli`` (``korvet conformance``) on top, and ``test_checks`` for
  ``pytest --pyargs korvet.conformance``.
"""
