"""What the suite does with a broker besides running checks one by one.

- ``differential``: the same generated request sequences to the broker under test and to
  Apache Kafka, compared field by field (``korvet conformance --oracle``);
- ``fuzz``: requests generated from the JSON Schemas of Kafka's messages, and the
  narrowings that keep them harmless on a shared broker (the ``generated.*`` checks);
- ``history``: the Jepsen-style analysis of what producers and consumers observed
  (the ``history.*`` checks).

The modes stand on the harness and the client floor; the checks stand on them.
"""
