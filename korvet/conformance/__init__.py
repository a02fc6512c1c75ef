"""``korvet conformance``: a conformance suite for Kafka-compatible brokers.

Point it at any broker (``korvet conformance --bootstrap HOST:PORT``). Every check
is named, says which Kafka behaviour it asserts and where Kafka documents it, and
passes on Apache Kafka; the ``korvet`` profile excuses Korvet's documented design
differences. See docs/conformance.md.
"""
