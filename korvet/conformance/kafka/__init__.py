"""A raw Kafka client: the floor the conformance checks and the live verification stand on.

It sends exactly the requests it is asked for and returns what the broker answered, for
any version both the broker and kio know: framing (``wire``), requests as plain values
(``messages``), record batches (``records``), JSON Schemas of requests (``schemas``),
broker operations (``ops``) and classic group members (``groups``). A ``session``
gives the operations what they need of their caller (connections, the API table, fresh
names) and the error they raise when they cannot go on.

Nothing here asserts Kafka behaviour or knows of checks: it imports no other part of
``korvet.conformance``. API keys and error codes are named as ``korvet.core`` names them.
"""
