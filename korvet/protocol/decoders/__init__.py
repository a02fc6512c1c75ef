"""From kio's versioned requests to version-free values: one decoder per API.

kio generates one class per API version; a handler that read fields of whichever version came
would ask, field by field, whether this version has it. Each decoder asks once: it turns the
request of any version into one typed value (korvet/core's request values, or the frozen
dataclasses beside the decoder), with Kafka's meaning for a field a version lacks (JoinGroup
v0's rebalance timeout is its session timeout, FindCoordinator v0's key type is a group's...).
Handlers (korvet/server/handlers/) read only those values; nothing in korvet/server asks kio's
classes which fields they have.

One module per handler module: ``decoders.produce`` for ``handlers.produce``, and so on.
"""
