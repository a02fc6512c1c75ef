"""``korvet spec test-live``: the specs' machines run beside a live broker as its oracle.

Hypothesis generates request sequences; each request goes to the broker over the wire
and, at the same time, through the pure machine that the spec describes. Every reply the
broker sends must be one the machine allows; a request the machine holds back must stay
unanswered, and one it releases must be answered.

- ``groups``: the classic group protocol against ``korvet.core.coordinator`` (the oracle
  in ``oracle``, the wire in ``wire_groups``, the Hypothesis machine in ``machine``).
- ``storage``: produce, fetch and list-offsets against the rules of spec/ProducerState.tla
  and spec/PartitionLog.tla.

For users: docs/spec/live-testing.md.
"""
